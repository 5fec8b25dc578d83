"""Operations matched by name, as Horovod matches them (issue 32; python/cohort/torch/_named.py), at 2 and 3 ranks.

    cohortrun -np N python3 test_named.py

Every rank issues its named calls in an order of its own and the results are checked against values computed here:
- Horovod's own pattern: rank 0 starts 'a' and waits in a barrier that the others reach before they start 'a';
- twelve named async calls of every kind (allreduce, allgather of uneven rows, broadcast from a moving root,
  reducescatter, alltoall, grouped allreduce) issued in a permutation of each rank's own, synchronized in another;
- blocking named calls around async ones, in opposite orders on even and odd ranks, and the gradient of a named
  allreduce (its backward runs in call order, on the job's communicator);
- a name still in flight is refused with ValueError on that rank, and is free again once its call completed;
- one name used by different kinds of call: MismatchError on every rank, and the next named call is right;
- join(): rank 0 joins first, the others reduce named tensors (rank 0 adds zeros; Average divides by the world) and
  join() returns the rank whose join came last, on every rank;
- a process set's names, and calls without a name running beside named ones;
- a name only rank 0 issues: a warning names the missing ranks after COHORT_STALL_S, then TimeoutError on rank 0
  after COHORT_OP_TIMEOUT (both set short by the ctest), and the job goes on;
- start_timeline/stop_timeline: rank 0's Chrome trace has a row per call (named: its name), the negotiation of a
  named call, the coordinator's rounds with mark_cycles, and no other rank writes;
- shutdown() with a named call never completed (only rank 0 issued it): synchronize() raises, then init() again
  and names work again.
Exits non-zero on the first failed check; every check runs on every rank.
"""
import io
import json
import os
import random
import sys
import tempfile
import time

import torch

import cohort.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
WARN_S, TIMEOUT_S = float(os.environ["COHORT_STALL_S"]), float(os.environ["COHORT_OP_TIMEOUT"])


def check(cond, what):
    if not cond:
        print(f"rank {R}: FAIL {what}", flush=True)
        sys.exit(1)


def tri(n):
    return n * (n - 1) // 2


# ---- Horovod's pattern: a barrier between ranks' issues of one name ----
t = torch.full((17, 17), float(R + 1))
if R == 0:
    ha = hvd.allreduce_async(t, name="a", op=hvd.Sum)
    hvd.barrier()
else:
    hvd.barrier()
    time.sleep(0.05)
    ha = hvd.allreduce_async(t, name="a", op=hvd.Sum)
