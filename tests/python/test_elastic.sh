#!/bin/sh
# test_elastic.sh COHORTRUN PYTHON NP: hvd.elastic across a real SIGKILL (tests/python/test_elastic.py). Runs the
# training once without a failure, then with rank NP-1 killing itself after step 12 in the first generation under
# --max-restarts 1: the second generation must resume from the commit of step 10, end with the same parameters, and
# remove its commit; then a damaged commit is refused with one line naming it.
set -u
RUN=$1 PY=$2 NP=$3
HERE=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export COHORT_ELASTIC_DIR=$dir/commits
fail() { echo "FAIL: $*"; exit 1; }

ref=$("$RUN" -np "$NP" "$PY" "$HERE/test_elastic.py" 2>&1) || { echo "$ref"; fail "the run without a kill failed"; }
want=$(echo "$ref" | sed -n 's/.*generation 0: steps 20 params sha256 \([0-9a-f]*\).*/\1/p')
[ -n "$want" ] || { echo "$ref"; fail "no digest from the run without a kill"; }

out=$(ELASTIC_KILL=$((NP - 1)):12 "$RUN" -np "$NP" --max-restarts 1 "$PY" "$HERE/test_elastic.py" 2>&1)
rc=$?
echo "$out" | grep -E "killing|resumes|generation|restart|sha256" | head -20
[ $rc = 0 ] || { echo "$out" | tail -20; fail "the run with a kill exited $rc"; }
echo "$out" | grep -q "killing myself after step 12" || fail "rank $((NP - 1)) did not kill itself"
echo "$out" | grep -q "resumes from the last commit" || fail "the second generation did not resume from the commit"
got=$(echo "$out" | sed -n 's/.*generation 1: steps 20 params sha256 \([0-9a-f]*\).*/\1/p')
[ "$got" = "$want" ] || fail "parameters after the kill and the resume ($got) differ from the run without ($want)"
[ -z "$(ls -A "$COHORT_ELASTIC_DIR" 2>/dev/null)" ] || fail "the commit was left behind: $(ls -A "$COHORT_ELASTIC_DIR")"

# A damaged commit: one line that names it, and no training from garbage.
mkdir -p "$COHORT_ELASTIC_DIR" && printf 'cohort-elastic-commit\nnot a checksum' >"$COHORT_ELASTIC_DIR/state.pt"
bad=$("$RUN" -np "$NP" "$PY" "$HERE/test_elastic.py" 2>&1) && fail "a damaged commit was accepted"
echo "$bad" | grep -q "the last commit $COHORT_ELASTIC_DIR/state.pt is damaged" || { echo "$bad" | tail -5; fail "no clear error for a damaged commit"; }
echo "PASS (elastic: resumed at step 10 after a SIGKILL at step 12, parameters equal to the run without it: $want)"
