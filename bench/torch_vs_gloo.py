"""cohort.torch beside torch.distributed on gloo: the pieces bench/torch_vs_gloo.sh runs and tabulates.

  cohortrun -np 2 python3 torch_vs_gloo.py allreduce MAXMB      cohort.torch.allreduce_ busbw, the columns and
                                                                 loop of the gloo anchor (torch_allreduce.py)
  cohortrun -np 2 python3 torch_vs_gloo.py overhead ITERS       a one-float allreduce: through cohort.torch, and
                                                                 the bare ctypes call of cohort_allreduce
  cohortrun -np N python3 torch_vs_gloo.py train cohort MODEL STEPS BATCH
  python3 torch_vs_gloo.py train gloo MODEL STEPS BATCH WORLD    (spawns WORLD ranks itself, as the anchors do)
  cohortrun -np N python3 torch_vs_gloo.py grouped MAXMB      grouped_allreduce_ of 4 float32 tensors (256 KiB to
                                                                 MAXMB MiB in all), its fused buffer in the shared
                                                                 arena (the default) and in ordinary memory (staged),
                                                                 against what a torch.distributed user writes for it
                                                                 on gloo (cat, all_reduce, copy back), in the same
                                                                 processes, alternately
  cohortrun -np N python3 torch_vs_gloo.py interleaved MODEL ROUNDS STEPS BATCH
                                                                 the three trainings below in the same processes,
                                                                 taking turns every STEPS steps, ROUNDS times
  cohortrun -np N python3 torch_vs_gloo.py dist_allreduce MAXMB  torch.distributed.all_reduce on backend "cohort"
                                                                 (the default group) and on a gloo group of the same
                                                                 ranks, alternately in the same processes, 4 KiB to
                                                                 MAXMB MiB (best of 3 per size)
  cohortrun -np N python3 torch_vs_gloo.py dist_ddp MODEL ROUNDS STEPS BATCH
                                                                 as interleaved, the five being torch DDP on backend
                                                                 "cohort", torch DDP on gloo, cohort.torch's
                                                                 DistributedDataParallel, the model alone and torch DDP
                                                                 on "cohort" with gradient_as_bucket_view=True
  cohortrun -np 2 python3 torch_vs_gloo.py ddp_profile MODEL STEPS BATCH
                                                                 torch's profiler over each of those but gloo's: the
                                                                 ms per step of the reducer's own copies

interleaved: this machine's speed drifts by 10-20% from one run to the next (a shared VM), more than the
differences to be measured, so separate runs cannot tell 1.05x from 1.1x. Here every rank holds three copies of the
model and trains them in turns: "alone" (no wrapper, no communication: each rank trains by itself, the ceiling of
any data-parallel wrapper on this machine), cohort.torch's DistributedDataParallel and torch DDP on gloo (joined
through torch.distributed's env:// with the MASTER_ADDR/MASTER_PORT that cohortrun provides). Each turn is timed
between two barriers, the order of the three rotates from round to round, and the figures are the sums over all
rounds: a drift of the machine hits all three alike.

MODEL: cnn (the reference CNN of fmnist-train and torch_ddp_fmnist.py) or mlp (784-4096-4096-1024-10, 24.2 M
parameters: far more gradient than compute per step). Training: 1 torch thread per rank, SGD with momentum, the same
Fashion-MNIST batches (preloaded tensors, no DataLoader) on both; img/s of the loop after 5 warm-up steps, all
ranks together.
"""
import ctypes
import gzip
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load():
    d = "/usr/share/datasets/fashion-mnist/"
    with gzip.open(d + "train-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16)
    with gzip.open(d + "train-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.tensor(x.reshape(-1, 1, 28, 28), dtype=torch.float32) / 255.0, torch.tensor(y, dtype=torch.long)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.f1, self.f2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c2(F.relu(self.c1(x)))), 2)
        return self.f2(F.relu(self.f1(x.flatten(1))))


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 1024), nn.ReLU(), nn.Linear(1024, 10))


