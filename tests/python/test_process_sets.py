"""Process sets (Horovod's hvd.add_process_set / process_set=) and torch-style new_group with DistributedDataParallel
(process_group=), between real processes.

Run under cohortrun with 4 or 5 ranks: build/bin/cohortrun -np 5 /usr/bin/python3 tests/python/test_process_sets.py
Checks, against values every rank can compute: allreduce (plain, in place, async, grouped, differentiable),
broadcast, allgather and reducescatter on the even and odd ranks' sets; a rank outside a set is refused; two sets
driven by two threads at once; DDP on the even ranks averages over them only (and equals one process training on
their concatenated batches); remove_process_set. Prints "ok: N checks" on success; any failure exits 1.
"""
import sys
import threading

import torch

import cohort.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
assert N >= 4, "run with 4 or more ranks"
checks = 0
failures = []


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print(f"[rank {R}] FAIL: {what}", flush=True)


evens = hvd.add_process_set([r for r in range(N) if r % 2 == 0])
odds = hvd.add_process_set(hvd.ProcessSet([r for r in range(N) if r % 2 == 1]))
mine, other = (evens, odds) if R % 2 == 0 else (odds, evens)
members = mine.ranks
check(mine.included() and not other.included(), "included()")
check(mine.size() == len(members) and mine.rank() == members.index(R), "size() and rank() in the set")
check(other.rank() == -1, "rank() outside the set")
check(evens.process_set_id != odds.process_set_id and hvd.global_process_set.process_set_id == 0, "ids")

# allreduce: sum and average of world ranks over the set only.
t = torch.full((1000,), float(R))
s = hvd.allreduce(t, op=hvd.Sum, process_set=mine)
check(torch.all(s == float(sum(members))).item(), f"allreduce Sum over {members}: {s[0].item()}")
a = hvd.allreduce(t, process_set=mine)
check(torch.allclose(a, torch.full((1000,), sum(members) / len(members))), "allreduce Average")
u = t.clone()
hvd.allreduce_(u, op=hvd.Sum, process_set=mine)
check(torch.all(u == float(sum(members))).item(), "allreduce_ in place")
h = hvd.allreduce_async(torch.full((7,), float(R)), op=hvd.Max, process_set=mine)
check(torch.all(hvd.synchronize(h) == float(max(members))).item(), "allreduce_async Max")
g = hvd.grouped_allreduce([torch.full((3,), float(R)), torch.full((5,), 1.0)], op=hvd.Sum, process_set=mine)
check(torch.all(g[0] == float(sum(members))).item() and torch.all(g[1] == float(len(members))).item(),
      "grouped_allreduce")
x = torch.full((4,), float(R), requires_grad=True)
y = hvd.allreduce(x, op=hvd.Sum, process_set=mine)
y.sum().backward()  # the gradient is the same Sum over the same set: len(members) per element
check(torch.all(x.grad == float(len(members))).item(), f"allreduce backward over the set: {x.grad}")

# broadcast, allgather, reducescatter.
b = hvd.broadcast(torch.full((10,), float(R)), root_rank=members[1], process_set=mine)  # a job rank, as in Horovod
check(torch.all(b == float(members[1])).item(), "broadcast from the set's second member")
ag = hvd.allgather(torch.full((R + 1, 2), float(R)), process_set=mine)
want = torch.cat([torch.full((r + 1, 2), float(r)) for r in members])
check(ag.shape == want.shape and torch.equal(ag, want), "allgather of uneven first dimensions")
rows = 2 * len(members)
rs = hvd.reducescatter(torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3), op=hvd.Sum, process_set=mine)
full = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) * len(members)
k = mine.rank()
check(torch.equal(rs, full[2 * k:2 * k + 2]), "reducescatter")

# A rank outside a set is refused before anything is sent.
try:
    hvd.allreduce(torch.ones(3), process_set=other)
    check(False, "allreduce on a set without this rank raised nothing")
except ValueError as e:
    check("not in" in str(e), f"refusal names the set: {e}")

# Two sets at once: a thread on a set of every rank (new_group(None)) while the main thread uses its parity set.
everyone = hvd.new_group()
results = {}


def drive_everyone():
    v = None
    for i in range(50):
        v = hvd.allreduce(torch.full((5000,), float(R + i)), op=hvd.Sum, process_set=everyone)
    results["everyone"] = v[0].item()


th = threading.Thread(target=drive_everyone)
th.start()
for i in range(50):
    v = hvd.allreduce(torch.full((3000,), float(R * i)), op=hvd.Sum, process_set=mine)
th.join()
check(v[0].item() == float(sum(members) * 49), "the parity set while another set runs")
check(results.get("everyone") == float(sum(range(N)) + 49 * N), "the set of everyone while another set runs")

# DDP on the even ranks only (torch's new_group + process_group=): their gradients are averaged among them.
group = hvd.new_group([r for r in range(N) if r % 2 == 0])
if R % 2 == 0:
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 2)
    ref = torch.nn.Linear(6, 2)
    ref.load_state_dict(model.state_dict())
    ddp = hvd.DistributedDataParallel(model, process_group=group)
    evens_ranks = group.ranks
    batches = {r: torch.randn(4, 6, generator=torch.Generator().manual_seed(100 + r)) for r in evens_ranks}
    ddp(batches[R]).pow(2).sum().backward()
    # One process over all the evens' batches, the loss averaged over the ranks as DDP does.
    sum(ref(batches[r]).pow(2).sum() for r in evens_ranks).div(len(evens_ranks)).backward()
    for (n_, p), q in zip(model.named_parameters(), ref.parameters()):
        check(torch.allclose(p.grad, q.grad, atol=1e-5), f"DDP on new_group: {n_} gradient averaged over the group")
    del ddp
else:
    try:
        hvd.DistributedDataParallel(torch.nn.Linear(6, 2), process_group=group)
        check(False, "DDP on a group without this rank raised nothing")
    except ValueError:
        check(True, "")

check(hvd.remove_process_set(odds) and not hvd.remove_process_set(odds), "remove_process_set once")
check(not hvd.remove_process_set(hvd.global_process_set), "the global set stays")
hvd.barrier()
if failures:
    print(f"[rank {R}] {len(failures)} of {checks} checks failed", flush=True)
    sys.exit(1)
print(f"[rank {R}] ok: {checks} checks", flush=True)
hvd.shutdown()
