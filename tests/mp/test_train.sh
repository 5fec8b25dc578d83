#!/usr/bin/env bash
# test_train.sh CASE: multi-rank tests of fmnist-train (the main job) on the real Fashion-MNIST files, run as real
# processes under cohortrun. COHORT_TEST_COHORTRUN and COHORT_TEST_FMNIST_TRAIN name the two programs.
#
#   usage        bad command lines: exit 2 and one line on stderr that names the problem, before any rank starts
#   determinism  a 2-rank run's final line parses, and a rerun gives the same param_sha256 (so do --sync fused and
#                smaller buckets; another seed does not)
#   loss         the training loss falls over 50 steps and the test accuracy leaves chance level
#   resume       40 steps straight == 20 steps + checkpoint + --resume to 40 (same param_sha256, same loss)
#   kernels      --kernels onednn is named with its ISA (where built in); with --kernels reference,
#                generic OpenBLAS kernels (pretended) on a CPU that runs better ones: every rank restarts itself with
#                the best core type, rank 0 says so once and names the kernels, and the result is a run with that
#                OPENBLAS_CORETYPE set by hand; a pinned OPENBLAS_CORETYPE is kept, and the kernel line says so
#                without a word on faster kernels; unpinned, it says OpenBLAS chose. It sets or unsets
#                OPENBLAS_CORETYPE for each run itself, and computes only on kernels the caller's environment runs
#   uneven       --uneven on 3 ranks: ranks train 10, 7 and 4 of each epoch's 10 steps, join, and end each epoch
#                together on rank 0's parameters, without a hang; the job learns
#   zero         --zero 1 (ZeRO-1): on 2 ranks the same param_sha256 as without it (the reduce-scatter sums a + b as
#                the allreduce does), with a per-rank optimizer state about half the unsharded one (--profile); a
#                checkpoint written under it at 2 ranks is byte for byte the unsharded run's, and resumes at 3 ranks
#                without ZeRO (the same param_sha256 as resuming the unsharded checkpoint) and with it (the same
#                parameters up to the 3-rank summation order)
#   equivalence  2 ranks x batch B, 1 rank x batch 2B and 2 ranks x 2 accumulated batches of B/2 reach the same
#                parameters after 10 steps, up to float32 rounding (a bound from the arithmetic: params.sh); so do
#                --kernels onednn and --kernels reference
set -u
RUN=${COHORT_TEST_COHORTRUN:?set COHORT_TEST_COHORTRUN to build/bin/cohortrun}
TRAIN=${COHORT_TEST_FMNIST_TRAIN:?set COHORT_TEST_FMNIST_TRAIN to build/bin/fmnist-train}
CASE=${1:?usage: test_train.sh usage|determinism|loss|resume|equivalence|kernels|uneven|zero|preempt}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_train.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/params.sh"

fail() {
  echo "FAIL [$CASE]: $*" >&2
  exit 1
}

# train NP ARGS...: runs the job on NP ranks; stdout in $TMP/out, stderr in $TMP/err; sets FINAL to the final line.
train() {
  local np=$1
  shift
  "$RUN" -np "$np" "$TRAIN" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    cat "$TMP/out" "$TMP/err" >&2
    fail "fmnist-train $* on $np ranks exited with $rc"
  fi
  FINAL=$(grep '^\[0\] final: ' "$TMP/out" | tail -n 1 | sed 's/^\[0\] //')
  [ -n "$FINAL" ] || fail "no final line from rank 0 in: $(cat "$TMP/out")"
  # Only rank 0 reports.
  if grep -q '^\[1\] final: ' "$TMP/out"; then fail "rank 1 printed a final line"; fi
}

