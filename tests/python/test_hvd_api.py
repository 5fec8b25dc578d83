"""Horovod names that cohort.torch gained for Horovod's own test suite (issue 32), checked against values at any
world size: alltoall (splits, received splits, autograd, mismatch on every rank and the job goes on), grouped
allgather/reducescatter, allgather_async and reducescatter_async in the background, sparse_allreduce_async, int8/int16 tensors and integer scaling,
gradients of allgather/broadcast/grouped_allreduce/reducescatter as Horovod defines them, SyncBatchNorm against
BatchNorm on the whole batch, process sets (barrier, broadcast_object, root_rank as a job rank), the *_built()
answers and the error classes. Exits non-zero on the first failed check."""
import sys
import time

import torch

import cohort.torch as hvd

hvd.init()
N, R = hvd.size(), hvd.rank()


def check(cond, what):
    if not cond:
        print(f"rank {R}: FAIL {what}", flush=True)
        sys.exit(1)


check(hvd.ccl_built() is False and hvd.ddl_built() is False, "ccl_built/ddl_built answer False")
check(issubclass(hvd.RemoteError, hvd.HorovodInternalError) and issubclass(hvd.TimeoutError, hvd.HorovodInternalError)
      and not issubclass(hvd.MismatchError, hvd.HorovodInternalError), "HorovodInternalError classes")

# alltoall with splits: rank r sends p+1 rows of value r*10+p to rank p.
rows = [p + 1 for p in range(N)]
t = torch.cat([torch.full((rows[p], 2), float(R * 10 + p)) for p in range(N)])
out, recv = hvd.alltoall(t, torch.tensor(rows, dtype=torch.int32))
check(recv.tolist() == [R + 1] * N, f"alltoall received splits {recv.tolist()}")
exp = torch.cat([torch.full((R + 1, 2), float(p * 10 + R)) for p in range(N)])
check(torch.equal(out, exp), "alltoall values")
out = hvd.alltoall(torch.arange(N * 3, dtype=torch.int16).reshape(N, 3))  # equal split: the tensor alone
check(out.dtype == torch.int16 and out.tolist() == [[3 * R, 3 * R + 1, 3 * R + 2]] * N, "alltoall equal split")
h = hvd.alltoall_async(t, torch.tensor(rows, dtype=torch.int32))
check(torch.equal(hvd.synchronize(h)[0], exp), "alltoall_async")
# gradient: the alltoall back with the received splits
x = t.clone().requires_grad_()
o, _ = hvd.alltoall(x, torch.tensor(rows, dtype=torch.int32))
(o * o.detach()).sum().backward()
check(torch.equal(x.grad, t), "alltoall gradient")
if N > 1:
    bad = torch.ones(N, dtype=torch.int32 if R == 1 else torch.float32)
    try:
        hvd.alltoall(bad)
        check(False, "alltoall of different dtypes raises")
    except hvd.MismatchError:
        pass
    try:
        hvd.alltoall(torch.ones(N + 1))
        check(False, "alltoall of an uneven first dimension without splits raises")
    except ValueError:
        pass
    hvd.barrier()  # the job goes on
    check(hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N, "allreduce after the refused alltoall")

# int8/int16 and integer scaling (in float64, truncated back, as Horovod)
s = hvd.allreduce(torch.tensor([3, -5], dtype=torch.int8), op=hvd.Sum, prescale_factor=0.5)
check(s.dtype == torch.int8 and s.tolist() == [N * 1, N * -2], f"int8 prescale {s.tolist()}")
s = hvd.allreduce(torch.tensor([7], dtype=torch.int32), op=hvd.Sum, postscale_factor=0.5)
check(s.tolist() == [int(7 * N * 0.5)], f"int32 postscale {s.tolist()}")
s = hvd.allreduce(torch.tensor([R + 1], dtype=torch.int16), op=hvd.Sum, prescale_factor=2)
check(s.tolist() == [N * (N + 1)], "int16 integer prescale")

