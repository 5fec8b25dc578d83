#!/bin/sh
# The stall inspector across 3 processes: runs test_stall under cohortrun and checks the warnings' text, which the
# program itself cannot see (it goes to stderr through the logger).
# usage: test_stall.sh COHORTRUN TEST_STALL
set -u
run=$1
bin=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$run" -np 3 "$bin" >"$log" 2>&1
rc=$?
cat "$log"
[ $rc -eq 0 ] || { echo "FAIL: the ranks failed (exit $rc)"; exit 1; }
fail() { echo "FAIL: $1"; exit 1; }
want1='for bucket 1 of step 0; missing: rank 2 (last submitted: bucket 0 of step 0)'
want2='for bucket 0 of step 1; missing: rank 0 (last submitted: bucket 1 of step 0)'
for r in 0 1; do
  grep -F "[$r] cohort[$r] W: stall: waited " "$log" | grep -qF "$want1" || fail "rank $r did not name rank 2 in phase 1"
done
for r in 1 2; do
  grep -F "[$r] cohort[$r] W: stall: waited " "$log" | grep -qF "$want2" || fail "rank $r did not name rank 0 in phase 2"
done
grep -F "[2] cohort[2] W: stall" "$log" | grep -qF "for bucket 1 of step 0" && fail "rank 2, the one held back, warned in phase 1"
grep -F "[0] cohort[0] W: stall" "$log" | grep -qF "for bucket 0 of step 1" && fail "rank 0, the one held back, warned in phase 2"
# Every warning names exactly the held-back rank and no other.
n_all=$(grep -c "W: stall: waited " "$log")
n_exact=$(grep -F -e "$want1" -e "$want2" "$log" | grep -c "W: stall: waited ")
[ "$n_all" -eq "$n_exact" ] || fail "$n_all warnings, but only $n_exact name exactly the held-back rank"
grep -q "W: stall: cannot" "$log" && fail "the store could not be used"
echo "ok: $n_all stall warnings, each naming the held-back rank, none from it"
