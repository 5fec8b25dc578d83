"""torch.distributed's backend "cohort" on CUDA tensors: every operation, with values checked against the same call on
CPU tensors, and torch's DDP on a CUDA module against DDP on gloo.

    build/bin/cohortrun -np 2 python3 tests/python/test_dist_cuda.py     (2 ranks share the GPU host's one GPU)

all_reduce (every op), broadcast, all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor and the
coalesced all_reduce run on the tensors' device through the library's device collectives (docs/gpu.md); reduce,
gather, scatter, all_to_all, send and recv, and the dtypes the device path lacks (int8), are staged through host
memory. Either way the result must lie on the input's device and equal, bitwise, what the same call gives on CPU
tensors (which test_dist_backend.py checks against known values), blocking and with async_op=True, and on a side
stream. The device path must have run (cohort_device_path names it). DDP on a CUDA module with the default
(cohort) group must end bitwise equal to DDP on a gloo group of the same ranks (2 ranks: each sum is of two values,
correctly rounded in any order). Exits 77 (ctest's SKIP) with the reason when torch sees no CUDA device, as in CI.
"""
import os
import sys

import torch

if not torch.cuda.is_available():
    print("SKIP: no CUDA device (torch.cuda.is_available() is False)")
    sys.exit(1 if os.environ.get("COHORT_TEST_EXPECT_GPU") == "1" else 77)  # a GPU is listed: no skip (gpu-check.sh)

import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import cohort.torch  # noqa: E402,F401 (registers the backend "cohort")
from cohort.torch import _backend  # noqa: E402

# Every call of the library's _stream collectives is counted: an operation of the device path must make one, a
# staged one none (equal results alone would not tell a staged all_gather from a direct one).
stream_calls = [0]


class _Counted:
    def __init__(self, fn):
        object.__setattr__(self, "_fn", fn)

    def __call__(self, *args):
        stream_calls[0] += 1
        return self._fn(*args)

    def __getattr__(self, name):
        return getattr(self._fn, name)

    def __setattr__(self, name, value):  # restype and argtypes belong to the C function
        setattr(self._fn, name, value)


class _CountingLib:
    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        return _Counted(fn) if name.endswith("_stream") else fn


_backend._c = _CountingLib(_backend._c)
torch.backends.cudnn.deterministic = True  # DDP below is compared bitwise: the same kernels on both sides
torch.backends.cudnn.benchmark = False

dist.init_process_group("cohort")
R, N = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", R)) % torch.cuda.device_count())
torch.cuda.set_device(dev)
failures = []


class warnings_off:  # all_reduce_coalesced is deprecated in torch 2 and warns
    def __enter__(self):
        import warnings
        self.c = warnings.catch_warnings()
        self.c.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        self.c.__exit__(*exc)


def same(got, want, what):
    if got.device != dev:
        failures.append(f"{what}: result on {got.device}, not {dev}")
    elif not torch.equal(got.cpu(), want):
        failures.append(f"{what}: {got.cpu().flatten()[:4].tolist()} != {want.flatten()[:4].tolist()}")


def both(fn, *cpu_args, direct):
    """fn on CPU tensors and on their CUDA copies: (CPU results, CUDA results), fn returning its output tensors; the
    CUDA call must have gone through the device path (direct) or been staged through host memory."""
    want = fn(*[a.clone() for a in cpu_args])
    before = stream_calls[0]
    got = fn(*[a.to(dev) for a in cpu_args])
    if (stream_calls[0] > before) != direct:
        failures.append(f"{fn.__name__} {cpu_args[0].dtype}: {'staged' if direct else 'on the device path'}, expected "
                        f"{'the device path' if direct else 'staged'}")
    return want, got


