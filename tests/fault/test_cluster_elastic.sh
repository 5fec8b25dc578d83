#!/usr/bin/env bash
# test_cluster_elastic.sh CASE: an elastic job (cohortrun --nnodes 2:3) on three "hosts", network namespaces joined
# by a bridge in a fourth (10.78.0.1, .2, .3), 1 rank of fmnist-train per node over TCP, checkpoints every 5 steps
# on a file every "host" sees. Needs root and `ip netns`; skipped (exit 77) otherwise.
# COHORT_TEST_COHORTRUN and COHORT_TEST_FMNIST_TRAIN name the programs.
#
#   leave  3 nodes; kill -9 of node 2's cohortrun mid-training: nodes 0 and 1 name node 2 as the node that left,
#          start generation 1 with 2 nodes (world 2), fmnist-train resumes from the checkpoint with the rate
#          rescaled (3 -> 2), both finish with exit 0, one final line; no process left in any namespace and no new
#          /dev/shm entry
#   join   2 nodes start; node 2 joins once training runs: all three stop and start generation 1 with 3 nodes
#          (world 3), fmnist-train resumes (2 -> 3), all three exit 0, one final line from a world of 3
#   rejoin 3 nodes; kill -9 of node 2's cohortrun; once nodes 0 and 1 go on at world 2, a new cohortrun with the
#          same --node-rank 2 replaces the lost node and generation 2 takes it in (world 3); meanwhile a cohortrun
#          with the --node-rank of live node 1 is refused, naming it, and the job goes on; all three exit 0
set -u
CASE=${1:?usage: test_cluster_elastic.sh leave|join}
RUN=${COHORT_TEST_COHORTRUN:?set COHORT_TEST_COHORTRUN to build/bin/cohortrun}
TRAIN=${COHORT_TEST_FMNIST_TRAIN:?set COHORT_TEST_FMNIST_TRAIN to build/bin/fmnist-train}
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: needs root to create network namespaces (ip netns)"
  exit 77
fi
if ! command -v ip >/dev/null; then
  echo "SKIP: the ip command (iproute2) is not installed"
  exit 77
fi
NS=(cohortE0$$ cohortE1$$ cohortE2$$)
HUB=cohortEh$$
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_cluster_elastic.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for ns in "${NS[@]}" "$HUB"; do ip netns del "$ns" 2>/dev/null; done
  [ -n "${COHORT_TEST_KEEP:-}" ] && echo "kept $TMP" >&2 || rm -rf "$TMP"
}
trap cleanup EXIT
if ! ip netns add "$HUB" 2>"$TMP/err"; then
  echo "SKIP: ip netns is not available here: $(cat "$TMP/err")"
  exit 77
fi
ip -n "$HUB" link add br0 type bridge && ip -n "$HUB" link set br0 up || exit 1
for i in 0 1 2; do
  ip netns add "${NS[$i]}" || exit 1
  # veth names are at most 15 characters
  if ! ip link add "ce$$n$i" type veth peer name "ce$$h$i" 2>"$TMP/err"; then
    echo "SKIP: cannot create a veth pair here: $(cat "$TMP/err")"
    exit 77
  fi
  ip link set "ce$$n$i" netns "${NS[$i]}" && ip link set "ce$$h$i" netns "$HUB" &&
    ip -n "$HUB" link set "ce$$h$i" master br0 && ip -n "$HUB" link set "ce$$h$i" up &&
    ip -n "${NS[$i]}" addr add "10.78.0.$((i + 1))/24" dev "ce$$n$i" &&
    ip -n "${NS[$i]}" link set "ce$$n$i" up && ip -n "${NS[$i]}" link set lo up || exit 1
done

fail() {
  echo "FAIL [$CASE]: $*" >&2
  for i in 0 1 2; do
    echo "--- node $i stdout/stderr:" >&2
    tail -n 8 "$TMP/out$i" >&2 2>/dev/null
    tail -n 12 "$TMP/err$i" >&2 2>/dev/null
  done
  exit 1
}
export COHORT_SECRET=elastic-test-secret-$$
export COHORT_TIMEOUT=20
export COHORT_TRANSPORT=tcp
PORT=29741
CK=$TMP/job.ck
STEPS=70
[ "$CASE" = rejoin ] && STEPS=200 # room for a leave, 4.5 s of silence and a join
ARGS=(--steps "$STEPS" --batch 16 --log-every 1 --checkpoint "$CK" --checkpoint-every 5 --resume auto)