# grouped allgather / reducescatter, reducescatter_async
g = hvd.grouped_allgather([torch.full((2,), float(R)), torch.full((1, 3), R, dtype=torch.int8)])
check(g[0].tolist() == [float(r) for r in range(N) for _ in range(2)] and g[1].shape == (N, 3), "grouped_allgather")
g = hvd.grouped_reducescatter([torch.ones(2 * N), torch.ones(N, 2)], op=hvd.Sum)
check(g[0].tolist() == [float(N)] * 2 and g[1].tolist() == [[float(N)] * 2], "grouped_reducescatter")
check(hvd.synchronize(hvd.reducescatter_async(torch.ones(N), op=hvd.Sum)).tolist() == [float(N)], "reducescatter_async")

# allgather_async and reducescatter_async in the background: several in flight at once, even and uneven, every
# dtype Horovod's fused tests use; each result against the blocking call's. The data phase runs after the call
# returns, so poll() sees at least one still running (Horovod's test_horovod_*_async_fused assert the same).
pending, running = [], 0
for dt in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float32, torch.float64, torch.float16):
    for rows in (N, 2 * N + 1):  # an even and an uneven split for reducescatter
        a = torch.full((R + 1, 3), R + 1).to(dt)  # allgather: a first dimension of its own on every rank
        s = (torch.arange(rows * 2).reshape(rows, 2) % 7 + R).to(dt)
        ha, hs = hvd.allgather_async(a), hvd.reducescatter_async(s, op=hvd.Sum, postscale_factor=1.0)
        running += (not hvd.poll(ha)) + (not hvd.poll(hs))
        pending.append((ha, a, hs, s))
for ha, a, hs, s in pending:
    got, want = hvd.synchronize(ha), hvd.allgather(a)
    check(got.dtype == a.dtype and torch.equal(got, want), f"allgather_async {a.dtype}: {got.tolist()}")
    got, want = hvd.synchronize(hs), hvd.reducescatter(s, op=hvd.Sum)
    check(got.dtype == s.dtype and torch.equal(got, want), f"reducescatter_async {s.dtype} {tuple(s.shape)}: {got}")
x = torch.arange(10.).reshape(5, 2) * (R + 1)
got = hvd.synchronize(hvd.reducescatter_async(x, prescale_factor=2.0, postscale_factor=0.5))
check(torch.equal(got, hvd.reducescatter(x, prescale_factor=2.0, postscale_factor=0.5)), f"scaled: {got}")
check(N == 1 or running > 0, "allgather_async/reducescatter_async: poll() was never False: not in the background")

# A name still in flight on this rank is refused (ValueError, as Horovod refuses it); once its operation has completed
# the name is free again. Rank 0 submits first; the others come 0.3 s later, so its first operation cannot have
# completed when it submits the second.
if N > 1:
    if R == 0:
        h = hvd.allreduce_async(torch.ones(3), name="in flight")
        try:
            hvd.allreduce_async(torch.ones(3), name="in flight")
            check(False, "a duplicate name in flight was not refused")
        except ValueError as e:
            check("still in flight" in str(e), f"the refusal says why: {e}")
    else:
        time.sleep(0.3)
        h = hvd.allreduce_async(torch.ones(3), name="in flight")
    check(hvd.synchronize(h).tolist() == [1.0] * 3, "the named allreduce")
    check(hvd.synchronize(hvd.broadcast_async(torch.full((2,), float(R)), 0, name="in flight")).tolist() == [0.0] * 2,
          "the name, free again once its operation completed")

# gradients as Horovod defines them
x = torch.ones(R + 1, 2, requires_grad=True)
hvd.allgather(x).mul(torch.arange(1.0, 1 + sum(range(1, N + 1))).unsqueeze(1)).sum().backward()
off = sum(range(1, R + 1))
check(torch.equal(x.grad, torch.arange(1.0 + off, 2.0 + off + R).unsqueeze(1).expand(R + 1, 2)), "allgather gradient")
x = torch.ones(3, requires_grad=True)
(hvd.broadcast(x, N - 1) * 2).sum().backward()
check(x.grad.tolist() == ([2.0] * 3 if R == N - 1 else [0.0] * 3), "broadcast gradient")
xs = [torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)]
ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
(ys[0] * 2).sum().backward(retain_graph=True)
(ys[1] * 3).sum().backward()
check(xs[0].grad.tolist() == [2.0 * N] * 2 and xs[1].grad.tolist() == [3.0 * N] * 3, "grouped_allreduce gradient")
x = torch.ones(2 * N, requires_grad=True)
hvd.reducescatter(x, op=hvd.Sum).sum().backward()
check(x.grad.tolist() == [float(N)] * (2 * N), "reducescatter gradient (Sum: times size, as Horovod)")