# field NAME: the value of NAME= in $FINAL.
field() { printf '%s\n' "$FINAL" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

check_final_format() {
  printf '%s\n' "$FINAL" |
    grep -Eq '^final: steps=[0-9]+ loss=[0-9.]+ test_acc=[0-9.]+ img_per_s=[0-9.]+ param_sha256=[0-9a-f]{64}$' ||
    fail "final line does not parse: '$FINAL'"
}

# usage_case WANT ARGS...: fmnist-train ARGS must exit 2 with exactly one stderr line containing WANT.
usage_case() {
  local want=$1
  shift
  "$TRAIN" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ $rc -eq 2 ] || fail "fmnist-train $* exited with $rc, expected 2 (stderr: $(cat "$TMP/err"))"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "fmnist-train $*: expected one line on stderr, got: $(cat "$TMP/err")"
  grep -qF -- "$want" "$TMP/err" || fail "fmnist-train $*: stderr '$(cat "$TMP/err")' does not mention '$want'"
  [ ! -s "$TMP/out" ] || fail "fmnist-train $*: wrote to stdout: $(cat "$TMP/out")"
}

case "$CASE" in
usage)
  usage_case "unknown flag '--bogus'" --bogus
  usage_case "unknown flag '--lr-max'" --lr-max=3
  usage_case "unexpected argument 'extra'" extra
  usage_case "--kernels must be auto, onednn or reference, got 'mkl'" --kernels mkl
  COHORT_KERNELS=fast usage_case "COHORT_KERNELS='fast' is not one of auto, reference, onednn" --steps 1
  usage_case "--epochs needs an integer, got 'abc'" --epochs abc
  usage_case "--epochs needs an integer, got '3x'" --epochs 3x
  usage_case "--epochs is out of range" --epochs 0
  usage_case "--steps needs a value" --steps
  usage_case "--checkpoint needs a value, got the flag '--steps'" --checkpoint --steps 1
  usage_case "--batch is out of range: '0'" --batch 0
  usage_case "--batch is out of range: '-4'" --batch=-4
  usage_case "--lr must be > 0, got '0'" --lr 0
  usage_case "--lr must be > 0, got '-0.1'" --lr -0.1
  usage_case "--lr needs a finite number, got 'fast'" --lr fast
  usage_case "--lr needs a finite number, got 'nan'" --lr nan
  usage_case "--momentum must be in [0, 1)" --momentum 1
  usage_case "--model must be cnn or mlp, got 'resnet'" --model resnet
  usage_case "--threads is out of range" --threads 0
  usage_case "--resume needs --checkpoint PATH" --resume
  usage_case "--checkpoint-every needs --checkpoint PATH" --checkpoint-every 10
  usage_case "--resume takes no value" --resume=yes --checkpoint x
  usage_case "no directory '$TMP/no-such-dir'" --data "$TMP/no-such-dir"
  usage_case "--uneven needs --sync ddp" --uneven --sync fused
  usage_case "--zero 1 needs --sync ddp" --zero 1 --sync fused
  usage_case "--zero 1 does not combine with --compress" --zero 1 --compress f16
  usage_case "--zero 1 does not combine with --uneven" --zero 1 --uneven
  usage_case "--zero is out of range" --zero 2
  usage_case "--eval-images is out of range: '-1'" --eval-images -1
  usage_case "--lars must be >= 0 (0: plain SGD), got '-0.01'" --lars -0.01
  usage_case "--lars-mode must be larc or lars, got 'lamb'" --lars-mode lamb
  usage_case "--uneven checkpoints at the ends of epochs only" --uneven --checkpoint x --checkpoint-every 5
  # --help is not an error: usage on stdout, exit 0.
  "$TRAIN" --help >"$TMP/out" 2>"$TMP/err" || fail "--help exited with $?"
  grep -q -- '--checkpoint-every' "$TMP/out" || fail "--help does not list the flags"
  # Under the launcher the usage error still ends the job with a failure.
  "$RUN" -np 2 "$TRAIN" --batch 0 >"$TMP/out" 2>"$TMP/err" && fail "cohortrun succeeded with --batch 0"
  grep -q -- "--batch is out of range" "$TMP/err" || fail "cohortrun did not relay the usage error: $(cat "$TMP/err")"
  ;;
