#!/usr/bin/env bash
# test_launcher_waits.sh CASE: cohortrun never waits forever. Every wait outside its poll loop (nodes joining, node
# 0's store, the end of the job) answers SIGINT and SIGTERM within a second and says what it was waiting for; an ssh
# that fails fails the job at once; a node whose store cannot answer stops within a few seconds. Loopback only.
# COHORT_TEST_COHORTRUN names cohortrun.
#
#   ssh-fails      -H with an ssh that exits 255 at once: exit 1 within 3 s (COHORT_TIMEOUT=60), naming the ssh
#                  (before: the whole COHORT_TIMEOUT, deaf to Ctrl-C)
#   join-signals   SIGINT and SIGTERM to a node that waits for the others (--nnodes 2 node 0 alone; node 1 without
#                  node 0's store; elastic node 0; an elastic node 1): exit 128+signal within 1.5 s, naming the wait
#   silent-store   node 0's cohortrun is stopped (SIGSTOP: its store accepts but never answers); SIGTERM to node 1
#                  ends it within 4 s (before: 300 s, the store request's timeout)
#   silent-peer    node 1's cohortrun is stopped (SIGSTOP: silent, its connections open); SIGTERM to node 0 ends it
#                  within 4 s
#   interrupted    Ctrl-C to node 0 of a running 2-node job: node 1 stops too, within 3 s, naming node 0's SIGINT,
#                  and both exit 130
#   end-wait       node 0 has finished and waits for node 1; SIGINT ends that wait within 1.5 s
#   hang-any       COHORT_HEARTBEAT_S=1 over shell programs (nothing of cohort in them): rank 1 sleeps while ranks
#                  0 and 2 wait for a peer (a FIFO no one opens): cohortrun names rank 1, by its wait, and exits 1
#                  within 6 s; all three waiting alike still names one of them; of 2 ranks, a SIGSTOPped one is
#                  named as stopped beside one that sleeps; ranks that compute (CPU) or move
#                  bytes for 3 s are never reported (before: no report at all, the job hung)
#   hang-torch     the same for a plain torch program (tests/python/plain_hang.py; COHORT_TEST_PYTHON, skipped
#                  without torch): rank 1 sleeps after 5 allreduces, the others wait in the 6th
set -u
CASE=${1:?usage: test_launcher_waits.sh ssh-fails|join-signals|silent-store|silent-peer|interrupted|end-wait|hang-any|hang-torch}
RUN=${COHORT_TEST_COHORTRUN:?set COHORT_TEST_COHORTRUN to build/bin/cohortrun}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_launcher_waits.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do
    kill -CONT "$p" 2>/dev/null
    kill -9 "$p" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$TMP"/err*; do
    [ -f "$f" ] && { echo "--- $f:" >&2; tail -n 8 "$f" >&2; }
  done
  exit 1
}
export COHORT_SECRET=waits-test-secret-$$
# A port of its own per case and run, away from the other tests' fixed ports.
# Below the kernel's ephemeral range (32768-60999), where an outgoing connection of another test can hold it.
PORT=$((22000 + ($$ % 1000) * 2)) # 22000-23999 (see test_torchrun_cli.sh)
# The workers sleep for a time no other process on the machine does, so that pgrep finds only them.
NAP=60.$$

now() { date +%s.%N; }
since() { echo "$1 $(now)" | awk '{printf "%.2f", $2 - $1}'; }
# Waits for pid to end (at most $2 s); sets RC (its exit code) and TOOK (seconds); fails past the limit.
wait_end() {
  local pid=$1 limit=$2 start
  start=$(now)
  for _ in $(seq 1 $((limit * 50))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  kill -0 "$pid" 2>/dev/null && fail "pid $pid still runs $limit s later"
  wait "$pid"
  RC=$?
  TOOK=$(since "$start")
}
# Asserts TOOK <= $1.
within() { awk -v t="$TOOK" -v l="$1" 'BEGIN { exit !(t <= l) }' || fail "took $TOOK s, more than $1 s"; }

case "$CASE" in
ssh-fails)
  printf '#!/bin/sh\necho "ssh: connect to host $3 port 22: Connection refused" >&2\nexit 255\n' >"$TMP/ssh"
  chmod +x "$TMP/ssh"
  start=$(now)
  PATH="$TMP:$PATH" COHORT_TIMEOUT=60 "$RUN" -H 127.0.0.1:1,otherhost:1 /bin/echo hi >"$TMP/out" 2>"$TMP/err"
  RC=$?
  TOOK=$(since "$start")
  [ "$RC" = 1 ] || fail "exit code $RC, expected 1"
  within 3
  grep -q "\`ssh otherhost\`, which starts node 1, exited with code 255" "$TMP/err" || fail "no word of the ssh"
  grep -q "while waiting for" "$TMP/err" || fail "does not say what it waited for"
  echo "ok: exit 1 after $TOOK s: $(tail -n 1 "$TMP/err")"
  ;;
