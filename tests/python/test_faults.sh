#!/bin/sh
# Faults of cohort.torch between real processes under cohortrun (tests/python/test_faults.py writes what each rank
# saw). usage: test_faults.sh COHORTRUN PYTHON MODE
#   kill      rank 1 is SIGKILLed inside an allreduce: rank 0 raises RemoteError naming rank 1 within 2 s
#   mismatch  the ranks reduce different shapes, twice, then broadcast each as its own root: both raise MismatchError
#             each time (within 2 s) naming both calls, then a barrier and an allreduce work (3 on every element)
#   left      rank 1 calls shutdown() (and lives on) while rank 0 waits for it in a barrier: rank 0 raises
#             RemoteError naming rank 1 as having left the communicator within 2 s
#   sigint    Ctrl-C (SIGINT) to cohortrun while the ranks reduce: cohortrun exits 130 within 10 s, no Python
#             rank is left, and nothing of theirs is left in /dev/shm
set -u
run=$1 py=$2 mode=$3
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# within_2s RESULT STAMP WHAT: rank 0's error (first line of RESULT: a time) came less than 2 s after STAMP's time.
within_2s() {
  "$py" -c 'import sys; d = float(open(sys.argv[1]).readline()) - float(open(sys.argv[2]).read())
print(f"rank 0 raised {d:.3f} s after {sys.argv[3]}"); sys.exit(0 if 0 <= d < 2.0 else 1)' "$1" "$2" "$3" >>"$tmp/out" 2>&1
}
fail() { echo "FAIL ($mode): $*"; echo "--- job output:"; cat "$tmp/out"; for f in "$tmp"/result.*; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }

case $mode in
kill)
  "$run" -np 2 --grace 10 "$py" "$here/test_faults.py" kill "$tmp" >"$tmp/out" 2>&1
  [ -f "$tmp/result.0" ] || fail "rank 0 reported nothing"
  [ -f "$tmp/killed_at" ] || fail "rank 1 was not killed"
  [ "$(sed -n 2p "$tmp/result.0")" = RemoteError ] || fail "rank 0 did not raise RemoteError"
  sed -n '3,$p' "$tmp/result.0" | grep -q "rank 1" || fail "rank 0's error does not name rank 1"
  within_2s "$tmp/result.0" "$tmp/killed_at" "the kill" || fail "RemoteError came 2 s or more after the kill"
  ;;
left)
  COHORT_TRANSPORT=shm "$run" -np 2 "$py" "$here/test_faults.py" left "$tmp" >"$tmp/out" 2>&1 || fail "the job failed"
  [ -f "$tmp/result.0" ] || fail "rank 0 reported nothing"
  [ "$(sed -n 2p "$tmp/result.0")" = RemoteError ] || fail "rank 0 did not raise RemoteError"
  sed -n '3,$p' "$tmp/result.0" | grep -q "rank 1 left the communicator" || fail "rank 0's error does not say rank 1 left"
  within_2s "$tmp/result.0" "$tmp/left_at" "rank 1 shut down" || fail "RemoteError came 2 s or more after the shutdown"
  ;;
mismatch)
  "$run" -np 2 "$py" "$here/test_faults.py" mismatch "$tmp" >"$tmp/out" 2>&1 || fail "the job failed"
  for r in 0 1; do
    [ -f "$tmp/result.$r" ] || fail "rank $r reported nothing"
    [ "$(grep -c '^MismatchError [01]\.' "$tmp/result.$r")" = 3 ] ||
      fail "rank $r did not raise MismatchError three times, each within 2 s"
    grep -q "^MismatchError .*rank 0 called allreduce(count=12, f32, sum, .*) \[call #[0-9]*\] but rank 1 called allreduce(count=15, f32, sum" \
      "$tmp/result.$r" || fail "rank $r's error does not name both allreduces"
    grep -q "^MismatchError .*rank 0 called broadcast(count=4, f32, root=0, .*) \[call #[0-9]*\] but rank 1 called broadcast(count=4, f32, root=1" \
      "$tmp/result.$r" || fail "rank $r's error does not name both broadcasts"
    grep -qx "after \[3.0, 3.0, 3.0, 3.0, 3.0\]" "$tmp/result.$r" || fail "rank $r could not go on after the mismatches"
  done
  ;;
sigint)
  # A background command of a non-interactive shell starts with SIGINT ignored (and so would the ranks): put back
  # the default that a launch from a terminal has, then exec cohortrun.
  "$py" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
    "$run" -np 2 "$py" "$here/test_faults.py" sigint "$tmp" >"$tmp/out" 2>&1 &
  job=$!
  i=0
  while [ ! -s "$tmp/pid.0" ] || [ ! -s "$tmp/pid.1" ]; do
    i=$((i + 1)); [ $i -gt 600 ] && { kill -9 $job; fail "the ranks did not start"; }
    sleep 0.1
  done
  sleep 1
  pids="$(cat "$tmp/pid.0") $(cat "$tmp/pid.1")"
  kill -INT $job
  i=0
  while kill -0 $job 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 100 ] && { kill -9 $job; fail "cohortrun still runs 10 s after SIGINT"; }
    sleep 0.1
  done
  wait $job; rc=$?
  [ $rc = 130 ] || fail "cohortrun exited $rc, not 130"
  grep -q "SIGKILL" "$tmp/out" && fail "the ranks did not stop on SIGINT: cohortrun had to SIGKILL them"
  for p in $pids; do
    kill -0 "$p" 2>/dev/null && fail "rank pid $p still runs"
    ls /dev/shm | grep -q "cohort-shm-$p-" && fail "/dev/shm still holds a segment of pid $p: $(ls /dev/shm | grep "cohort-shm-$p-")"
  done
  echo "stopped in $i tenths of a second; ranks $pids gone; nothing of theirs in /dev/shm" >>"$tmp/out"
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
cat "$tmp/out"; for f in "$tmp"/result.*; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
echo "PASS ($mode)"