determinism)
  train 2 --steps 20 --batch 32 --quiet
  check_final_format
  [ "$(field steps)" = 20 ] || fail "steps=$(field steps), expected 20"
  first=$(field param_sha256)
  # The reruns compare parameters only: no evaluation (--eval-images 0), which took most of each run's time.
  train 2 --steps 20 --batch 32 --quiet --eval-images 0
  [ "$(field param_sha256)" = "$first" ] || fail "rerun gave param_sha256 $(field param_sha256), first run $first"
  [ "$(field test_acc)" = nan ] || fail "--eval-images 0 reported test_acc=$(field test_acc), not nan (nothing scored)"
  # The engine's buckets and one fused allreduce schedule the sums differently; on 2 ranks the sums are the same.
  train 2 --steps 20 --batch 32 --quiet --eval-images 0 --sync fused
  [ "$(field param_sha256)" = "$first" ] || fail "--sync fused gave param_sha256 $(field param_sha256), not $first"
  train 2 --steps 20 --batch 32 --quiet --eval-images 0 --bucket-mb 0.25
  [ "$(field param_sha256)" = "$first" ] || fail "--bucket-mb 0.25 gave param_sha256 $(field param_sha256), not $first"
  train 2 --steps 20 --batch 32 --quiet --eval-images 0 --seed 1
  [ "$(field param_sha256)" != "$first" ] || fail "--seed 1 gave the same parameters as --seed 0"
  ;;
loss)
  train 2 --steps 50 --batch 32 --log-every 10 --csv "$TMP/m.csv"
  check_final_format
  # The plain progress lines carry the running mean of the epoch's loss: after 10 steps and after 50.
  l10=$(sed -n 's/^\[0\] epoch 1\/1 step 10\/50 loss \([0-9.]*\) .*/\1/p' "$TMP/out")
  l50=$(sed -n 's/^\[0\] epoch 1\/1 step 50\/50 loss \([0-9.]*\) .*/\1/p' "$TMP/out")
  [ -n "$l10" ] && [ -n "$l50" ] || fail "no progress lines for steps 10 and 50 in: $(cat "$TMP/out")"
  awk -v a="$l10" -v b="$l50" 'BEGIN { exit !(a > 2.0 && b < a - 0.15) }' ||
    fail "loss did not fall: mean of the first 10 steps $l10, of all 50 $l50"
  acc=$(field test_acc)
  awk -v a="$acc" 'BEGIN { exit !(a > 0.4) }' || fail "test_acc $acc after 50 steps: no better than chance"
  # The CSV: a header and one row (the end-of-run evaluation) that agrees with the final line.
  [ "$(head -n 1 "$TMP/m.csv")" = "epoch,step,train_loss,test_acc,img_per_s,seconds" ] || fail "bad CSV header"
  [ "$(wc -l <"$TMP/m.csv")" -eq 2 ] || fail "CSV should have one row: $(cat "$TMP/m.csv")"
  row=$(sed -n 2p "$TMP/m.csv")
  [ "$(echo "$row" | cut -d, -f1,2)" = "1,50" ] || fail "CSV row '$row' is not epoch 1, step 50"
  awk -F, -v a="$acc" '{ exit !($4 - a < 0.0001 && a - $4 < 0.0001) }' <<<"$row" ||
    fail "CSV test_acc in '$row' differs from the final line's $acc"
  ;;
resume)
  # Evaluation scores the first 1000 test images: the accuracies still compare, at a tenth of the time.
  ck="$TMP/job.ck"
  train 2 --steps 40 --batch 32 --eval-images 1000 --quiet
  straight=$FINAL
  train 2 --steps 20 --batch 32 --eval-images 1000 --quiet --checkpoint "$ck"
  [ -s "$ck" ] || fail "no checkpoint written at $ck"
  half=$(field param_sha256)
  train 2 --steps 40 --batch 32 --eval-images 1000 --checkpoint "$ck" --resume
  grep -q '^\[0\] resumed from .* at step 20' "$TMP/out" || fail "no 'resumed ... at step 20' line: $(cat "$TMP/out")"
  [ "$(field param_sha256)" != "$half" ] || fail "the resumed run did not train"
  resumed=$FINAL
  for f in steps loss test_acc param_sha256; do
    [ "$(FINAL=$resumed field $f)" = "$(FINAL=$straight field $f)" ] ||
      fail "resumed run ended with '$resumed', the straight run with '$straight' ($f differs)"
  done
  # Resuming with other settings would silently be another run: refused, naming the setting.
  "$RUN" -np 2 "$TRAIN" --steps 40 --batch 16 --eval-images 1000 --checkpoint "$ck" --resume >"$TMP/out" 2>"$TMP/err" &&
    fail "resuming with another --batch succeeded"
  grep -q "written with --batch 32, this run has 16" "$TMP/err" || fail "no clear message: $(cat "$TMP/err")"
  ;;