# sparse_allreduce_async: the allgather of indices and values equals the dense average
torch.manual_seed(R)
d = torch.rand(5, 3)
d[d < 0.6] = 0
got = hvd.sparse_allreduce_async(d.to_sparse(), name="sp", op=hvd.Average)().to_dense()
check(torch.allclose(got, hvd.allreduce(d), atol=1e-6), "sparse_allreduce_async")

# SyncBatchNorm: this rank's slice of the whole batch, against BatchNorm1d on all of it
torch.manual_seed(0)
batch = torch.randn(2 * N, 4, 3)
bn = hvd.SyncBatchNorm(4)
ref = torch.nn.BatchNorm1d(4)
a = batch[2 * R:2 * R + 2].clone().requires_grad_()
b = batch.clone().requires_grad_()
oa, ob = bn(a), ref(b)
check(torch.allclose(oa, ob[2 * R:2 * R + 2], atol=1e-5), "SyncBatchNorm output")
check(torch.allclose(bn.running_var, ref.running_var, atol=1e-5), "SyncBatchNorm running_var")
(oa ** 2).sum().backward()
(ob ** 2).sum().backward()
check(torch.allclose(a.grad, b.grad[2 * R:2 * R + 2], atol=1e-5), "SyncBatchNorm input gradient")
check(torch.allclose(hvd.allreduce(bn.weight.grad, op=hvd.Sum), ref.weight.grad, atol=1e-4), "SyncBatchNorm weight grad")

# process sets: root_rank is a rank of the job; barrier and broadcast_object take process_set=
if N > 1:
    odd = hvd.add_process_set([r for r in range(N) if r % 2])
    even = hvd.add_process_set([r for r in range(N) if r % 2 == 0])
    mine = odd if R % 2 else even
    root = mine.ranks[-1]
    v = hvd.broadcast(torch.full((2,), float(R)), root_rank=root, process_set=mine)
    check(v.tolist() == [float(root)] * 2, "broadcast root_rank is a job rank")
    hvd.barrier(process_set=mine)
    o = hvd.broadcast_object({"r": R}, root_rank=root, process_set=mine)
    check(o == {"r": root}, "broadcast_object(process_set=)")
    check(hvd.allgather_object(R, process_set=mine) == mine.ranks, "allgather_object(process_set=)")
    hvd.remove_process_set(odd)
    hvd.remove_process_set(even)

# DistributedOptimizer: Horovod's _parameter_names (param -> name, the same names on every rank), its warning for
# step() after synchronize() outside skip_synchronize(), and process_set=: the set's ranks average, the others step
# on their own gradients.
import warnings  # noqa: E402

net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
opt = hvd.DistributedOptimizer(torch.optim.SGD([{"params": net[0].parameters()}, {"params": net[1].parameters()}],
                                               lr=0.1))
try:  # duplicate names (two modules' 'weight') are refused, as Horovod refuses them
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    hvd.DistributedOptimizer(torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1),
                             named_parameters=list(a.named_parameters()) + list(b.named_parameters()))
    check(False, "duplicate parameter names raise ValueError")
except ValueError as e:
    check("'weight' appears more than once" in str(e), f"the duplicate is named: {e}")
names = opt._parameter_names
check(len(names) == 4 and len(set(names.values())) == 4 and set(names) == set(net.parameters()),
      f"_parameter_names maps each parameter to a name: {names}")
check(all(x == set(names.values()) for x in hvd.allgather_object(set(names.values()))), "the same names on every rank")
hvd.broadcast_parameters(net.state_dict(), root_rank=0)
net(torch.full((4, 3), float(R))).sum().backward()
opt.synchronize()
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    opt.step()
check(len(ws) == 1 and "optimizer.step() called without optimizer.skip_synchronize()" in str(ws[0].message),
      f"step() after synchronize() warns once: {[str(w.message) for w in ws]}")
opt.zero_grad()
net(torch.ones(4, 3)).sum().backward()
opt.synchronize()
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    with opt.skip_synchronize():
        opt.step()
check(not ws, f"step() inside skip_synchronize() does not warn: {[str(w.message) for w in ws]}")

