"""What name= costs a cohort.torch call (docs/torch.md, "Operations matched by name"): a call with a name is parked
until rank 0 has heard from every rank, then started by a runner thread on the twin communicator; one without a name
goes straight to the library. This times the same blocking allreduce with and without name=, and an async named
allreduce of many tensors synchronized together (as a script reducing a model's tensors one by one would), in
alternating rounds so that a busy machine's noise falls on all alike, and prints the medians on rank 0; then how far
apart the ranks return from one blocking call, with and without a name.

    build/bin/cohortrun -np 2 python3 bench/torch_named_cost.py [--bytes 4096] [--calls 2000] [--rounds 5]
"""
import argparse
import statistics
import time

import torch

import cohort.torch as hvd


def per_call_us(fn, calls):
    hvd.barrier()
    start = time.perf_counter()
    for i in range(calls):
        fn(i)
    hvd.barrier()
    return (time.perf_counter() - start) / calls * 1e6


def return_skew(name):
    """When each rank returns from the same blocking call (a timing test that starts a clock after it, as Horovod's
    barrier tests do, sees the difference): per call, the last other rank's return minus rank 0's, in us, sorted."""
    ts = []
    for i in range(200):
        hvd.allreduce_(torch.IntTensor([1]), None, None if name is None else f"{name}{i}", hvd.Sum)
        ts.append(time.time())
        time.sleep(0.002)
    every = hvd.allgather_object(ts)
    return sorted((max(every[k][i] for k in range(1, len(every))) - every[0][i]) * 1e6 if len(every) > 1 else 0.0
                  for i in range(200))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    hvd.init()
    t = torch.ones(args.bytes // 4)
    batch = [torch.ones(args.bytes // 4) for _ in range(50)]

    def named_batch(i):
        hs = [hvd.allreduce_async(x, name=f"t{k}", op=hvd.Sum) for k, x in enumerate(batch)]
        for h in hs:
            hvd.synchronize(h)

    def plain_batch(i):
        hs = [hvd.allreduce_async(x, op=hvd.Sum) for x in batch]
        for h in hs:
            hvd.synchronize(h)

    kinds = {
        "unnamed": lambda i: hvd.allreduce(t, op=hvd.Sum),
        "named": lambda i: hvd.allreduce(t, name="x", op=hvd.Sum),
        "unnamed async x50": plain_batch,
        "named async x50": named_batch,
    }
    calls = {"unnamed": args.calls, "named": max(args.calls // 10, 20), "unnamed async x50": max(args.calls // 50, 10),
             "named async x50": max(args.calls // 100, 10)}
    times = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for k, fn in kinds.items():
            times[k].append(per_call_us(fn, calls[k]))
    skews = {"unnamed": return_skew(None), "named": return_skew("s")}
    if hvd.rank() == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{hvd.size()} ranks, {hvd.transport()}, {args.bytes} B allreduce, us per call (median of {args.rounds} "
              f"rounds): " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
        print(f"named/unnamed: blocking {med['named'] / med['unnamed']:.2f}x, 50 async per synchronize "
              f"{med['named async x50'] / med['unnamed async x50']:.2f}x "
              f"({med['named async x50'] / 50:.1f} us per named tensor)")
        for k, d in skews.items():
            print(f"{k} 4-byte allreduce, how much later than rank 0 the last other rank returned, 200 calls 2 ms "
                  f"apart: median {d[100]:.0f} us, p90 {d[180]:.0f} us, max {d[-1]:.0f} us; later in "
                  f"{sum(x > 0 for x in d)} of 200")
    hvd.shutdown()


if __name__ == "__main__":
    main()