# node I: starts node I's cohortrun (--nnodes 2:3, a last call of 1 s) in its namespace; its pid is in $NODE_PID.
node() {
  local i=$1
  ip netns exec "${NS[$i]}" "$RUN" --nnodes 2:3 --node-rank "$i" --nproc-per-node 1 --master-addr 10.78.0.1 \
    --master-port "$PORT" --rdzv-last-call 1 "$TRAIN" "${ARGS[@]}" >"$TMP/out$i" 2>"$TMP/err$i" &
  NODE_PID=$!
  PIDS+=("$NODE_PID")
}

# Waits until rank 0 has printed training step $1 or later (of the current generation's numbering).
wait_step() {
  for _ in $(seq 1 600); do
    last=$(grep -o '^\[0\] epoch [0-9]*/[0-9]* step [0-9]*' "$TMP/out0" | tail -n 1 | awk '{print $5}')
    [ -n "$last" ] && [ "$last" -ge "$1" ] && return 0
    sleep 0.05
  done
  fail "training did not reach step $1"
}

wait_done() { # pid limit_s: waits for it to end and sets RC to its exit code (or fails after limit_s)
  for _ in $(seq 1 $(($2 * 20))); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$1" 2>/dev/null && fail "pid $1 still running after $2 s"
  wait "$1"
  RC=$?
}

nothing_left() {
  sleep 0.3
  for ns in "${NS[@]}"; do
    left=$(ip netns pids "$ns" | tr '\n' ' ')
    [ -z "$left" ] || fail "processes left in $ns: $left ($(ps -o comm= -p ${left// /,} | tr '\n' ' '))"
  done
  new=$(comm -13 <(echo "$SHM_BEFORE") <(ls -1 /dev/shm 2>/dev/null | sort) | grep -i cohort)
  [ -z "$new" ] || fail "new /dev/shm entries: $new"
}

one_final_line() {
  [ "$(grep -c '^\[0\] final: ' "$TMP/out0")" -eq 1 ] || fail "expected one final line on node 0"
  grep -q '^\[[1-9]\] final: ' "$TMP"/out* && fail "a final line from a rank other than 0"
  # The generation that finished ran at world $1: its banner comes last, right before its final line.
  banner=$(grep '^\[0\] fmnist-train: ' "$TMP/out0" | tail -n 1)
  echo "$banner" | grep -q " $1 ranks x batch 16" || fail "the last generation's banner: $banner (expected $1 ranks)"
}

# Starts nodes 0, 1 and 2 ($P0, $P1) and kill -9s node 2's cohortrun once training passed step 12.
three_nodes_then_kill_node_2() {
  node 0
  P0=$NODE_PID
  node 1
  P1=$NODE_PID
  node 2
  local p2=$NODE_PID
  wait_step 12
  kill -9 "$p2"
  { wait "$p2"; } 2>/dev/null # no shell 'Killed' notice
}

SHM_BEFORE=$(ls -1 /dev/shm 2>/dev/null | sort)
case "$CASE" in
leave)
  three_nodes_then_kill_node_2
  grep -q '^cohortrun: node 0: generation 0 (COHORT_RESTART_COUNT=0): the first generation: nodes 0,1,2; 3 nodes, world size 3' \
    "$TMP/err0" || fail "generation 0 was not the 3 nodes"
  wait_done "$P0" 60
  rc0=$RC
  wait_done "$P1" 10
  rc1=$RC
  [ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "survivors exited $rc0 and $rc1, expected 0 and 0"
  for n in 0 1; do
    grep -q "^cohortrun: node $n: generation 1 (COHORT_RESTART_COUNT=1): node 2 (host [^)]*) left the job; nodes 0,1 go on; 2 nodes, world size 2, this node runs ranks $n..$n$" \
      "$TMP/err$n" || fail "node $n does not name node 2 as the node that left"
  done
  grep -Eq '^\[0\] world size changed 3 -> 2: lr rescaled 0\.0375 -> 0\.025, resuming epoch 1 at sample [0-9]+$' "$TMP/out0" ||
    fail "no rescale line: $(grep 'world size' "$TMP/out0")"
  one_final_line 2
  grep -q '^\[0\] final: steps=70 ' "$TMP/out0" || fail "the final line is not at step 70"
  nothing_left
  echo "3 nodes, node 2's cohortrun killed: nodes 0 and 1 went on at world 2 and finished;" \
    "$(grep '^\[0\] world size changed' "$TMP/out0" | sed 's/^\[0\] //')"
  ;;
join)
  node 0
  P0=$NODE_PID
  node 1
  P1=$NODE_PID
  wait_step 10
  grep -q '^cohortrun: node 0: generation 0 (COHORT_RESTART_COUNT=0): the first generation: nodes 0,1; 2 nodes, world size 2' \
    "$TMP/err0" || fail "generation 0 was not the 2 nodes"
  node 2
  P2=$NODE_PID
  wait_done "$P0" 60
  rc0=$RC
  wait_done "$P1" 10
  rc1=$RC
  wait_done "$P2" 10
  rc2=$RC
  [ "$rc0$rc1$rc2" = 000 ] || fail "exit codes $rc0 $rc1 $rc2, expected 0 0 0"
  for n in 0 1 2; do
    grep -q "^cohortrun: node $n: generation 1 (COHORT_RESTART_COUNT=1): node 2 (host [^)]*) joined; nodes 0,1,2; 3 nodes, world size 3, this node runs ranks $n..$n$" \
      "$TMP/err$n" || fail "node $n did not start generation 1 with node 2"
  done
  grep -q 'node 2 (host .*) joined the job' "$TMP/err0" || fail "node 0 does not say node 2 joined"
  grep -Eq '^\[0\] world size changed 2 -> 3: lr rescaled 0\.025 -> 0\.0375, resuming epoch 1 at sample [0-9]+$' "$TMP/out0" ||
    fail "no rescale line: $(grep 'world size' "$TMP/out0")"
  one_final_line 3
  nothing_left
  echo "2 nodes, then node 2 joined: all 3 finished at world 3;" \
    "$(grep '^\[0\] world size changed' "$TMP/out0" | sed 's/^\[0\] //')"
  ;;
