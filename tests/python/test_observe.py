"""cohort.torch under the engine's observers: COHORT_TIMELINE gets forward and backward spans (and the allreduces),
COHORT_METRICS one line per step with every rank's times and the loss that DistributedDataParallel.metric() added,
COHORT_METRICS_DIR every rank's live counters, and cohort-report makes its page of the run.

Run under cohortrun -np 2 with COHORT_TIMELINE and COHORT_METRICS set (tests/python/python.cmake does).
"""
import json
import os
import sys

import torch

import cohort.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
torch.manual_seed(0)
model = hvd.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                                        torch.nn.Linear(64, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
STEPS = 12
for step in range(STEPS):
    x, y = torch.randn(16, 20), torch.randint(0, 4, (16,))
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    model.metric("loss", loss.item())
    loss.backward()
    opt.step()
model.close()  # the engine writes the timeline and the metrics' summary
hvd.barrier()
failures = []
if R == 0:
    with open(os.environ["COHORT_TIMELINE"]) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    for name in ("forward", "backward", "allreduce"):
        ranks = {e["pid"] for e in events if e.get("ph") == "X" and e.get("name") == name}
        if ranks != set(range(N)):
            failures.append(f"timeline: '{name}' spans for ranks {sorted(ranks)}, expected all {N}")
    fwd = [e for e in events if e.get("ph") == "X" and e.get("name") == "forward" and e["pid"] == 0]
    if len(fwd) != STEPS:
        failures.append(f"timeline: {len(fwd)} forward spans on rank 0, expected {STEPS}")
    lines = [json.loads(line) for line in open(os.environ["COHORT_METRICS"])]
    steps = [m for m in lines if "step" in m]
    if len(steps) != STEPS:
        failures.append(f"metrics: {len(steps)} step lines, expected {STEPS}")
    if not all(len(m["compute_s"]) == N and m["loss"] > 0 for m in steps):
        failures.append("metrics: a step line lacks a rank's times or the loss")
    if not lines or not lines[-1].get("summary"):
        failures.append("metrics: no summary line at the end")
    # The live counters cohortrun --metrics-port serves (COHORT_METRICS_DIR): every rank's file, all steps counted.
    for r in range(N):
        with open(os.path.join(os.environ["COHORT_METRICS_DIR"], f"rank-{r}.txt")) as f:
            counters = dict(line.split() for line in f)
        if int(counters["steps_total"]) != STEPS or float(counters["loss"]) <= 0:
            failures.append(f"counters of rank {r}: {counters}")
    # The report of a cohort.torch run.
    import subprocess
    out = os.environ["COHORT_METRICS"] + ".html"
    proc = subprocess.run([os.environ["COHORT_REPORT"], "--metrics", os.environ["COHORT_METRICS"], "--timeline",
                           os.environ["COHORT_TIMELINE"], "-o", out], capture_output=True, text=True)
    page = open(out).read() if proc.returncode == 0 else ""
    if proc.returncode != 0 or page.count("<svg id=") < 5 or 'id="timeline"' not in page:
        failures.append(f"cohort-report on the run: exit {proc.returncode}: {proc.stderr.strip()}")
hvd.shutdown()
if failures:
    print(f"[rank {R}] FAIL:", *failures, sep="\n  ")
    sys.exit(1)
print(f"[rank {R}] ok: the timeline has forward, backward and allreduce spans of every rank; {STEPS} metric lines "
      f"with the loss")
