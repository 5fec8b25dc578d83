"""cohort.torch on CUDA tensors: staged through pinned host memory, the result put back on the tensor's device.

Run under cohortrun (2 ranks share the one GPU of the GPU host):
    build/bin/cohortrun -np 2 python3 tests/python/test_cuda_staging.py
Every collective, in place and not, async and grouped, on float32/float16/int64 CUDA tensors: the result must lie on
the input's device and hold the values the same call gives on CPU tensors (which test_ops.py checks against numpy).
Exits 77 (ctest's SKIP) with the reason when torch sees no CUDA device: CI has none.
"""
import sys

import torch

if not torch.cuda.is_available():
    print("SKIP: no CUDA device (torch.cuda.is_available() is False)")
    sys.exit(77)

import cohort.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
failures = []


def same(got, want, what):
    if got.device != dev:
        failures.append(f"{what}: result on {got.device}, not {dev}")
    elif not torch.equal(got.cpu(), want):
        failures.append(f"{what}: {got.cpu().flatten()[:4].tolist()} != {want.flatten()[:4].tolist()}")


for dtype in (torch.float32, torch.float16, torch.int64):
    x = (torch.arange(12, dtype=torch.float64).reshape(3, 4) + R).to(dtype)
    for name, op in (("Sum", hvd.Sum), ("Max", hvd.Max), ("Average", hvd.Average)):
        if dtype == torch.int64 and name == "Average":
            continue
        want = hvd.allreduce(x, op=op)
        same(hvd.allreduce(x.to(dev), op=op), want, f"allreduce {name} {dtype}")
        y = x.to(dev)
        hvd.allreduce_(y, op=op)
        same(y, want, f"allreduce_ {name} {dtype}")
        same(hvd.synchronize(hvd.allreduce_async(x.to(dev), op=op)), want, f"allreduce_async {name} {dtype}")
    same(hvd.broadcast(x.to(dev), root_rank=N - 1), hvd.broadcast(x, root_rank=N - 1), f"broadcast {dtype}")
    same(hvd.allgather(x.to(dev)), hvd.allgather(x), f"allgather {dtype}")
    same(hvd.reducescatter(x.repeat(N, 1).to(dev), op=hvd.Sum), hvd.reducescatter(x.repeat(N, 1), op=hvd.Sum),
         f"reducescatter {dtype}")
    got = hvd.grouped_allreduce([x.to(dev), (x * 2).to(dev)], op=hvd.Sum)
    want = hvd.grouped_allreduce([x, x * 2], op=hvd.Sum)
    for k in range(2):
        same(got[k], want[k], f"grouped_allreduce[{k}] {dtype}")

hvd.shutdown()
if failures:
    print(f"[rank {R}] FAIL:", *failures, sep="\n  ")
    sys.exit(1)
print(f"ok: CUDA tensors on {dev} ({torch.cuda.get_device_name(dev)}), torch {torch.__version__}")
