"""torch.distributed on backend "cohort": every operation on CPU tensors, with values checked on every rank.

    cohortrun -np N python3 test_dist_backend.py                  init_method env:// (cohortrun's rendezvous)
    RANK=r WORLD_SIZE=N MASTER_ADDR=.. MASTER_PORT=.. python3 test_dist_backend.py   env:// by hand (torch's store)
    python3 test_dist_backend.py file:///path RANK N              init_method file:// (torch's FileStore), by hand
    python3 test_dist_backend.py tcp://127.0.0.1:PORT RANK N      init_method tcp:// (torch's TCPStore), by hand

Prints "PASS (backend <rendezvous> <transport>) rank R of N" at the end; any failed check raises (non-zero exit).
"""
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist

import cohort.torch  # noqa: F401 (registers the backend "cohort")

warnings.filterwarnings("ignore", message=".*all_gather_coalesced will be deprecated")

init = sys.argv[1] if len(sys.argv) > 1 else "env://"
if init == "env://":
    dist.init_process_group("cohort")
else:
    dist.init_process_group("cohort", init_method=init, rank=int(sys.argv[2]), world_size=int(sys.argv[3]))
r, n = dist.get_rank(), dist.get_world_size()
pg = dist.distributed_c10d._get_default_group()
assert dist.get_backend() == "cohort", dist.get_backend()
under_cohortrun = os.environ.get("COHORT_LAUNCHER_STORE") == "1"
expected_rendezvous = "cohortrun" if init == "env://" and under_cohortrun else "torch's store"
assert pg.rendezvous == expected_rendezvous, (pg.rendezvous, expected_rendezvous)


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {r}: {what}")


# The backend's C++ half (cohort.torch._c10d): loaded where CMake built it (COHORT_TEST_TORCH_EXT=1) unless
# COHORT_TORCH_EXT=0; blocking all_reduces of one contiguous tensor then run there, and the Python half never makes
# the completed Work (_DoneWork) that its own blocking path returns. Counted over the all_reduce checks below.
from cohort.torch import _backend  # noqa: E402

if os.environ.get("COHORT_TEST_TORCH_EXT") in ("0", "1"):
    want_ext = os.environ["COHORT_TEST_TORCH_EXT"] == "1" and os.environ.get("COHORT_TORCH_EXT", "1") != "0"
    check((_backend._EXT is not None) == want_ext, f"C++ half loaded: {_backend._EXT}, expected {want_ext}")
python_done_works = 0


class _CountedDoneWork(_backend._DoneWork):
    def __init__(self, result):
        global python_done_works
        python_done_works += 1
        super().__init__(result)


_backend._DoneWork = _CountedDoneWork


