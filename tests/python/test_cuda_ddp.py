"""cohort.torch.DistributedDataParallel on a CUDA module (buckets in device memory, docs/gpu.md), 2 ranks sharing
one GPU: after the same steps its parameters equal those of one process training on the global batch.

Every rank trains the wrapped model on its half of each global batch, and beside it an unwrapped copy on the whole
batch (same initial weights, plain SGD with momentum). The gradient of the mean loss over the global batch is the
average of the halves' gradients, so the two must agree up to float32 rounding (cuDNN may sum in another order for
another batch size): relative 1e-4. Also: no_sync() accumulation, zero_grad(set_to_none=True), small buckets so that
several allreduces overlap backward, and the device path the library chose. Exits 77 (SKIP) without a GPU.
"""
import os
import sys

import torch

if not torch.cuda.is_available():
    print("SKIP: no CUDA device (torch.cuda.is_available() is False)")
    sys.exit(1 if os.environ.get("COHORT_TEST_EXPECT_GPU") == "1" else 77)  # a GPU is listed: no skip (gpu-check.sh)

import cohort.torch as hvd  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)
torch.backends.cudnn.deterministic = True
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def net():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(16 * 12 * 12, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(dev)


failures = []
ref = net()
model = hvd.DistributedDataParallel(net(), bucket_cap_mb=0.05)  # several buckets: allreduces overlap backward
opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
g = torch.Generator().manual_seed(7)
B = 16 * N
for step in range(8):
    x = torch.randn(B, 1, 28, 28, generator=g).to(dev)
    y = torch.randint(0, 10, (B,), generator=g).to(dev)
    accumulate = step in (3, 6)  # these steps' gradients wait for the next step (no_sync)
    opt_ref.zero_grad(set_to_none=False) if step not in (4, 7) else None
    torch.nn.functional.cross_entropy(ref(x), y).backward()
    if not accumulate:
        opt_ref.step()
    mine = slice(R * (B // N), (R + 1) * (B // N))
    if step not in (4, 7):
        opt.zero_grad(set_to_none=(step % 2 == 0))
    if accumulate:
        with model.no_sync():
            torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
    else:
        torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
        opt.step()
torch.cuda.synchronize()
for (name, a), b in zip(model.module.named_parameters(), ref.parameters()):
    err = ((a - b).norm() / b.norm()).item()
    if not err < 1e-4:
        failures.append(f"{name}: relative difference {err:.3g} from one process on the global batch")
from cohort import _lib, _get_comm  # noqa: E402
path = (_lib.lib.cohort_device_path(_get_comm()) or b"").decode()
want = os.environ.get("COHORT_TEST_DEVICE_PATH")
if N > 1 and want and path != want:
    failures.append(f"device path {path!r}, expected {want}")
hvd.shutdown()
if failures:
    print(f"[rank {R}] FAIL:", *failures, sep="\n  ")
    sys.exit(1)
print(f"ok: DistributedDataParallel on {dev}, {N} ranks, device path {path}, parameters as one process's")
