#!/usr/bin/env bash
# test_train_resume.sh CASE: fmnist-train's --resume against damaged checkpoints and a job killed mid-run.
# COHORT_TEST_COHORTRUN and COHORT_TEST_FMNIST_TRAIN name the two programs.
#
#   corrupt  truncated, bit-flipped, missing, another model's and an empty checkpoint, and one written with another
#            --accumulate: every rank refuses with one clear line naming the file and what is wrong, and the job
#            exits non-zero without training
#   killed   a 2-rank job is SIGKILLed (launcher and all) after a few periodic checkpoints; resuming from what
#            was left on disk ends with the same parameters as a run that was never interrupted
#   outputs  a --checkpoint or --dump-params that cannot be written fails the job before its first step, naming the
#            flag, the path and the reason, with rank 0 (which failed) as cohortrun's root cause; --steps past the
#            planned run is said at start
set -u
RUN=${COHORT_TEST_COHORTRUN:?set COHORT_TEST_COHORTRUN to build/bin/cohortrun}
TRAIN=${COHORT_TEST_FMNIST_TRAIN:?set COHORT_TEST_FMNIST_TRAIN to build/bin/fmnist-train}
CASE=${1:?usage: test_train_resume.sh corrupt|killed|outputs}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_train_resume.XXXXXX")
JOB_PID=
cleanup() {
  if [ -n "$JOB_PID" ]; then kill -9 "$JOB_PID" 2>/dev/null; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$CASE]: $*" >&2
  exit 1
}

final_of() { grep '^\[0\] final: ' "$1" | tail -n 1 | sed 's/^\[0\] //'; }
sha_of() { printf '%s\n' "$1" | sed -n 's/.*param_sha256=\([0-9a-f]*\).*/\1/p'; }

# refuse CKPT WANT [ARGS...]: resuming from CKPT on 2 ranks must fail, each rank saying WANT, and not train.
refuse() {
  local ck=$1 want=$2
  shift 2
  "$RUN" -np 2 "$TRAIN" --model mlp --steps 10 --checkpoint "$ck" --resume "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ $rc -ne 0 ] || fail "resuming from a bad checkpoint ($want) succeeded: $(cat "$TMP/out")"
  if grep -q 'final: ' "$TMP/out"; then fail "a final line after a refused resume: $(cat "$TMP/out")"; fi
  for r in 0 1; do
    grep -F "[$r] fmnist-train: rank $r: cannot resume" "$TMP/err" | grep -qF -- "$want" ||
      fail "rank $r did not say '$want': $(cat "$TMP/err")"
  done
}

