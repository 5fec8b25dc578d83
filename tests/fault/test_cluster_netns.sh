#!/usr/bin/env bash
# test_cluster_netns.sh CASE: two "hosts" as Linux network namespaces joined by a veth link (10.77.0.1 and
# 10.77.0.2), each running cohortrun --nnodes 2 with 2 ranks. Needs root and `ip netns`; skipped (exit 77) otherwise.
# COHORT_TEST_COHORTRUN, COHORT_TEST_COLLECTIVES and COHORT_TEST_FMNIST_TRAIN name the programs.
#
#   collectives  build/tests/test_collectives --quick over the 4 ranks of both nodes
#   train        fmnist-train --steps 20 on both nodes: the same param_sha256 as 4 ranks on one node
#   kill-worker  kill -9 of one of node 1's workers mid-training: node 0's workers stop within 5 s and node 0's
#                cohortrun names the killed rank as the root cause
#   kill-node    kill -9 of node 1's cohortrun mid-training: node 0's workers stop within 5 s and its cohortrun
#                says node 1 went silent (or names the rank that lost its peers); nothing is left running
#   restart      fmnist-train --steps 40 --checkpoint-every 10 on 2 nodes x 1 rank with --max-restarts 1; rank 1
#                (node 1) SIGKILLs itself after step 25 in generation 0: both nodes report it, start generation 1
#                together, resume from the step-20 checkpoint (one file both "hosts" see; rank 0 writes it) and
#                end with the param_sha256 of an uninterrupted run
#   hang         COHORT_HEARTBEAT_S=1, launcher_worker hang: rank 3 (node 1) stops after 10 allreduces while the
#                other 3 ranks wait for it in the 11th: both nodes name rank 3 as the one outside every collective,
#                and both stop with a non-zero exit within a few seconds
set -u
CASE=${1:?usage: test_cluster_netns.sh collectives|train|kill-worker|kill-node|restart|hang}
RUN=${COHORT_TEST_COHORTRUN:?set COHORT_TEST_COHORTRUN to build/bin/cohortrun}
COLL=${COHORT_TEST_COLLECTIVES:-}
TRAIN=${COHORT_TEST_FMNIST_TRAIN:-}
WORKER=${COHORT_TEST_WORKER:-}
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: needs root to create network namespaces (ip netns)"
  exit 77
fi
if ! command -v ip >/dev/null; then
  echo "SKIP: the ip command (iproute2) is not installed"
  exit 77
fi
A=cohortA$$
B=cohortB$$
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_cluster_netns.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
if ! ip netns add "$A" 2>"$TMP/err"; then
  echo "SKIP: ip netns is not available here: $(cat "$TMP/err")"
  exit 77
fi
ip netns add "$B" || exit 1
# veth names are at most 15 characters
if ! ip link add "cv$$a" type veth peer name "cv$$b" 2>"$TMP/err"; then
  echo "SKIP: cannot create a veth pair here: $(cat "$TMP/err")"
  exit 77
fi
ip link set "cv$$a" netns "$A" && ip link set "cv$$b" netns "$B" &&
  ip -n "$A" addr add 10.77.0.1/24 dev "cv$$a" && ip -n "$B" addr add 10.77.0.2/24 dev "cv$$b" &&
  ip -n "$A" link set "cv$$a" up && ip -n "$B" link set "cv$$b" up &&
  ip -n "$A" link set lo up && ip -n "$B" link set lo up || exit 1

fail() {
  echo "FAIL [$CASE]: $*" >&2
  echo "--- node 0 stderr:" >&2
  tail -n 20 "$TMP/err0" >&2 2>/dev/null
  echo "--- node 1 stderr:" >&2
  tail -n 20 "$TMP/err1" >&2 2>/dev/null
  exit 1
}
export COHORT_SECRET=netns-test-secret-$$
export COHORT_TIMEOUT=20
# Between namespaces the ranks are on different hosts: TCP whatever the default, said here for clarity.
export COHORT_TRANSPORT=tcp
PORT=29731
NPROC=2

# node NS RANK ARGS...: starts cohortrun for node RANK in namespace NS, in the background; its pid is in $NODE_PID.
node() {
  local ns=$1 rank=$2
  shift 2
  ip netns exec "$ns" "$RUN" --nnodes 2 --node-rank "$rank" --nproc-per-node "$NPROC" --master-addr 10.77.0.1 \
    --master-port "$PORT" "$@" >"$TMP/out$rank" 2>"$TMP/err$rank" &
  NODE_PID=$!
  PIDS+=("$NODE_PID")
}

final_of() { grep '^\[0\] final: ' "$1" | tail -n 1 | sed -n 's/.*param_sha256=\([0-9a-f]*\).*/\1/p'; }

