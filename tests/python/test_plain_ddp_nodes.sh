#!/bin/sh
# A plain torch DDP program (plain_ddp.py, nothing cohort in it) on two "nodes" on this host: two cohortruns,
# --nnodes 2 --node-rank 0/1, 2 workers each. Rank 0 (on node 0) serves torch's c10d store on MASTER_PORT, so that
# port must be one cohortrun keeps free, the same on both nodes; cohortrun's own store is --master-port.
# usage: test_plain_ddp_nodes.sh COHORTRUN PYTHON SCRIPT
set -u
run=$1
py=$2
script=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
COHORT_SECRET=$("$py" -c 'import secrets; print(secrets.token_hex(32))')
export COHORT_SECRET
COHORT_TIMEOUT=60
export COHORT_TIMEOUT
for node in 1 0; do
  timeout 120 "$run" --nnodes 2 --node-rank $node --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$port" \
    "$py" "$script" >"$tmp/out.$node" 2>&1 &
  eval "pid$node=\$!"
done
wait "$pid0"
rc0=$?
wait "$pid1"
rc1=$?
cat "$tmp/out.0" "$tmp/out.1"
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || { echo "FAIL: node 0 exited $rc0, node 1 exited $rc1"; exit 1; }
for r in 0 1 2 3; do
  grep -q "^\[$r\] PASS (plain ddp) rank $r of 4 " "$tmp/out.$((r / 2))" || { echo "FAIL: rank $r did not pass"; exit 1; }
done
echo "PASS (plain ddp on 2 nodes)"
