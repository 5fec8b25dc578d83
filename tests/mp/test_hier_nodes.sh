#!/usr/bin/env bash
# test_hier_nodes.sh COHORTRUN PROGRAM [ARGS...]: two cohortruns on this machine, --nnodes 2 with 2 workers each,
# node 0 with COHORT_NODE_ID=a and node 1 with b: the launcher's own multi-node layout (RANK = node * 2 + local
# rank), which cohort must turn into the layered transport. Every rank must print "(tcp+shm)" and both exit 0.
set -u
RUN=$1
shift
TMP=$(mktemp -d /tmp/cohort-hier-nodes.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export COHORT_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export COHORT_TRANSPORT=auto
# A port for node 0's store: a random one, tried again if it is taken.
for try in 1 2 3; do
  PORT=$((24000 + RANDOM % 2000)) # below the ephemeral range (32768-60999), apart from the other tests' ports (test_torchrun_cli.sh)
  COHORT_NODE_ID=a timeout 300 "$RUN" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 127.0.0.1 \
    --master-port "$PORT" "$@" >"$TMP/node0" 2>&1 &
  node0=$!
  COHORT_NODE_ID=b timeout 300 "$RUN" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 127.0.0.1 \
    --master-port "$PORT" "$@" >"$TMP/node1" 2>&1
  rc1=$?
  wait "$node0"
  rc0=$?
  grep -q "Address already in use" "$TMP/node0" || break
done
cat "$TMP/node0" "$TMP/node1"
[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] || { echo "FAIL: node 0 exited $rc0, node 1 exited $rc1"; exit 1; }
n=$(cat "$TMP/node0" "$TMP/node1" | grep -c "of 4 (tcp+shm): all collectives correct")
[ "$n" -eq 4 ] || { echo "FAIL: $n of 4 ranks reported correct results over tcp+shm"; exit 1; }
echo "PASS"