for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8):
    x = (torch.arange(12, dtype=torch.float64).reshape(3, 4) + 3 * R).to(dtype)
    on_device = dtype != torch.int8  # the device path has no int8: staged
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT]
    for op in ops:
        for async_op in (False, True):
            def allreduce(t, op=op, async_op=async_op):
                w = dist.all_reduce(t, op=op, async_op=async_op)
                if async_op:
                    w.wait()
                return t
            want, got = both(allreduce, x, direct=on_device)
            same(got, want, f"all_reduce {op} {dtype} async_op={async_op}")

    def broadcast(t):
        dist.broadcast(t, src=N - 1)
        return t

    want, got = both(broadcast, x, direct=on_device)
    same(got, want, f"broadcast {dtype}")

    def all_gather(t):
        outs = [torch.empty_like(t) for _ in range(N)]
        dist.all_gather(outs, t)
        return torch.stack(outs)

    want, got = both(all_gather, x, direct=on_device)
    same(got, want, f"all_gather {dtype}")

    def all_gather_into(t):
        out = torch.empty((N * t.shape[0],) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
        dist.all_gather_into_tensor(out, t)
        return out

    want, got = both(all_gather_into, x, direct=on_device)
    same(got, want, f"all_gather_into_tensor {dtype}")

    def reduce_scatter(t):
        out = torch.empty_like(t)
        dist.reduce_scatter(out, [t * (k + 1) for k in range(N)])
        return out

    want, got = both(reduce_scatter, x, direct=on_device)
    same(got, want, f"reduce_scatter {dtype}")

    def reduce_scatter_tensor(t):
        big = t.repeat(N, 1)
        out = torch.empty_like(t)
        dist.reduce_scatter_tensor(out, big)
        return out

    want, got = both(reduce_scatter_tensor, x, direct=on_device)
    same(got, want, f"reduce_scatter_tensor {dtype}")

    # staged ones: rooted, personalized, point to point
    def reduce(t):
        dist.reduce(t, dst=0)
        return t

    def gather(t):
        outs = [torch.empty_like(t) for _ in range(N)] if R == 0 else None
        dist.gather(t, outs, dst=0)
        return torch.stack(outs) if R == 0 else t

    def scatter(t):
        out = torch.empty_like(t)
        dist.scatter(out, [t + k for k in range(N)] if R == 0 else None, src=0)
        return out

    def all_to_all_single(t):
        big = torch.cat([t + k for k in range(N)])
        out = torch.empty_like(big)
        dist.all_to_all_single(out, big)
        return out

    def send_recv(t):
        if R == 0:
            dist.send(t, dst=N - 1)
            return t
        if R == N - 1:
            out = torch.empty_like(t)
            dist.recv(out, src=0)
            return out
        return t

    for fn in (reduce, gather, scatter, all_to_all_single, send_recv):
        want, got = both(fn, x, direct=False)
        same(got, want, f"{fn.__name__} {dtype}")


HAVE_COALESCED = hasattr(dist, "all_reduce_coalesced")  # deprecated in torch 2: may be gone in a later one
if HAVE_COALESCED:
    a, b = torch.full((5,), float(R + 1), device=dev), torch.full((7,), float(2 * R), device=dev)
    with warnings_off():
        dist.all_reduce_coalesced([a, b])
    same(a, torch.full((5,), float(N * (N + 1) / 2)), "all_reduce_coalesced [0]")
    same(b, torch.full((7,), float(N * (N - 1))), "all_reduce_coalesced [1]")

# On a side stream: the operation is ordered after the work queued there.
side = torch.cuda.Stream(device=dev)
with torch.cuda.stream(side):
    for k in range(5):
        y = torch.full((1 << 20,), float(R + k), device=dev)
        y.mul_(2.0)  # queued on side just before the all_reduce
        dist.all_reduce(y)
        got = y.sum().item() / y.numel()
        want_v = 2.0 * (N * k + N * (N - 1) / 2)
        if got != want_v:
            failures.append(f"all_reduce on a side stream, round {k}: {got} != {want_v}")
    # Operations whose finish copies on the device (a list all_gather, a coalesced all_reduce, a non-contiguous
    # tensor), asynchronous, with fresh allocations on the stream before the results are read: the copies must land
    # on this stream, after the collective and before what follows.
    for k in range(3):
        t = torch.full((4096,), float(R + k), device=dev)
        outs = [torch.empty_like(t) for _ in range(N)]
        w1 = dist.all_gather(outs, t, async_op=True)
        a, b = torch.full((300,), float(R), device=dev), torch.full((500,), float(k), device=dev)
        if HAVE_COALESCED:
            with warnings_off():
                w2 = dist.all_reduce_coalesced([a, b], async_op=True)
        else:  # the same values another way
            w2 = dist.all_reduce(a, async_op=True)
            w2.wait()
            b.mul_(N)
        m = (torch.arange(64, dtype=torch.float32, device=dev).reshape(8, 8) * (R + 1)).t()  # not contiguous
        w3 = dist.all_reduce(m, async_op=True)
        for w in (w1, w2, w3):
            w.wait()
        scratch = [torch.full((4096,), -1.0, device=dev) for _ in range(4)]  # may reuse freed temporaries
        for r_, o in enumerate(outs):
            if not torch.equal(o.cpu(), torch.full((4096,), float(r_ + k))):
                failures.append(f"async all_gather on a side stream, round {k}, part {r_}: {o[:2].tolist()}")
        if not (torch.equal(a.cpu(), torch.full((300,), float(N * (N - 1) / 2)))
                and torch.equal(b.cpu(), torch.full((500,), float(N * k)))):
            failures.append(f"async all_reduce_coalesced on a side stream, round {k}: {a[:2].tolist()} "
                            f"{b[:2].tolist()}")
        want_m = torch.arange(64, dtype=torch.float32).reshape(8, 8).t() * (N * (N + 1) / 2)
        if not torch.equal(m.cpu(), want_m):
            failures.append(f"async all_reduce of a non-contiguous tensor on a side stream, round {k}")
        del scratch
side.synchronize()

# An operation issued while an async one is out is held behind it (the backend's call order, docs/torch.md) unless
# that one has completed already, and then starts on another thread: either way it runs on the device path, on the
# stream it was issued on, and completes.
held_before = stream_calls[0]
a = torch.full((1000,), float(R), device=dev)
w = dist.all_reduce(a, async_op=True)
g = [torch.empty(10, device=dev) for _ in range(N)]
dist.all_gather(g, torch.full((10,), float(R), device=dev))
w.wait()
if not torch.equal(a.cpu(), torch.full((1000,), float(N * (N - 1) / 2))):
    failures.append(f"async all_reduce before a held all_gather: {a[:2].tolist()}")
if any(not torch.equal(g[r_].cpu(), torch.full((10,), float(r_))) for r_ in range(N)):
    failures.append("an all_gather held behind an async all_reduce: wrong result")
if stream_calls[0] - held_before != 2:
    failures.append(f"an async all_reduce and a held all_gather made {stream_calls[0] - held_before} device calls")

# The supported operations ran on the device path, not through host staging.
from cohort.torch import _backend  # noqa: E402

pg = dist.distributed_c10d._get_default_group()
path = (_backend._c.cohort_device_path(pg._comm) or b"").decode()
if not path:
    failures.append("no device path ran: CUDA tensors were staged through host memory")
want_path = os.environ.get("COHORT_TEST_DEVICE_PATH")
if want_path and path != want_path:
    failures.append(f"device path {path!r}, expected {want_path}")


# torch's DDP on a CUDA module: the default (cohort) group against a gloo group of the same ranks.
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(1, 8, 3)
        self.f = nn.Linear(8 * 26 * 26, 10)

    def forward(self, x):
        return self.f(F.relu(self.c(x)).flatten(1))


gloo = dist.new_group(backend="gloo")
params = {}
for name, group in (("cohort", None), ("gloo", gloo)):
    torch.manual_seed(0)
    model = Net().to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index], process_group=group, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(5):
        g = torch.Generator().manual_seed(100 * step + R)
        xb, yb = torch.randn(16, 1, 28, 28, generator=g).to(dev), torch.randint(0, 10, (16,), generator=g).to(dev)
        opt.zero_grad()
        F.cross_entropy(ddp(xb), yb).backward()
        opt.step()
    params[name] = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
if not torch.equal(params["cohort"], params["gloo"]):
    d = (params["cohort"] - params["gloo"]).abs().max().item()
    failures.append(f"DDP on CUDA: cohort and gloo differ by up to {d}")
torch.manual_seed(0)
moved = (params["cohort"] - torch.cat([p.detach().flatten() for p in Net().parameters()])).abs().max().item()
if moved < 1e-3:
    failures.append(f"DDP on CUDA: the parameters moved by {moved} only")

dist.destroy_process_group()
if failures:
    print(f"[rank {R}] FAIL:", *failures, sep="\n  ")
    sys.exit(1)
print(f"ok: torch.distributed on cohort with CUDA tensors on {dev} ({torch.cuda.get_device_name(dev)}), device path "
      f"{path}, torch {torch.__version__}")