# all_reduce: every op torch allows on CPU, every dtype torch sends, in place, non-contiguous, complex.
for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
           torch.int64, torch.uint8):
    t = torch.full((7,), r + 1, dtype=dt)
    dist.all_reduce(t)
    check(t.tolist() == [n * (n + 1) // 2] * 7, f"all_reduce SUM {dt}: {t}")
    t = torch.full((3,), r + 1, dtype=dt)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check(t.tolist() == [n] * 3, f"all_reduce MAX {dt}: {t}")
    t = torch.full((3,), r + 1, dtype=dt)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    check(t.tolist() == [1] * 3, f"all_reduce MIN {dt}: {t}")
t = torch.full((2,), float(r + 1), dtype=torch.float64)
dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
check(t.tolist() == [float(torch.arange(1, n + 1).prod())] * 2, f"PRODUCT: {t}")
b = torch.tensor([r == 0, False, True])
dist.all_reduce(b)
check(b.tolist() == [True, False, True], f"bool SUM (logical or): {b}")
b = torch.tensor([r == 0, True])
dist.all_reduce(b, op=dist.ReduceOp.MIN)
check(b.tolist() == [n == 1, True], f"bool MIN (logical and): {b}")
# 30 blocking all_reduces of contiguous tensors above: each made a Python _DoneWork unless the C++ half ran it.
check(python_done_works == (0 if _backend._EXT else 30), f"blocking all_reduces through Python: {python_done_works}")
x = torch.tensor([1 << r, 6], dtype=torch.int32)
dist.all_reduce(x, op=dist.ReduceOp.BOR)
check(x.tolist() == [(1 << n) - 1, 6], f"BOR: {x}")
x = torch.tensor([(1 << n) - 1 - (1 << r), 6], dtype=torch.int64)
dist.all_reduce(x, op=dist.ReduceOp.BAND)
check(x.tolist() == [0, 6], f"BAND: {x}")
x = torch.tensor([1 << r, 3], dtype=torch.int16)
dist.all_reduce(x, op=dist.ReduceOp.BXOR)
check(x.tolist() == [(1 << n) - 1, 3 if n % 2 else 0], f"BXOR: {x}")
c = torch.tensor([1 + 1j, r * 1j], dtype=torch.complex64)
dist.all_reduce(c)
check(c.tolist() == [n * (1 + 1j), sum(range(n)) * 1j], f"complex: {c}")
m = torch.arange(16, dtype=torch.float32).reshape(4, 4) + r
col = m.t()[1]  # non-contiguous: the result must land in m itself
dist.all_reduce(col)
check(m[:, 1].tolist() == [float(n * v + sum(range(n))) for v in (1, 5, 9, 13)], f"non-contiguous: {m}")
check(m[:, 0].tolist() == [float(v + r) for v in (0, 4, 8, 12)], f"non-contiguous wrote outside its view: {m}")
if hasattr(dist.ReduceOp, "AVG"):
    t = torch.full((2,), float(2 * r))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check(t.tolist() == [float(n - 1)] * 2, f"AVG: {t}")

# async, futures (what DDP's comm hooks chain on)
works = [dist.all_reduce(torch.full((1000,), float(k + r)), async_op=True) for k in range(5)]
for w in works:
    w.wait()
    check(w.is_completed(), "an async all_reduce did not complete")
t = torch.ones(4)
fut = dist.all_reduce(t, async_op=True).get_future()
check(fut.wait()[0].tolist() == [float(n)] * 4, f"get_future: {fut.value()}")
doubled = dist.all_reduce(torch.ones(2), async_op=True).get_future().then(lambda f: f.value()[0] * 2).wait()
check(doubled.tolist() == [2.0 * n] * 2, f"future.then: {doubled}")

# A callback that issues a collective (as DDP comm hooks do: PowerSGD allreduces its factors in then()) keeps its place
# in the call order on every rank, whatever the timing. Rank 0 lets the first allreduce complete, and so its callback
# issue, before it issues the next call; the other ranks issue the next call at once, before the first completes.
# Each call must still meet its own: the callback's 5 elements with the callback's, the next call's 7 with its own
# (unordered, the ranks would pair 5 with 7: a mismatch).
for blocking_next in (True, False):
    def issue_in_callback(f):
        inner = torch.full((5,), float(r))
        return dist.all_reduce(inner, async_op=True).get_future().wait()[0]

    outer = dist.all_reduce(torch.ones(3), async_op=True).get_future().then(issue_in_callback)
    if r == 0:
        time.sleep(0.3)
    nxt = torch.full((7,), float(r + 1))
    w = dist.all_reduce(nxt, async_op=not blocking_next)
    if w is not None:
        w.wait()
    check(nxt.tolist() == [float(n * (n + 1) // 2)] * 7, f"the call after a callback's (blocking {blocking_next}): {nxt}")
    got = outer.wait()
    check(got.tolist() == [float(n * (n - 1) // 2)] * 5, f"the callback's call (blocking {blocking_next}): {got}")

# broadcast, reduce, gather, scatter, all_gather, reduce_scatter
for src in range(n):
    t = torch.full((3,), float(r))
    dist.broadcast(t, src=src)
    check(t.tolist() == [float(src)] * 3, f"broadcast from {src}: {t}")
    t = torch.full((3,), float(r))
    dist.reduce(t, dst=src)
    if r == src:
        check(t.tolist() == [float(sum(range(n)))] * 3, f"reduce to {src}: {t}")
g = [torch.empty(2) for _ in range(n)] if r == 0 else None
dist.gather(torch.tensor([r, -r], dtype=torch.float32), g, dst=0)
if r == 0:
    check([x.tolist() for x in g] == [[k, -k] for k in range(n)], f"gather: {g}")
out = torch.empty(2)
dist.scatter(out, [torch.tensor([k, 2 * k], dtype=torch.float32) for k in range(n)] if r == n - 1 else None, src=n - 1)
check(out.tolist() == [r, 2 * r], f"scatter: {out}")
outs = [torch.empty(2, dtype=torch.int64) for _ in range(n)]
dist.all_gather(outs, torch.tensor([r, 10 * r]))
check([o.tolist() for o in outs] == [[k, 10 * k] for k in range(n)], f"all_gather: {outs}")
whole = torch.empty(2 * n)
gather_into = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
gather_into(whole, torch.tensor([r, r + 0.5]))
check(whole.tolist() == [v for k in range(n) for v in (k, k + 0.5)], f"all_gather_into_tensor: {whole}")
coalesced = [[torch.empty(2, 2), torch.empty(3)] for _ in range(n)]
dist.all_gather_coalesced(coalesced, [torch.full((2, 2), float(r)), torch.full((3,), 10.0 + r)])
check(all(coalesced[k][0].eq(k).all() and coalesced[k][1].eq(10 + k).all() for k in range(n)),
      f"all_gather_coalesced: {coalesced}")
out = torch.empty(2)
dist.reduce_scatter(out, [torch.full((2,), float(10 * k + r)) for k in range(n)])
check(out.tolist() == [float(10 * r * n + sum(range(n)))] * 2, f"reduce_scatter: {out}")
out = torch.empty(3)
scatter_into = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
scatter_into(out, torch.arange(3 * n, dtype=torch.float32) + r)
check(out.tolist() == [float(n * (3 * r + j) + sum(range(n))) for j in range(3)], f"reduce_scatter_tensor: {out}")
def _rs_opts(op):
    o = dist.distributed_c10d.ReduceScatterOptions()
    o.reduceOp = op
    return o


# The coalesced tensor forms torch 2's functional collectives call on the group (DTensor, FSDP2), called here on the
# group itself as torch's C++ does: shapes of several dimensions, a complex tensor, and the ranks' values in order.
pg = dist.distributed_c10d._get_default_group()
ins = [torch.full((2, 3), float(r)), torch.tensor([r, 100.0 + r]), torch.full((1,), 7.0 * r)]
outs = [torch.empty(2 * n, 3), torch.empty(2 * n), torch.empty(n)]
pg.allgather_into_tensor_coalesced(outs, ins, None).wait()
check(outs[0].tolist() == [[float(k)] * 3 for k in range(n) for _ in range(2)]
      and outs[1].tolist() == [v for k in range(n) for v in (k, 100.0 + k)]
      and outs[2].tolist() == [7.0 * k for k in range(n)], f"allgather_into_tensor_coalesced: {outs}")
zin = torch.tensor([complex(r, -r)], dtype=torch.complex64)
zout = torch.empty(n, dtype=torch.complex64)
pg.allgather_into_tensor_coalesced([zout], [zin], None).wait()
check(zout.tolist() == [complex(k, -k) for k in range(n)], f"allgather_into_tensor_coalesced, complex: {zout}")
ins = [torch.arange(2 * n, dtype=torch.float32) + r, (torch.arange(3 * n, dtype=torch.float32) * 10).reshape(n, 3)]
outs = [torch.empty(2), torch.empty(1, 3)]
pg.reduce_scatter_tensor_coalesced(outs, ins, None).wait()
check(outs[0].tolist() == [float(n * (2 * r + j) + sum(range(n))) for j in range(2)]
      and outs[1].tolist() == [[float(n * 10 * (3 * r + j)) for j in range(3)]],
      f"reduce_scatter_tensor_coalesced: {outs}")
# A complex tensor goes as its real view, right for SUM and AVG only: MAX, MIN and PRODUCT are refused on every rank
# before anything moves (they used to run on the real and imaginary parts apart), and the group goes on.
def _scatter_complex(z, op):
    return pg.reduce_scatter_tensor_coalesced([torch.empty(1, dtype=z.dtype)], [z], _rs_opts(op))


for op, call in ((dist.ReduceOp.MAX, lambda z, op: dist.reduce(z, dst=0, op=op)),
                 (dist.ReduceOp.PRODUCT, _scatter_complex)):
    try:
        call(torch.ones(n, dtype=torch.complex64), op)
        check(False, f"{op} on a complex tensor was not refused")
    except ValueError as e:
        check("complex" in str(e), f"{op} on a complex tensor: {e}")
t = torch.ones(2)
dist.all_reduce(t)
check(t.tolist() == [float(n)] * 2, f"all_reduce after the refusals: {t}")

# all_to_all, even and uneven
inp = torch.arange(n * 2, dtype=torch.float32) + 100 * r
o = torch.empty(n * 2)
dist.all_to_all_single(o, inp)
check(o.tolist() == [float(100 * k + 2 * r + j) for k in range(n) for j in range(2)], f"all_to_all_single: {o}")
inp = torch.cat([torch.full((k + 1, 2), float(r)) for k in range(n)])
o = torch.empty((r + 1) * n, 2)
dist.all_to_all_single(o, inp, [r + 1] * n, [k + 1 for k in range(n)])
check(o[:, 0].tolist() == [float(k) for k in range(n) for _ in range(r + 1)], f"all_to_all_single splits: {o}")
outs = [torch.empty(k + 1) for k in range(n)]
dist.all_to_all(outs, [torch.full((r + 1,), float(10 * r + k)) for k in range(n)])
check([x.tolist() for x in outs] == [[float(10 * k + r)] * (k + 1) for k in range(n)], f"all_to_all: {outs}")

# point to point: tags, any source, batch_isend_irecv
if n > 1:
    if r == 0:
        for k in range(1, n):
            dist.send(torch.tensor([k * 1.5]), dst=k, tag=7)
            dist.send(torch.tensor([k * 2.5]), dst=k, tag=3)
        seen = set()
        for _ in range(1, n):
            got = torch.empty(1)
            src = dist.recv(got, tag=11)
            check(got.item() == 42.0 + src, f"recv from any source: {got} from {src}")
            seen.add(src)
        check(seen == set(range(1, n)), f"any-source receives came from {seen}")
    else:
        a, b = torch.empty(1), torch.empty(1)
        wb = dist.irecv(b, src=0, tag=3)  # the later message, received first: matched by tag
        dist.recv(a, src=0, tag=7)
        wb.wait()
        check((a.item(), b.item()) == (r * 1.5, r * 2.5), f"tags: {a} {b}")
        dist.send(torch.tensor([42.0 + r]), dst=0, tag=11)
    buf = torch.empty(1)
    ops = [dist.P2POp(dist.isend, torch.tensor([float(r)]), (r + 1) % n),
           dist.P2POp(dist.irecv, buf, (r - 1) % n)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check(buf.item() == float((r - 1) % n), f"batch_isend_irecv: {buf}")

# objects, barrier, subgroups
objs = [None] * n
dist.all_gather_object(objs, {"rank": r, "name": f"r{r}"})
check(objs == [{"rank": k, "name": f"r{k}"} for k in range(n)], f"all_gather_object: {objs}")
lst = [f"from {n - 1}" if r == n - 1 else None]
dist.broadcast_object_list(lst, src=n - 1)
check(lst == [f"from {n - 1}"], f"broadcast_object_list: {lst}")
dist.barrier()
evens = dist.new_group([k for k in range(n) if k % 2 == 0])
odds = dist.new_group([k for k in range(n) if k % 2 == 1]) if n > 1 else None
mine = evens if r % 2 == 0 else odds
t = torch.full((2,), float(r))
dist.all_reduce(t, group=mine)
check(t.tolist() == [float(sum(k for k in range(n) if k % 2 == r % 2))] * 2, f"subgroup all_reduce: {t}")
t = torch.full((1,), float(r))
dist.broadcast(t, src=r % 2, group=mine)  # src is a global rank, as in torch
check(t.item() == float(r % 2), f"subgroup broadcast: {t}")
# A subgroup carries the name torch gave it (torch 2 looks it up by name, destroy_process_group(group) among others:
# on torch 2.11 its own suite's test_destroy_group failed with "ProcessGroup name not set"), and destroying it leaves
# the world's group working.
# torch 2 asks a group for its backend on a device (init_process_group's and new_group's device_id, DeviceMesh):
# the group answers for itself, and does not split through torch.
be = mine._get_backend(torch.device("cpu"))
check(be is mine and be.supports_splitting is False and be.name() == "cohort", f"_get_backend: {be!r}")
c10d = dist.distributed_c10d
torch_names = c10d._world.pg_names if hasattr(c10d, "_world") else c10d._pg_names  # torch 2, torch 1.13
check(mine.group_name == torch_names[mine], f"subgroup name {mine.group_name!r}, torch's {torch_names[mine]!r}")
check(dist.group.WORLD.group_name == torch_names[dist.group.WORLD],
      f"the world's name {dist.group.WORLD.group_name!r}, torch's {torch_names[dist.group.WORLD]!r}")
dist.destroy_process_group(mine)
t = torch.ones(3)
dist.all_reduce(t)
check(t.tolist() == [float(n)] * 3, f"all_reduce after a subgroup was destroyed: {t}")

# torch's DDP on the backend: replicas stay equal. Several buckets on both torches: torch 1.13 caps the first bucket
# at dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB, this whole model) whatever bucket_cap_mb, torch 2 at bucket_cap_mb.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
dist._DEFAULT_FIRST_BUCKET_BYTES = int(0.0005 * 1024 * 1024)
ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0005)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(4):
    torch.manual_seed(100 + 10 * r + step)
    opt.zero_grad()
    ddp(torch.randn(8, 10)).sum().backward()
    opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
every = [torch.empty_like(flat) for _ in range(n)]
dist.all_gather(every, flat)
check(all(torch.equal(every[0], e) for e in every), "DDP replicas differ")

# A forked child leaves the groups alone: an operation there raises, and what the backend does at exit (closing
# every group) neither hangs nor disturbs the parent's job (it hung in the group's close before the backend forgot
# its groups at fork). The child then ends with os._exit: at a normal exit torch's own TCPStore on rank 0 joins its
# server thread, which a forked child does not have, and dies of SIGSEGV (torch 1.13, any backend; gloo's child
# hangs before that).
child = os.fork()
if child == 0:
    try:
        dist.all_reduce(torch.ones(1))
        code = 3
    except RuntimeError as e:
        code = 0 if "destroyed process group" in str(e) else 4
    _backend._close_groups()  # what the atexit handler does
    sys.stdout.flush()
    os._exit(code)
deadline = time.time() + 30
while True:
    done, status = os.waitpid(child, os.WNOHANG)
    if done:
        break
    if time.time() > deadline:
        os.kill(child, 9)
        check(False, "a forked child did not exit within 30 s")
    time.sleep(0.02)
check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the forked child ended with status {status}")
t = torch.full((3,), float(r + 1))
dist.all_reduce(t)
check(t.tolist() == [float(n * (n + 1) / 2)] * 3, f"all_reduce after a forked child's exit: {t}")

transport = pg.transport()
dist.destroy_process_group()
print(f"PASS (backend {expected_rendezvous} {transport}) rank {r} of {n}", flush=True)
