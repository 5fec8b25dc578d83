#!/usr/bin/env bash
# test_replicas.sh CASE: fmnist-train --replicas N (the job's ranks as threads of one process) on the real
# Fashion-MNIST files. COHORT_TEST_COHORTRUN and COHORT_TEST_FMNIST_TRAIN name the two programs.
#
#   equal    --replicas 2 and cohortrun -np 2 end with the same final line: steps, loss, test accuracy and
#            param_sha256 (the same collectives in the same order, so bit for bit); exactly one final line
#   sync     --replicas 2 with --sync fused and with the default (ddp) take the same steps and end with the same
#            param_sha256: on two replicas every gradient element is the one sum a + b, however it is bucketed
#   usage    --replicas out of range, or inside a multi-rank job (WORLD_SIZE > 1, as under cohortrun), and the
#            other engine flags' mistakes: exit 2 and one line on stderr, before anything starts
set -u
RUN=${COHORT_TEST_COHORTRUN:?set COHORT_TEST_COHORTRUN to build/bin/cohortrun}
TRAIN=${COHORT_TEST_FMNIST_TRAIN:?set COHORT_TEST_FMNIST_TRAIN to build/bin/fmnist-train}
CASE=${1:?usage: test_replicas.sh equal|sync|usage}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_replicas.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

fail() {
  echo "FAIL [$CASE]: $*" >&2
  exit 1
}

# finish WHAT RC: checks a run's exit status and sets FINAL to its one final line (with any "[0] " prefix removed).
finish() {
  [ "$2" -eq 0 ] || {
    cat "$TMP/out" "$TMP/err" >&2
    fail "$1 exited with $2"
  }
  local n
  n=$(grep -c 'final: ' "$TMP/out")
  [ "$n" -eq 1 ] || fail "$1: expected one final line (rank 0's), got $n in: $(cat "$TMP/out")"
  FINAL=$(grep 'final: ' "$TMP/out" | sed 's/^\[0\] //')
  printf '%s\n' "$FINAL" |
    grep -Eq '^final: steps=[0-9]+ loss=[0-9.]+ test_acc=([0-9.]+|nan) img_per_s=[0-9.]+ param_sha256=[0-9a-f]{64}$' ||
    fail "$1: final line does not parse: '$FINAL'"
}

# replicas N ARGS...: one process, N replicas.
replicas() {
  local n=$1
  shift
  "$TRAIN" --replicas "$n" "$@" >"$TMP/out" 2>"$TMP/err"
  finish "fmnist-train --replicas $n $*" $?
}

# launched NP ARGS...: NP processes under cohortrun.
launched() {
  local np=$1
  shift
  "$RUN" -np "$np" "$TRAIN" "$@" >"$TMP/out" 2>"$TMP/err"
  finish "cohortrun -np $np fmnist-train $*" $?
}

field() { printf '%s\n' "$FINAL" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

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
equal)
  # The accuracies compare on the first 1000 test images (--eval-images): a tenth of the time of all 10,000.
  replicas 2 --steps 30 --batch 32 --eval-images 1000 --quiet
  threads=$FINAL
  [ "$(field steps)" = 30 ] || fail "--replicas 2 took $(field steps) steps, expected 30"
  launched 2 --steps 30 --batch 32 --eval-images 1000 --quiet
  processes=$FINAL
  for f in steps loss test_acc param_sha256; do
    [ "$(FINAL=$threads field $f)" = "$(FINAL=$processes field $f)" ] ||
      fail "--replicas 2 ended with '$threads', cohortrun -np 2 with '$processes' ($f differs)"
  done
  # The comparison can fail: one replica with the same per-rank batch is another run.
  replicas 1 --steps 30 --batch 32 --eval-images 0 --quiet
  [ "$(field param_sha256)" != "$(FINAL=$processes field param_sha256)" ] ||
    fail "--replicas 1 gave the same parameters as 2 ranks: the comparison is blind"
  ;;
sync)
  replicas 2 --steps 30 --batch 32 --eval-images 0 --quiet
  ddp=$FINAL
  replicas 2 --steps 30 --batch 32 --eval-images 0 --quiet --sync fused
  fused=$FINAL
  [ "$(FINAL=$ddp field steps)" = 30 ] && [ "$(FINAL=$fused field steps)" = 30 ] ||
    fail "steps differ from 30: ddp '$ddp', fused '$fused'"
  [ "$(FINAL=$ddp field param_sha256)" = "$(FINAL=$fused field param_sha256)" ] ||
    fail "--sync ddp ended with '$ddp', --sync fused with '$fused'"
  # The comparison can fail: a run with a different seed ends elsewhere.
  replicas 2 --steps 30 --batch 32 --eval-images 0 --quiet --seed 1
  [ "$(field param_sha256)" != "$(FINAL=$ddp field param_sha256)" ] || fail "--seed 1 ended with seed 0's parameters"
  ;;
usage)
  usage_case "--replicas is out of range: '0'" --replicas 0
  usage_case "--replicas is out of range: '65'" --replicas 65
  usage_case "--replicas needs an integer, got 'two'" --replicas two
  WORLD_SIZE=2 usage_case "WORLD_SIZE=2 says it is one of several ranks" --replicas 2
  usage_case "--sync must be ddp or fused, got 'async'" --sync async
  usage_case "--bucket-mb must be > 0" --bucket-mb 0
  usage_case "--compress must be none, f16 or bf16, got 'int8'" --compress int8
  usage_case "--accumulate is out of range: '0'" --accumulate 0
  usage_case "unknown flag '--overlap'" --overlap
  usage_case "--bucket-mb needs --sync ddp" --sync fused --bucket-mb 4
  usage_case "--compress needs --sync ddp" --compress bf16 --sync fused
  # A 1-rank job's environment is no obstacle (WORLD_SIZE=1 is what torchrun sets for one process).
  WORLD_SIZE=1 replicas 2 --model mlp --steps 2 --batch 8 --quiet
  # Under the launcher every worker refuses, and the job fails with the reason.
  "$RUN" -np 2 "$TRAIN" --replicas 2 >"$TMP/out" 2>"$TMP/err" && fail "cohortrun -np 2 fmnist-train --replicas 2 succeeded"
  grep -q "WORLD_SIZE=2 says it is one of several ranks" "$TMP/err" ||
    fail "cohortrun did not relay the --replicas refusal: $(cat "$TMP/err")"
  "$TRAIN" --help | grep -q -- '--replicas N' || fail "--help does not list --replicas"
  ;;
*)
  fail "unknown case '$CASE'"
  ;;
esac
echo "PASS [$CASE]"