join-signals)
  for sig in INT TERM; do
    want=$((128 + $(kill -l "$sig")))
    for who in "fixed-0|--nnodes 2 --node-rank 0|waiting for node 1 of 2 to join" \
      "fixed-1|--nnodes 2 --node-rank 1|waiting for the rendezvous store of node 0" \
      "elastic-0|--nnodes 1:2 --node-rank 0 --rdzv-last-call 100|waiting for the nodes to join" \
      "elastic-1|--nnodes 1:2 --node-rank 1|waiting for the rendezvous store of node 0"; do
      IFS='|' read -r name args expect <<<"$who"
      # shellcheck disable=SC2086
      COHORT_TIMEOUT=60 "$RUN" $args -np 1 --master-port "$PORT" /bin/echo hi >"$TMP/out" 2>"$TMP/err.$name" &
      pid=$!
      PIDS+=("$pid")
      sleep 0.7
      kill -"$sig" "$pid"
      wait_end "$pid" 10
      [ "$RC" = "$want" ] || fail "$name: SIG$sig gave exit code $RC, expected $want"
      within 1.5
      grep -q "interrupted by SIG$sig while $expect" "$TMP/err.$name" || fail "$name: no '... while $expect'"
      echo "ok: $name SIG$sig: exit $RC after $TOOK s: $(tail -n 1 "$TMP/err.$name")"
    done
  done
  ;;
silent-store)
  COHORT_TIMEOUT=20 "$RUN" --nnodes 2 --node-rank 0 -np 1 --master-port "$PORT" sleep "$NAP" >"$TMP/out0" 2>"$TMP/err0" &
  p0=$!
  PIDS+=("$p0")
  COHORT_TIMEOUT=20 "$RUN" --nnodes 2 --node-rank 1 -np 1 --master-port "$PORT" sleep "$NAP" >"$TMP/out1" 2>"$TMP/err1" &
  p1=$!
  PIDS+=("$p1")
  for _ in $(seq 1 200); do
    [ "$(pgrep -c -f "^sleep $NAP\$")" -ge 2 ] && break
    sleep 0.05
  done
  sleep 0.5
  kill -STOP "$p0"
  sleep 0.3
  kill -TERM "$p1"
  wait_end "$p1" 20
  within 4
  [ "$RC" != 0 ] || fail "node 1 exited 0"
  echo "ok: node 1 ended $TOOK s after SIGTERM with its node 0 stopped (exit $RC): $(tail -n 1 "$TMP/err1")"
  kill -CONT "$p0"
  wait_end "$p0" 10
  ;;
silent-peer)
  COHORT_TIMEOUT=20 "$RUN" --nnodes 2 --node-rank 0 -np 1 --master-port "$PORT" sleep "$NAP" >"$TMP/out0" 2>"$TMP/err0" &
  p0=$!
  PIDS+=("$p0")
  COHORT_TIMEOUT=20 "$RUN" --nnodes 2 --node-rank 1 -np 1 --master-port "$PORT" sleep "$NAP" >"$TMP/out1" 2>"$TMP/err1" &
  p1=$!
  PIDS+=("$p1")
  for _ in $(seq 1 200); do
    [ "$(pgrep -c -f "^sleep $NAP\$")" -ge 2 ] && break
    sleep 0.05
  done
  sleep 0.5
  kill -STOP "$p1"
  sleep 0.3
  kill -TERM "$p0"
  wait_end "$p0" 20
  within 4
  echo "ok: node 0 ended $TOOK s after SIGTERM with node 1 silent (exit $RC): $(tail -n 1 "$TMP/err0")"
  kill -CONT "$p1"
  wait_end "$p1" 10
  ;;