if N > 1:
    evens = hvd.add_process_set([r for r in range(N) if r % 2 == 0])
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 1, bias=False)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=1.0), named_parameters=lin.named_parameters(),
                                   process_set=evens)
    before = lin.weight.detach().clone()
    lin(torch.full((1, 2), float((R + 1) ** 2))).sum().backward()  # the gradient: (R + 1)^2 (the means differ)
    opt.step()
    members = [r for r in range(N) if r % 2 == 0]
    want = sum((r + 1) ** 2 for r in members) / len(members) if R % 2 == 0 else float((R + 1) ** 2)
    check(torch.allclose(before - lin.weight.detach(), torch.full((1, 2), want)),
          f"DistributedOptimizer(process_set=evens): rank {R} stepped by {(before - lin.weight).tolist()}, want {want}")
    hvd.remove_process_set(evens)

# Shapes are compared with the call (cohort_tag_next_call): 6 elements as 2x3 on one rank and 3x2 on another is
# refused on every rank, before data moves (Horovod refuses it), blocking and async; the next call works.
if N > 1:
    for call in (lambda t: hvd.allreduce(t), lambda t: hvd.synchronize(hvd.allreduce_async(t)),
                 lambda t: hvd.broadcast(t, root_rank=0)):
        t = torch.ones((2, 3) if R == 0 else (3, 2))
        try:
            call(t)
            check(False, "an allreduce/broadcast of another shape (same element count) raises")
        except hvd.MismatchError as e:
            check("with a tensor of another shape" in str(e), f"the shape mismatch says so: {e}")
    check(hvd.allreduce(torch.ones(2, 3), op=hvd.Sum).tolist() == [[float(N)] * 3] * 2, "the same shape after that")

# Sparse gradients (nn.Embedding(sparse=True)) through DistributedOptimizer, with sparse_as_dense False and True: the
# optimizer gets them sparse (SparseAdam refuses dense ones), averaged over the ranks.
for as_dense in (False, True):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1), sparse_as_dense=as_dense)
    idx = torch.tensor([[R % 10, (R + 3) % 10]])
    (emb(idx) * (R + 1)).sum().backward()
    mine = torch.zeros(10, 3)
    for j in idx[0].tolist():
        mine[j] += R + 1
    opt.synchronize()
    g = emb.weight.grad
    check(g.is_sparse, f"sparse_as_dense={as_dense}: the averaged gradient is sparse again")
    check(torch.allclose(g.to_dense(), hvd.allreduce(mine, op=hvd.Average)),
          f"sparse_as_dense={as_dense}: the sparse gradient is the average over the ranks")
    with opt.skip_synchronize():
        opt.step()
del opt, emb, net  # the optimizers' engines go (join() below is the one without an engine)

# join() without an engine (cohort_join): the joined rank adds zeros to the others' allreduces (an average divides
# by the whole world, as Horovod's does); their allgather or broadcast raises naming it; the same last rank returns
# everywhere.
if N > 1:
    for first in range(N):
        if R == first:
            last = hvd.join()
        else:
            a = hvd.allreduce(torch.full((5,), float(R + 1)), op=hvd.Average)
            want = sum(r + 1 for r in range(N) if r != first) / N
            check(torch.allclose(a, torch.full((5,), want)), f"allreduce beside a joined rank: {a.tolist()} != {want}")
            i = hvd.synchronize(hvd.allreduce_async(torch.full((3,), R + 1, dtype=torch.int32), op=hvd.Sum))
            check(i.tolist() == [sum(r + 1 for r in range(N) if r != first)] * 3, f"int32 sum beside a joined rank {i}")
            for call in (lambda: hvd.allgather(torch.ones(2)), lambda: hvd.broadcast(torch.ones(2), root_rank=R)):
                try:
                    call()
                    check(False, "allgather/broadcast beside a joined rank raises")
                except hvd.MismatchError as e:
                    check(f"rank {first} joined" in str(e), f"the error names the joined rank: {e}")
            last = hvd.join()
        check(last == (N - 1 if first != N - 1 else N - 2), f"join() returned {last} (rank {first} joined first)")
        check(hvd.allgather_object(last) == [last] * N, "join() returns the same rank everywhere")

print(f"rank {R}: hvd api ok", flush=True)