check(torch.equal(hvd.synchronize(ha), torch.full((17, 17), float(N * (N + 1) // 2))), "'a' across a barrier")

# ---- every kind of call, each rank in its own order ----
calls = {}
for k in range(2):
    calls[f"sum{k}"] = (lambda k=k: hvd.allreduce_async(torch.arange(10.0) + R + k, name=f"sum{k}", op=hvd.Sum),
                        lambda out, k=k: torch.equal(out, N * torch.arange(10.0) + tri(N) + N * k))
    calls[f"avg{k}"] = (lambda k=k: hvd.allreduce_async_(torch.full((5,), float(R * 3 + k)), name=f"avg{k}"),
                        lambda out, k=k: torch.allclose(out, torch.full((5,), 3.0 * (N - 1) / 2 + k)))
    calls[f"gather{k}"] = (lambda k=k: hvd.allgather_async(torch.full((R + 1, 2), float(R + k)), name=f"gather{k}"),
                           lambda out, k=k: torch.equal(out, torch.cat([torch.full((r + 1, 2), float(r + k))
                                                                        for r in range(N)])))
    calls[f"bcast{k}"] = (lambda k=k: hvd.broadcast_async(torch.full((3,), float(R * 10 + k)), root_rank=(k + 1) % N,
                                                          name=f"bcast{k}"),
                          lambda out, k=k: torch.equal(out, torch.full((3,), float(((k + 1) % N) * 10 + k))))
    calls[f"rs{k}"] = (lambda k=k: hvd.reducescatter_async(torch.arange(float(N * 4)) * (R + 1), name=f"rs{k}",
                                                           op=hvd.Sum),
                       lambda out: torch.equal(out, torch.arange(float(R * 4), float(R * 4 + 4)) * tri(N + 1)))
    calls[f"a2a{k}"] = (lambda k=k: hvd.alltoall_async(torch.full((N,), float(R + k)), name=f"a2a{k}"),
                        lambda out, k=k: torch.equal(out, torch.arange(float(N)) + k))
order = sorted(calls)
random.Random(R).shuffle(order)
handles = {name: calls[name][0]() for name in order}
for name in sorted(order, key=lambda n: random.Random(R + 100).random()):
    out = hvd.synchronize(handles[name])
    out = out[0] if isinstance(out, tuple) else out  # alltoall: (output, received splits)
    check(calls[name][1](out), f"'{name}' issued in a rank's own order: {out}")

# ---- blocking named calls around async ones; the gradient of a named allreduce ----
x = torch.tensor([float(R)])
if R % 2 == 0:
    h = hvd.allreduce_async(x, name="p", op=hvd.Sum)
    y = hvd.allreduce(x * 2, name="q", op=hvd.Sum)
else:
    y = hvd.allreduce(x * 2, name="q", op=hvd.Sum) if N > 1 else None
    h = hvd.allreduce_async(x, name="p", op=hvd.Sum)
check(hvd.synchronize(h).item() == tri(N) and y.item() == 2 * tri(N), f"blocking 'q' around async 'p': {y}")
w = torch.full((4,), float(R + 1), requires_grad=True)
s = hvd.allreduce(w, name="grad", op=hvd.Sum)
(s * (R + 1)).sum().backward()
check(torch.equal(s.detach(), torch.full((4,), float(tri(N + 1)))) and torch.equal(w.grad, torch.full((4,), float(tri(N + 1)))),
      f"the gradient of a named allreduce: {w.grad}")

# ---- a name in flight is refused, and free once completed ----
if R == 0:
    h1 = hvd.allreduce_async(torch.ones(3), name="dup", op=hvd.Sum)
if R == 0 and N > 1:  # in flight until the others issue it (at 1 rank it may have completed already)
    try:
        hvd.allreduce_async(torch.ones(3), name="dup")
        check(False, "a second 'dup' in flight was not refused")
    except ValueError as e:
        check("still in flight" in str(e), f"the refusal says why: {e}")
hvd.barrier()
if R != 0:
    h1 = hvd.allreduce_async(torch.ones(3), name="dup", op=hvd.Sum)
check(torch.equal(hvd.synchronize(h1), torch.full((3,), float(N))), "'dup' itself")
h2 = hvd.allreduce_async(torch.ones(3), name="dup", op=hvd.Sum)  # completed: the name is free again
check(torch.equal(hvd.synchronize(h2), torch.full((3,), float(N))), "'dup' reused after it completed")

# ---- one name, different kinds of call ----
if N > 1:
    try:
        if R == 0:
            hvd.synchronize(hvd.allreduce_async(torch.ones(6), name="kind"))
        else:
            hvd.synchronize(hvd.allgather_async(torch.ones(6), name="kind"))
        check(False, "one name for an allreduce and an allgather was not refused")
    except hvd.MismatchError as e:
        check("allreduce" in str(e) and "allgather" in str(e), f"the mismatch names both calls: {e}")
check(torch.equal(hvd.allreduce(torch.ones(2), name="after-kind", op=hvd.Sum), torch.full((2,), float(N))),
      "a named call after the mismatch")

# ---- join(): the joined rank adds zeros to the others' named allreduces ----
if R == 0:
    last = hvd.join()
else:
    time.sleep(0.1)
    avg = hvd.synchronize(hvd.allreduce_async(torch.full((4,), float(R)), name="joined-avg"))
    check(torch.allclose(avg, torch.full((4,), tri(N) / N)), f"a named Average while rank 0 has joined: {avg}")
    if R == 1:
        time.sleep(0.2)  # rank 1's join comes last
    last = hvd.join()
check(last == (1 if N > 1 else 0), f"join() returns the rank whose join came last: {last}")

# ---- a process set's names, and unnamed calls beside named ones ----
# From 3 ranks on the set leaves rank 0 out, so that its ranks are not the world's (over the MPI transport too).
members = list(range(N)) if N < 3 else list(range(1, N))
ps = hvd.add_process_set(members)
order = ["s1", "s2"] if R % 2 == 0 else ["s2", "s1"]
hs = {n: hvd.allreduce_async(torch.full((2,), float(R)), name=n, op=hvd.Sum, process_set=ps)
      for n in order if R in members}
plain = hvd.allreduce(torch.ones(3), op=hvd.Sum)  # no name: at once, in call order
check(torch.equal(plain, torch.full((3,), float(N))), "an unnamed allreduce while named ones wait")
for n in hs:
    check(torch.equal(hvd.synchronize(hs[n]), torch.full((2,), float(sum(members)))), f"process set's '{n}'")
hvd.remove_process_set(ps)

# ---- a name that only rank 0 issues ----
if N > 1:
    if R == 0:
        start, missing = time.monotonic(), list(range(1, N))
        stderr, sys.stderr = sys.stderr, io.StringIO()  # the coordinator's warning (rank 0's thread) lands here
        try:
            hvd.synchronize(hvd.allreduce_async(torch.ones(2), name="lonely"))
            check(False, "'lonely' completed without the other ranks")
        except hvd.TimeoutError as e:
            took = time.monotonic() - start
            check(f"rank(s) {missing} never issued" in str(e), f"the timeout names the missing ranks: {e}")
            check(TIMEOUT_S - 0.5 <= took <= TIMEOUT_S + 3, f"failed after COHORT_OP_TIMEOUT ({took:.1f} s)")
        finally:
            warned, sys.stderr = sys.stderr.getvalue(), stderr
        check("'lonely' has waited" in warned and f"for rank(s) {missing}" in warned,
              f"a warning after COHORT_STALL_S names the missing ranks: {warned!r}")
    else:
        time.sleep(TIMEOUT_S - 1)  # not in a collective: a barrier would time out with rank 0's name
    hvd.barrier()
    check(torch.equal(hvd.allreduce(torch.ones(1), name="after-lonely", op=hvd.Sum), torch.ones(1) * N),
          "a named call after the timeout")

# ---- hvd.start_timeline / stop_timeline: rank 0's Chrome trace of the calls, named ones with their negotiation ----
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, f"timeline.{R}.json")  # a path of each rank's own: only rank 0's may appear
    hvd.start_timeline(path, mark_cycles=True)
    hvd.start_timeline(path, mark_cycles=True)  # again, same file: goes on
    hvd.allreduce(torch.ones(3), name="tl")
    hvd.allreduce(torch.ones(3))
    hvd.synchronize(hvd.allgather_async(torch.ones(2)))
    hvd.stop_timeline()
    if R == 0:
        trace = json.load(open(path))["traceEvents"]
        rows = {e["args"]["name"]: e["tid"] for e in trace if e["name"] == "thread_name"}
        spans = {(e["tid"], e["name"]): e for e in trace if e["ph"] == "X"}
        check("allreduce.tl" in rows and (rows["allreduce.tl"], "ALLREDUCE") in spans, f"the named call's row: {rows}")
        check((N > 1) == ((rows["allreduce.tl"], "NEGOTIATE_ALLREDUCE") in spans), "its negotiation (several ranks)")
        noname = [r for r in rows if r.startswith("allreduce.noname.")]
        check(len(noname) == 1 and (rows[noname[0]], "ALLREDUCE") in spans, f"the unnamed call's row: {rows}")
        gather = [r for r in rows if r.startswith("allgather.noname.")]
        check(len(gather) == 1 and (rows[gather[0]], "ALLGATHER") in spans, f"the async allgather's row: {rows}")
        check((N > 1) == any(e["name"] == "CYCLE_START" for e in trace), "mark_cycles: the coordinator's rounds")
        check(any("start_time_since_epoch_in_micros" in e.get("args", {}) for e in trace), "the start time")
    check(sorted(os.listdir(d)) == (["timeline.0.json"] if R == 0 else []), f"only rank 0 writes: {os.listdir(d)}")
    hvd.barrier()

# ---- shutdown() with a name never completed, then init() again ----
if N > 1:
    hvd.barrier()
    h = hvd.allreduce_async(torch.ones(2), name="abandoned") if R == 0 else None
    hvd.barrier()
    hvd.shutdown()
    if R == 0:
        try:
            hvd.synchronize(h)
            check(False, "a named call parked at shutdown() did not raise")
        except RuntimeError as e:
            check("shutdown" in str(e), f"it says shutdown() came first: {e}")
    hvd.init()
    out = hvd.synchronize(hvd.allreduce_async(torch.full((2,), float(R)), name="abandoned", op=hvd.Sum))
    check(torch.equal(out, torch.full((2,), float(tri(N)))), "the name after init() again")

hvd.barrier()
print(f"rank {R}: named ok", flush=True)