interrupted)
  COHORT_TIMEOUT=20 "$RUN" --nnodes 2 --node-rank 0 -np 1 --master-port "$PORT" sleep "$NAP" >"$TMP/out0" 2>"$TMP/err0" &
  p0=$!
  PIDS+=("$p0")
  COHORT_TIMEOUT=20 "$RUN" --nnodes 2 --node-rank 1 -np 1 --master-port "$PORT" sleep "$NAP" >"$TMP/out1" 2>"$TMP/err1" &
  p1=$!
  PIDS+=("$p1")
  for _ in $(seq 1 200); do
    [ "$(pgrep -c -f "^sleep $NAP\$")" -ge 2 ] && break
    sleep 0.05
  done
  sleep 0.3
  kill -INT "$p0"
  wait_end "$p1" 20
  within 3
  [ "$RC" = 130 ] || fail "node 1 exit code $RC, expected 130"
  grep -q "node 0 (host .*) was interrupted by SIGINT, so every node stops" "$TMP/err1" || fail "node 1 does not say why"
  wait_end "$p0" 10
  [ "$RC" = 130 ] || fail "node 0 exit code $RC, expected 130"
  echo "ok: node 1 stopped (exit 130) within 3 s of node 0's SIGINT: $(grep 'interrupted' "$TMP/err1" | head -n 1)"
  ;;
end-wait)
  COHORT_TIMEOUT=20 "$RUN" --nnodes 2 --node-rank 0 -np 1 --master-port "$PORT" true >"$TMP/out0" 2>"$TMP/err0" &
  p0=$!
  PIDS+=("$p0")
  COHORT_TIMEOUT=20 "$RUN" --nnodes 2 --node-rank 1 -np 1 --master-port "$PORT" sleep "$NAP" >"$TMP/out1" 2>"$TMP/err1" &
  p1=$!
  PIDS+=("$p1")
  for _ in $(seq 1 200); do
    pgrep -f "^sleep $NAP\$" >/dev/null && break
    sleep 0.05
  done
  sleep 0.5
  kill -INT "$p0"
  wait_end "$p0" 10
  within 1.5
  [ "$RC" = 130 ] || fail "node 0 exit code $RC, expected 130"
  grep -q "interrupted by SIGINT while waiting for the other nodes to finish" "$TMP/err0" || fail "no word of the wait"
  echo "ok: node 0 left its wait for node 1 $TOOK s after SIGINT"
  kill -TERM "$p1"
  wait_end "$p1" 10
  ;;