def train_loop(model, rank, world, steps, batch, wrap):
    torch.manual_seed(0)
    x, y = load()
    net = wrap(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    t0 = None
    for s in range(steps + 5):
        if s == 5:
            t0 = time.perf_counter()
        lo = ((s * world + rank) * batch) % (len(x) - batch)
        opt.zero_grad()
        F.cross_entropy(net(x[lo:lo + batch]), y[lo:lo + batch]).backward()
        opt.step()
    return steps * batch * world / (time.perf_counter() - t0)


def gloo_rank(rank, world, port, model_name, steps, batch):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = CNN() if model_name == "cnn" else mlp()
    ips = train_loop(model, rank, world, steps, batch,
                     lambda m: nn.parallel.DistributedDataParallel(m) if world > 1 else m)
    if rank == 0:
        print(f"train gloo {model_name} world={world} img_per_s={ips:.1f}", flush=True)
    dist.destroy_process_group()


def interleaved(hvd, rank, world, model_name, rounds, steps, batch):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    x, y = load()
    nets = {}
    for name, wrap in (("alone", lambda m: m), ("cohort", lambda m: hvd.DistributedDataParallel(m)),
                       ("gloo", lambda m: nn.parallel.DistributedDataParallel(m))):
        torch.manual_seed(0)
        net = wrap(CNN() if model_name == "cnn" else mlp())
        nets[name] = (net, torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9))
    names = list(nets)
    spent = dict.fromkeys(names, 0.0)
    per_round = {k: [] for k in names}
    step = 0
    for r in range(-1, rounds):  # round -1 warms every model up and is not counted
        order = names[r % 3:] + names[:r % 3] if r >= 0 else names
        for name in order:
            net, opt = nets[name]
            hvd.barrier()
            t0 = time.perf_counter()
            for _ in range(steps):
                lo = ((step * world + rank) * batch) % (len(x) - batch)
                step += 1
                opt.zero_grad()
                F.cross_entropy(net(x[lo:lo + batch]), y[lo:lo + batch]).backward()
                opt.step()
            hvd.barrier()  # the turn ends when the slowest rank's does
            if r >= 0:
                dt = time.perf_counter() - t0
                spent[name] += dt
                per_round[name].append(dt)
    dist.destroy_process_group()
    if rank == 0:
        imgs = rounds * steps * batch * world
        ips = {k: imgs / v for k, v in spent.items()}
        ratios = sorted(g / c for c, g in zip(per_round["cohort"], per_round["gloo"]))
        print(f"interleaved {model_name} world={world} rounds={rounds} steps={steps} "
              + " ".join(f"{k}_img_per_s={v:.1f}" for k, v in ips.items())
              + f" cohort_over_gloo={ips['cohort'] / ips['gloo']:.3f} alone_over_gloo={ips['alone'] / ips['gloo']:.3f}"
              + f" round_ratio_min={ratios[0]:.3f} round_ratio_median={ratios[len(ratios) // 2]:.3f}"
              + f" round_ratio_max={ratios[-1]:.3f}", flush=True)


def dist_groups():
    """The default group on backend "cohort" (cohortrun's rendezvous) and a gloo group of the same ranks."""
    import torch.distributed as dist
    import cohort.torch  # noqa: F401 (registers the backend)
    dist.init_process_group("cohort")
    return dist, dist.new_group(backend="gloo")