# Waits for pid (at most $2 s); prints how long it took.
wait_exit() {
  local pid=$1 limit=$2 start end
  start=$(date +%s.%N)
  for _ in $(seq 1 $((limit * 20))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$pid" 2>/dev/null && return 1
  end=$(date +%s.%N)
  echo "$start $end" | awk '{printf "%.2f", $2 - $1}'
}

# Waits until node 0 has printed a training step past 3.
wait_training() {
  for _ in $(seq 1 400); do
    grep -q '^\[0\] epoch 1/1 step \([4-9]\|[1-9][0-9]\)' "$TMP/out0" && return 0
    sleep 0.05
  done
  fail "training did not get going: $(tail -n 3 "$TMP/out0")"
}

# Every worker of both nodes is gone.
no_workers_left() {
  local left
  left=$(pgrep -f "$1" | wc -l)
  [ "$left" -eq 0 ] || fail "$left workers ($1) still running"
}

case "$CASE" in
collectives)
  [ -n "$COLL" ] || fail "set COHORT_TEST_COLLECTIVES"
  node "$B" 1 "$COLL" --quick
  P1=$NODE_PID
  node "$A" 0 "$COLL" --quick
  P0=$NODE_PID
  wait "$P0" || fail "node 0 exited $?"
  wait "$P1" || fail "node 1 exited $?"
  for r in 0 1 2 3; do
    grep -q "^\[$r\] rank $r of 4 (tcp): all collectives correct" "$TMP/out0" "$TMP/out1" ||
      fail "rank $r did not pass: $(cat "$TMP/out0" "$TMP/out1")"
  done
  echo "collectives correct on 4 ranks over 2 namespaces"
  ;;
train)
  [ -n "$TRAIN" ] || fail "set COHORT_TEST_FMNIST_TRAIN"
  "$RUN" -np 4 "$TRAIN" --steps 20 --batch 32 --quiet >"$TMP/one" 2>&1 || fail "4 ranks on one node failed"
  want=$(final_of "$TMP/one")
  # The ranks listen on the veth's address, chosen by name (the route to 10.77.0.1 would pick it too).
  COHORT_SOCKET_IFNAME="cv$$b" node "$B" 1 "$TRAIN" --steps 20 --batch 32 --quiet
  P1=$NODE_PID
  COHORT_SOCKET_IFNAME="cv$$a" node "$A" 0 "$TRAIN" --steps 20 --batch 32 --quiet
  P0=$NODE_PID
  wait "$P0" || fail "node 0 exited $?"
  wait "$P1" || fail "node 1 exited $?"
  got=$(final_of "$TMP/out0")
  [ -n "$got" ] && [ "$got" = "$want" ] || fail "2 nodes: param_sha256 '$got', one node: '$want'"
  echo "fmnist-train on 2 nodes x 2 ranks: param_sha256 $got, as on one node"
  ;;
kill-worker | kill-node)
  [ -n "$TRAIN" ] || fail "set COHORT_TEST_FMNIST_TRAIN"
  # Long enough to be killed in the middle; --log-every 1 shows its progress.
  node "$B" 1 "$TRAIN" --steps 5000 --batch 32 --log-every 1
  P1=$NODE_PID
  node "$A" 0 "$TRAIN" --steps 5000 --batch 32 --log-every 1
  P0=$NODE_PID
  wait_training
  # ip netns exec execs cohortrun itself, so the workers are the nodes' children.
  W0=$(pgrep -P "$P0" | tr '\n' ' ')
  W1=$(pgrep -P "$P1" | tr '\n' ' ')
  [ "$(echo $W0 | wc -w)" -eq 2 ] && [ "$(echo $W1 | wc -w)" -eq 2 ] || fail "expected 2 workers per node: '$W0' '$W1'"
  if [ "$CASE" = kill-worker ]; then
    victim=${W1%% *}
    kill -9 "$victim"
  else
    kill -9 "$P1"
  fi
  took=$(wait_exit "$P0" 10) || fail "node 0's cohortrun still running 10 s after the kill"
  wait "$P0"
  rc0=$?
  [ "$rc0" -ne 0 ] || fail "node 0 exited 0 after a kill"
  awk -v t="$took" 'BEGIN { exit !(t < 5.0) }' || fail "node 0 took $took s to stop (limit 5 s)"
  for w in $W0 $W1; do
    for _ in $(seq 1 40); do kill -0 "$w" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$w" 2>/dev/null && fail "worker $w still running"
  done
  if [ "$CASE" = kill-worker ]; then
    took1=$(wait_exit "$P1" 10) || fail "node 1's cohortrun still running"
    wait "$P1"
    rc1=$?
    [ "$rc1" -eq 137 ] || fail "node 1 exited $rc1, expected 137"
    # Both nodes name the killed rank (2, node 1's first) as the root cause, as the last lines of stderr.
    for n in 0 1; do
      grep -q "^cohortrun: rank 2 (pid $victim, host .*) was killed by signal 9 (SIGKILL)" "$TMP/err$n" ||
        fail "node $n does not name rank 2's SIGKILL"
    done
    tail -n 1 "$TMP/err0" | grep -q '^cohortrun: node 0: stopped its 2 ranks because of the failure above$' ||
      fail "node 0's last line: $(tail -n 1 "$TMP/err0")"
    echo "kill -9 of rank 2 (node 1): node 0 stopped in $took s, node 1 in $took1 s; both name rank 2"
  else
    # Node 1's workers die with their cohortrun; node 0 finds out from the silence of node 1, or first from a rank
    # that lost its peers: either way it names the cause and stops.
    grep -q '^cohortrun: root cause: node 1 (host .*) went silent\|^cohortrun: root cause: rank [01] on host' \
      "$TMP/err0" || fail "node 0 does not report the loss of node 1"
    echo "kill -9 of node 1's cohortrun: node 0 stopped in $took s: $(grep -m1 '^cohortrun: root cause' "$TMP/err0")"
  fi
  ;;
