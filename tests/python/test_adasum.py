"""op=Adasum in cohort.torch's allreduce family, checked against values on every rank (issue 32).

    cohortrun -np N python3 test_adasum.py     N a power of 2: the values; N = 3: the refusal on every rank

Adasum combines two vectors as (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b, pairwise up a binary tree over the
ranks. Checked: orthogonal vectors add and parallel ones average (float16, float32, float64); random vectors match a
float64 reference of the tree written here; each tensor of a grouped call keeps its own coefficients; the in-place,
async and scaled forms agree with the plain call; vectors of tiny and of widely spread magnitudes stay accurate; the
gradient of an Adasum allreduce is the Adasum of the gradients; integer tensors and reducescatter are refused.
Exits non-zero on the first failed check.
"""
import sys

import numpy as np
import torch

import cohort.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()


def check(cond, what):
    if not cond:
        print(f"rank {R}: FAIL {what}", flush=True)
        sys.exit(1)


if N & (N - 1):
    # Not a power of 2: refused on every rank before anything moves, and the job goes on.
    try:
        hvd.allreduce(torch.ones(4), op=hvd.Adasum)
        check(False, "Adasum over a world that is not a power of 2 was not refused")
    except NotImplementedError as e:
        check("power of 2" in str(e), f"the refusal says why: {e}")
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1), op=hvd.Adasum)
        check(False, "DistributedOptimizer(op=Adasum) over a world that is not a power of 2 was not refused")
    except NotImplementedError as e:
        check("power of 2" in str(e), f"the optimizer's refusal says why: {e}")
    t = hvd.allreduce(torch.ones(2), op=hvd.Sum)
    check(t.tolist() == [float(N)] * 2, "an allreduce after the refusal")
    print(f"rank {R}: adasum refused at {N} ranks, ok", flush=True)
    sys.exit(0)

rng = np.random.default_rng(7)  # the same draws on every rank: each takes its own column
TOL = {torch.float16: 1e-3 * 4, torch.float32: 1e-6, torch.float64: 1e-13}


def rel(got, want):
    want = np.asarray(want, np.float64)
    return float(np.linalg.norm(got.double().numpy() - want) / np.linalg.norm(want))


def reference(columns):
    """The Adasum tree over columns (rank order), in float64."""
    level = [c.astype(np.float64) for c in columns]
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[0::2], level[1::2]):
            dot, aa, bb = a @ b, a @ a, b @ b
            nxt.append((1 - dot / (2 * aa)) * a + (1 - dot / (2 * bb)) * b)
        level = nxt
    return level[0]


for dt in (torch.float16, torch.float32, torch.float64):
    npdt = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}[dt]
    for length in (N + 2, 20 * N - 17, 1000):
        q, _ = np.linalg.qr(rng.normal(0, 1, (length, N)))  # orthonormal columns
        q = q.astype(npdt).astype(np.float64)
        got = hvd.allreduce(torch.from_numpy(q[:, R].copy()).to(dt), op=hvd.Adasum)
        check(got.dtype == dt and rel(got, q.sum(axis=1)) < TOL[dt],
              f"orthogonal {dt} x{length}: relative error {rel(got, q.sum(axis=1)):.3g}")
        # Parallel, same sign (of mixed signs the average cancels, and the relative error grows with the cancellation).
        p = np.outer(rng.normal(0, 1, length), rng.uniform(0.5, 2, N)).astype(npdt).astype(np.float64)
        got = hvd.synchronize(hvd.allreduce_async(torch.from_numpy(p[:, R].copy()).to(dt), op=hvd.Adasum))
        check(rel(got, p.sum(axis=1) / N) < TOL[dt],
              f"parallel {dt} x{length}: relative error {rel(got, p.sum(axis=1) / N):.3g}")
        x = rng.normal(0, 1, (length, N)).astype(npdt).astype(np.float64)  # neither
        got = hvd.allreduce(torch.from_numpy(x[:, R].copy()).to(dt), op=hvd.Adasum)
        want = reference([x[:, k] for k in range(N)])
        check(rel(got, want) < TOL[dt] * N, f"random {dt} x{length}: relative error {rel(got, want):.3g}")

# Tiny magnitudes (near the dtype's smallest normal) and magnitudes spread over the dtype's range: the dot products
# and norms in float64 keep them accurate (parallel vectors: the average).
for dt, npdt in ((torch.float32, np.float32), (torch.float16, np.float16)):
    fi = np.finfo(npdt)
    a = rng.normal(0, 1, 256)
    for scales in ([float(fi.tiny)] * N,
                   [np.sqrt(float(fi.max)) ** ((k + 1) / N) * float(fi.tiny) ** ((N - k - 1) / N) for k in range(N)]):
        cols = np.outer(a, scales).astype(npdt).astype(np.float64)
        got = hvd.allreduce(torch.from_numpy(cols[:, R].copy()).to(dt), op=hvd.Adasum)
        want = cols.sum(axis=1) / N
        check(rel(got, want) < 100 * float(fi.eps), f"stability {dt} scales {scales[0]:.3g}..: {rel(got, want):.3g}")