def dist_allreduce(rank, world, maxmb):
    dist, gloo = dist_groups()
    # floor: every rank at once passes over its vector in place (t.mul_(1.0): it reads and writes each byte once), the
    # least memory traffic any in-place allreduce has; floor_frac = floor_us / cohort_us, and gloo_us / floor_us is
    # the most any backend could reach against gloo where the vector no longer fits in the caches.
    if rank == 0:
        print(f"{'bytes':>12} {'cohort_us':>10} {'gloo_us':>10} {'cohort_busbw':>12} {'gloo_busbw':>10} {'ratio':>7} "
              f"{'floor_us':>9} {'floor_frac':>10} {'max_ratio':>9}", flush=True)
    b = 4096
    while b <= maxmb << 20:
        t = torch.ones(b // 4)
        iters = 200 if b < 1 << 20 else 40 if b < 16 << 20 else 5
        best = {}
        for _ in range(3):  # alternately, the best of 3 for each
            for name, call in (("cohort", lambda: dist.all_reduce(t)), ("gloo", lambda: dist.all_reduce(t, group=gloo)),
                               ("floor", lambda: t.mul_(1.0))):
                call()
                dist.barrier(group=gloo)
                t0 = time.perf_counter()
                for _ in range(iters):
                    call()
                el = (time.perf_counter() - t0) / iters
                best[name] = min(best.get(name, el), el)
        if rank == 0:
            bw = {k: b / v * 2 * (world - 1) / world / 1e9 for k, v in best.items()}
            print(f"{b:12d} {best['cohort'] * 1e6:10.1f} {best['gloo'] * 1e6:10.1f} {bw['cohort']:12.2f} "
                  f"{bw['gloo']:10.2f} {best['gloo'] / best['cohort']:7.2f} {best['floor'] * 1e6:9.1f} "
                  f"{best['floor'] / best['cohort']:10.2f} {best['gloo'] / best['floor']:9.2f}", flush=True)
        b *= 4
    dist.destroy_process_group()


def dist_ddp(hvd, rank, world, model_name, rounds, steps, batch):
    """torch DDP on "cohort" against torch DDP on gloo and cohort.torch's DDP, as interleaved() does. The default
    group is gloo and the cohort group a new_group (met through torch's store): a default group on "cohort" beside
    hvd.init() fails today under cohortrun (both join cohortrun's rendezvous with the same run id).
    torch's large CPU tensors (DDP's buckets among them) go to the arena of the "cohort" group, as in a program that
    uses the backend alone: hvd.init() lent torch's allocator its own communicator's arena first, which the group's
    collectives would stage (cohort.torch's DDP keeps its buckets in that arena through its engine either way).
    COHORT_TORCH_ARENA=0 keeps torch's allocator for every copy."""
    import torch.distributed as dist
    from cohort.torch import _arena
    _arena.detach(hvd._core._get_comm())
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    gloo, coh = None, dist.new_group(backend="cohort")
    torch.set_num_threads(1)
    x, y = load()
    nets = {}
    for name, wrap in ddp_wrappers(hvd, coh, gloo):
        torch.manual_seed(0)
        net = wrap(CNN() if model_name == "cnn" else mlp())
        nets[name] = (net, torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9))
    names = list(nets)
    spent = dict.fromkeys(names, 0.0)
    step = 0
    for r in range(-1, rounds):  # round -1 warms every model up and is not counted
        order = names[r % len(names):] + names[:r % len(names)] if r >= 0 else names
        for name in order:
            net, opt = nets[name]
            hvd.barrier()
            t0 = time.perf_counter()
            for _ in range(steps):
                lo = ((step * world + rank) * batch) % (len(x) - batch)
                step += 1
                opt.zero_grad()
                F.cross_entropy(net(x[lo:lo + batch]), y[lo:lo + batch]).backward()
                opt.step()
            hvd.barrier()
            if r >= 0:
                spent[name] += time.perf_counter() - t0
    dist.destroy_process_group()
    if rank == 0:
        imgs = rounds * steps * batch * world
        ips = {k: imgs / v for k, v in spent.items()}
        print(f"dist_ddp {model_name} world={world} rounds={rounds} steps={steps} "
              + " ".join(f"{k}_img_per_s={v:.1f}" for k, v in ips.items())
              + f" dist_cohort_over_gloo={ips['dist_cohort'] / ips['gloo']:.3f}"
              + f" dist_cohort_over_cohort_torch={ips['dist_cohort'] / ips['cohort_torch']:.3f}"
              + f" dist_cohort_view_over_gloo={ips['dist_cohort_view'] / ips['gloo']:.3f}"
              + f" dist_cohort_view_over_cohort_torch={ips['dist_cohort_view'] / ips['cohort_torch']:.3f}", flush=True)


