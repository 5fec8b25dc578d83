"""Every collective of cohort.torch (and of the numpy core) against a numpy reference, on every dtype and op.

Run under cohortrun at any world size: build/bin/cohortrun -np 3 /usr/bin/python3 tests/python/test_ops.py
Each rank rebuilds every rank's input from the same seeds, computes the expected result with numpy in float64 (or
exact integers), and compares. The inputs are small integers and halves, so that sums, products, minima and maxima
are exact in every dtype (float16 and bfloat16 included, whose reductions cohort computes in float32): those are
compared exactly. Averages divide by the world size and are compared to one unit in the last place of the dtype.
Prints "ok: N checks" on success; any failure prints what differed and exits 1.
"""
import ctypes
import sys

import numpy as np
import torch

import cohort
import cohort.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
checks = 0
failures = []

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8]
OPS = [("Sum", hvd.Sum), ("Average", hvd.Average), ("Min", hvd.Min), ("Max", hvd.Max), ("Product", hvd.Product)]
# One unit in the last place, relative: what an average may differ by after its single rounding (cohort computes
# float16/bfloat16 in float32 and rounds once more to the dtype: still within one unit of the dtype).
ULP = {torch.float32: 2.0 ** -23, torch.float64: 2.0 ** -52, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print(f"[rank {R}] FAIL: {what}", flush=True)


def data(dtype, r, shape, salt=0):
    """Rank r's input: small values whose sums and products over 3 ranks are exact in every dtype."""
    rs = np.random.RandomState(1000 * r + 7 * DTYPES.index(dtype) + salt)
    if dtype == torch.uint8:
        v = rs.randint(0, 4, size=shape)
    elif dtype.is_floating_point:
        v = rs.randint(-8, 9, size=shape) / 2.0
        v[v == 0] = 0.5  # no zeros: Min/Max ties of +0/-0 aside, keep products informative
    else:
        v = rs.randint(-4, 5, size=shape)
    return torch.tensor(v).to(dtype)


def reference(dtype, opname, inputs):
    x = np.stack([t.to(torch.float64).numpy() if dtype.is_floating_point else t.to(torch.int64).numpy()
                  for t in inputs])
    if opname == "Sum":
        return x.sum(0)
    if opname == "Average":
        if dtype.is_floating_point:
            return x.sum(0) / N
        return np.fix(x.sum(0) / N)  # integers round toward zero (cohort.h)
    if opname == "Min":
        return x.min(0)
    if opname == "Max":
        return x.max(0)
    return np.prod(x, 0)


def same(got, want, dtype, opname, what):
    g = got.to(torch.float64).numpy() if dtype.is_floating_point else got.to(torch.int64).numpy()
    if dtype == torch.uint8 or dtype in (torch.int32, torch.int64):
        if dtype == torch.uint8:
            want = np.mod(want, 256)  # sums and products wrap (never reached with these inputs)
        ok = g.shape == want.shape and np.array_equal(g, want)
    elif opname == "Average":
        ok = g.shape == want.shape and np.all(np.abs(g - want) <= ULP[dtype] * np.abs(want))
    else:
        ok = g.shape == want.shape and np.array_equal(g, want)
    check(ok, f"{what}: got {g.ravel()[:6]} want {want.ravel()[:6]}")


shape = (3, 5)
for dtype in DTYPES:
    inputs = [data(dtype, r, shape) for r in range(N)]
    mine = inputs[R]
    for opname, op in OPS:
        want = reference(dtype, opname, inputs)
        tag = f"{dtype} {opname}"
        out = hvd.allreduce(mine, op=op)
        same(out, want, dtype, opname, f"allreduce {tag}")
        check(torch.equal(mine, inputs[R]), f"allreduce {tag} left its input alone")
        t = mine.clone()
        ret = hvd.allreduce_(t, op=op)
        check(ret is t, f"allreduce_ {tag} returns its tensor")
        same(t, want, dtype, opname, f"allreduce_ {tag}")
        h = hvd.allreduce_async(mine, op=op)
        same(hvd.synchronize(h), want, dtype, opname, f"allreduce_async {tag}")
        check(hvd.poll(h), f"poll after synchronize {tag}")
        t = mine.clone()
        h = hvd.allreduce_async_(t, op=op)
        while not hvd.poll(h):
            pass
        check(hvd.synchronize(h) is t, f"allreduce_async_ {tag} returns its tensor")
        same(t, want, dtype, opname, f"allreduce_async_ {tag}")
        # Non-contiguous: a transposed view, reduced in place through a contiguous copy.
        base = mine.t().contiguous().clone()  # (5, 3)
        view = base.t()  # (3, 5), not contiguous, equal to mine
        hvd.allreduce_(view, op=op)
        same(view, want, dtype, opname, f"allreduce_ non-contiguous {tag}")
        same(hvd.allreduce(mine.t(), op=op), want.T, dtype, opname, f"allreduce non-contiguous {tag}")
        # The numpy core, for the dtypes numpy has.
        if dtype != torch.bfloat16:
            a = mine.numpy()
            same(torch.from_numpy(cohort.allreduce(a, op=op)), want, dtype, opname, f"cohort.allreduce {tag}")
            b = a.copy()
            cohort.allreduce_(b, op=op)
            same(torch.from_numpy(b), want, dtype, opname, f"cohort.allreduce_ {tag}")
            same(torch.from_numpy(cohort.synchronize(cohort.allreduce_async(a, op=op))), want, dtype, opname,
                 f"cohort.allreduce_async {tag}")
    # Scale factors and compression (floating point): (sum * 2) * 0.25, exact with these inputs.
    if dtype.is_floating_point:
        want = reference(dtype, "Sum", inputs) * 0.5
        same(hvd.allreduce(mine, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25), want, dtype, "Sum",
             f"allreduce {dtype} prescale/postscale")
        for comp in (hvd.Compression.fp16, hvd.Compression.bf16):
            out = hvd.allreduce(mine, op=hvd.Sum, compression=comp)
            check(out.dtype == dtype, f"allreduce {dtype} {comp.__name__} keeps the dtype")
            same(out, reference(dtype, "Sum", inputs), dtype, "Sum", f"allreduce {dtype} {comp.__name__}")
    # Broadcast from every root.
    for root in range(N):
        out = hvd.broadcast(mine, root)
        check(torch.equal(out, inputs[root]) and torch.equal(mine, inputs[R]), f"broadcast {dtype} root {root}")
        t = mine.clone()
        check(hvd.broadcast_(t, root) is t and torch.equal(t, inputs[root]), f"broadcast_ {dtype} root {root}")
        t = mine.clone()
        hvd.synchronize(hvd.broadcast_async_(t, root))
        check(torch.equal(t, inputs[root]), f"broadcast_async_ {dtype} root {root}")
    # Allgather, uneven first dimensions (rank 0 contributes no rows at all), then even ones.
    rows = [r for r in range(N)]
    parts = [data(dtype, r, (rows[r], 2, 3), salt=1) for r in range(N)]
    out = hvd.allgather(parts[R])
    check(out.shape == (sum(rows), 2, 3) and torch.equal(out, torch.cat(parts)), f"allgather uneven {dtype}")
    out = hvd.synchronize(hvd.allgather_async(inputs[R]))
    check(torch.equal(out, torch.cat(inputs)), f"allgather even {dtype}")
    # Reducescatter: dimension 0 split over the ranks (the first dim % size get one row more).
    for first in (2 * N, 2 * N + 1):
        ins = [data(dtype, r, (first, 4), salt=2) for r in range(N)]
        counts = [first // N + (1 if r < first % N else 0) for r in range(N)]
        start = sum(counts[:R])
        for opname, op in OPS[:4]:
            want = reference(dtype, opname, ins)[start:start + counts[R]]
            same(hvd.reducescatter(ins[R], op=op), want, dtype, opname, f"reducescatter {dtype} {opname} {first}")

# Grouped: mixed dtypes and shapes in one call, new and in place, blocking and async.
group_in = [[data(dt, r, (2 + i, 3), salt=3) for i, dt in enumerate(DTYPES)] for r in range(N)]
for opname, op in OPS[:2]:
    wants = [reference(dt, opname, [group_in[r][i] for r in range(N)]) for i, dt in enumerate(DTYPES)]
    outs = hvd.grouped_allreduce(group_in[R], op=op)
    for i, dt in enumerate(DTYPES):
        same(outs[i], wants[i], dt, opname, f"grouped_allreduce {opname} {dt}")
    ts = [t.clone() for t in group_in[R]]
    hvd.grouped_allreduce_(ts, op=op)
    for i, dt in enumerate(DTYPES):
        same(ts[i], wants[i], dt, opname, f"grouped_allreduce_ {opname} {dt}")
    outs = hvd.synchronize(hvd.grouped_allreduce_async(group_in[R], op=op))
    for i, dt in enumerate(DTYPES):
        same(outs[i], wants[i], dt, opname, f"grouped_allreduce_async {opname} {dt}")
    ts = [t.clone() for t in group_in[R]]
    h = hvd.grouped_allreduce_async_(ts, op=op)
    hvd.synchronize(h)
    for i, dt in enumerate(DTYPES):
        same(ts[i], wants[i], dt, opname, f"grouped_allreduce_async_ {opname} {dt}")

# Grouped, large: each dtype's fused buffer is over 1 MiB, so it comes from the shared arena where the transport
# has one (zero copy) and goes back to a pool for the next call of that size. Several sizes, twice each (the second
# reuses the pooled block: it must hold nothing of the first), async calls in flight together, in place and not.
from cohort import _arena_pools  # noqa: E402

big = {dt: 600_000 + 4099 * k for k, dt in enumerate([torch.float32, torch.float64, torch.bfloat16, torch.int32])}
for rep in range(2):
    for opname, op in OPS[:2]:
        ins = [[data(dt, r, (n,), salt=4 + rep) for dt, n in big.items()] for r in range(N)]
        wants = [reference(dt, opname, [ins[r][i] for r in range(N)]) for i, dt in enumerate(big)]
        outs = hvd.grouped_allreduce(ins[R], op=op)
        h1 = hvd.grouped_allreduce_async(ins[R][:2], op=op)
        ts = [t.clone() for t in ins[R][2:]]
        h2 = hvd.grouped_allreduce_async_(ts, op=op)
        outs_async = hvd.synchronize(h1) + hvd.synchronize(h2)
        for i, dt in enumerate(big):
            same(outs[i], wants[i], dt, opname, f"grouped_allreduce large {opname} {dt} round {rep}")
            same(outs_async[i], wants[i], dt, opname, f"grouped_allreduce_async large {opname} {dt} round {rep}")
        check(all(o.data_ptr() != t.data_ptr() for o, t in zip(outs, ins[R])), "grouped_allreduce returns new tensors")
# The numpy core's grouped_allreduce, large, twice (the second from the pool).
for rep in range(2):
    ins = [[np.full(300_000 + 1000 * k, r + k + rep, dtype) for k, dtype in enumerate([np.float32, np.int64])]
           for r in range(N)]
    outs = cohort.grouped_allreduce(ins[R], op=cohort.Sum)
    check(all(np.array_equal(outs[k], sum(ins[r][k] for r in range(N))) for k in range(2)),
          f"cohort.grouped_allreduce large, round {rep}")
if hvd.transport() == "shm":
    pool = _arena_pools.get(cohort._get_comm().value)
    kept = pool.idle_bytes() if pool else None
    check(pool is not None and pool.too_big is None and kept >= 1 << 20,
          f"grouped_allreduce's fused buffers came from the shm arena and were pooled (kept {kept} bytes)")

# The pool's policy, on a pool of its own with a 3 MiB cap: the least recently returned block goes first, the last
# one returned stays even when larger than the cap, and a block of the size asked for is reused.
if hvd.transport() == "shm":
    p = cohort._ArenaPool(cohort._get_comm())
    p.KEEP = 3 << 20
    a, b = p.take(2 << 20), p.take(2 << 20)
    addr_b = ctypes.addressof(b)
    del a, b  # 4 MiB back: over the cap, so a (returned first) is freed
    check(p.idle_bytes() == 2 << 20 and p.free[0][1] == addr_b, f"pool keeps the newer block: {p.free}")
    c = p.take(5 << 20)
    addr_c = ctypes.addressof(c)
    del c
    check(p.idle_bytes() == 5 << 20 and [x[1] for x in p.free] == [addr_c],
          f"pool keeps the last, large block: {p.free}")
    d = p.take(5 << 20)
    check(ctypes.addressof(d) == addr_c and p.idle_bytes() == 0, "pool reuses the block of the size asked for")
    del d
    p.drop()
    check(p.free == [] and p.kept == 0 and not p.alive, "pool dropped")

# Several asynchronous reductions in flight at once, completed in reverse order.
hs = [hvd.allreduce_async(torch.full((1000,), float(R + k)), op=hvd.Sum) for k in range(5)]
for k in reversed(range(5)):
    want = sum(float(r + k) for r in range(N))
    check(torch.all(hvd.synchronize(hs[k]) == want).item(), f"async #{k} of 5 in flight")

# allreduce is differentiable (Horovod's): d/dx sum(allreduce(x, Sum) * w_r) on rank r is the sum of the w's.
x = torch.ones(4, requires_grad=True)
(hvd.allreduce(x, op=hvd.Sum) * (R + 1)).sum().backward()
check(torch.equal(x.grad, torch.full((4,), float(sum(r + 1 for r in range(N))))), f"allreduce gradient {x.grad}")
x = torch.ones(4, requires_grad=True)
(hvd.allreduce(x, op=hvd.Average) * (R + 1)).sum().backward()
check(torch.allclose(x.grad, torch.full((4,), sum(r + 1 for r in range(N)) / N), rtol=1e-6, atol=0),
      f"allreduce Average gradient {x.grad}")

# Objects.
for root in range(N):
    obj = {"root": root, "payload": list(range(root * 100)), "t": torch.arange(3) + root}
    got = hvd.broadcast_object(obj if R == root else None, root_rank=root)
    check(got["root"] == root and got["payload"] == list(range(root * 100)) and torch.equal(got["t"], obj["t"]),
          f"broadcast_object root {root}")
got = hvd.allgather_object({"rank": R, "s": "x" * (R * 1000)})
check(got == [{"rank": r, "s": "x" * (r * 1000)} for r in range(N)], "allgather_object")

# The numpy core on other inputs: a bytearray (buffer protocol), uneven allgather, reducescatter.
ba = bytearray([R + 1] * 8)
cohort.allreduce_(ba, op=cohort.Sum)
check(list(ba) == [sum(r + 1 for r in range(N))] * 8, "cohort.allreduce_ on a bytearray")
a = np.full((R + 1, 2), R, np.int64)
check(np.array_equal(cohort.allgather(a), np.concatenate([np.full((r + 1, 2), r, np.int64) for r in range(N)])),
      "cohort.allgather uneven")
a = np.arange(2 * N, dtype=np.float64) * (R + 1)
want = np.arange(2 * N, dtype=np.float64) * sum(r + 1 for r in range(N))
check(np.array_equal(cohort.reducescatter(a, op=cohort.Sum), want[2 * R:2 * R + 2]), "cohort.reducescatter")

# broadcast_parameters and broadcast_optimizer_state.
torch.manual_seed(R)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
opt = torch.optim.SGD(model.parameters(), lr=0.1 * (R + 1), momentum=0.9)
model(torch.randn(5, 4)).sum().backward()
opt.step()
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
flat = torch.cat([p.detach().reshape(-1) for p in model.state_dict().values()]).double()
everyone = hvd.allgather(flat.reshape(1, -1))
check(bool((everyone == everyone[0]).all()), "broadcast_parameters: every rank holds rank 0's state_dict")
check(opt.param_groups[0]["lr"] == 0.1, "broadcast_optimizer_state: rank 0's learning rate")
mom = torch.cat([opt.state[p]["momentum_buffer"].reshape(-1) for p in model.parameters()])
every_mom = hvd.allgather(mom.reshape(1, -1))
check(bool((every_mom == every_mom[0]).all()), "broadcast_optimizer_state: rank 0's momentum")
hvd.broadcast_parameters(list(model.named_parameters()), root_rank=N - 1)

hvd.barrier()
check(hvd.is_initialized() and 0 <= hvd.local_rank() < hvd.local_size() <= N, "rank queries")

# Misuse raises at once with a clear message, on every rank alike (so the ranks stay in step).
def raises(exc, fn, what, needle=None):
    try:
        fn()
    except exc as e:
        check(needle is None or needle in str(e), f"{what}: message '{e}' lacks '{needle}'")
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e}, not {exc.__name__}")
        return
    check(False, f"{what}: did not raise {exc.__name__}")


check(hvd.allreduce(torch.ones(3, dtype=torch.int16), op=hvd.Sum).tolist() == [N] * 3, "int16 allreduce")
raises(TypeError, lambda: hvd.allreduce(torch.zeros(3, dtype=torch.complex64)), "complex64", "unsupported dtype")
raises(TypeError, lambda: hvd.allreduce([1.0, 2.0]), "a list", "torch.Tensor")
raises(TypeError, lambda: hvd.allreduce(torch.zeros(3, dtype=torch.int64), op=hvd.Adasum), "Adasum of int64",
       "float16, float32 and float64")  # op=Adasum itself: tests/python/test_adasum.py
raises(RuntimeError, lambda: hvd.reducescatter(torch.zeros(4), op=hvd.Adasum), "Adasum (reducescatter: a RuntimeError, as Horovod raises)", "Adasum")
raises(ValueError, lambda: hvd.allreduce(torch.zeros(3), op=99), "op 99", "unknown reduction op")
raises(ValueError, lambda: hvd.grouped_allreduce([]), "empty group", "empty")
raises(TypeError, lambda: hvd.grouped_allreduce([torch.zeros(2), "x"]), "group with a string", "torch.Tensor")
raises(ValueError, lambda: hvd.broadcast(torch.zeros(2), N), "root out of range", "out of range")
check(hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Sum, prescale_factor=2.0).tolist() == [2 * N] * 2,
      "int prescale (in float64, as Horovod)")