case "$CASE" in
corrupt)
  good="$TMP/good.ck"
  "$RUN" -np 2 "$TRAIN" --model mlp --steps 5 --quiet --checkpoint "$good" >"$TMP/out" 2>"$TMP/err" ||
    fail "could not make a checkpoint: $(cat "$TMP/err")"
  size=$(stat -c %s "$good")
  [ "$size" -gt 100000 ] || fail "checkpoint is only $size bytes"
  # The intact file resumes, to the parameters of a straight run (so the refusals below are about the damage).
  "$RUN" -np 2 "$TRAIN" --model mlp --steps 10 --quiet >"$TMP/straight" 2>&1 || fail "straight run failed"
  cp "$good" "$TMP/ok.ck"
  "$RUN" -np 2 "$TRAIN" --model mlp --steps 10 --quiet --checkpoint "$TMP/ok.ck" --resume >"$TMP/out" 2>"$TMP/err" ||
    fail "resuming from an intact checkpoint failed: $(cat "$TMP/err")"
  [ "$(sha_of "$(final_of "$TMP/out")")" = "$(sha_of "$(final_of "$TMP/straight")")" ] ||
    fail "resuming from an intact checkpoint ended elsewhere than a straight run"
  # A checkpoint already past --steps: nothing is trained, and rank 0 says why instead of ending at 0 img/s.
  cp "$good" "$TMP/past.ck"
  "$RUN" -np 2 "$TRAIN" --model mlp --steps 3 --quiet --checkpoint "$TMP/past.ck" --resume >"$TMP/out" 2>"$TMP/err" ||
    fail "resuming past --steps failed: $(cat "$TMP/err")"
  want="nothing to train: the checkpoint is at step 5 (of 2 ranks x batch 64) and this run stops at step 3 (--steps)"
  grep -qF "$want" "$TMP/err" || fail "no 'nothing to train' line for a checkpoint past --steps: $(cat "$TMP/err")"
  grep -q "final: steps=5 " "$TMP/out" || fail "the final line moved off step 5: $(cat "$TMP/out")"

  for cut in 0 7 64 $((size / 2)) $((size - 1)); do
    head -c "$cut" "$good" >"$TMP/cut.ck"
    if [ "$cut" -lt 16 ]; then refuse "$TMP/cut.ck" "$TMP/cut.ck"; else refuse "$TMP/cut.ck" "truncated at byte $cut"; fi
  done
  for off in 100 $((size / 3)) $((size - 10)); do
    cp "$good" "$TMP/flip.ck"
    byte=$(od -An -tu1 -j "$off" -N1 "$good" | tr -d ' ')
    printf "\\$(printf %03o $((byte ^ 16)))" | dd of="$TMP/flip.ck" bs=1 seek="$off" conv=notrunc status=none
    cmp -s "$good" "$TMP/flip.ck" && fail "the bit flip at $off did not change the file"
    refuse "$TMP/flip.ck" "checksum mismatch"
  done
  : >"$TMP/empty.ck"
  refuse "$TMP/empty.ck" "$TMP/empty.ck"
  refuse "$TMP/missing.ck" "cannot open checkpoint '$TMP/missing.ck'"
  # Another --accumulate is another global batch: resumed, it skipped part of the epoch (the steps left were counted
  # in the new batches from the old step number) and trained at another rate, without a word.
  cp "$good" "$TMP/acc.ck"
  refuse "$TMP/acc.ck" "it was written with --accumulate 1, this run has 2 (resume with the same settings)" --accumulate 2
  # An MLP's checkpoint is not the CNN's, however intact.
  "$RUN" -np 2 "$TRAIN" --model cnn --steps 10 --checkpoint "$good" --resume >"$TMP/out" 2>"$TMP/err" &&
    fail "the CNN resumed from an MLP checkpoint"
  grep -q "cannot resume: .*written by a model with signature \"fmnist-train/mlp/" "$TMP/err" ||
    fail "no signature message: $(cat "$TMP/err")"
  ;;
killed)
  ck="$TMP/job.ck"
  args=(--steps 60 --batch 32 --checkpoint-every 5 --log-every 1 --checkpoint "$ck")
  "$RUN" -np 2 "$TRAIN" --steps 60 --batch 32 --quiet >"$TMP/straight" 2>&1 || fail "straight run failed"
  want=$(sha_of "$(final_of "$TMP/straight")")
  [ -n "$want" ] || fail "no final line from the straight run"
  # Start the job and kill it -9 once it is past step 22: the launcher dies at once and its workers get SIGKILL
  # from the kernel (PR_SET_PDEATHSIG), wherever they are, possibly in the middle of writing a checkpoint.
  "$RUN" -np 2 "$TRAIN" "${args[@]}" >"$TMP/run1" 2>&1 &
  JOB_PID=$!
  for _ in $(seq 1 600); do
    grep -q '^\[0\] epoch 1/1 step 2[2-9]/60\|^\[0\] epoch 1/1 step [3-5][0-9]/60' "$TMP/run1" && break
    kill -0 "$JOB_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -9 "$JOB_PID" 2>/dev/null || fail "the job ended before it could be killed: $(tail -n 3 "$TMP/run1")"
  wait "$JOB_PID" 2>/dev/null
  JOB_PID=
  sleep 0.5 # the workers' SIGKILL is asynchronous
  if grep -q 'final: ' "$TMP/run1"; then fail "the killed job finished anyway"; fi
  [ -s "$ck" ] || fail "no checkpoint after the kill"
  "$RUN" -np 2 "$TRAIN" "${args[@]}" --resume >"$TMP/run2" 2>&1 || fail "resume failed: $(cat "$TMP/run2")"
  from=$(sed -n 's/^\[0\] resumed from .* at step \([0-9]*\) .*/\1/p' "$TMP/run2")
  [ -n "$from" ] && [ "$from" -ge 20 ] && [ $((from % 5)) -eq 0 ] && [ "$from" -lt 60 ] ||
    fail "resumed at step '$from', expected a multiple of 5 from 20 to 55: $(head -n 3 "$TMP/run2")"
  got=$(sha_of "$(final_of "$TMP/run2")")
  [ "$got" = "$want" ] || fail "killed at step ~$from and resumed: param_sha256 $got, uninterrupted $want"
  echo "killed after step $from checkpoint, resumed to the same parameters"
  ;;
