#!/usr/bin/env bash
# test_cluster_restart.sh: cohortrun --max-restarts with fmnist-train --resume auto, real processes, a real SIGKILL.
# COHORT_TEST_COHORTRUN and COHORT_TEST_FMNIST_TRAIN name the two programs.
#
# Rank 1 of a 2-rank job SIGKILLs itself after step 35 of 60 in the first generation only (COHORT_TEST_KILL_AT_STEP,
# read by fmnist-train only while COHORT_RESTART_COUNT is 0). cohortrun must report it, stop rank 0, start both ranks
# again as generation 1; they resume from the step-30 checkpoint and end with the parameters of an uninterrupted run.
set -u
RUN=${COHORT_TEST_COHORTRUN:?set COHORT_TEST_COHORTRUN to build/bin/cohortrun}
TRAIN=${COHORT_TEST_FMNIST_TRAIN:?set COHORT_TEST_FMNIST_TRAIN to build/bin/fmnist-train}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_cluster_restart.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
final_of() { grep '^\[0\] final: ' "$1" | tail -n 1; }
sha_of() { printf '%s\n' "$1" | sed -n 's/.*param_sha256=\([0-9a-f]*\).*/\1/p'; }

"$RUN" -np 2 "$TRAIN" --steps 60 --batch 32 --quiet >"$TMP/straight" 2>&1 || fail "straight run failed: $(tail -n 5 "$TMP/straight")"
want=$(sha_of "$(final_of "$TMP/straight")")
[ -n "$want" ] || fail "no final line from the straight run"

ck="$TMP/job.ck"
COHORT_TEST_KILL_AT_STEP=35 "$RUN" -np 2 --max-restarts 1 --log-dir "$TMP/logs" "$TRAIN" --steps 60 --batch 32 \
  --log-every 100 --checkpoint-every 10 --checkpoint "$ck" --resume auto >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] || fail "the restarted job exited $rc: $(tail -n 15 "$TMP/err")"
grep -q '^cohortrun: rank 1 (pid [0-9]*, host .*) was killed by signal 9 (SIGKILL); stopped the other rank$' "$TMP/err" ||
  fail "no report of rank 1's SIGKILL: $(cat "$TMP/err")"
grep -q '^cohortrun: restart 1 of 1: starting all 2 ranks again with COHORT_RESTART_COUNT=1$' "$TMP/err" ||
  fail "no restart line: $(cat "$TMP/err")"
# Generation 0 started fresh (no checkpoint yet); generation 1 resumed from the last checkpoint before step 35.
grep -q 'resumed from .* at step 30 ' "$TMP/out" || fail "generation 1 did not resume at step 30: $(cat "$TMP/out")"
[ "$(grep -c 'resumed from' "$TMP/out")" -eq 1 ] || fail "resumed more than once: $(cat "$TMP/out")"
[ "$(grep -c '^\[0\] final: ' "$TMP/out")" -eq 1 ] || fail "expected one final line: $(cat "$TMP/out")"
got=$(sha_of "$(final_of "$TMP/out")")
[ "$got" = "$want" ] || fail "killed at step 35, restarted: param_sha256 $got, uninterrupted $want"
# The log of rank 0 holds both generations, with cohortrun's mark between them.
grep -q '^---- cohortrun: restart 1, COHORT_RESTART_COUNT=1 ----$' "$TMP/logs/rank-0.log" ||
  fail "no restart mark in rank-0.log"
grep -q 'final: steps=60' "$TMP/logs/rank-0.log" || fail "rank-0.log lacks the final line"
echo "rank 1 killed at step 35, restarted from step 30, same param_sha256 $got"
