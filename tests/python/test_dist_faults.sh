#!/bin/sh
# Faults of torch.distributed on backend "cohort" between real processes under cohortrun
# (tests/python/test_dist_faults.py writes what each rank saw). usage: test_dist_faults.sh COHORTRUN PYTHON MODE VIA
#   kill      3 ranks; rank 2 is SIGKILLed inside an all_reduce: ranks 0 and 1 raise within 2 s naming rank 2
#   mismatch  2 ranks reduce different shapes, twice, then broadcast each as its own root, then reduce 2x3 against
#             3x2 and all_to_all_single with split sizes that disagree: both raise each time, and go on
#             (within 2 s) naming both calls, then a barrier and an all_reduce work (3 on every element)
#   timeout   2 ranks, init_process_group(timeout=timedelta(seconds=3)); rank 1 stays away from an all_reduce:
#             rank 0 raises after 2.5 to 6 s naming rank 1 and COHORT_OP_TIMEOUT
# VIA: future (get_future().wait()) or wait (dist.all_reduce blocking, work.wait()). With torch 1.13, "wait" fails
# today: the Work that torch._C._distributed_c10d._create_work_from_future makes returns True from wait() whatever
# its future holds, so dist.all_reduce and work.wait() never raise the backend's errors (python.cmake disables it).
set -u
run=$1 py=$2 mode=$3 via=$4
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL ($mode $via): $*"; echo "--- job output:"; cat "$tmp/out"; for f in "$tmp"/result.*; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }
elapsed() { "$py" -c 'import sys; d = float(open(sys.argv[1]).readline()) - float(open(sys.argv[2]).read())
print(f"{sys.argv[3]} raised {d:.3f} s after the kill"); sys.exit(0 if 0 <= d < 2.0 else 1)' "$@"; }

case $mode in
kill)
  "$run" -np 3 --grace 10 "$py" "$here/test_dist_faults.py" kill "$tmp" "$via" >"$tmp/out" 2>&1
  [ -f "$tmp/killed_at" ] || fail "rank 2 was not killed"
  for r in 0 1; do
    [ -f "$tmp/result.$r" ] || fail "rank $r reported nothing (did its wait return?)"
    sed -n '3,$p' "$tmp/result.$r" | grep -q "rank 2" || fail "rank $r's error does not name rank 2"
    elapsed "$tmp/result.$r" "$tmp/killed_at" "rank $r" >>"$tmp/out" 2>&1 || fail "rank $r raised 2 s or more after the kill"
  done
  ;;
mismatch)
  "$run" -np 2 "$py" "$here/test_dist_faults.py" mismatch "$tmp" "$via" >"$tmp/out" 2>&1 || fail "the job failed"
  for r in 0 1; do
    [ -f "$tmp/result.$r" ] || fail "rank $r reported nothing"
    [ "$(grep -c '^[A-Za-z]*Error [01]\.[0-9]* .*MismatchError' "$tmp/result.$r")" = 5 ] ||
      fail "rank $r did not raise a MismatchError five times, each within 2 s"
    grep -q "rank 0 called allreduce(count=12, f32, sum, .*) \[call #[0-9]*\] but rank 1 called allreduce(count=15, f32, sum" \
      "$tmp/result.$r" || fail "rank $r's error does not name both all_reduces"
    grep -q "rank 0 called broadcast(count=4, f32, root=0, .*) \[call #[0-9]*\] but rank 1 called broadcast(count=4, f32, root=1" \
      "$tmp/result.$r" || fail "rank $r's error does not name both broadcasts"
    want_shape=$([ "$r" = 0 ] && echo 2x3 || echo 3x2)
    grep -q "all_reduce of a $want_shape tensor: ranks disagree: .* with a tensor of another shape" "$tmp/result.$r" ||
      fail "rank $r's error does not refuse the all_reduce of 2x3 against 3x2 naming its own shape"
    grep -q "counts of cohort_alltoallv: rank 1 sends 1 elements to rank 0, which expects 2 .*before any data moved" \
      "$tmp/result.$r" || fail "rank $r's error does not name the all_to_all_single's split sizes that disagree"
    grep -qx "after \[3.0, 3.0, 3.0, 3.0, 3.0\]" "$tmp/result.$r" || fail "rank $r could not go on after the mismatches"
  done
  ;;
timeout)
  COHORT_STALL_S=1 "$run" -np 2 --grace 10 "$py" "$here/test_dist_faults.py" timeout "$tmp" "$via" >"$tmp/out" 2>&1
  [ -f "$tmp/result.0" ] || fail "rank 0 reported nothing"
  # the stall warning, before the timeout: one line, naming the rank waited on
  [ "$(grep -c 'cohort\[0\] W: .* has waited 1 s for rank(s) 1 (COHORT_STALL_S).*fails after 3 s' "$tmp/out")" = 1 ] ||
    fail "rank 0 did not warn once, after COHORT_STALL_S=1, that it waited for rank 1"
  sed -n 1p "$tmp/result.0" | grep -q "^no error" && fail "rank 0's all_reduce returned without error"
  "$py" -c 'import sys; d = float(open(sys.argv[1]).readline()); print(f"rank 0 raised after {d:.3f} s")
sys.exit(0 if 2.5 <= d < 6.0 else 1)' "$tmp/result.0" >>"$tmp/out" 2>&1 || fail "rank 0 did not raise 2.5 to 6 s after calling"
  sed -n '3,$p' "$tmp/result.0" | grep -q "rank(s) 1 .*COHORT_OP_TIMEOUT" || fail "rank 0's error does not name rank 1 and the timeout"
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
cat "$tmp/out"; for f in "$tmp"/result.*; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
echo "PASS ($mode $via)"