hang-any)
  mkfifo "$TMP/fifo"
  # shellcheck disable=SC2016
  prog='if [ "$RANK" = 1 ]; then exec sleep 100; else exec cat "$0"; fi'
  start=$(now)
  COHORT_HEARTBEAT_S=1 "$RUN" -np 3 /bin/sh -c "$prog" "$TMP/fifo" >"$TMP/out" 2>"$TMP/err"
  RC=$?
  TOOK=$(since "$start")
  [ "$RC" = 1 ] || fail "exit code $RC, expected 1"
  within 6
  grep -q "^cohortrun: rank 1 (pid [0-9]*, host .*) made no progress for .* (COHORT_HEARTBEAT_S=1; it does not count collectives for cohortrun" "$TMP/err" ||
    fail "rank 1 is not named"
  grep -q "its wait in the kernel is its own (a sleep, a disk) while the others wait for a peer; stopping the job" "$TMP/err" ||
    fail "the evidence is not given"
  echo "ok: rank 1 named after $TOOK s: $(grep -m1 'made no progress' "$TMP/err")"
  # All three wait alike (for a peer that never comes): one is named, by the order they went quiet.
  COHORT_HEARTBEAT_S=1 "$RUN" -np 3 /bin/sh -c 'exec cat "$0"' "$TMP/fifo" >"$TMP/out" 2>"$TMP/err"
  RC=$?
  [ "$RC" = 1 ] || fail "all waiting alike: exit code $RC, expected 1"
  grep -q "it went quiet first (no rank's wait tells more); stopping the job" "$TMP/err" || fail "no rank named"
  echo "ok: all waiting alike: $(grep -m1 -o 'rank [0-9] (pid' "$TMP/err") named, as the first to go quiet"
  # A stopped rank beside one that sleeps (its wait "its own"): the stopped one is named, as stopped (before: the
  # sleeping rank 0 was named, and rank 1's stop was taken for a wait for a peer).
  # shellcheck disable=SC2016
  COHORT_HEARTBEAT_S=1 "$RUN" -np 2 /bin/sh -c 'echo $$ >"$0.$RANK"; exec sleep 100' "$TMP/pid" >"$TMP/out" 2>"$TMP/err" &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 250); do
    [ -s "$TMP/pid.1" ] && break
    sleep 0.02
  done
  [ -s "$TMP/pid.1" ] || fail "rank 1 did not start"
  PIDS+=("$(cat "$TMP/pid.1")")
  kill -STOP "$(cat "$TMP/pid.1")"
  wait_end "$pid" 10
  [ "$RC" = 1 ] || fail "a stopped rank: exit code $RC, expected 1"
  grep -q "^cohortrun: rank 1 (pid [0-9]*, .* it is stopped (SIGCONT resumes it).*: it is the one rank the kernel shows stopped; stopping the job" "$TMP/err" ||
    fail "the stopped rank 1 is not named as stopped"
  echo "ok: a stopped rank named beside a sleeping one, after $TOOK s"
  # Computing (CPU) for 3 s, 6 times COHORT_HEARTBEAT_S, and moving bytes through a pipe are progress.
  # shellcheck disable=SC2016
  busy='end=$(($(date +%s) + 3)); while [ "$(date +%s)" -lt "$end" ]; do :; done; echo done $RANK'
  COHORT_HEARTBEAT_S=0.5 "$RUN" -np 2 /bin/sh -c "$busy" >"$TMP/out" 2>"$TMP/err"
  RC=$?
  [ "$RC" = 0 ] || fail "busy ranks: exit code $RC"
  grep -q "no progress" "$TMP/err" && fail "a busy rank was reported"
  COHORT_HEARTBEAT_S=0.5 "$RUN" -np 2 /bin/sh -c 'dd if=/dev/zero bs=64k count=40000 status=none | cat >/dev/null; echo read $RANK' >"$TMP/out" 2>"$TMP/err"
  RC=$?
  [ "$RC" = 0 ] || fail "reading ranks: exit code $RC"
  grep -q "no progress" "$TMP/err" && fail "a reading rank was reported"
  echo "ok: ranks that compute or read are not reported"
  ;;
hang-torch)
  PY=${COHORT_TEST_PYTHON:-python3}
  SCRIPT=${COHORT_TEST_PLAIN_HANG:?set COHORT_TEST_PLAIN_HANG to tests/python/plain_hang.py}
  if ! "$PY" -c 'import torch.distributed' 2>/dev/null; then
    echo "SKIP: $PY cannot import torch.distributed"
    exit 77
  fi
  for how in sleep lock; do
    start=$(now)
    HANG_HOW=$how COHORT_HEARTBEAT_S=2 OMP_NUM_THREADS=1 "$RUN" -np 3 "$PY" "$SCRIPT" >"$TMP/out" 2>"$TMP/err"
    RC=$?
    TOOK=$(since "$start")
    [ "$RC" = 1 ] || fail "$how: exit code $RC, expected 1"
    [ "$(grep -c 'did 5 allreduces' "$TMP/out")" = 3 ] || fail "$how: the ranks did not get going"
    grep -q "^cohortrun: rank [0-2] (pid [0-9]*, host .*) made no progress for" "$TMP/err" || fail "$how: no rank named"
    if [ "$how" = sleep ]; then
      grep -q "^cohortrun: rank 1 (pid .*its wait in the kernel is its own" "$TMP/err" || fail "sleep: rank 1 not named"
    fi
    echo "ok: $how: exit 1 after $TOOK s: $(grep -m1 -o 'rank [0-2] (pid [0-9]*, host [^)]*) made no progress for [0-9.]* s' "$TMP/err") ... $(grep -m1 -o '[^:]*; stopping the job' "$TMP/err")"
  done
  ;;
*)
  fail "unknown case"
  ;;
esac
exit 0
