#!/bin/sh
# cohort.torch in processes started without cohortrun, from torchrun's variables set by hand (Debian's torchrun 1.13
# itself fails under Python 3.11): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
# usage: test_env_launch.sh PYTHON
set -u
py=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 60 "$py" -c '
import torch, cohort.torch as hvd
hvd.init()
s = hvd.allreduce(torch.tensor([1.0 + hvd.rank()]), op=hvd.Sum).item()
print(f"rank={hvd.rank()} size={hvd.size()} local={hvd.local_rank()}/{hvd.local_size()} sum={s}")' >"$tmp/out.$r" 2>&1 &
done
wait
cat "$tmp/out.0" "$tmp/out.1"
grep -qx "rank=0 size=2 local=0/2 sum=3.0" "$tmp/out.0" && grep -qx "rank=1 size=2 local=1/2 sum=3.0" "$tmp/out.1" &&
  echo "PASS (env launch)"