# A grouped call: each tensor with its own coefficients, as separate calls give them (the same arithmetic: equal).
u = torch.from_numpy(rng.normal(0, 1, (N, 7))[R].copy()).float()
v = torch.from_numpy(rng.normal(0, 100, (N, 3, 5))[R].copy()).float()
w = torch.from_numpy(rng.normal(0, 1, (N, 4))[R].copy())  # float64: another fused buffer
g = hvd.grouped_allreduce([u, v, w], op=hvd.Adasum)
for got, t in zip(g, (u, v, w)):
    check(got.shape == t.shape and torch.equal(got, hvd.allreduce(t, op=hvd.Adasum)), f"grouped {tuple(t.shape)}")
g2 = hvd.synchronize(hvd.grouped_allreduce_async([u, v, w], op=hvd.Adasum))
check(all(torch.equal(a, b) for a, b in zip(g, g2)), "grouped_allreduce_async")

# In place, async in place, scaled.
want = hvd.allreduce(u, op=hvd.Adasum)
x = u.clone()
check(hvd.allreduce_(x, op=hvd.Adasum) is x and torch.equal(x, want), "allreduce_")
x = u.clone()
check(torch.equal(hvd.synchronize(hvd.allreduce_async_(x, op=hvd.Adasum)), want) and torch.equal(x, want),
      "allreduce_async_")
d = u.double()
got = hvd.allreduce(d, op=hvd.Adasum, prescale_factor=0.5, postscale_factor=3.0)
check(torch.allclose(got, hvd.allreduce(d * 0.5, op=hvd.Adasum) * 3.0, rtol=1e-15, atol=0), "scaling factors")

# The gradient of an Adasum allreduce is the Adasum of the gradients: equal gradients on every rank come back as is.
x = torch.from_numpy(rng.normal(0, 1, (N, 6))[R].copy()).requires_grad_()
(hvd.allreduce(x, op=hvd.Adasum) * torch.arange(1.0, 7.0, dtype=torch.float64)).sum().backward()
check(torch.allclose(x.grad, torch.arange(1.0, 7.0, dtype=torch.float64)), f"gradient {x.grad.tolist()}")

# DistributedOptimizer(op=Adasum): every rank steps on its own gradients, the parameters' changes combine by Adasum
# (each parameter with its own coefficients), and every rank ends with the start plus the combined change.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(),
                               op=hvd.Adasum)
for step in range(3):
    before = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(100 + 10 * R + step)  # each rank its own batch
    opt.zero_grad()
    model(torch.randn(8, 5)).pow(2).mean().backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    opt.step()
    for p, b, gr in zip(model.parameters(), before, grads):
        every = hvd.allgather(gr.reshape(1, -1)).double().numpy()  # every rank's gradient of this parameter
        want = b.double().numpy().reshape(-1) + reference([-0.1 * every[k] for k in range(N)])
        check(np.allclose(p.detach().double().numpy().reshape(-1), want, rtol=1e-5, atol=1e-7),
              f"DistributedOptimizer(op=Adasum) step {step}: {p.detach().reshape(-1)[:3].tolist()} against "
              f"{want[:3].tolist()}")
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
check(torch.equal(hvd.broadcast(flat, root_rank=0), flat), "the replicas stay equal")
try:
    with opt.skip_synchronize():
        pass
    check(N == 1, "skip_synchronize() with op=Adasum was not refused")
except AssertionError:
    pass
if N > 1:
    try:  # a second backward before step() with backward_passes_per_step=1
        model(torch.randn(2, 5)).sum().backward()
        model(torch.randn(2, 5)).sum().backward()
        check(False, "a second backward before step() was not refused")
    except (AssertionError, RuntimeError) as e:
        check("backward_passes_per_step" in str(e), f"the refusal names backward_passes_per_step: {e}")
    opt.zero_grad()

# What Adasum does not take.
for bad, err in ((lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum), TypeError),
                 (lambda: hvd.reducescatter(torch.ones(2 * N), op=hvd.Adasum), RuntimeError)):
    try:
        bad()
        check(False, f"not refused: {err.__name__}")
    except err:
        pass
check(hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N, "an allreduce after the refusals")
print(f"rank {R}: adasum ok at {N} ranks", flush=True)
