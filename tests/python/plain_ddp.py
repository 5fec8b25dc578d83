"""A plain PyTorch DDP program, written as a torchrun user writes one: nothing of cohort in it.

torch.distributed.init_process_group('gloo', init_method='env://') reads RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT; rank 0 serves the c10d store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE is not True). A small MLP
trains for a few steps on synthetic data, each rank on its own shard (DistributedSampler), and at the end every rank
allgathers a checksum of its parameters: DDP averages the gradients, so the parameters must be equal everywhere.
The other variables torchrun sets (LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, ...) are checked against the layout.

usage (under cohortrun, torchrun or anything that sets torchrun's variables): python3 plain_ddp.py [--steps N]
Prints "PASS (plain ddp) rank R of W" on each rank.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    assert 0 <= local_rank < local_world and world % local_world == 0, (local_rank, local_world, world)
    assert int(os.environ["GROUP_RANK"]) == rank // local_world, os.environ["GROUP_RANK"]
    assert int(os.environ["GROUP_WORLD_SIZE"]) == world // local_world, os.environ["GROUP_WORLD_SIZE"]
    assert local_rank == rank % local_world, (local_rank, rank, local_world)

    torch.manual_seed(1234)  # the same data and the same initial model on every rank
    x = torch.randn(512, 16)
    y = (x @ torch.randn(16, 1)).squeeze(1).gt(0).long()
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    initial = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

    steps, first_batch = 0, None
    while steps < args.steps:
        sampler.set_epoch(steps)
        for xb, yb in loader:
            if first_batch is None:
                first_batch = xb.sum().item()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(xb), yb)
            loss.backward()
            opt.step()
            steps += 1
            if steps == args.steps:
                break

    params = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    assert not torch.equal(params.float(), initial), "the parameters never changed"
    # Two numbers that differ if any parameter differs: the sum, and a sum weighted by position.
    checksum = torch.stack([params.sum(), (params * torch.arange(1, params.numel() + 1).double()).sum()])
    gathered = [torch.zeros_like(checksum) for _ in range(world)]
    dist.all_gather(gathered, checksum)
    for r, c in enumerate(gathered):
        assert torch.equal(c, gathered[0]), f"rank {r}'s parameters differ from rank 0's: {c} vs {gathered[0]}"
    # The ranks trained on different shards (else equal parameters would prove nothing about DDP).
    firsts = [None] * world
    dist.all_gather_object(firsts, first_batch)
    assert world == 1 or len(set(firsts)) > 1, f"every rank saw the same first batch: {firsts}"
    dist.barrier()
    print(f"PASS (plain ddp) rank {rank} of {world} loss={loss.item():.4f} checksum={checksum[0].item():.6f}",
          flush=True)
    # The end, through torch's store rather than gloo: with torch 1.13, closing the gloo group (destroy_process_group,
    # or the interpreter's exit) sometimes hung for good on one rank or another under load, after every rank had
    # printed PASS (python.plain_ddp.two_nodes, several times on 2026-11-25, also with rank 0 leaving 2 s after the
    # others). That is torch's teardown, not what this test is about, so the ranks agree through the store that all
    # are done and leave without it; rank 0, whose process serves the store, leaves last.
    store = dist.distributed_c10d._get_default_store()
    done = store.add("plain_ddp/done", 1)
    deadline = time.monotonic() + 60
    while done < world and time.monotonic() < deadline:
        time.sleep(0.02)
        done = store.add("plain_ddp/done", 0)
    if rank != 0:
        store.add("plain_ddp/left", 1)  # the last use of the store: rank 0 may be gone after it
    else:
        while world > 1 and store.add("plain_ddp/left", 0) < world - 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    sys.stdout.flush()
    os._exit(0 if done == world else 1)


if __name__ == "__main__":
    main()
