#!/bin/sh
# cohort programs under torch 1.13's own launcher, python3 -m torch.distributed.run (Debian's torchrun wrapper
# crashes), on 2 workers: fmnist-train for 3 steps and a cohort.torch allreduce.
#   static      torchrun's default rendezvous: its agent serves a store on MASTER_PORT and tells the workers so
#               (TORCHELASTIC_USE_AGENT_STORE=True); fmnist-train's rank 0 serves cohort's on MASTER_PORT+1,
#               cohort.torch meets through the agent's store
#   standalone  --standalone: MASTER_PORT is free; fmnist-train's rank 0 serves cohort's store there, cohort.torch
#               meets through torch's TCPStore on it (shared with init_process_group)
# The Python program also runs torch.distributed (init_process_group) beside cohort.torch, in both orders.
# Under Python 3.11, torch 1.13's launcher cannot parse its own default "--redirects 0 --tee 0" (an IntFlag's zero
# member is no longer iterated), so the test gives "--redirects 1 --tee 1": stdout to a log and the console.
# usage: test_torchrun.sh PYTHON FMNIST_TRAIN static|standalone
set -u
py=$1
train=$2
mode=$3
"$py" -c 'import torch' 2>/dev/null || { echo "FAIL: $py cannot import torch (apt-get install python3-torch)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A free port whose next one is free too: the agent's store takes the one, cohort's the other.
port=$("$py" -c '
import socket
while True:
    a, b = socket.socket(), socket.socket()
    a.bind(("127.0.0.1", 0))
    try:
        b.bind(("127.0.0.1", a.getsockname()[1] + 1))
        break
    except OSError:
        pass
print(a.getsockname()[1])')
case $mode in
  static) rdzv="--master_addr 127.0.0.1 --master_port $port" ;;
  standalone) rdzv="--standalone" ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
launch() {
  # shellcheck disable=SC2086 # $rdzv is several words
  timeout 120 "$py" -m torch.distributed.run --redirects 1 --tee 1 --log_dir "$tmp/logs.$1" --nproc_per_node 2 \
    $rdzv "$@"
}
launch --no_python "$train" --steps 3 >"$tmp/train" 2>&1
rc=$?
cat "$tmp/train"
[ $rc -eq 0 ] || { echo "FAIL ($mode): fmnist-train under torch.distributed.run exited $rc"; exit 1; }
grep -q "final: steps=3 " "$tmp/train" || { echo "FAIL ($mode): no final line from fmnist-train"; exit 1; }
# The program may use torch.distributed beside cohort.torch, in either order: cohort.torch meets through torch's
# store on MASTER_PORT (the agent's, or under --standalone one rank 0 serves and init_process_group shares:
# python/cohort/torch/_torchrun.py), and says so.
dist_part='
import torch.distributed as dist
dist.init_process_group("cohort")
t = torch.tensor([10.0 * (1 + dist.get_rank())])
dist.all_reduce(t)
print(f"rank={dist.get_rank()} dist_sum={t.item()}")'
hvd_part="
import torch, cohort.torch as hvd
hvd.init()
s = hvd.allreduce(torch.tensor([1.0 + hvd.rank()]), op=hvd.Sum).item()
from cohort.torch import _torchrun
print(f'rank={hvd.rank()} size={hvd.size()} sum={s} torch_store={_torchrun._store is not None}')"
for order in hvd-dist dist-hvd; do
  if [ $order = hvd-dist ]; then prog="$hvd_part$dist_part"; else prog="import torch, cohort.torch$dist_part$hvd_part"; fi
  # shutdown() and init() again meet again, through the same store.
  prog="$prog
hvd.shutdown()
hvd.init()
s = hvd.allreduce(torch.tensor([1.0 + hvd.rank()]), op=hvd.Sum).item()
print(f'rank={hvd.rank()} again={s}')"
  launch --no_python "$py" -c "$prog" >"$tmp/py" 2>&1
  rc=$?
  cat "$tmp/py"
  [ $rc -eq 0 ] || { echo "FAIL ($mode, $order): cohort.torch and torch.distributed under torch.distributed.run exited $rc"; exit 1; }
  grep -q "rank=0 size=2 sum=3.0 torch_store=True" "$tmp/py" && grep -q "rank=1 size=2 sum=3.0 torch_store=True" "$tmp/py" ||
    { echo "FAIL ($mode, $order): cohort.torch's allreduce, met through torch's store"; exit 1; }
  grep -q "rank=0 dist_sum=30.0" "$tmp/py" && grep -q "rank=1 dist_sum=30.0" "$tmp/py" ||
    { echo "FAIL ($mode, $order): torch.distributed beside cohort.torch"; exit 1; }
  grep -q "rank=0 again=3.0" "$tmp/py" && grep -q "rank=1 again=3.0" "$tmp/py" ||
    { echo "FAIL ($mode, $order): cohort.torch after shutdown() and init()"; exit 1; }
done
echo "PASS (torchrun $mode)"