raises(ValueError, lambda: hvd.allreduce(torch.zeros(2, dtype=torch.bool), prescale_factor=2.0), "bool prescale",
       "bool")
raises(ValueError, lambda: hvd.allgather(torch.tensor(1.0)), "scalar allgather", "scalar")
raises(TypeError, lambda: cohort.allreduce("text"), "a str to the core", "buffer protocol")
raises(ValueError, lambda: cohort.allreduce_(b"abc"), "read-only buffer", "read-only")
raises(TypeError, lambda: hvd.synchronize(42), "synchronize(42)", "handle")
raises(TypeError, lambda: hvd.DistributedDataParallel(torch.nn.Linear(2, 2).double()), "float64 DDP", "float32")
raises(ValueError, lambda: hvd.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1),
                                                    backward_passes_per_step=0), "backward_passes_per_step=0", ">= 1")
# Allgather whose trailing dimensions differ: every rank raises MismatchError (they all see all the shapes).
if N > 1:
    raises(hvd.MismatchError, lambda: hvd.allgather(torch.zeros(2, 3 + (R == 1))), "allgather trailing dims",
           "every dimension but the first")
check(hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N, "the communicator still works after the misuse")

# The binding's mirror of cohort_ddp_options has every field of the C struct: cohort_ddp_options_init, given a
# buffer twice the mirror's size filled with 0xA5, must leave every byte past the mirror's end untouched (a field added
# in C and not in Python once shifted the binding's "overlap" onto another option).
from cohort import _lib  # noqa: E402

