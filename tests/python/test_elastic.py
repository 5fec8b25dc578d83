"""hvd.elastic on cohortrun's restarts: a deterministic training loop under @hvd.elastic.run with a TorchState that
commits every 5 steps. With ELASTIC_KILL=RANK:STEP, that rank kills itself (SIGKILL) right after that step in the
first generation; cohortrun (--max-restarts) starts the workers again and they go on from the last commit. Rank 0
prints the parameters' digest at the end: the same as a run without the kill (test_elastic.sh compares them).
Also checks ObjectState's attributes and ElasticSampler's split of an epoch's remaining indices."""
import hashlib
import os
import signal
import sys

import torch

import cohort.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
generation = int(os.environ.get("COHORT_RESTART_COUNT", "0"))
kill = os.environ.get("ELASTIC_KILL", "")
STEPS = 20

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                               named_parameters=model.named_parameters())
data = torch.utils.data.TensorDataset(torch.arange(40))
sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
state = hvd.elastic.TorchState(model, opt, step=0, seen=[])


@hvd.elastic.run
def train(state):
    while state.step < STEPS:
        g = torch.Generator().manual_seed(1000 * state.step + R)  # each step's batch: the same in every generation
        x = torch.randn(16, 6, generator=g)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        state.step += 1
        state.seen.append(state.step)
        if state.step % 5 == 0:
            state.commit()
        if kill and generation == 0 and kill == f"{R}:{state.step}":
            print(f"rank {R}: killing myself after step {state.step} (the last commit was step "
                  f"{state.step - state.step % 5})", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    return state.step


steps = train(state)
if steps != STEPS or state.seen[-1] != STEPS:
    print(f"rank {R}: FAIL ended at step {steps}, seen {state.seen}", flush=True)
    sys.exit(1)
# The steps a generation resumed at were redone, never skipped: seen is 1..STEPS with the redone ones repeated.
if sorted(set(state.seen)) != list(range(1, STEPS + 1)):
    print(f"rank {R}: FAIL steps seen {state.seen}", flush=True)
    sys.exit(1)

# ElasticSampler: the epoch's indices, split among the ranks; processed ones are left out after a reload.
idx = list(iter(sampler))
every = hvd.allgather_object(idx)
if sorted(i for part in every for i in part)[:40] != list(range(40)) and N <= 40:
    pass
if len(set(i for part in every for i in part)) != 40:
    print(f"rank {R}: FAIL the sampler's parts do not cover the epoch: {every}", flush=True)
    sys.exit(1)
sampler.record_batch(0, 3)
sd = sampler.state_dict()
sampler.load_state_dict(sd)
rest = hvd.allgather_object(list(iter(sampler)))
if len(sd["processed_indices"]) != 3 * N or set(sd["processed_indices"]) & {i for part in rest for i in part}:
    print(f"rank {R}: FAIL processed indices {sd['processed_indices']} came back: {rest}", flush=True)
    sys.exit(1)

flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
if not torch.equal(hvd.broadcast(flat, root_rank=0), flat):
    print(f"rank {R}: FAIL the replicas differ", flush=True)
    sys.exit(1)
if R == 0:
    print(f"generation {generation}: steps {STEPS} params sha256 {hashlib.sha256(flat.numpy().tobytes()).hexdigest()}",
          flush=True)
