"""cohort.torch on CUDA tensors: reduced on their device by the library's device collectives (docs/gpu.md), no host
copy, the result on the tensor's device.

Run under cohortrun (2 ranks share the one GPU of the GPU host: the cuda-ipc path):
    build/bin/cohortrun -np 2 python3 tests/python/test_cuda_tensors.py
Every collective, in place and not, async and grouped, on float32/float16/int64 CUDA tensors: the result must lie on
the input's device and hold the values the same call gives on CPU tensors (which test_ops.py checks against numpy).
Exits 77 (ctest's SKIP) with the reason when torch sees no CUDA device: CI has none.
"""
import os
import sys

import torch

if not torch.cuda.is_available():
    print("SKIP: no CUDA device (torch.cuda.is_available() is False)")
    sys.exit(1 if os.environ.get("COHORT_TEST_EXPECT_GPU") == "1" else 77)  # a GPU is listed: no skip (gpu-check.sh)

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

# The calls above went through the library's device path, not through host staging.
if not hvd.cuda_built():
    failures.append("cuda_built() is False: CUDA tensors were staged through host memory")
from cohort import _lib, _get_comm  # noqa: E402
path = _lib.lib.cohort_device_path(_get_comm())
want = os.environ.get("COHORT_TEST_DEVICE_PATH")
if want and (path or b"").decode() != want:
    failures.append(f"device path {path!r}, expected {want}")

# On torch's current stream when it is not the default one: the collective is ordered on it.
side = torch.cuda.Stream(device=dev)
with torch.cuda.stream(side):
    for k in range(5):
        y = torch.full((1 << 20,), float(R + k), device=dev)
        y.mul_(2.0)  # queued on side just before the allreduce
        hvd.allreduce_(y, op=hvd.Sum)
        got = y.sum().item() / y.numel()
        want_v = 2.0 * (N * k + N * (N - 1) / 2)
        if got != want_v:
            failures.append(f"allreduce_ on a side stream, round {k}: {got} != {want_v}")

hvd.shutdown()
if failures:
    print(f"[rank {R}] FAIL:", *failures, sep="\n  ")
    sys.exit(1)
print(f"ok: CUDA tensors on {dev} ({torch.cuda.get_device_name(dev)}), torch {torch.__version__}")