def ddp_wrappers(hvd, coh, gloo):
    """dist_ddp's trainings: torch DDP on "cohort", on gloo, cohort.torch's DDP, and two that say where the time goes:
    the model alone (no wrapper, no communication: the ceiling) and torch DDP on "cohort" with
    gradient_as_bucket_view=True (the gradients are the reducer's buckets: no copy into them and back)."""
    ddp = nn.parallel.DistributedDataParallel
    return (("dist_cohort", lambda m: ddp(m, process_group=coh)), ("gloo", lambda m: ddp(m, process_group=gloo)),
            ("cohort_torch", lambda m: hvd.DistributedDataParallel(m)), ("alone", lambda m: m),
            ("dist_cohort_view", lambda m: ddp(m, process_group=coh, gradient_as_bucket_view=True)))


def ddp_profile(hvd, rank, world, model_name, steps, batch):
    """torch's profiler over STEPS steps of each of dist_ddp's trainings in turn (2 ranks, rank 0 prints): the ms per
    step of the operators torch's reducer runs itself (aten::mul: a gradient copied into its bucket and divided by
    the world size; aten::copy_: a bucket copied back into the gradient; aten::div_: the division in place, with
    gradient_as_bucket_view), and of all operators on the training thread. The allreduce itself runs on the backend's
    threads, outside these figures."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    coh = dist.new_group(backend="cohort")
    torch.set_num_threads(1)
    x, y = load()
    for name, wrap in ddp_wrappers(hvd, coh, None):
        if name == "gloo":
            continue
        torch.manual_seed(0)
        net = wrap(CNN() if model_name == "cnn" else mlp())
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

        def run(n):
            for s in range(n):
                lo = ((s * world + rank) * batch) % (len(x) - batch)
                opt.zero_grad()
                F.cross_entropy(net(x[lo:lo + batch]), y[lo:lo + batch]).backward()
                opt.step()
        run(3)  # DDP rebuilds its buckets after the first step
        hvd.barrier()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run(steps)
        hvd.barrier()
        wall = (time.perf_counter() - t0) / steps * 1e3
        ms = {e.key: e.self_cpu_time_total / 1e3 / steps for e in prof.key_averages()}
        if rank == 0:
            print(f"ddp_profile {model_name} {name}: wall_ms_per_step={wall:.1f} mul={ms.get('aten::mul', 0):.1f} "
                  f"copy_={ms.get('aten::copy_', 0):.1f} div_={ms.get('aten::div_', 0):.1f} "
                  f"all_ops={sum(ms.values()):.1f}", flush=True)
    dist.destroy_process_group()


def grouped(hvd, rank, world, maxmb):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)

    def gloo_grouped(ts):
        flat = torch.cat([t.reshape(-1) for t in ts])
        dist.all_reduce(flat)
        off = 0
        for t in ts:
            t.copy_(flat[off:off + t.numel()].view_as(t))
            off += t.numel()

    def cohort_grouped(ts):
        hvd.grouped_allreduce_(ts, op=hvd.Sum)

    def cohort_staged(ts):  # the fused buffer in ordinary memory, as before 2026-11-25 23:30
        keep, hvd._ZERO_COPY_MIN_BYTES = hvd._ZERO_COPY_MIN_BYTES, float("inf")
        try:
            hvd.grouped_allreduce_(ts, op=hvd.Sum)
        finally:
            hvd._ZERO_COPY_MIN_BYTES = keep

    if rank == 0:
        print(f"{'bytes':>12} {'cohort_us':>10} {'staged_us':>10} {'gloo_us':>10} {'ratio':>7} {'vs_staged':>9}",
              flush=True)
    b = 256 << 10
    while b <= maxmb << 20:
        ts = [torch.ones(b // 16) for _ in range(4)]
        iters = 40 if b < 16 << 20 else 8
        best = {}
        for _ in range(3):  # alternately, the best of 3 for each
            for name, fn in (("cohort", cohort_grouped), ("staged", cohort_staged), ("gloo", gloo_grouped)):
                fn(ts)
                hvd.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn(ts)
                hvd.barrier()
                el = (time.perf_counter() - t0) / iters
                best[name] = min(best.get(name, el), el)
        if rank == 0:
            print(f"{b:12d} {best['cohort'] * 1e6:10.1f} {best['staged'] * 1e6:10.1f} {best['gloo'] * 1e6:10.1f} "
                  f"{best['gloo'] / best['cohort']:7.2f} {best['staged'] / best['cohort']:9.2f}", flush=True)
        b *= 4
    dist.destroy_process_group()


def main():
    mode = sys.argv[1]
    if mode == "train" and sys.argv[2] == "gloo":
        import torch.multiprocessing as mp
        model_name, steps, batch, world = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        mp.spawn(gloo_rank, args=(world, port, model_name, steps, batch), nprocs=world)
        return
    if mode == "dist_allreduce":  # no cohort.torch engine beside the backend's default group (see dist_ddp)
        import cohort.torch as hvd
        dist_allreduce(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(sys.argv[2]))
        return
    import cohort
    import cohort.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    if mode == "allreduce":
        maxmb = int(sys.argv[2])
        if r == 0:
            print(f"{'bytes':>12} {'iters':>8} {'time_us':>10} {'busbw_GBs':>10}", flush=True)
        b = 4096
        while b <= maxmb << 20:
            t = torch.ones(b // 4)
            iters = 200 if b < 1 << 20 else 40 if b < 16 << 20 else 10
            hvd.allreduce_(t, op=hvd.Sum)
            hvd.barrier()
            s = time.perf_counter()
            for _ in range(iters):
                hvd.allreduce_(t, op=hvd.Sum)
            el = (time.perf_counter() - s) / iters
            if r == 0:
                print(f"{b:12d} {iters:8d} {el * 1e6:10.1f} {b / el * 2 * (n - 1) / n / 1e9:10.2f}", flush=True)
            b *= 4
    elif mode == "overhead":
        iters = int(sys.argv[2])
        t = torch.ones(1)
        lib, comm = cohort._lib.lib, cohort._get_comm()
        ptr = ctypes.c_void_p(t.data_ptr())
        res = {}
        for name, fn in [("cohort.torch.allreduce_", lambda: hvd.allreduce_(t, op=hvd.Sum)),
                         ("ctypes cohort_allreduce", lambda: lib.cohort_allreduce(comm, ptr, ptr, 1, 0, 0))]:
            for _ in range(1000):
                fn()
            hvd.barrier()
            s = time.perf_counter()
            for _ in range(iters):
                fn()
            res[name] = (time.perf_counter() - s) / iters * 1e6
        if r == 0:
            for k, v in res.items():
                print(f"overhead {k} us={v:.2f}", flush=True)
    elif mode == "grouped":
        grouped(hvd, r, n, int(sys.argv[2]))
    elif mode == "dist_ddp":
        dist_ddp(hvd, r, n, sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "ddp_profile":
        ddp_profile(hvd, r, n, sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "interleaved":
        interleaved(hvd, r, n, sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "train":
        model_name, steps, batch = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        torch.set_num_threads(1)
        model = CNN() if model_name == "cnn" else mlp()
        ips = train_loop(model, r, n, steps, batch, lambda m: hvd.DistributedDataParallel(m) if n > 1 else m)
        if r == 0:
            print(f"train cohort {model_name} world={n} img_per_s={ips:.1f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
