"""cohort.torch.DistributedDataParallel against torch DDP on gloo, CUDA modules, ranks sharing one GPU (issue target:
>= 2x gloo at batch 64 per rank on the reference CNN). Both train in the same processes in alternating rounds, so
that the machine's drift cannot decide the ratio; torch's NCCL refuses ranks that share a GPU, so gloo (which stages
CUDA tensors through host memory) is torch's only option for this layout.

    cohortrun -np 2 python3 bench/torch_cuda_ddp.py [STEPS_PER_ROUND] [BATCH] [ROUNDS]

Prints one line per round and system, then img/s (global) per system and the ratio (rank 0).
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import cohort.torch as hvd


class Net(nn.Module):  # the reference CNN (fmnist-train's, and the anchors')
    def __init__(s):
        super().__init__()
        s.c1 = nn.Conv2d(1, 32, 3)
        s.c2 = nn.Conv2d(32, 64, 3)
        s.f1 = nn.Linear(9216, 128)
        s.f2 = nn.Linear(128, 10)

    def forward(s, x):
        x = F.max_pool2d(F.relu(s.c2(F.relu(s.c1(x)))), 2)
        return s.f2(F.relu(s.f1(x.flatten(1))))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    torch.manual_seed(0)
    systems = {}
    m = Net().to(dev)
    systems["cohort"] = (hvd.DistributedDataParallel(m), m)
    m = Net().to(dev)
    systems["gloo"] = (torch.nn.parallel.DistributedDataParallel(m), m)
    opts = {k: torch.optim.SGD(v[0].parameters(), lr=0.01, momentum=0.9) for k, v in systems.items()}
    x = torch.rand(batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def run(name, n):
        model, opt = systems[name][0], opts[name]
        for _ in range(n):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        torch.cuda.synchronize()

    for name in systems:  # warm-up: cuDNN's choices, the device path, gloo's buffers
        run(name, 10)
    times = {k: [] for k in systems}
    for r in range(rounds):
        order = list(systems) if r % 2 == 0 else list(systems)[::-1]
        for name in order:
            dist.barrier()
            t0 = time.perf_counter()
            run(name, steps)
            dist.barrier()
            dt = time.perf_counter() - t0
            times[name].append(dt)
            if rank == 0:
                print(f"round {r} {name}: {steps * batch * world / dt:.0f} img/s", flush=True)
    if rank == 0:
        best = {k: steps * batch * world / min(v) for k, v in times.items()}
        # The median beside the best: on the GPU host (2026-11-27) cohort's rounds fell from 39k to 27k img/s in one
        # run of 3 rounds of 60 steps, so one number alone says little about the spread.
        median = {k: steps * batch * world / sorted(v)[len(v) // 2] for k, v in times.items()}
        from cohort import _lib, _get_comm
        path = (_lib.lib.cohort_device_path(_get_comm()) or b"").decode()
        print(f"RESULT world={world} batch/rank={batch} cohort_img_s={best['cohort']:.0f} gloo_img_s={best['gloo']:.0f}"
              f" ratio={best['cohort'] / best['gloo']:.2f} median_cohort_img_s={median['cohort']:.0f}"
              f" median_gloo_img_s={median['gloo']:.0f} median_ratio={median['cohort'] / median['gloo']:.2f}"
              f" device_path={path} gpu={torch.cuda.get_device_name(dev)}",
              flush=True)
    dist.destroy_process_group()
    hvd.shutdown()
    os._exit(0)  # torch 1.13's gloo teardown can hang after the work is done (tests/python/plain_ddp.py)


if __name__ == "__main__":
    main()