rejoin)
  three_nodes_then_kill_node_2
  for _ in $(seq 1 200); do
    grep -q '^cohortrun: node 0: generation 1 .*node 2 (host [^)]*) left the job; nodes 0,1 go on' "$TMP/err0" && break
    sleep 0.05
  done
  grep -q '^cohortrun: node 0: generation 1 ' "$TMP/err0" || fail "no generation 1 without node 2"
  mv "$TMP/out2" "$TMP/out2.lost" && mv "$TMP/err2" "$TMP/err2.lost"
  node 2
  P2=$NODE_PID
  # A node with the id of a live node is refused while the job runs, and the job does not notice.
  ip netns exec "${NS[2]}" "$RUN" --nnodes 2:3 --node-rank 1 --nproc-per-node 1 --master-addr 10.78.0.1 \
    --master-port "$PORT" --rdzv-last-call 1 "$TRAIN" "${ARGS[@]}" >"$TMP/dup.out" 2>"$TMP/dup.err"
  rc=$?
  [ "$rc" != 0 ] || fail "a second cohortrun with the --node-rank of live node 1 exited 0"
  grep -q -- '--node-rank 1 is already taken by a live node of this job (host [^)]*)' "$TMP/dup.err" ||
    fail "the second node 1 was not refused by name: $(cat "$TMP/dup.err")"
  wait_done "$P0" 90
  rc0=$RC
  wait_done "$P1" 10
  rc1=$RC
  wait_done "$P2" 10
  rc2=$RC
  [ "$rc0$rc1$rc2" = 000 ] || fail "exit codes $rc0 $rc1 $rc2, expected 0 0 0"
  grep -q '^cohortrun: node 2: the node that had --node-rank 2 (host [^)]*) is gone; this node replaces it$' \
    "$TMP/err2" || fail "the new node 2 does not say it replaces the lost one"
  for n in 0 1 2; do
    grep -q "^cohortrun: node $n: generation 2 (COHORT_RESTART_COUNT=2): node 2 (host [^)]*) joined; nodes 0,1,2; 3 nodes, world size 3, this node runs ranks $n..$n$" \
      "$TMP/err$n" || fail "node $n did not start generation 2 with the new node 2"
  done
  grep -Eq '^\[0\] world size changed 2 -> 3: lr rescaled 0\.025 -> 0\.0375, resuming epoch 1 at sample [0-9]+$' "$TMP/out0" ||
    fail "no rescale line 2 -> 3: $(grep 'world size' "$TMP/out0")"
  one_final_line 3
  grep -q "^\[0\] final: steps=$STEPS " "$TMP/out0" || fail "the final line is not at step $STEPS"
  nothing_left
  echo "3 nodes, node 2 killed, the others went on at world 2, a new node 2 replaced it: all 3 finished at world 3;" \
    "the duplicate node 1 was refused: $(head -c 160 "$TMP/dup.err")"
  ;;
*)
  fail "unknown case '$CASE'"
  ;;
esac
