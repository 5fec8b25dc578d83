"""One task of a Slurm step (tests/slurm/test_slurm.sh), through cohort.torch (Horovod's API): joins the job from
Slurm's variables alone, prints where it sits, allreduces and checks the sum. With --loop N it goes on for N more
allreduces, 0.1 s apart (for scancel and kill -9), after writing its pid to DIR/pid.RANK (--pid-dir DIR).

Prints: "task rank R size N local L/LS cross C/CS node NODE transport T threads H sum ok"."""
import argparse
import os
import socket
import sys
import time

import torch

import cohort.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--loop", type=int, default=0)
p.add_argument("--pid-dir", default="")
args = p.parse_args()

hvd.init()
r, n = hvd.rank(), hvd.size()
if args.pid_dir:
    with open(os.path.join(args.pid_dir, f"pid.{r}"), "w") as f:
        f.write(f"{os.getpid()}\n")
x = hvd.allreduce(torch.tensor([float(r + 1)]), op=hvd.Sum)
if int(x.item()) != n * (n + 1) // 2:
    print(f"task rank {r}: allreduce gave {x.item()}, expected {n * (n + 1) // 2}", file=sys.stderr)
    sys.exit(1)
node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
print(f"task rank {r} size {n} local {hvd.local_rank()}/{hvd.local_size()} cross {hvd.cross_rank()}/"
      f"{hvd.cross_size()} node {node} transport {hvd.transport()} threads {torch.get_num_threads()} sum ok",
      flush=True)
for i in range(args.loop):
    hvd.allreduce(torch.ones(4), op=hvd.Sum)
    time.sleep(0.1)
hvd.shutdown()
