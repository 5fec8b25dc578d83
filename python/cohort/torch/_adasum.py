"""Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021) as Horovod defines it,
for op=Adasum in cohort.torch's allreduce family, on CPU tensors.

Two vectors a and b combine as

    adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b

(a coefficient stays 1 where its vector's squared norm is under sqrt(DBL_MIN), as in Horovod): orthogonal vectors
add, equal ones average, and everything between is in between. Over n ranks (a power of 2, as Horovod requires) the
vectors combine pairwise up a binary tree in rank order: level 1 combines ranks 2k and 2k+1, level 2 those results
pairwise, and so on. Each tensor of a call (a layer of a fused gradient) gets its own coefficients. Horovod computes
the same tree with vector halving and distance doubling, each rank holding a slice and the dot products and norms
summed over the ranks that share a vector; here every rank gathers the n vectors and computes the whole tree, which
moves n times the bytes of one vector but gives every rank the same result in the same arithmetic: the dot products
and norms in float64, each level's result rounded to the tensor's dtype (float16 is combined in float32, as
Horovod's AVX path does).
"""
import ctypes

import numpy as np
import torch

import cohort as _core
from cohort import _lib
from cohort._lib import lib as _c

# Below this a squared norm counts as zero and its coefficient stays 1 (Horovod: std::sqrt(DBL_MIN)).
_NORM_FLOOR = float(np.sqrt(np.finfo(np.float64).tiny))
_DTYPES = {torch.float16: (np.float16, _lib.F16), torch.float32: (np.float32, _lib.F32),
           torch.float64: (np.float64, _lib.F64)}


class AdasumError(_core.AdasumNotImplemented):
    """What Adasum cannot do here (a world that is not a power of 2, CUDA tensors): a NotImplementedError, as
    Horovod raises it, and a ValueError, as cohort refuses arguments."""


def check(comm, tensors, what):
    """Refuses, before anything moves (every rank alike), what Adasum does not take."""
    for t in tensors:
        if t.dtype not in _DTYPES:
            raise TypeError(f"{what}: Adasum reduces float16, float32 and float64 tensors, not {t.dtype}")
        if t.device.type != "cpu":
            raise AdasumError(f"{what}: Adasum of a tensor on {t.device}: cohort.torch runs Adasum on CPU tensors")
    n = _c.cohort_size(comm)
    if n & (n - 1):
        raise AdasumError(f"{what}: Adasum over {n} ranks: it combines the ranks pairwise and needs a power of 2 "
                          f"(as Horovod's 'Running Adasum with non-power of 2 ranks is not supported yet')")


def _combine(a, b, dtype):
    """adasum(a, b) of two 1-D arrays of dtype (one layer), rounded to dtype."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    dot, anormsq, bnormsq = float(np.dot(a64, b64)), float(np.dot(a64, a64)), float(np.dot(b64, b64))
    acoeff = 1.0 - dot / anormsq * 0.5 if anormsq >= _NORM_FLOOR else 1.0
    bcoeff = 1.0 - dot / bnormsq * 0.5 if bnormsq >= _NORM_FLOOR else 1.0
    if dtype == np.float16:
        return (np.float32(acoeff) * a.astype(np.float32) + np.float32(bcoeff) * b.astype(np.float32)).astype(dtype)
    return (acoeff * a64 + bcoeff * b64).astype(dtype)


def reduce_layers(vectors, layers, dtype):
    """The tree over vectors (one 1-D array per rank, in rank order), layer by layer ((offset, count) pairs)."""
    level = [v.copy() for v in vectors]
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), 2):
            a, b = level[i], level[i + 1]
            out = np.empty_like(a)
            for off, cnt in layers:
                out[off:off + cnt] = _combine(a[off:off + cnt], b[off:off + cnt], dtype)
            nxt.append(out)
        level = nxt
    return level[0]


def allreduce(comm, tensors, what):
    """Adasum of each of tensors (CPU, float16/32/64, the same shapes on every rank) over comm's ranks; new tensors.
    Tensors of one dtype travel in one allgather; each keeps its own coefficients."""
    check(comm, tensors, what)
    n = _c.cohort_size(comm)
    results = [None] * len(tensors)
    by_dtype = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    with torch.no_grad():
        for tdt, idx in by_dtype.items():
            npdt, code = _DTYPES[tdt]
            flat = torch.cat([tensors[i].detach().reshape(-1) for i in idx]) if len(idx) > 1 else \
                tensors[idx[0]].detach().reshape(-1).contiguous()
            layers, off = [], 0
            for i in idx:
                layers.append((off, tensors[i].numel()))
                off += tensors[i].numel()
            gathered = torch.empty(n * off, dtype=tdt)
            _core._check(_c.cohort_allgather(comm, ctypes.c_void_p(flat.data_ptr()),
                                             ctypes.c_void_p(gathered.data_ptr()), off, code), what)
            g = gathered.numpy().reshape(n, off)
            out = torch.from_numpy(reduce_layers([g[r] for r in range(n)], layers, npdt))
            for i, (o, cnt) in zip(idx, layers):
                results[i] = out[o:o + cnt].view(tensors[i].shape)
    return results
