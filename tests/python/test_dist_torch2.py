"""What torch 2 builds on a process group, on backend "cohort" (CPU tensors): DeviceMesh, torch.distributed.checkpoint
(DCP) and FSDP2 (fully_shard). Debian's torch 1.13 has none of them: there it exits 77 (ctest's SKIP) with the
reason; the GPU host's torch 2.11 runs it (scripts/gpu/40-torch2.sh runs the python label).

    build/bin/cohortrun -np 2 python3 tests/python/test_dist_torch2.py

Each part reports PASS or FAIL with its exception, and every part runs whatever the others did, so that one run on
the GPU host says which of them work:
  1. DeviceMesh: a 1-D mesh over the world and a 2-D (1 x N) one; an all_reduce on each dimension's group, and the
     group found again by its name (torch 2 resolves groups by name: functional collectives, DTensor);
  2. a group made with device_id, and the functional collectives (all_reduce, the coalesced all-gather and reduce-scatter) and DTensor (distribute,
     full_tensor, redistribute) on the mesh's group;
  3. DCP: a state dict with a tensor per rank saved to a shared directory and loaded into zeros, bitwise equal;
  4. FSDP2: a small MLP, fully_shard over the 1-D mesh, 4 SGD steps on each rank's own batch, against the same model
     trained in one process on the whole batch (the mean over the ranks' batches): within 1e-5.
"""
import shutil
import sys
import tempfile
import traceback

import torch

major, minor = (int(v) for v in torch.__version__.split(".")[:2])
if (major, minor) < (2, 4):
    print(f"SKIP: torch {torch.__version__} has no DeviceMesh, DCP save/load and FSDP2 (torch 2.4 or later)")
    sys.exit(77)

import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

import cohort.torch  # noqa: E402,F401 (registers the backend "cohort")

dist.init_process_group("cohort")
R, N = dist.get_rank(), dist.get_world_size()
results = []


def part(name):
    def run(fn):
        try:
            fn()
            results.append((name, None))
        except Exception as e:  # noqa: BLE001 (reported, and the next part runs)
            results.append((name, f"{type(e).__name__}: {e}"))
            traceback.print_exc()
        dist.barrier()
        return fn
    return run


@part("device_mesh")
def _():
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (N,))
    t = torch.full((4,), float(R + 1))
    dist.all_reduce(t, group=mesh.get_group())
    assert torch.equal(t, torch.full((4,), float(N * (N + 1) / 2))), t
    mesh2 = init_device_mesh("cpu", (1, N), mesh_dim_names=("dp", "tp"))
    tp = mesh2["tp"].get_group()
    t = torch.full((3,), float(R))
    dist.all_reduce(t, group=tp)
    assert torch.equal(t, torch.full((3,), float(N * (N - 1) / 2))), t
    name = tp.group_name
    from torch.distributed.distributed_c10d import _resolve_process_group
    assert _resolve_process_group(name) is tp, f"group {name!r} not found again by its name"
    dp = mesh2["dp"].get_group()
    t = torch.full((2,), float(R))
    dist.all_reduce(t, group=dp)  # one rank per dp group: unchanged
    assert torch.equal(t, torch.full((2,), float(R))), t


@part("device_id")
def _():
    # A group made with device_id (as torchtitan and torchrun scripts do for their GPU): torch then asks the group's
    # backend on that device whether it can split, which a group with no Backend objects of torch's could not answer.
    dev = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    g = dist.new_group(list(range(N)), device_id=dev)
    t = torch.full((2,), float(R))
    dist.all_reduce(t, group=g)
    assert torch.equal(t, torch.full((2,), float(N * (N - 1) / 2))), t
    dist.destroy_process_group(g)


@part("funcol_dtensor")
def _():
    # torch's functional collectives resolve the group by its name and call its methods from C++, the coalesced
    # tensor forms included; DTensor's full_tensor and redistribute run on them.
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    except ImportError:
        from torch.distributed._tensor import Replicate, Shard, distribute_tensor

    def done(t):
        return t.wait() if hasattr(t, "wait") else t

    mesh = init_device_mesh("cpu", (N,))
    g = mesh.get_group()
    t = done(funcol.all_reduce(torch.full((3,), float(R)), "sum", g))
    assert torch.equal(t, torch.full((3,), float(N * (N - 1) / 2))), t
    outs = [done(o) for o in funcol.all_gather_into_tensor_coalesced([torch.full((2,), float(R)),
                                                                      torch.full((1,), 10.0 + R)], g)]
    assert outs[0].tolist() == [float(k) for k in range(N) for _ in range(2)], outs
    assert outs[1].tolist() == [10.0 + k for k in range(N)], outs
    outs = [done(o) for o in funcol.reduce_scatter_tensor_coalesced(
        [torch.arange(2 * N, dtype=torch.float32) + R, torch.full((N,), 1.0)], ["sum", "sum"], [0, 0], g)]
    assert outs[0].tolist() == [float(N * (2 * R + j) + N * (N - 1) / 2) for j in range(2)], outs
    assert outs[1].tolist() == [float(N)], outs
    whole = torch.arange(4 * N, dtype=torch.float32).reshape(2 * N, 2)
    dt = distribute_tensor(whole, mesh, [Shard(0)])
    assert torch.equal(dt.to_local(), whole[2 * R:2 * R + 2]), dt.to_local()
    assert torch.equal(dt.full_tensor(), whole), dt.full_tensor()
    assert torch.equal(dt.redistribute(mesh, [Replicate()]).to_local(), whole)


@part("dcp")
def _():
    import torch.distributed.checkpoint as dcp
    where = [tempfile.mkdtemp(prefix="cohort-dcp-") if R == 0 else None]
    dist.broadcast_object_list(where, src=0)
    try:
        # Plain tensors are replicated in DCP's view: one rank writes each, every rank loads it.
        state = {"w": torch.arange(10, dtype=torch.float32) * 3, "step": torch.tensor(7)}
        dcp.save(state, checkpoint_id=where[0])
        back = {"w": torch.zeros(10), "step": torch.tensor(0)}
        dcp.load(back, checkpoint_id=where[0])
        assert torch.equal(back["w"], torch.arange(10, dtype=torch.float32) * 3), back["w"]
        assert back["step"].item() == 7, back["step"]
    finally:
        dist.barrier()
        if R == 0:
            shutil.rmtree(where[0], ignore_errors=True)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


@part("fsdp2")
def _():
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (N,))
    model = mlp()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref = mlp()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(4):
        x, y = batch(step, R)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        xs, ys = zip(*(batch(step, r) for r in range(N)))
        ref_opt.zero_grad()
        nn.functional.mse_loss(ref(torch.cat(xs)), torch.cat(ys)).backward()
        ref_opt.step()
    worst = 0.0
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        worst = max(worst, (full.detach() - q.detach()).abs().max().item())
    assert worst <= 1e-5, f"FSDP2 and one process differ by up to {worst}"
    moved = max((q.detach() - p0.detach()).abs().max().item() for q, p0 in zip(ref.parameters(), mlp().parameters()))
    assert moved > 1e-3, f"the parameters moved by {moved} only"


dist.destroy_process_group()
for name, error in results:
    print(f"{'PASS' if error is None else 'FAIL'} torch2.{name}{'' if error is None else ': ' + error}")
if any(error for _, error in results):
    sys.exit(1)
print(f"ok: DeviceMesh, DCP and FSDP2 on cohort, torch {torch.__version__}, {N} ranks")