outputs)
  # unwritable FLAG PATH WANT: training with FLAG PATH fails at once (no step taken) with WANT on stderr.
  unwritable() {
    "$RUN" -np 2 "$TRAIN" --model mlp --epochs 1 --log-every 1 "$1" "$2" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    [ $rc -ne 0 ] || fail "$1 $2 was accepted: $(cat "$TMP/out")"
    grep -qF -- "$3" "$TMP/err" || fail "$1 $2: no '$3' in: $(cat "$TMP/err")"
    # Rank 0 alone writes, so it alone fails: cohortrun's root cause is rank 0 and its words, not rank 1's echo of
    # it (rank 1 exited at the same moment, and was the root cause about every other run).
    grep '^cohortrun: | ' "$TMP/err" | grep -qF -- "$3" && grep -q '^cohortrun: root cause: rank 0 ' "$TMP/err" ||
      fail "$1 $2: the root cause is not rank 0's failure: $(cat "$TMP/err")"
    if grep -q 'step [0-9]*/\|final: ' "$TMP/out"; then fail "$1 $2: the job trained before failing: $(cat "$TMP/out")"; fi
  }
  : >"$TMP/file"
  mkdir "$TMP/dir"
  unwritable --checkpoint "$TMP/no/such/dir/job.ck" "--checkpoint $TMP/no/such/dir/job.ck cannot be written"
  unwritable --checkpoint "$TMP/file/job.ck" "Not a directory"
  unwritable --dump-params "$TMP/dir" "--dump-params $TMP/dir is a directory: give a file name"
  unwritable --dump-params "$TMP/no/params.bin" "no file can be made in $TMP/no: No such file or directory (checked before training)"
  # Writable paths: the check leaves nothing behind but the files themselves.
  "$RUN" -np 2 "$TRAIN" --model mlp --steps 1 --quiet --checkpoint "$TMP/dir/ok.ck" --dump-params "$TMP/dir/p.bin" \
    >"$TMP/out" 2>"$TMP/err" || fail "writable outputs failed: $(cat "$TMP/err")"
  [ "$(ls -A "$TMP/dir" | tr '\n' ' ')" = "ok.ck p.bin " ] || fail "left in the output directory: $(ls -A "$TMP/dir")"
  # --steps past the epochs: said at start, and the run ends with the epochs.
  "$RUN" -np 2 "$TRAIN" --model mlp --batch 2048 --steps 2000 --quiet >"$TMP/out" 2>"$TMP/err" ||
    fail "--steps 2000 failed: $(cat "$TMP/err")"
  want="--steps 2000 is past the 15 steps of --epochs 1 (15 per epoch): the run stops at step 15; raise --epochs"
  grep -qF -- "$want" "$TMP/err" || fail "no notice for --steps past the epochs: $(cat "$TMP/err")"
  grep -q "final: steps=15 " "$TMP/out" || fail "the run did not end at step 15: $(cat "$TMP/out")"
  ;;
*)
  fail "unknown case '$CASE'"
  ;;
esac
echo "PASS [$CASE]"
