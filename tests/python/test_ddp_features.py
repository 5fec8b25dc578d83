"""DistributedDataParallel and DistributedOptimizer features on 2 ranks, each against values computed here.

Run: build/bin/cohortrun -np 2 /usr/bin/python3 tests/python/test_ddp_features.py

- broadcast_buffers: rank 0's BatchNorm running statistics reach every rank at each forward (and not with False)
- find_unused_parameters: a head only rank 1 uses gets half of rank 1's gradient on both ranks
- zero_grad(set_to_none=True) (torch 2.x's default): the same parameters as keeping zeroed gradients
- DistributedOptimizer(op=Sum), and compression=fp16 (within half precision of the exact average)
- skip_synchronize() after synchronize() (gradient clipping), and the zero_grad() guard
- a construction with different parameter shapes: MismatchError on both ranks
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import cohort.torch as hvd

torch.set_num_threads(1)
hvd.init()
R, N = hvd.rank(), hvd.size()
assert N == 2
ok = True


def expect(cond, what):
    global ok
    print(f"[rank {R}] {'ok  ' if cond else 'FAIL'} {what}", flush=True)
    ok = ok and bool(cond)


def same_everywhere(t):
    g = hvd.allgather(t.detach().reshape(1, -1).double())
    return bool((g == g[0]).all())


# broadcast_buffers.
for bb in (True, False):
    torch.manual_seed(R)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    with torch.no_grad():
        m[1].running_mean.fill_(float(R))
    d = hvd.DistributedDataParallel(m, broadcast_buffers=bb)
    expect(same_everywhere(m[1].running_mean), f"construction broadcasts rank 0's buffers (broadcast_buffers={bb})")
    with torch.no_grad():
        m[1].running_mean.fill_(float(10 * R))  # the ranks drift apart...
    torch.manual_seed(7)
    d(torch.randn(5, 3)).sum().backward()  # ...then the same batch on both
    expect(same_everywhere(m[1].running_mean) == bb,
           f"broadcast_buffers={bb}: running stats {'agree' if bb else 'differ'} after a forward")
    d.close()

# find_unused_parameters: rank 0 uses head a, rank 1 uses heads a and b.


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)

    def forward(self, x, use_b):
        h = self.body(x)
        return self.a(h).sum() + (self.b(h).sum() if use_b else 0)


torch.manual_seed(0)
m = TwoHeads()
ref = TwoHeads()
ref.load_state_dict(m.state_dict())
d = hvd.DistributedDataParallel(m, find_unused_parameters=True)
x = torch.randn(3, 4) + R
for step in range(2):  # the second step runs on the rebuilt buckets
    for p in m.parameters():
        p.grad.zero_()
    d(x, use_b=(R == 1)).backward()
    ref.zero_grad()
    ref(x, use_b=(R == 1)).backward()
    local_b = ref.b.weight.grad if R == 1 else torch.zeros_like(ref.b.weight)
    want_b = hvd.allreduce(local_b, op=hvd.Average)
    expect(torch.allclose(m.b.weight.grad, want_b, rtol=0, atol=1e-7),
           f"find_unused_parameters step {step}: the unused head's gradient is the average with zeros")
    expect(torch.allclose(m.a.weight.grad, hvd.allreduce(ref.a.weight.grad), rtol=0, atol=1e-7),
           f"find_unused_parameters step {step}: the used head's gradient is the average")
d.close()

# zero_grad(set_to_none=True) against zeroed gradients: bitwise the same training.
finals = []
for set_to_none in (False, True):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    d = hvd.DistributedDataParallel(net, bucket_cap_mb=0.0005)
    opt = torch.optim.SGD(d.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(100 + R)
    for _ in range(5):
        opt.zero_grad(set_to_none=set_to_none)
        F.cross_entropy(d(torch.randn(4, 8)), torch.randint(0, 3, (4,))).backward()
        opt.step()
    finals.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
    d.close()
expect(torch.equal(finals[0], finals[1]), "zero_grad(set_to_none=True) trains exactly as zeroed gradients")

# DistributedOptimizer: op=Sum and fp16 compression, synchronize() + skip_synchronize().
for op, comp, tol, name in [(hvd.Sum, None, 0.0, "op=Sum"), (hvd.Average, hvd.Compression.fp16, 2.0 ** -11, "fp16")]:
    torch.manual_seed(0)
    net = nn.Linear(6, 5)
    torch.manual_seed(200 + R)
    x = torch.randn(4, 6)
    net(x).pow(2).sum().backward()
    local = [p.grad.clone() for p in net.parameters()]
    want = [hvd.allreduce(g, op=op) for g in local]
    net.zero_grad()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.0), named_parameters=net.named_parameters(),
                                   op=op, compression=comp)
    net(x).pow(2).sum().backward()
    try:
        opt.zero_grad()
        expect(False, f"{name}: zero_grad() before step() raised nothing")
    except AssertionError:
        expect(True, f"{name}: zero_grad() between backward and step() raises AssertionError")
    opt.synchronize()
    # fp16: each rank's gradient is rounded to half (relative error <= 2^-11 of it), summed in float32 and the
    # average rounded to half again (<= 2^-11 of it): within 2^-11 (mean |g_r| + |avg|), plus half's smallest
    # subnormal step. op=Sum is exact (tol 0).
    scale = [hvd.allreduce(g.abs(), op=hvd.Average) + w.abs() for g, w in zip(local, want)]
    err = max(((p.grad - w).abs() - tol * sc).max().item() for p, w, sc in zip(net.parameters(), want, scale))
    expect(err <= (6e-8 if tol else 0.0), f"DistributedOptimizer {name}: gradients match the allreduce within "
                                          f"{tol:g} (mean |g| + |avg|) (excess {err:.2g})")
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1e9)
    with opt.skip_synchronize():
        opt.step()
    opt._engine.close()

# Different parameter shapes at construction: MismatchError on both ranks (the communicator is then aborted).
try:
    hvd.DistributedDataParallel(nn.Linear(3, 3 + R))
    expect(False, "different shapes: no error")
except hvd.MismatchError as e:
    expect("rank" in str(e), f"different shapes: MismatchError ({str(e)[:120]}...)")

sys.exit(0 if ok else 1)
