#!/bin/sh
# Ranks started by hand, as torchrun-style users do, with no launcher: rank 0 serves the rendezvous store itself.
# usage: test_rank0_store.sh NP PROGRAM [ARGS...]
set -u
np=$1
shift
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=""
r=0
while [ $r -lt "$np" ]; do
  RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port COHORT_SECRET=rank0-serves-the-store "$@" &
  pids="$pids $!"
  r=$((r + 1))
done
rc=0
for p in $pids; do
  wait "$p" || rc=1
done
[ $rc -eq 0 ] && echo "all $np ranks passed with the store served by rank 0 on port $port"
exit $rc