preempt)
  # SIGTERM to rank 1 mid-run (Slurm's before a preemption, scancel's): both ranks stop after the same step with 143,
  # rank 0 having written the checkpoint, and --resume auto ends as the uninterrupted run (before: rank 1 died and
  # the steps since the last --checkpoint-every were lost).
  ck="$TMP/job.ck"
  train 2 --steps 60 --batch 32 --eval-images 1000 --quiet
  straight=$FINAL
  "$RUN" -np 2 "$TRAIN" --steps 60 --batch 32 --eval-images 1000 --checkpoint "$ck" >"$TMP/out" 2>"$TMP/err" &
  job=$!
  victim=""
  for _ in $(seq 1 600); do
    for p in $(pgrep -P "$job"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=1' && victim=$p
    done
    [ -n "$victim" ] && grep -q '^\[0\] epoch 1/1 step \([5-9]\|[1-9][0-9]\)/' "$TMP/out" && break
    sleep 0.05
  done
  [ -n "$victim" ] || fail "rank 1 did not start"
  kill -TERM "$victim"
  wait "$job"
  rc=$?
  [ "$rc" = 143 ] || fail "the job exited with $rc after SIGTERM to rank 1, expected 143: $(tail -n 5 "$TMP/err")"
  grep -q '^\[0\] fmnist-train: asked to stop (a signal on another rank) after step [0-9]*: checkpoint .* written' \
    "$TMP/err" || fail "rank 0 does not say it stopped and saved: $(cat "$TMP/err")"
  at=$(sed -n 's/.*after step \([0-9]*\): checkpoint.*/\1/p' "$TMP/err" | head -n 1)
  [ "$at" -lt 60 ] || fail "it stopped only at step $at"
  train 2 --steps 60 --batch 32 --eval-images 1000 --checkpoint "$ck" --resume auto
  grep -q "^\[0\] resumed from .* at step $at" "$TMP/out" || fail "no 'resumed ... at step $at': $(cat "$TMP/out")"
  for f in steps loss test_acc param_sha256; do
    [ "$(FINAL=$FINAL field $f)" = "$(FINAL=$straight field $f)" ] ||
      fail "the resumed run ended with '$FINAL', the straight run with '$straight' ($f differs)"
  done
  echo "ok: SIGTERM to rank 1: both ranks saved after step $at and exited 143; resumed to the straight run's end"
  ;;
zero)
  train 2 --steps 20 --batch 32 --quiet --eval-images 0
  plain=$(field param_sha256)
  train 2 --steps 20 --batch 32 --quiet --eval-images 0 --zero 1 --profile
  [ "$(field param_sha256)" = "$plain" ] || fail "--zero 1 gave param_sha256 $(field param_sha256), not $plain"
  bytes=$(sed -n 's/^\[0\] profile: optimizer state \([0-9]*\) bytes per rank (ZeRO-1 shard).*/\1/p' "$TMP/out")
  full=$((1199882 * 4)) # the CNN's momentum buffers
  [ -n "$bytes" ] || fail "no optimizer state line in --profile: $(cat "$TMP/out")"
  [ "$bytes" -ge $((full / 2)) ] && [ "$bytes" -le $((full / 2 + 4096)) ] ||
    fail "ZeRO-1 on 2 ranks holds $bytes bytes of optimizer state per rank, not about half of $full"
  # Checkpoints: written under ZeRO at 2 ranks, they are the unsharded run's (rank 0 gathered the shards).
  train 2 --steps 20 --batch 32 --quiet --eval-images 0 --checkpoint "$TMP/plain.ck"
  train 2 --steps 20 --batch 32 --quiet --eval-images 0 --zero 1 --checkpoint "$TMP/zero.ck"
  cmp -s "$TMP/plain.ck" "$TMP/zero.ck" || fail "the ZeRO checkpoint differs from the unsharded one"
  # ... and resume at 3 ranks with and without ZeRO, and an unsharded checkpoint resumes under ZeRO.
  train 3 --steps 30 --batch 32 --quiet --eval-images 0 --checkpoint "$TMP/plain.ck" --resume --dump-params "$TMP/p.bin"
  straight=$(field param_sha256)
  train 3 --steps 30 --batch 32 --quiet --eval-images 0 --checkpoint "$TMP/zero.ck" --resume --dump-params "$TMP/z.bin"
  [ "$(field param_sha256)" = "$straight" ] || fail "the ZeRO checkpoint resumed without ZeRO is another run"
  cp "$TMP/zero.ck" "$TMP/zero2.ck"
  train 3 --steps 30 --batch 32 --quiet --eval-images 0 --zero 1 --checkpoint "$TMP/zero2.ck" --resume --dump-params "$TMP/zz.bin"
  train 3 --steps 30 --batch 32 --quiet --eval-images 0 --zero 1 --checkpoint "$TMP/plain.ck" --resume --dump-params "$TMP/pz.bin"
  for f in zz pz; do
    d=$(param_distance "$TMP/p.bin" "$TMP/$f.bin")
    at_most "$d" 1e-5 || fail "resumed at 3 ranks under ZeRO ($f) the parameters are $d (relative) from the straight run"
  done
  ;;