size = ctypes.sizeof(_lib.DdpOptions)
raw = (ctypes.c_ubyte * (2 * size))(*([0xA5] * (2 * size)))
_lib.lib.cohort_ddp_options_init(ctypes.cast(raw, ctypes.POINTER(_lib.DdpOptions)))
check(all(b == 0xA5 for b in raw[size:]), f"cohort_ddp_options is larger than the binding's {size}-byte mirror")
opts = ctypes.cast(raw, ctypes.POINTER(_lib.DdpOptions)).contents
check(opts.broadcast_buffers == 1 and opts.overlap == 0 and opts.uneven_inputs == 0 and opts.zero_stage == 0, "the mirror's fields line up")

# Work still outstanding at shutdown: its handle raises instead of returning a result that was never completed
# (a grouped call's fused buffer, in the arena, is gone with the communicator).
pending = hvd.grouped_allreduce_async([torch.ones(100_000), torch.ones(3)], op=hvd.Sum)
hvd.shutdown()
check(not hvd.is_initialized(), "shutdown")
raises(RuntimeError, lambda: hvd.synchronize(pending), "synchronize after shutdown", "shutdown() was called before")
raises(RuntimeError, lambda: hvd.rank(), "rank() after shutdown", "init()")

if failures:
    print(f"[rank {R}] {len(failures)} of {checks} checks failed", flush=True)
    sys.exit(1)
print(f"[rank {R}] ok: {checks} checks at world size {N}", flush=True)
