"""torch's own DistributedDataParallel on backend="cohort" against the same DDP on gloo, in the same processes.

Run: build/bin/cohortrun -np 2 /usr/bin/python3 tests/python/test_dist_ddp.py   (and -np 3)

The default group is "cohort" (dist.init_process_group("cohort") under cohortrun); a gloo group of the same ranks
comes from dist.new_group(backend="gloo"). For every mode, two copies of one model (same seed) are trained for the
same steps on the same data (step s, rank r: rows (s N + r) B .. + B of one seeded synthetic set), one with DDP on
the default (cohort) group, one with DDP(process_group=gloo); then their parameters are compared.

Modes: plain (with a BatchNorm: buffers broadcast every forward), find_unused_parameters=True (a branch used on
even steps only, and one never used), gradient_as_bucket_view=True, static_graph=True, no_sync() (2 micro-batches
a step, the first under no_sync), torch's comm hooks fp16_compress_hook, bf16_compress_hook, powerSGD_hook and
batched_powerSGD_hook (PowerSGDState with a fixed random_seed, compression from step 2), DDP with
torch.distributed.algorithms.join.Join over uneven inputs (rank r has STEPS + 2 r batches), and
ZeroRedundancyOptimizer (torch.distributed.optim) under DDP, each on its own backend. A small bucket_cap_mb gives
several buckets per step, so several asynchronous all_reduces are in flight at once: torch 2 caps DDP's first
bucket (the last parameters) at bucket_cap_mb too, where torch 1.13 capped it at dist._DEFAULT_FIRST_BUCKET_BYTES
(1 MiB: this whole model, one bucket); the test sets that to bucket_cap_mb, so that both torches bucket alike.

The reference's PowerSGD hook (on gloo) waits for each bucket's result inside the hook: the same arithmetic, one
bucket at a time. Left asynchronous, it hangs in torch's own gloo once a step has several buckets (torch 2, or 1.13
with the cap above): PowerSGD's callbacks run on gloo's two worker threads and each waits there for its P (or Q)
all_reduce, which only those threads can run; two buckets' callbacks block both for good (2026-11-28: 2 and 3 ranks
on torch 1.13 with the small first bucket, stacks in unpack_uncompressed_tensors_and_allreduce_ps on both workers;
on torch 2.11 the PowerSGD modes did not finish). The hook also races gloo's call order (docs/torch.md, "Call order
and callbacks"). On cohort the hooks run asynchronously, as a user's would.

What is compared, and why that exactly:
- 2 ranks: bitwise (torch.equal). Each rank computes its gradients with the same torch code on the same data in the
  same process, so the per-rank inputs to the reductions are the same bits for both backends; a sum of two floats
  is correctly rounded whichever order the backend adds them in (a + b == b + a), and DDP's division by the world
  size, the hooks' casts to fp16/bf16 and PowerSGD's matrix products happen in torch on both sides. fp16/bf16 sums
  of two values: any backend that adds in float32 and rounds once gets the correctly rounded half result, the same
  as adding in half. So any difference at all is a backend bug (a lost, doubled or misplaced element).
- 3 ranks: (a + b) + c and a + (b + c) may differ in the last bit, and gloo's ring and cohort's collectives need
  not add the three contributions in the same order (nor in the same order for every chunk), so the test allows
  a tight tolerance: |cohort - gloo| <= 1e-5 after the training (fp16/bf16 hooks: one rounding of the compressed
  sum is up to 2^-11 / 2^-8 of a gradient, so 1e-4 / 1e-3); it prints the largest difference it found either
  way.
- Always: the parameters moved by far more than the tolerance (training did something), the ranks hold bitwise
  the same parameters (DDP kept the replicas in sync), and a control trained without any communication differs
  from the DDP result by far more than the tolerance (the data differ per rank, so a backend that reduced
  nothing would fail).
"""
import os
import sys

# The models here are on the CPU. torch's PowerSGD hooks call torch.cuda.synchronize(tensor's device) whenever a GPU
# is visible, which raises "Expected a cuda device, but got: cpu" for CPU tensors whatever the backend (torch 2.11 on
# the GPU host, 2026-11-27): the GPU is hidden before torch starts.
os.environ["CUDA_VISIBLE_DEVICES"] = ""