equivalence)
  # The same 10 steps of global batch 64 three ways; each pair may differ by float32 rounding alone, at most K * u
  # of the distance travelled from the initial parameters, K = 64 x 26 x 26 (params.sh says why).
  bound=$(unit_roundoff_times $((64 * 26 * 26)))
  train 1 --steps 0 --batch 64 --quiet --eval-images 0 --dump-params "$TMP/p0.bin"
  train 1 --steps 10 --batch 64 --quiet --eval-images 0 --dump-params "$TMP/p1.bin"
  train 2 --steps 10 --batch 32 --quiet --eval-images 0 --dump-params "$TMP/p2.bin"
  train 2 --steps 10 --batch 16 --accumulate 2 --quiet --eval-images 0 --dump-params "$TMP/pa.bin"
  # 1,199,882 CNN parameters, 4 bytes each.
  for f in p0 p1 p2 pa; do
    [ "$(stat -c %s "$TMP/$f.bin" 2>/dev/null)" = $((1199882 * 4)) ] || fail "$f.bin is not a dump of 1199882 floats"
  done
  moved=$(param_distance "$TMP/p0.bin" "$TMP/p1.bin")
  at_most 1e-3 "$moved" || fail "10 steps moved the parameters by only $moved of their norm: nothing to compare"
  ddp=$(param_distance_travelled "$TMP/p1.bin" "$TMP/p2.bin" "$TMP/p0.bin")
  acc=$(param_distance_travelled "$TMP/p1.bin" "$TMP/pa.bin" "$TMP/p0.bin")
  echo "10 steps moved the parameters $moved of their norm; apart from 1 rank x 64, over that distance:" \
    "2 ranks x 32 $ddp, 2 ranks x 2 x 16 accumulated $acc (bound $bound)"
  at_most "$ddp" "$bound" || fail "1 rank x 64 and 2 ranks x 32 ended $ddp of the distance travelled apart (> $bound)"
  at_most "$acc" "$bound" || fail "1 rank x 64 and 2 ranks x 2 x 16 accumulated ended $acc apart (> $bound)"
  # oneDNN (where built in) against the reference: the same sums in other orders.
  if "$TRAIN" --kernels onednn --steps 0 --quiet >/dev/null 2>&1; then
    train 1 --steps 10 --batch 64 --quiet --eval-images 0 --kernels reference --dump-params "$TMP/pr.bin"
    train 1 --steps 10 --batch 64 --quiet --eval-images 0 --kernels onednn --dump-params "$TMP/po.bin"
    ref=$(param_distance_travelled "$TMP/pr.bin" "$TMP/po.bin" "$TMP/p0.bin")
    echo "--kernels onednn against --kernels reference: $ref (bound $bound)"
    at_most "$ref" "$bound" || fail "oneDNN and the reference kernels ended $ref of the distance travelled apart"
  fi
  # The comparison can fail: an update 1% too large (the lr) ends outside the bound.
  train 2 --steps 10 --batch 32 --quiet --eval-images 0 --lr 0.0505 --dump-params "$TMP/plr.bin"
  off=$(param_distance_travelled "$TMP/p1.bin" "$TMP/plr.bin" "$TMP/p0.bin")
  echo "an lr 1% too large: $off"
  at_most "$off" "$bound" && fail "an lr 1% too large ended $off apart, within the bound $bound: the comparison is blind"
  ;;
