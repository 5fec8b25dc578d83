"""The per-step cost of uneven inputs in cohort.torch (docs/torch.md): cohort.torch makes every engine with
uneven_inputs on, which adds one 4-byte allreduce at the start of every synchronized step. This times a
DistributedDataParallel step (forward, backward, SGD step) of a small MLP with it on and off, in alternating rounds
(so that a busy machine's noise falls on both alike), and prints the medians.

    build/bin/cohortrun -np 2 python3 bench/torch_join_cost.py [--steps 2000] [--rounds 5]
"""
import argparse
import statistics
import time

import torch

import cohort.torch as hvd
from cohort.torch import _engine


def step_time(uneven, steps, model, x, y):
    _engine._UNEVEN_INPUTS = uneven
    ddp = hvd.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

    def one():
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()

    for _ in range(50):
        one()
    hvd.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        one()
    took = time.perf_counter() - t0
    ddp.close()
    # The slowest rank's time is the step's.
    return hvd.allreduce(torch.tensor([took / steps]), op=hvd.Max).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    x, y = torch.randn(32, 64), torch.randn(32, 10)
    times = {True: [], False: []}
    for _ in range(a.rounds):
        for uneven in (False, True):
            times[uneven].append(step_time(uneven, a.steps, model, x, y))
    # The added call alone: the count allreduce (one int32, summed), timed in a loop.
    one = torch.ones(1, dtype=torch.int32)
    lat = []
    for _ in range(a.rounds):
        hvd.barrier()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            hvd.allreduce_(one, op=hvd.Sum)
            one.fill_(1)
        lat.append(hvd.allreduce(torch.tensor([(time.perf_counter() - t0) / a.steps]), op=hvd.Max).item())
    if hvd.rank() == 0:
        params = sum(p.numel() for p in model.parameters())
        us = {k: [round(t * 1e6, 1) for t in v] for k, v in times.items()}
        for name, f in (("median", statistics.median), ("min", min)):
            off, on = f(times[False]), f(times[True])
            print(f"np={hvd.size()} transport={hvd.transport()} mlp {params} params, batch 32, {name} of "
                  f"{a.rounds} rounds of {a.steps} steps: {off * 1e6:.1f} us/step without uneven_inputs, "
                  f"{on * 1e6:.1f} us with ({(on - off) * 1e6:+.1f} us, {(on / off - 1) * 100:+.1f}%)", flush=True)
        print(f"rounds: off={us[False]} on={us[True]}", flush=True)
        print(f"one int32 allreduce (the count): median {statistics.median(lat) * 1e6:.1f} us, min "
              f"{min(lat) * 1e6:.1f} us", flush=True)


if __name__ == "__main__":
    main()