# COHORT_TEST_STACKS_AFTER=S: a rank still running after S seconds prints every thread's Python stack and exits, so
# that a hang shows where it is (scripts/gpu/40-torch2.sh sets it: on torch 2.11 the PowerSGD modes once did not end).
if os.environ.get("COHORT_TEST_STACKS_AFTER"):
    import faulthandler

    faulthandler.dump_traceback_later(float(os.environ["COHORT_TEST_STACKS_AFTER"]), exit=True)

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

import cohort.torch  # noqa: F401 (registers the backend "cohort")

torch.set_num_threads(1)
dist.init_process_group("cohort")
R, N = dist.get_rank(), dist.get_world_size()
GLOO = dist.new_group(backend="gloo")
assert dist.get_backend() == "cohort", dist.get_backend()
assert dist.get_backend(GLOO) == "gloo", dist.get_backend(GLOO)
WORLD = dist.group.WORLD
B, STEPS, LR = 8, 8, 0.05
BUCKET_MB = 0.004
# torch 1.13 caps the first bucket at this, whatever bucket_cap_mb (torch 2: at bucket_cap_mb when one is given).
dist._DEFAULT_FIRST_BUCKET_BYTES = int(BUCKET_MB * 1024 * 1024)
EXACT = N == 2

g = torch.Generator().manual_seed(1234)
X = torch.randn((STEPS + 2 * N + 2) * 2 * N * B, 20, generator=g)
Y = torch.randint(0, 5, (X.shape[0],), generator=g)


def batch(step, rank, half=None):
    lo = (step * N + rank) * 2 * B
    if half is not None:
        lo += half * B
        return X[lo:lo + B], Y[lo:lo + B]
    return X[lo:lo + 2 * B], Y[lo:lo + 2 * B]


class Net(nn.Module):
    def __init__(self, bn=False):
        super().__init__()
        self.f1 = nn.Linear(20, 64)
        self.bn = nn.BatchNorm1d(64) if bn else nn.Identity()
        self.f2 = nn.Linear(64, 48)
        self.branch = nn.Linear(48, 48)  # used on even steps only
        self.never = nn.Linear(48, 48)  # never used
        self.out = nn.Linear(48, 5)
        self.step = 0
        self.use_branch = True

    def forward(self, x):
        h = F.relu(self.f2(F.relu(self.bn(self.f1(x)))))
        if self.use_branch and self.step % 2 == 0:
            h = h + torch.tanh(self.branch(h))
        return self.out(h)


def fresh(bn=False):
    torch.manual_seed(0)
    return Net(bn)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def bf16_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    # torch 1.13's DDP refuses default_hooks.bf16_compress_hook by its name where torch has no NCCL 2.10 (a CPU
    # build), whatever the process group: the same hook under another name.
    return default_hooks.bf16_compress_hook(state, bucket)