restart)
  [ -n "$TRAIN" ] || fail "set COHORT_TEST_FMNIST_TRAIN"
  NPROC=1
  args=(--steps 40 --batch 32 --log-every 100)
  COHORT_TRANSPORT=tcp "$RUN" -np 2 "$TRAIN" "${args[@]}" >"$TMP/straight" 2>&1 || fail "uninterrupted run failed"
  want=$(final_of "$TMP/straight")
  [ -n "$want" ] || fail "no final line from the uninterrupted run"
  ck=$TMP/job.ck
  export COHORT_TEST_KILL_AT_STEP=25 COHORT_TEST_KILL_RANK=1
  node "$B" 1 --max-restarts 1 "$TRAIN" "${args[@]}" --checkpoint-every 10 --checkpoint "$ck" --resume auto
  P1=$NODE_PID
  node "$A" 0 --max-restarts 1 "$TRAIN" "${args[@]}" --checkpoint-every 10 --checkpoint "$ck" --resume auto
  P0=$NODE_PID
  unset COHORT_TEST_KILL_AT_STEP COHORT_TEST_KILL_RANK
  wait_exit "$P0" 100 >/dev/null || fail "node 0 still running after 100 s"
  wait "$P0" || fail "node 0 exited $?"
  wait_exit "$P1" 10 >/dev/null || fail "node 1 still running 10 s after node 0 ended"
  wait "$P1" || fail "node 1 exited $?"
  # Both nodes name the cause (rank 1's SIGKILL) and their own restart.
  for n in 0 1; do
    grep -q "^cohortrun: rank 1 (pid [0-9]*, host .*) was killed by signal 9 (SIGKILL)" "$TMP/err$n" ||
      fail "node $n does not name rank 1's SIGKILL"
    grep -q "^cohortrun: restart 1 of 1: node $n starts its 1 rank ($n..$n of 2) again with COHORT_RESTART_COUNT=1, with all 2 nodes$" \
      "$TMP/err$n" || fail "node $n has no restart line"
  done
  grep -q 'resumed from .* at step 20 ' "$TMP/out0" || fail "generation 1 did not resume at step 20: $(cat "$TMP/out0")"
  [ "$(grep -c '^\[0\] final: ' "$TMP/out0")" -eq 1 ] || fail "expected one final line: $(cat "$TMP/out0")"
  got=$(final_of "$TMP/out0")
  [ "$got" = "$want" ] || fail "killed at step 25, restarted on 2 nodes: param_sha256 '$got', uninterrupted '$want'"
  echo "2 nodes: rank 1 killed at step 25, both nodes restarted, resumed at step 20, same param_sha256 $got"
  ;;
hang)
  [ -n "$WORKER" ] || fail "set COHORT_TEST_WORKER"
  export COHORT_HEARTBEAT_S=1
  node "$B" 1 "$WORKER" hang 3 10
  P1=$NODE_PID
  node "$A" 0 "$WORKER" hang 3 10
  P0=$NODE_PID
  took=$(wait_exit "$P0" 20) || fail "node 0 still running 20 s after the start"
  wait "$P0"
  rc0=$?
  wait_exit "$P1" 10 >/dev/null || fail "node 1 still running"
  wait "$P1"
  rc1=$?
  [ "$rc0" -ne 0 ] && [ "$rc1" -ne 0 ] || fail "exit codes $rc0 $rc1 after a hang"
  for n in 0 1; do
    grep -q "^cohortrun: .*rank 3 (pid [0-9]*, host .*) made no progress for [0-9.]* s (COHORT_HEARTBEAT_S=1): it is outside every collective, in its own code; its last completed collective was #9 (allreduce)" \
      "$TMP/err$n" || fail "node $n does not name rank 3 as hung"
    grep -q "made no progress.*rank [012] \|rank [012] (pid [0-9]*, host .*) made no progress" "$TMP/err$n" &&
      fail "node $n names a waiting rank as hung"
  done
  echo "rank 3 hung on node 1: both nodes named it; node 0 ended $took s after its start (exits $rc0, $rc1)"
  ;;
*)
  fail "unknown case '$CASE'"
  ;;
esac
