"""Uneven inputs (docs/torch.md): ranks with different numbers of batches train a small model with
DistributedOptimizer + hvd.join() and with DistributedDataParallel + model.join(), under cohortrun at 2 and 3 ranks.

Each case checks, on every rank:
  - the final parameters against a replay in this process: every step averages the gradients of the ranks that
    still had a batch at that step (over those ranks; or over the whole world for model.join()'s default
    divide_by_initial_world_size=True; a plain sum for op=Sum), within 1e-6 (2e-3 with fp16 compression);
  - that every rank ends with bitwise the same parameters;
  - that join() returns the rank that trained the most steps (ties: the highest), on every rank;
and model.join(throw_on_early_termination=True): every rank raises RuntimeError after the shortest rank's steps
(none with even inputs), parameters bitwise equal.
A hang is caught by the ctest TIMEOUT (tests/python/python.cmake).
"""
import faulthandler
import gc
import sys

import torch

import cohort.torch as hvd

LR = 0.1


def model_fn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def batch(r, b):
    g = torch.Generator().manual_seed(1000 * r + b)
    return torch.randn(3, 5, generator=g), torch.randn(3, 2, generator=g)


def loss_of(model, r, b):
    x, y = batch(r, b)
    return torch.nn.functional.mse_loss(model(x), y)


def reference(batches, divisor):
    """One process replaying the steps: divisor(active ranks) -> what the gradient sum is divided by."""
    model = model_fn()
    params = list(model.parameters())
    for s in range(max(batches)):
        active = [r for r, n in enumerate(batches) if n > s]
        total = [torch.zeros_like(p) for p in params]
        for r in active:
            model.zero_grad()
            loss_of(model, r, s).backward()
            for t, p in zip(total, params):
                t += p.grad
        with torch.no_grad():
            for t, p in zip(total, params):
                p -= LR * t / divisor(len(active))
    return torch.cat([p.detach().reshape(-1) for p in params])


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check(name, model, batches, divisor, joined, tol=1e-6):
    rank, size = hvd.rank(), hvd.size()
    got = flat(model)
    want = reference(batches, divisor)
    err = (got - want).abs().max().item()
    assert err <= tol, f"{name}: rank {rank}: parameters differ from the replay by {err:g}"
    every = hvd.allgather(got.reshape(1, -1))
    for r in range(size):
        assert torch.equal(every[r], got), f"{name}: rank {r}'s parameters differ from rank {rank}'s"
    longest = max(batches)
    expect = max(r for r, n in enumerate(batches) if n == longest)
    assert joined == expect, f"{name}: rank {rank}: join returned {joined}, expected {expect}"
    assert hvd.allgather(torch.tensor([joined])).tolist() == [expect] * size
    print(f"rank {rank}: {name} batches={batches} max|diff|={err:.2e} join->{joined}: ok", flush=True)


def run_hvd(name, batches, op, compression=hvd.Compression.none, tol=1e-6):
    rank = hvd.rank()
    model = model_fn()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                   named_parameters=model.named_parameters(), op=op, compression=compression)
    for b in range(batches[rank]):
        opt.zero_grad()
        loss_of(model, rank, b).backward()
        opt.step()
    joined = hvd.join()
    divisor = (lambda active: 1) if op == hvd.Sum else (lambda active: active)
    check(name, model, batches, divisor, joined, tol)
    del opt
    gc.collect()  # the engine goes with its optimizer: join wants one live engine


def run_ddp(name, batches, divide_by_initial):
    rank, size = hvd.rank(), hvd.size()
    model = model_fn()
    ddp = hvd.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    with ddp.join(divide_by_initial_world_size=divide_by_initial):
        for b in range(batches[rank]):
            opt.zero_grad()
            loss_of(ddp, rank, b).backward()
            opt.step()
    divisor = (lambda active: size) if divide_by_initial else (lambda active: active)
    check(name, model, batches, divisor, ddp.joined_from)
    ddp.close()


def run_ddp_throw(name, batches):
    """throw_on_early_termination=True: every rank raises RuntimeError at the step where the first rank's data
    ended (none with even inputs), after min(batches) steps that all ranks took together; a model with buffers
    (BatchNorm's running statistics, broadcast at every step) so that the ended rank's share of that step is
    exercised too. Every rank ends with bitwise equal parameters."""
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    ddp = hvd.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    done, raised = 0, None
    try:
        with ddp.join(throw_on_early_termination=True):
            for b in range(batches[rank]):
                opt.zero_grad()
                loss_of(ddp, rank, b).backward()
                opt.step()
                done += 1
    except RuntimeError as e:
        raised = e
    even = len(set(batches)) == 1
    assert (raised is None) == even, f"{name}: rank {rank}: raised {raised!r} with batches {batches}"
    assert raised is None or "exhausted its inputs" in str(raised), raised
    assert done == min(batches), f"{name}: rank {rank} took {done} steps, expected {min(batches)}"
    # Buffers too when it raised (the step that raised began with rank 0's buffers broadcast, as in torch); after a
    # normal end each rank's running statistics hold its own last batch, as in torch DDP.
    tensors = list(model.parameters()) + (list(model.buffers()) if raised is not None else [])
    state = torch.cat([t.detach().reshape(-1).float() for t in tensors])
    every = hvd.allgather(state.reshape(1, -1))
    for r in range(size):
        assert torch.equal(every[r], state), f"{name}: rank {r}'s parameters or buffers differ from rank {rank}'s"
    print(f"rank {rank}: {name} batches={batches} steps={done} raised={raised is not None}: ok", flush=True)
    ddp.close()


def main():
    faulthandler.dump_traceback_later(90, exit=True)  # a hang: every rank's stack, before ctest's TIMEOUT
    hvd.init()
    size = hvd.size()
    # No engine: join() only waits for every rank and names the highest.
    assert hvd.join() == size - 1
    down = [10 - 3 * r for r in range(size)]  # rank 0 trains longest
    up = [4 + 3 * r for r in range(size)]  # the last rank trains longest
    tie = [7] * (size - 1) + [4] if size > 2 else [6, 6]  # ties: the highest of the longest
    run_hvd("DistributedOptimizer+join", down, hvd.Average)
    run_hvd("DistributedOptimizer(op=Sum)+join", up, hvd.Sum)
    run_hvd("DistributedOptimizer+join (tie)", tie, hvd.Average)
    # Gradients travel as IEEE half: 2^-11 relative per step, about 1e-4 here after 10 steps.
    run_hvd("DistributedOptimizer(fp16)+join", down, hvd.Average, hvd.Compression.fp16, tol=2e-3)
    run_ddp("DDP.join()", up, True)
    run_ddp("DDP.join(divide_by_initial_world_size=False)", down, False)
    run_ddp("DDP.join() (tie)", tie, True)
    # Even inputs inside join(): nothing changes (every step averages over the world).
    run_ddp("DDP.join() (even)", [5] * size, True)
    run_ddp_throw("DDP.join(throw_on_early_termination=True)", down)
    run_ddp_throw("DDP.join(throw_on_early_termination=True) (last rank ends first)", [6] * (size - 1) + [2])
    run_ddp_throw("DDP.join(throw_on_early_termination=True) (even)", [4] * size)
    hvd.shutdown()
    print("PASS (join)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