def bf16_on_gloo(pg, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    # gloo in torch 1.13 has no bfloat16 all_reduce (it aborts the process: "Invalid scalar type"). The reference is
    # what a correct bf16 all_reduce returns: the bf16-compressed gradients summed exactly (float32 holds the sum of
    # two bf16 values exactly) and rounded once to bf16, then decompressed as bf16_compress_hook does.
    compressed = bucket.buffer().to(torch.bfloat16).div_(pg.size()).float()
    fut = dist.all_reduce(compressed, group=pg, async_op=True).get_future()

    def decompress(fut):
        buf = bucket.buffer()
        buf.copy_(fut.value()[0].to(torch.bfloat16))
        return buf

    return fut.then(decompress)


def hook_for(mode, pg):
    if mode == "fp16":
        return pg, default_hooks.fp16_compress_hook
    if mode == "bf16":
        return pg, (bf16_hook if pg is WORLD else bf16_on_gloo)
    if mode in ("powersgd", "batched_powersgd"):
        # batched_powerSGD_hook makes each bucket a square matrix whose side must be at least the rank: this model's
        # small buckets (bucket_cap_mb=BUCKET_MB) have sides of 1, so rank 1 there.
        rank = 2 if mode == "powersgd" else 1
        state = powerSGD_hook.PowerSGDState(process_group=pg, matrix_approximation_rank=rank, start_powerSGD_iter=2,
                                            min_compression_rate=0.5, use_error_feedback=True, warm_start=True,
                                            random_seed=7)
        hook = powerSGD_hook.powerSGD_hook if mode == "powersgd" else powerSGD_hook.batched_powerSGD_hook
        return state, (hook if pg is WORLD else one_bucket_at_a_time(hook))
    return None


def one_bucket_at_a_time(hook):
    """hook, its future waited for before it returns (the reference on gloo: see the top)."""
    def waited(state, bucket):
        fut = hook(state, bucket)
        fut.wait()
        return fut
    return waited


def train(mode, pg):
    """Trains one DDP copy on process group pg (WORLD: cohort; GLOO) in the given mode; returns its parameters and
    those before training."""
    model = fresh(bn=(mode == "plain"))
    if mode != "unused":
        model.use_branch = False  # without the branch and `never`, every parameter gets a gradient every step
        del model.never, model.branch
    before = flat(model)
    kw = dict(process_group=pg, bucket_cap_mb=BUCKET_MB)
    if mode == "unused":
        kw["find_unused_parameters"] = True
    if mode == "bucket_view":
        kw["gradient_as_bucket_view"] = True
    if mode == "static_graph":
        kw["static_graph"] = True
    ddp = DDP(model, **kw)
    hook = hook_for(mode, pg)
    if hook:
        ddp.register_comm_hook(*hook)
    if mode == "zero":
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, process_group=pg, lr=LR,
                                      momentum=0.9)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.9)

    def one_step(s):
        model.step = s
        opt.zero_grad()
        if mode == "no_sync":
            x, y = batch(s, R, 0)
            with ddp.no_sync():
                F.cross_entropy(ddp(x), y).backward()
            x, y = batch(s, R, 1)
            F.cross_entropy(ddp(x), y).backward()
        else:
            x, y = batch(s, R)
            F.cross_entropy(ddp(x), y).backward()
        opt.step()

    if mode == "join":
        with Join([ddp]):
            for s in range(STEPS + 2 * R):
                one_step(s)
    else:
        for s in range(STEPS):
            one_step(s)
    return flat(model), before


def alone():
    """The control: the plain-mode model trained by this rank alone (no communication)."""
    model = fresh()
    model.use_branch = False
    del model.never, model.branch
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for s in range(STEPS):
        opt.zero_grad()
        x, y = batch(s, R)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return flat(model)


def same_on_every_rank(t, what):
    got = [torch.empty_like(t) for _ in range(N)]
    dist.all_gather(got, t, group=GLOO)  # the reference backend carries the check
    for r, o in enumerate(got):
        assert torch.equal(o, got[0]), f"{what}: rank {r}'s parameters differ from rank 0's by {(o - got[0]).abs().max()}"


TOL = {"fp16": 1e-4, "bf16": 1e-3}
MODES = ["plain", "unused", "bucket_view", "static_graph", "no_sync", "fp16", "bf16", "powersgd", "batched_powersgd",
         "join", "zero"]
if len(sys.argv) > 1:
    MODES = sys.argv[1:]
failures = []
control = alone()
for mode in MODES:
    pc, before = train(mode, WORLD)
    pgl, before_g = train(mode, GLOO)
    assert torch.equal(before, before_g)
    tol = TOL.get(mode, 1e-5)
    diff = (pc - pgl).abs().max().item()
    moved = (pc - before).abs().max().item()
    same_on_every_rank(pc, f"{mode} (cohort)")
    same_on_every_rank(pgl, f"{mode} (gloo)")
    assert moved > 50 * tol, f"{mode}: training moved the parameters by only {moved}"
    if mode in ("bucket_view", "static_graph", "zero"):  # the modes that train the control's model on its data
        away = (pc - control).abs().max().item()
        assert away > 100 * tol, f"{mode}: DDP ended {away} from a rank trained alone: nothing was reduced?"
    ok = torch.equal(pc, pgl) if EXACT else diff <= tol
    if R == 0:
        print(f"{mode:18s} max|cohort - gloo| = {diff:.3g} ({'bitwise equal' if diff == 0 else 'differs'}; "
              f"{'exact required' if EXACT else f'tolerance {tol:g}'}) moved {moved:.3g} -> "
              f"{'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(mode)

dist.barrier()
dist.destroy_process_group()
if failures:
    sys.exit(f"rank {R}: cohort DDP differs from gloo DDP in: {', '.join(failures)}")
print(f"rank {R}: PASS ({N} ranks, {len(MODES)} modes)", flush=True)