uneven)
  train 3 --model mlp --batch 2048 --epochs 2 --lr 0.01 --uneven --log-every 1
  for want in "the shortest rank trained to step 4, rank 0 to step 10" "the shortest rank trained to step 14, rank 0 to step 20"; do
    grep -qF -- "$want" "$TMP/out" || fail "no '$want' in: $(cat "$TMP/out")"
  done
  case "$FINAL" in "final: steps=20 "*) ;; *) fail "did not end at step 20: $FINAL" ;; esac
  acc=$(printf '%s\n' "$FINAL" | sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p')
  awk -v a="$acc" 'BEGIN { exit !(a > 0.5) }' || fail "test accuracy $acc after 2 uneven epochs"
  ;;
kernels)
  # Each run sets or unsets OPENBLAS_CORETYPE itself, whatever the caller has: the restart happens only where it is
  # unset, and the kernel line says who chose the kernels. Every run computes on kernels that the caller's
  # environment computes with: where it pins OPENBLAS_CORETYPE, it does so because other kernels compute wrong
  # results on its CPU, so the restart goes to the pinned family (COHORT_TEST_BLAS_BEST) and no run computes
  # without the pin. OPENBLAS_L2_SIZE (block sizes, not the kernels; set where OpenBLAS misreads the cache) passes
  # through as the caller has it, the same in every run.
  pin=${OPENBLAS_CORETYPE:-}
  core_of() { env "$@" OPENBLAS_VERBOSE=2 "$TRAIN" --help 2>&1 >/dev/null | sed -n 's/^Core: //p' | head -n 1; }
  # unpinned FUNCTION ARGS...: FUNCTION with OPENBLAS_CORETYPE unset, put back after.
  unpinned() {
    unset OPENBLAS_CORETYPE
    "$@"
    if [ -n "$pin" ]; then export OPENBLAS_CORETYPE=$pin; fi
  }
  # oneDNN, named with what it runs on; no OpenBLAS restart for it (OpenBLAS does not run the layers). The OpenBLAS
  # runs above and below use --kernels reference: the restart and the advice are about OpenBLAS's kernels only.
  if "$TRAIN" --kernels onednn --steps 0 --quiet >/dev/null 2>&1; then
    COHORT_TEST_BLAS_CORENAME=Prescott train 1 --model mlp --steps 1 --kernels onednn
    grep -qE '^\[0\] kernels: oneDNN [0-9.]+, ISA [a-z0-9_]+ ' "$TMP/out" || fail "no oneDNN kernel line in: $(cat "$TMP/out")"
    if grep -q 'restarting' "$TMP/err"; then fail "restarted for OpenBLAS while oneDNN runs the layers"; fi
  fi
  here=$(core_of) # the kernels the caller's environment runs: its pin, or OpenBLAS's own choice
  [ -n "$here" ] || fail "OPENBLAS_VERBOSE=2 printed no 'Core:' line"
  # The families above generic that this CPU runs (scripts/openblas-cores.sh reads its flags); the best of them is
  # cohort_blas_best_core()'s choice.
  above=$(bash "$(dirname "$0")/../../scripts/openblas-cores.sh" | grep -Ev '^(Prescott|Nehalem)$')
  best=$(printf '%s\n' "$above" | grep -E '^(Sandybridge|Haswell|SkylakeX)$' | tail -n 1)

  # Pinned: OpenBLAS runs generic kernels (pretended) under an OPENBLAS_CORETYPE set by the environment (the caller's
  # pin, or the family OpenBLAS picks itself here): kept, said, and no word on faster kernels, even on a CPU that runs
  # some (they may be what the pin keeps away).
  OPENBLAS_CORETYPE=${pin:-$here} COHORT_TEST_BLAS_CORENAME=Prescott train 1 --model mlp --steps 1 --kernels reference
  if grep -q 'restarting' "$TMP/err"; then fail "a pinned OPENBLAS_CORETYPE was overridden: $(cat "$TMP/err")"; fi
  want="[0] kernels: OpenBLAS Prescott (OPENBLAS_CORETYPE=${pin:-$here}, pinned by the environment: kept)"
  grep -qxF -- "$want" "$TMP/out" || fail "no kernel line '$want' in: $(cat "$TMP/out")"
  if grep -qi 'faster' "$TMP/out" "$TMP/err"; then fail "advice to leave a pinned core type: $(cat "$TMP/out" "$TMP/err")"; fi

  # Unpinned, OpenBLAS's own choice kept: the line says OpenBLAS chose. Only where the caller pins nothing: elsewhere
  # the run would compute on the kernels the pin keeps away.
  if [ -z "$pin" ]; then
    COHORT_TEST_BLAS_CORENAME=${best:-Prescott} unpinned train 1 --model mlp --steps 1 --kernels reference
    if grep -q 'restarting' "$TMP/err"; then fail "restarted from the best kernels: $(cat "$TMP/err")"; fi
    want="[0] kernels: OpenBLAS ${best:-Prescott} (chosen by OpenBLAS for this CPU)"
    grep -qxF -- "$want" "$TMP/out" || fail "no kernel line '$want' in: $(cat "$TMP/out")"
  else
    echo "the caller pins OPENBLAS_CORETYPE=$pin: the unpinned run without a restart is not made (it would compute without the pin)"
  fi

  # Unpinned, generic kernels (pretended) on a CPU that runs better ones: every rank restarts itself, rank 0 says so
  # once and names the kernels, and the result is that of a run with that OPENBLAS_CORETYPE set by hand. The target
  # is the best family by the CPU's flags, or, where the caller pins one above generic that this CPU runs, that one.
  if [ -z "$best" ]; then
    echo "SKIP restart: this CPU has no AVX: OpenBLAS's generic kernels are its best"
  elif [ -n "$pin" ] && ! printf '%s\n' "$above" | grep -qixF -- "$pin"; then
    echo "SKIP restart: the caller pins OPENBLAS_CORETYPE=$pin, no family above generic that this CPU runs: none to restart to"
  else
    target=${pin:-$best}
    running=$(core_of OPENBLAS_CORETYPE="$target")
    sha_of() { printf '%s\n' "$1" | sed -n 's/.*param_sha256=\([0-9a-f]*\).*/\1/p'; }
    OPENBLAS_CORETYPE=$target train 2 --model mlp --steps 3 --kernels reference
    by_hand=$(sha_of "$FINAL")
    COHORT_TEST_BLAS_CORENAME=Prescott COHORT_TEST_BLAS_BEST=$pin unpinned train 2 --model mlp --steps 3 --kernels reference
    [ "$(grep -c 'restarting with' "$TMP/err")" = 1 ] || fail "not one restart line: $(cat "$TMP/err")"
    want="[0] fmnist-train: OpenBLAS chose its generic Prescott kernels on a CPU that can run $target ones: restarting with OPENBLAS_CORETYPE=$target"
    grep -qxF -- "$want" "$TMP/err" || fail "no restart line '$want' in: $(cat "$TMP/err")"
    want="[0] kernels: OpenBLAS $running (OPENBLAS_CORETYPE=$target, set by fmnist-train: OpenBLAS had chosen Prescott)"
    grep -qxF -- "$want" "$TMP/out" || fail "no kernel line '$want' in: $(cat "$TMP/out")"
    [ "$(sha_of "$FINAL")" = "$by_hand" ] || fail "the restarted run differs from OPENBLAS_CORETYPE=$target by hand"
    if grep -q 'unknown variable' "$TMP/err"; then fail "the restart left a variable cohort does not know: $(cat "$TMP/err")"; fi
  fi
  ;;
*)
  fail "unknown case '$CASE'"
  ;;
esac
echo "PASS [$CASE]"
