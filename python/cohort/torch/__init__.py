"""cohort.torch: Horovod's PyTorch API, and a DistributedDataParallel wrapper, over libcohort.

    import cohort.torch as hvd
    hvd.init()
    ...
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Tensors: float32, float64, float16, bfloat16, int32, int64, uint8. A contiguous CPU tensor is handed to the library
as it is (no copy); a non-contiguous one is made contiguous first (and the result copied back for the in-place
forms); a CUDA tensor is reduced on its device by the library's device collectives (docs/gpu.md), or staged
through pinned host memory where they do not run. docs/torch.md
has the API table against Horovod and torch.distributed, and what differs.
"""
import functools
import inspect
import os
import threading
import weakref

import numpy as np
import torch

import cohort as _core
from cohort import __version__  # noqa: F401
from cohort import _lib
from cohort import (AuthError, CohortError, HorovodInternalError, Handle, InvalidArgumentError, MismatchError, RemoteError,  # noqa: F401
                    TimeoutError, Adasum, Average, Max, Min, Product, Sum, allgather_object, barrier,
                    broadcast_object, cross_rank, cross_size, is_initialized, local_rank, local_size,
                    rank, shutdown, size, transport, mpi_threads_supported, abort, ProcessSet,
                    global_process_set, add_process_set, remove_process_set, new_group)
from cohort._lib import lib as _c
from cohort.torch import _arena, _named, _timeline, _torchrun
from cohort.torch._tensors import (_TORCH_DTYPES, BF16Compressor, Compression, Compressor,  # noqa: F401
                                   FP16Compressor, NoneCompressor, _allreduce_call, _bytes, _check_tensor,
                                   _cuda_direct, _host, _iallreduce_call, _like, _p, _put_back, _stream, _tag_shape)


def init(comm=None):
    """cohort.init(), and, for a task of a Slurm step started with --cpus-per-task=C (and no OMP_NUM_THREADS of the
    user's), torch.set_num_threads(C): the CPUs Slurm gave the task, where torch would take every CPU of the node."""
    # Under torchrun's c10d rendezvous (--standalone) through torch's store on MASTER_PORT, which
    # init_process_group shares (_torchrun.py); elsewhere cohort_init meets by itself.
    _core.init(comm, _join=_torchrun.join if _torchrun.wanted() else None)
    # Large CPU tensors made from now on live in the job's shared arena: the collectives on them (the gradients
    # DistributedOptimizer averages, allreduce_ of a user's tensor) are zero copy (_arena.py; docs/torch.md).
    _arena.attach(_core._get_comm())
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit() and int(cpus) > 0 and os.environ.get("SLURM_STEP_ID") and not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(cpus))


def ccl_built():
    return False


def ddl_built():
    return False


def nccl_built():
    return False


def mpi_built():
    return False


def gloo_built():
    return False


def cuda_built():
    """True when this build has cohort's device collectives and they run here (CUDA tensors are then reduced on
    their device, without host copies)."""
    return _cuda_direct()


def rocm_built():
    return False


def mpi_enabled():
    """True when the job's communicator runs over cohort's MPI transport (under mpirun; docs/env.md,
    COHORT_TRANSPORT)."""
    if _core._comm is None:
        return False
    return "mpi" in _c.cohort_transport_name(_core._comm).decode().split("+")


def gloo_enabled():
    return False


# ---- arguments ----


def _scales(tensor, prescale_factor, postscale_factor, what):
    for f in (prescale_factor, postscale_factor):
        if isinstance(f, bool) or not isinstance(f, (int, float, np.integer, np.floating)):
            raise TypeError(f"{what}: prescale_factor/postscale_factor must be numbers, got {type(f).__name__}")
    if (prescale_factor != 1.0 or postscale_factor != 1.0) and tensor.dtype == torch.bool:
        raise ValueError(f"{what}: prescale_factor/postscale_factor do not apply to bool tensors")


def _scale(t, factor):
    """t * factor as Horovod computes it: integers in float64 (then truncated back), float16 and bfloat16 on the
    CPU in float32; the result in t's dtype."""
    if factor == 1.0:
        return t
    if not t.dtype.is_floating_point:
        return (t.double() * float(factor)).to(t.dtype)
    if t.dtype in (torch.float16, torch.bfloat16) and not t.is_cuda:
        return (t.float() * float(factor)).to(t.dtype)
    return t * float(factor)


def _resolve_op(op, average, what):
    if average is not None:
        if op is not None:
            raise ValueError(f"{what}: give op or average, not both")
        return Average if average else Sum
    if op == Adasum and type(op) is int:  # the allreduce family takes it (_adasum.py); the rest refuse it
        return Adasum
    return _core._op(op)


# ---- allreduce ----


def _adasum_start(comm, tensors, outputs, prescale_factor, postscale_factor, compression, what):
    """op=Adasum for the allreduce family: computed now (_adasum.py), each tensor with its own coefficients, scaled
    and compressed as the other ops are; returns the outputs (an async caller hands them back in a completed
    handle)."""
    compression = compression or Compression.none
    with torch.no_grad():
        wires = [compression.compress(t) for t in tensors]
        srcs = [_scale(w, prescale_factor) for w, _ in wires]
        reduced = _adasum.allreduce(comm, srcs, what)
        outs = [_put_back(compression.decompress(_scale(r, postscale_factor), ctx), o)
                for r, (_, ctx), o in zip(reduced, wires, outputs)]
    return outs


def _allreduce_start(comm, tensor, output, op, prescale_factor, postscale_factor, compression, what, async_):
    """Reduces tensor into output (which may be tensor itself) over comm; returns a Handle (async_) or output."""
    _check_tensor(tensor, what)
    _scales(tensor, prescale_factor, postscale_factor, what)
    if op == Adasum:
        out = _adasum_start(comm, [tensor], [output], prescale_factor, postscale_factor, compression, what)[0]
        return _core._completed(out) if async_ else out
    compression = compression or Compression.none
    with torch.no_grad():
        wire, ctx = compression.compress(tensor)
        if prescale_factor != 1.0:
            wire = _scale(wire, prescale_factor)
        src = _host(wire)
        # In place straight into the caller's memory when nothing had to be converted.
        dst = src if (src is tensor and output is tensor) else _like(src)

    def finish():
        with torch.no_grad():
            res = _scale(dst, postscale_factor)
            res = compression.decompress(res, ctx)
            return _put_back(res, output)

    dt = _TORCH_DTYPES[src.dtype]
    if async_:
        return _core._start(Handle(finish, (tensor, src, dst, output)),
                            lambda w: _iallreduce_call(comm, src, dst, dt, op, w))
    _core._check(_allreduce_call(comm, src, dst, dt, op))
    return finish()


def _output_for(tensor):
    return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)


class _AllreduceFunction(torch.autograd.Function):
    """allreduce as a differentiable op (as in Horovod): the gradient of an Average or Sum is the same reduction of
    the incoming gradients, scaled by the same factors."""

    @staticmethod
    def forward(ctx, tensor, comm, op, prescale_factor, postscale_factor, compression):
        # backward reduces over the same ranks, in call order (a named forward ran on the twin: _named.py)
        ctx.args = (_named.ordered(comm), op, prescale_factor, postscale_factor, compression)
        return _allreduce_start(comm, tensor, _output_for(tensor), op, prescale_factor, postscale_factor, compression,
                                "allreduce", False)

    @staticmethod
    def backward(ctx, grad):
        comm, op, pre, post, compression = ctx.args
        if op not in (Average, Sum, Adasum):
            raise RuntimeError("allreduce: only Average, Sum and Adasum are differentiable")
        g = grad.contiguous()
        return (_allreduce_start(comm, g, _output_for(g), op, pre, post, compression, "allreduce (backward)", False),
                None, None, None, None, None)


_OPS = frozenset(_core._OP_NAMES)


def _plain(tensor, op, average, prescale_factor, postscale_factor, compression):
    """The cohort_dtype of tensor when the call can go straight to the library: a contiguous CPU tensor of a
    supported dtype, a known op, no scaling, no compression, no autograd. Else None (the general path decides)."""
    if (average is None and prescale_factor == 1.0 and postscale_factor == 1.0 and type(op) is int
            and op in _OPS and (compression is None or compression is NoneCompressor)
            and type(tensor) is torch.Tensor):
        dt = _TORCH_DTYPES.get(tensor.dtype)
        if dt is not None and not tensor.is_cuda and not tensor.requires_grad and tensor.is_contiguous() \
                and tensor.layout is torch.strided:
            return dt
    return None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """A new tensor: op over the ranks of tensor (Average by default). Differentiable when tensor requires grad."""
    if name is not None or _timeline.on:
        named = _named_call(allreduce, name, (tensor,), dict(average=average, name=name, compression=compression, op=op,
                                                             prescale_factor=prescale_factor,
                                                             postscale_factor=postscale_factor,
                                                             process_set=process_set))
        if named is not None:
            return named
    if op is None and average is None:
        op = Average
    dt = _plain(tensor, op, average, prescale_factor, postscale_factor, compression)
    if dt is not None and process_set is None and _core._comm is not None:  # the hot path: one ctypes call
        out = torch.empty_like(tensor)
        _tag_shape(tensor)
        st = _c.cohort_allreduce(_core._comm, tensor.data_ptr(), out.data_ptr(), tensor.numel(), dt, op)
        if st != _lib.OK:
            raise _core._error(st)
        return out
    comm = _core._comm_of(process_set, "allreduce")
    op = _resolve_op(op, average, "allreduce")
    _check_tensor(tensor, "allreduce")
    if tensor.requires_grad and torch.is_grad_enabled():
        return _AllreduceFunction.apply(tensor, comm, op, prescale_factor, postscale_factor, compression)
    return _allreduce_start(comm, tensor, _output_for(tensor), op, prescale_factor, postscale_factor, compression,
                            "allreduce", False)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None, compression=Compression.none):
    """In place: tensor becomes op over the ranks of tensor. Returns tensor."""
    if name is not None or _timeline.on:
        named = _named_call(allreduce_, name, (tensor,), dict(average=average, name=name, op=op,
                                                              prescale_factor=prescale_factor,
                                                              postscale_factor=postscale_factor,
                                                              process_set=process_set, compression=compression))
        if named is not None:
            return named
    if op is None and average is None:
        op = Average
    dt = _plain(tensor, op, average, prescale_factor, postscale_factor, compression)
    if dt is not None and process_set is None and _core._comm is not None:  # the hot path: one ctypes call
        ptr = tensor.data_ptr()
        _tag_shape(tensor)
        st = _c.cohort_allreduce(_core._comm, ptr, ptr, tensor.numel(), dt, op)
        if st != _lib.OK:
            raise _core._error(st)
        return tensor
    comm = _core._comm_of(process_set, "allreduce_")
    op = _resolve_op(op, average, "allreduce_")
    return _allreduce_start(comm, tensor, tensor, op, prescale_factor, postscale_factor, compression, "allreduce_",
                            False)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None, compression=Compression.none):
    """Starts allreduce and returns a handle; synchronize(handle) returns the new tensor."""
    comm = _core._comm_of(process_set, "allreduce_async")
    op = _resolve_op(op, average, "allreduce_async")
    _check_tensor(tensor, "allreduce_async")
    return _allreduce_start(comm, tensor, _output_for(tensor), op, prescale_factor, postscale_factor, compression,
                            "allreduce_async", True)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None, compression=Compression.none):
    """Starts an in-place allreduce; synchronize(handle) returns tensor. Do not touch tensor until then."""
    comm = _core._comm_of(process_set, "allreduce_async_")
    op = _resolve_op(op, average, "allreduce_async_")
    return _allreduce_start(comm, tensor, tensor, op, prescale_factor, postscale_factor, compression,
                            "allreduce_async_", True)


def _grouped_start(comm, tensors, outputs, op, prescale_factor, postscale_factor, compression, what, async_):
    tensors = _core._list_arg(tensors, what)
    for t in tensors:
        _check_tensor(t, what)
        _scales(t, prescale_factor, postscale_factor, what)
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError(f"{what}: the tensors are on different devices ({', '.join(map(str, devices))})")
    if op == Adasum:
        outs = _adasum_start(comm, tensors, outputs, prescale_factor, postscale_factor, compression, what)
        return _core._completed(outs) if async_ else outs
    compression = compression or Compression.none
    # One fused buffer per wire dtype (in order of first appearance, the same on every rank).
    groups = {}
    with torch.no_grad():
        wires = []
        for i, t in enumerate(tensors):
            w, ctx = compression.compress(t)
            wires.append((w, ctx))
            groups.setdefault(w.dtype, []).append(i)
        fused = []
        for dt, idx in groups.items():
            parts = [_host(wires[i][0]).reshape(-1) for i in idx]
            flat = _fusion_buffer(comm, dt, sum(p.numel() for p in parts), parts[0].device)
            if len(parts) > 1:
                torch.cat(parts, out=flat)
            else:
                flat.copy_(parts[0])
            if prescale_factor != 1.0:
                flat.copy_(_scale(flat, prescale_factor))
            fused.append((dt, idx, flat))

    def finish():
        with torch.no_grad():
            for dt, idx, flat in fused:
                if postscale_factor != 1.0:
                    flat.copy_(_scale(flat, postscale_factor))
                off = 0
                for i in idx:
                    n = tensors[i].numel()
                    part = compression.decompress(flat[off:off + n].view(tensors[i].shape), wires[i][1])
                    _put_back(part, outputs[i])
                    off += n
        return outputs

    if async_:
        # One handle per fused buffer, chained: the last one's finish unpacks everything.
        handles = []
        for k, (dt, idx, flat) in enumerate(fused):
            code = _TORCH_DTYPES[dt]
            h = Handle(finish if k == len(fused) - 1 else None, (tensors, outputs, fused))
            handles.append(_core._start(h, lambda w, f=flat, c=code: _iallreduce_call(comm, f, f, c, op, w)))
        return _GroupHandle(handles)
    for dt, idx, flat in fused:
        _core._check(_allreduce_call(comm, flat, flat, _TORCH_DTYPES[dt], op), what)
    return finish()


# Over this size a fused buffer comes from the shared arena (zero copy). Measured (bench/torch_vs_gloo.py grouped,
# 2 ranks): 1.3x to 2.3x faster than staged from 4 MiB to 256 MiB, and no gain at 256 KiB (0.76x to 0.91x in three
# runs, where the same bench gives 0.85x with both staged: the order of its turns).
_ZERO_COPY_MIN_BYTES = 1 << 20


def _fusion_buffer(comm, dtype, numel, device):
    """A 1-D tensor for a fused reduction: on device for CUDA tensors; on the CPU in the shared arena (zero copy) when
    it is large enough and the transport has one, else ordinary memory. Never handed to the caller: the results are
    copied out of it."""
    if device.type != "cpu":
        return torch.empty(numel, dtype=dtype, device=device)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if nbytes > _ZERO_COPY_MIN_BYTES:
        buf = _core._arena_buffer(comm, nbytes)
        if buf is not None:
            return torch.frombuffer(buf, dtype=dtype)
    return torch.empty(numel, dtype=dtype)


class _GroupHandle(Handle):
    """The handle of a grouped call: several fused reductions, one result list."""
    __slots__ = ("_parts",)

    def __init__(self, parts):
        super().__init__(None, None)
        self._parts = parts

    def _release(self):
        for h in self._parts:
            h._release()


def _group_poll(h):
    return all(_core.poll(p) for p in h._parts)


def _group_sync(h):
    res = None
    for p in h._parts:
        res = _core.synchronize(p)
    return res


def poll(handle):
    """True once the work of handle has completed; never blocks."""
    if isinstance(handle, _GroupHandle):
        return _group_poll(handle)
    if isinstance(handle, _named.NamedHandle):
        return _named.poll(handle, poll)
    return _core.poll(handle)


def synchronize(handle):
    """Waits for the work of handle (from any *_async call) and returns its result."""
    if isinstance(handle, _GroupHandle):
        return _group_sync(handle)
    if isinstance(handle, _named.NamedHandle):
        return _named.synchronize(handle, synchronize)
    if _timed_handles:
        timed = _timed_handles.pop(handle, None)
        if timed is not None:
            out = _core.synchronize(handle)
            _timeline.span(timed[0], timed[1], timed[2])
            return out
    return _core.synchronize(handle)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """New tensors: each of tensors reduced over the ranks, in one fused allreduce per dtype."""
    comm = _core._comm_of(process_set, "grouped_allreduce")
    op = _resolve_op(op, average, "grouped_allreduce")
    tensors = _core._list_arg(tensors, "grouped_allreduce")
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
        if op not in (Average, Sum, Adasum):
            raise ValueError("grouped_allreduce: only Average, Sum and Adasum are differentiable")
        return list(_GroupedAllreduceFunction.apply(comm, op, prescale_factor, postscale_factor, compression,
                                                    *tensors))
    outs = [_output_for(t) if isinstance(t, torch.Tensor) else None for t in tensors]
    return _grouped_start(comm, tensors, outs, op, prescale_factor, postscale_factor, compression, "grouped_allreduce",
                          False)


class _GroupedAllreduceFunction(torch.autograd.Function):
    """grouped_allreduce as a differentiable op (as in Horovod): the gradients are the same grouped reduction of the
    incoming gradients."""

    @staticmethod
    def forward(ctx, comm, op, pre, post, compression, *tensors):
        ctx.args = (_named.ordered(comm), op, pre, post, compression)
        return tuple(_grouped_start(comm, list(tensors), [_output_for(t) for t in tensors], op, pre, post,
                                    compression, "grouped_allreduce", False))

    @staticmethod
    def backward(ctx, *grads):
        comm, op, pre, post, compression = ctx.args
        gs = [g.contiguous() for g in grads]
        out = _grouped_start(comm, gs, [_output_for(g) for g in gs], op, pre, post, compression,
                             "grouped_allreduce (backward)", False)
        return (None, None, None, None, None) + tuple(out)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=None, compression=Compression.none):
    comm = _core._comm_of(process_set, "grouped_allreduce_")
    op = _resolve_op(op, average, "grouped_allreduce_")
    tensors = _core._list_arg(tensors, "grouped_allreduce_")
    return _grouped_start(comm, tensors, list(tensors), op, prescale_factor, postscale_factor, compression,
                          "grouped_allreduce_", False)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=None, compression=Compression.none):
    comm = _core._comm_of(process_set, "grouped_allreduce_async")
    op = _resolve_op(op, average, "grouped_allreduce_async")
    outs = [_output_for(t) if isinstance(t, torch.Tensor) else None
            for t in _core._list_arg(tensors, "grouped_allreduce_async")]
    return _grouped_start(comm, tensors, outs, op, prescale_factor, postscale_factor, compression,
                          "grouped_allreduce_async", True)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=None, compression=Compression.none):
    comm = _core._comm_of(process_set, "grouped_allreduce_async_")
    op = _resolve_op(op, average, "grouped_allreduce_async_")
    tensors = _core._list_arg(tensors, "grouped_allreduce_async_")
    return _grouped_start(comm, tensors, list(tensors), op, prescale_factor, postscale_factor, compression,
                          "grouped_allreduce_async_", True)


# ---- broadcast, allgather, reducescatter ----


def _broadcast_start(comm, tensor, output, root_rank, what, async_):
    _check_tensor(tensor, what)
    _core._root(comm, root_rank, what)
    with torch.no_grad():
        src = _host(tensor)
        buf = src if (src is tensor and output is tensor) else src.clone()

    def finish():
        with torch.no_grad():
            return _put_back(buf, output)

    dt = _TORCH_DTYPES[buf.dtype]
    if async_:
        if buf.is_cuda:
            return _core._start(Handle(finish, (tensor, buf, output)),
                                lambda w: _tag_shape(buf) or _c.cohort_ibroadcast_stream(
                                    comm, _p(buf), buf.numel(), dt, root_rank, _stream(buf), w))
        return _core._start(Handle(finish, (tensor, buf, output)),
                            lambda w: _tag_shape(buf) or _c.cohort_ibroadcast(comm, _p(buf), buf.numel(), dt,
                                                                              root_rank, w))
    _tag_shape(buf)
    if buf.is_cuda:
        _core._check(_c.cohort_broadcast_stream(comm, _p(buf), buf.numel(), dt, root_rank, _stream(buf)))
    else:
        _core._check(_c.cohort_broadcast(comm, _p(buf), buf.numel(), dt, root_rank))
    return finish()


def broadcast(tensor, root_rank, name=None, process_set=None):
    """A new tensor holding root_rank's tensor (root_rank: a rank of the job, also with process_set=, as in Horovod).
    Differentiable (as in Horovod: the root's gradient is the average of the incoming gradients, the others' zero)."""
    comm = _core._comm_of(process_set, "broadcast")
    root = _core._set_root(comm, process_set, root_rank, "broadcast")
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled():
        return _BroadcastFunction.apply(tensor, comm, root)
    return _broadcast_start(comm, tensor, _output_for(tensor), root, "broadcast", False)


class _BroadcastFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, comm, root):
        ctx.comm, ctx.root = _named.ordered(comm), root
        return _broadcast_start(comm, tensor, _output_for(tensor), root, "broadcast", False)

    @staticmethod
    def backward(ctx, grad):
        g = _allreduce_start(ctx.comm, grad.contiguous(), _output_for(grad), Average, 1.0, 1.0, None,
                             "broadcast (backward)", False)
        if _c.cohort_rank(ctx.comm) != ctx.root:
            g.zero_()
        return g, None, None


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """In place: tensor becomes root_rank's tensor. Returns tensor."""
    comm = _core._comm_of(process_set, "broadcast_")
    root = _core._set_root(comm, process_set, root_rank, "broadcast_")
    return _broadcast_start(comm, tensor, tensor, root, "broadcast_", False)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    comm = _core._comm_of(process_set, "broadcast_async")
    root = _core._set_root(comm, process_set, root_rank, "broadcast_async")
    return _broadcast_start(comm, tensor, _output_for(tensor), root, "broadcast_async", True)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    comm = _core._comm_of(process_set, "broadcast_async_")
    root = _core._set_root(comm, process_set, root_rank, "broadcast_async_")
    return _broadcast_start(comm, tensor, tensor, root, "broadcast_async_", True)


def allgather(tensor, name=None, process_set=None):
    """Every rank's tensor concatenated along dimension 0 (ranks may pass different first dimensions).
    Differentiable (as in Horovod: the gradient is this rank's rows of the average of the incoming gradients)."""
    comm = _core._comm_of(process_set, "allgather")
    _check_tensor(tensor, "allgather")
    if tensor.requires_grad and torch.is_grad_enabled():
        return _AllgatherFunction.apply(tensor, comm)
    return _allgather(comm, tensor)


class _AllgatherFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, comm):
        ctx.comm, ctx.dim = _named.ordered(comm), tensor.shape[0]
        return _allgather(comm, tensor)

    @staticmethod
    def backward(ctx, grad):
        comm = ctx.comm
        g = _allreduce_start(comm, grad.contiguous(), _output_for(grad), Average, 1.0, 1.0, None,
                             "allgather (backward)", False)
        dims = _allgather(comm, torch.tensor([ctx.dim], dtype=torch.int64))
        r = _c.cohort_rank(comm)
        offset = int(dims[:r].sum()) if r else 0
        return g.narrow(0, offset, ctx.dim), None


def _allgather(comm, tensor):
    with torch.no_grad():
        src = _host(tensor)
        firsts = _core._gather_headers(comm, tuple(src.shape), _TORCH_DTYPES[src.dtype], "allgather")
        if src.is_cuda and len(set(firsts)) == 1:  # equal parts: the device allgather, on the device
            out = torch.empty((sum(firsts),) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
            _core._check(_c.cohort_allgather_stream(comm, _p(src), _p(out), src.numel(),
                                                    _TORCH_DTYPES[src.dtype], _stream(src)), "allgather")
            return out
        if src.is_cuda:
            src = src.cpu()
        out = torch.empty((sum(firsts),) + tuple(src.shape[1:]), dtype=src.dtype)
        row = src.element_size() * (src[0].numel() if src.shape[0] > 0 else int(np.prod(src.shape[1:])))
        _core._allgatherv_bytes(comm, _bytes(src), firsts, row, _bytes(out))
        return out.to(tensor.device) if tensor.device.type != "cpu" else out


def allgather_async(tensor, name=None, process_set=None):
    """allgather in the background: the ranks' first dimensions are exchanged now (a small blocking allgather, which
    also refuses tensors that disagree, on every rank), the data moves after the call returns, and
    synchronize(handle) returns the result. A CUDA tensor, or one that needs a gradient, is gathered now (the
    handle is complete)."""
    comm = _core._comm_of(process_set, "allgather_async")
    _check_tensor(tensor, "allgather_async")
    if tensor.device.type != "cpu" or (tensor.requires_grad and torch.is_grad_enabled()):
        return _core._completed(allgather(tensor, name, process_set=process_set))
    with torch.no_grad():
        src = _host(tensor)
        firsts = _core._gather_headers(comm, tuple(src.shape), _TORCH_DTYPES[src.dtype], "allgather_async")
        out = torch.empty((sum(firsts),) + tuple(src.shape[1:]), dtype=src.dtype)
        row = src.element_size() * int(np.prod(src.shape[1:], dtype=np.int64))
        counts = np.array([f * row for f in firsts], np.uintp)
        sb, ob = _bytes(src), _bytes(out)
        h = _core.Handle(lambda: out, (src, out, sb, ob, counts))
        return _core._start(h, lambda w: _c.cohort_iallgatherv(comm, _core._ptr(sb), _core._ptr(ob), _core._ptr(counts),
                                                               None, _lib.U8, w))


def reducescatter(tensor, op=Average, name=None, compression=Compression.none, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """tensor reduced over the ranks, then split along dimension 0: rank r gets its part (the first
    dim % size ranks get one row more, as in Horovod). Differentiable (as in Horovod: the gradient is the allgather
    of the incoming gradients, times size for op=Sum, times the scaling factors)."""
    comm = _core._comm_of(process_set, "reducescatter")
    _check_tensor(tensor, "reducescatter")
    op = _core._op(op)
    if tensor.dim() == 0:
        raise ValueError("reducescatter: a scalar cannot be scattered along dimension 0")
    _scales(tensor, prescale_factor, postscale_factor, "reducescatter")
    if tensor.requires_grad and torch.is_grad_enabled():
        return _ReducescatterFunction.apply(tensor, comm, op, compression, prescale_factor, postscale_factor)
    return _reducescatter(comm, tensor, op, compression, prescale_factor, postscale_factor)


class _ReducescatterFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, comm, op, compression, pre, post):
        ctx.args = (_named.ordered(comm), op, pre, post)
        return _reducescatter(comm, tensor, op, compression, pre, post)

    @staticmethod
    def backward(ctx, grad):
        comm, op, pre, post = ctx.args
        if op == Sum:
            grad = grad * _c.cohort_size(comm)
        grad = grad * pre * post if (pre != 1.0 or post != 1.0) else grad
        return _allgather(comm, grad.contiguous()), None, None, None, None, None


def _reducescatter(comm, tensor, op, compression, prescale_factor, postscale_factor):
    n, r = _c.cohort_size(comm), _c.cohort_rank(comm)
    with torch.no_grad():
        wire, ctx = (compression or Compression.none).compress(tensor)
        if prescale_factor != 1.0:
            wire = _scale(wire, prescale_factor)
        src = _host(wire)
        rows = [src.shape[0] // n + (1 if i < src.shape[0] % n else 0) for i in range(n)]
        dt = _TORCH_DTYPES[src.dtype]
        if src.shape[0] % n == 0:
            out = torch.empty((rows[r],) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
            if src.is_cuda:
                _core._check(_c.cohort_reduce_scatter_stream(comm, _p(src), _p(out), src.numel() // n, dt, op,
                                                             _stream(src)))
            else:
                _core._check(_c.cohort_reduce_scatter(comm, _p(src), _p(out), src.numel() // n, dt, op))
        else:
            full = _like(src)
            _core._check(_allreduce_call(comm, src, full, dt, op))
            start = sum(rows[:r])
            out = full[start:start + rows[r]].clone()
        out = _scale(out, postscale_factor)
        out = (compression or Compression.none).decompress(out, ctx)
        return out.to(tensor.device) if tensor.device.type != "cpu" else out


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter in the background; synchronize(handle) returns this rank's part. An even split is one
    reduce-scatter; an uneven one (dim % size != 0) an allreduce, whose part this rank keeps. A CUDA tensor, or one
    that needs a gradient, is reduced now (the handle is complete)."""
    comm = _core._comm_of(process_set, "reducescatter_async")
    _check_tensor(tensor, "reducescatter_async")
    if tensor.device.type != "cpu" or (tensor.requires_grad and torch.is_grad_enabled()):
        return _core._completed(reducescatter(tensor, op=op, name=name, process_set=process_set,
                                              prescale_factor=prescale_factor, postscale_factor=postscale_factor))
    op = _core._op(op)
    if tensor.dim() == 0:
        raise ValueError("reducescatter_async: a scalar cannot be scattered along dimension 0")
    _scales(tensor, prescale_factor, postscale_factor, "reducescatter_async")
    n, r = _c.cohort_size(comm), _c.cohort_rank(comm)
    with torch.no_grad():
        src = _host(_scale(tensor, prescale_factor) if prescale_factor != 1.0 else tensor)
        rows = [src.shape[0] // n + (1 if i < src.shape[0] % n else 0) for i in range(n)]
        dt = _TORCH_DTYPES[src.dtype]
        if src.shape[0] % n == 0:
            out = torch.empty((rows[r],) + tuple(src.shape[1:]), dtype=src.dtype)
            h = _core.Handle(lambda: _scale(out, postscale_factor), (src, out))
            return _core._start(h, lambda w: _c.cohort_ireduce_scatter(comm, _p(src), _p(out), src.numel() // n, dt,
                                                                       op, w))
        full = _like(src)
        start = sum(rows[:r])
        h = _core.Handle(lambda: _scale(full[start:start + rows[r]].clone(), postscale_factor), (src, full))
        return _core._start(h, lambda w: _iallreduce_call(comm, src, full, dt, op, w))


def grouped_allgather(tensors, name=None, process_set=None):
    """[allgather(t) for t in tensors], each differentiable as allgather is."""
    tensors = _core._list_arg(tensors, "grouped_allgather")
    return [allgather(t, process_set=process_set) for t in tensors]


def grouped_allgather_async(tensors, name=None, process_set=None):
    """grouped_allgather, run now; the handle returns the list of results."""
    return _core._completed(grouped_allgather(tensors, name, process_set=process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    """[reducescatter(t) for t in tensors], each differentiable as reducescatter is."""
    tensors = _core._list_arg(tensors, "grouped_reducescatter")
    return [reducescatter(t, op=op, compression=compression, process_set=process_set,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor) for t in tensors]


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None, prescale_factor=1.0,
                                postscale_factor=1.0):
    """grouped_reducescatter, run now; the handle returns the list of results."""
    return _core._completed(grouped_reducescatter(tensors, name, op=op, process_set=process_set,
                                                  prescale_factor=prescale_factor,
                                                  postscale_factor=postscale_factor))


# ---- alltoall ----


def _alltoall(comm, tensor, splits, what):
    """(output, received splits as int32): rows splits[p] of tensor (in order along dimension 0) go to rank p; the
    rows from every rank are concatenated in rank order. Every rank first learns every rank's dtype, trailing shape
    and splits (one allgather), so that a mismatch raises MismatchError on every rank before any data moves."""
    _check_tensor(tensor, what)
    n, me = _c.cohort_size(comm), _c.cohort_rank(comm)
    if tensor.dim() == 0:
        raise ValueError(f"{what}: a scalar cannot be split along dimension 0 (give it one dimension)")
    if tensor.dim() > _core._MAX_NDIM:
        raise ValueError(f"{what}: at most {_core._MAX_NDIM} dimensions")
    first = tensor.shape[0]
    if splits is None:
        if first % n:
            raise ValueError(f"{what}: the first dimension ({first}) is not a multiple of the {n} ranks; give splits")
        sp = [first // n] * n
    else:
        if isinstance(splits, torch.Tensor):
            if splits.dtype != torch.int32:
                raise ValueError(f"{what}: splits must be an int32 tensor, got {splits.dtype}")
            sp = [int(v) for v in splits.reshape(-1).tolist()]
        elif isinstance(splits, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in splits):
            sp = [int(v) for v in splits]
        else:
            raise ValueError(f"{what}: splits must be an int32 tensor or a list of ints, got {type(splits).__name__}")
        if len(sp) != n:
            raise ValueError(f"{what}: splits has {len(sp)} entries; the job has {n} ranks")
        if any(v < 0 for v in sp):
            raise ValueError(f"{what}: splits has a negative entry: {sp}")
        if sum(sp) > first:
            raise ValueError(f"{what}: the splits add up to {sum(sp)}, more than the first dimension ({first})")
    with torch.no_grad():
        src = tensor.detach()
        if src.is_cuda:
            src = src.cpu()
        src = src.contiguous()
        hdr = np.full(2 + _core._MAX_NDIM + n, -1, np.int64)
        hdr[0], hdr[1] = _TORCH_DTYPES[src.dtype], src.dim()
        hdr[2:1 + src.dim()] = src.shape[1:]
        hdr[2 + _core._MAX_NDIM:] = sp
        allh = np.empty((n, hdr.size), np.int64)
        _core._check(_c.cohort_allgather(comm, _core._ptr(hdr), _core._ptr(allh), hdr.size, _lib.I64), what)
        for r in range(n):
            if not np.array_equal(allh[r, :2 + _core._MAX_NDIM], hdr[:2 + _core._MAX_NDIM]):
                def desc(h):
                    return (f"dtype {_core._lib_dtype_name(h[0])}, trailing shape "
                            f"{tuple(int(v) for v in h[2:1 + h[1]])}")
                raise MismatchError(_lib.ERR_MISMATCH, f"{what}: rank {me} has {desc(hdr)}, rank {r} has "
                                    f"{desc(allh[r])}: the tensors must agree in dtype and in every dimension but "
                                    f"the first")
        recv = [int(allh[p, 2 + _core._MAX_NDIM + me]) for p in range(n)]
        row = int(np.prod(src.shape[1:], dtype=np.int64))
        out = torch.empty((sum(recv),) + tuple(src.shape[1:]), dtype=src.dtype)
        scounts = np.array([v * row for v in sp], np.uintp)
        rcounts = np.array([v * row for v in recv], np.uintp)
        dt = _TORCH_DTYPES[src.dtype]
        sbuf = src if src.numel() else torch.empty(1, dtype=src.dtype)
        rbuf = out if out.numel() else torch.empty(1, dtype=src.dtype)
        _core._check(_c.cohort_alltoallv(comm, _p(sbuf), _core._ptr(scounts), None, _p(rbuf), _core._ptr(rcounts),
                                         None, dt), what)
        if tensor.device.type != "cpu":
            out = out.to(tensor.device)
        return out, torch.tensor(recv, dtype=torch.int32)


class _AlltoallFunction(torch.autograd.Function):
    """alltoall as a differentiable op (as in Horovod): the gradient goes back by the alltoall with the received
    splits."""

    @staticmethod
    def forward(ctx, tensor, splits, comm):
        out, recv = _alltoall(comm, tensor, splits, "alltoall")
        ctx.comm, ctx.recv = _named.ordered(comm), recv
        ctx.mark_non_differentiable(recv)
        return out, recv

    @staticmethod
    def backward(ctx, grad, _dead):
        g, _ = _alltoall(ctx.comm, grad.contiguous(), ctx.recv, "alltoall (backward)")
        return g, None, None


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Rows of tensor scattered to the ranks (splits[p] rows to rank p, in order; None: equal parts) and the rows
    every rank sent here, concatenated in rank order. Returns the tensor, and with splits given also the received
    splits (int32), as Horovod does. Differentiable."""
    comm = _core._comm_of(process_set, "alltoall")
    _check_tensor(tensor, "alltoall")
    if tensor.requires_grad and torch.is_grad_enabled():
        out, recv = _AlltoallFunction.apply(tensor, splits, comm)
    else:
        out, recv = _alltoall(comm, tensor, splits, "alltoall")
    return out if splits is None else (out, recv)


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    """alltoall, run now (the receive sizes need the splits first); synchronize(handle) returns (tensor, received
    splits), as Horovod's does."""
    comm = _core._comm_of(process_set, "alltoall_async")
    return _core._completed(_alltoall(comm, tensor, splits, "alltoall_async"))


# ---- sparse tensors ----


def sparse_allreduce_async(tensor, name, op, process_set=None):
    """As Horovod: allgathers the indices and values of a sparse tensor (the sum of sparse tensors is their
    concatenation). Returns a function that, called, returns the reduced (uncoalesced) sparse tensor."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise TypeError("sparse_allreduce_async: expected a sparse torch.Tensor")
    op = _core._op(op)
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async: op must be Average or Sum")
    ps = process_set
    t = tensor
    indices = allgather(t._indices().transpose(0, 1).contiguous(), process_set=ps)
    values = allgather(t._values(), process_set=ps)
    n = _c.cohort_size(_core._comm_of(ps, "sparse_allreduce_async"))

    def handle():
        v = values / n if op == Average else values
        if indices.dim() == 0 or v.dim() == 0:
            return t.new().resize_as_(t)
        return torch.sparse_coo_tensor(indices.transpose(0, 1), v, t.size())

    return handle


# ---- Horovod's other names ----


def start_timeline(file_path, mark_cycles=False):
    """Horovod's runtime timeline: from now on rank 0 records each collective call of cohort.torch (a row per tensor
    name; NEGOTIATE_<OP> while a named call waits for the other ranks, then <OP>), and with mark_cycles its
    coordinator's rounds (CYCLE_START); stop_timeline() writes it to file_path as a Chrome trace. A start with another
    file writes the first one. The DDP engine's buckets are in COHORT_TIMELINE's timeline instead (docs/env.md)."""
    _timeline.start(file_path, mark_cycles, _core.rank())


def stop_timeline():
    """Writes the timeline that start_timeline began (rank 0; atomically), and stops recording."""
    _timeline.stop()


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Horovod's SyncBatchNorm: batch normalization whose batch statistics (training) are those of the whole
    batch over every rank (of process_set), computed with an allreduce of the per-rank count, sum and sum of
    squares; the backward allreduces the gradient sums. On CPU and CUDA tensors alike."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if not (self.training and self.track_running_stats) and self.running_mean is not None \
                and not self.training:
            return torch.nn.functional.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                                  self.bias, False, 0.0, self.eps)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        comm = _core._comm_of(self.process_set, "SyncBatchNorm")
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, self.running_mean, self.running_var,
                                            self.eps, momentum, comm)


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, comm):
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        xf = x.double()
        stats = torch.cat([torch.tensor([float(x.numel() // c)], dtype=torch.float64, device=x.device),
                           xf.sum(dims), (xf * xf).sum(dims)])
        stats = _allreduce_start(comm, stats, _output_for(stats), Sum, 1.0, 1.0, None, "SyncBatchNorm", False)
        count = stats[0]
        mean = stats[1:1 + c] / count
        var = stats[1 + c:] / count - mean * mean
        invstd = torch.rsqrt(var.clamp_min(0) + eps)
        if running_mean is not None:
            with torch.no_grad():
                unbiased = var * count / max(float(count) - 1, 1.0)
                running_mean.mul_(1 - momentum).add_(momentum * mean.to(running_mean.dtype))
                running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))
        shape = [1, c] + [1] * (x.dim() - 2)
        xhat = (xf - mean.view(shape)) * invstd.view(shape)
        y = xhat
        if weight is not None:
            y = y * weight.double().view(shape) + bias.double().view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.count, ctx.comm, ctx.dims, ctx.shape = count, comm, dims, shape
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xhat, invstd, weight = ctx.saved_tensors
        dims, shape = ctx.dims, ctx.shape
        dyf = dy.double()
        sum_dy = dyf.sum(dims)
        sum_dy_xhat = (dyf * xhat).sum(dims)
        g = torch.cat([sum_dy, sum_dy_xhat])
        g = _allreduce_start(ctx.comm, g, _output_for(g), Sum, 1.0, 1.0, None, "SyncBatchNorm (backward)", False)
        c = sum_dy.numel()
        mean_dy, mean_dy_xhat = g[:c] / ctx.count, g[c:] / ctx.count
        w = weight.double().view(shape) if weight is not None else 1.0
        dx = (dyf - mean_dy.view(shape) - xhat * mean_dy_xhat.view(shape)) * invstd.view(shape) * w
        dw = db = None
        if weight is not None:
            dw, db = sum_dy_xhat.to(weight.dtype), sum_dy.to(weight.dtype)
        return dx.to(dy.dtype), dw, db, None, None, None, None, None


# ---- parameters and optimizer state ----


def broadcast_parameters(params, root_rank):
    """Copies root_rank's values into params, in place: a state_dict, or named_parameters() (pairs), on every
    rank in the same order."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        items = list(params)
        for it in items:
            if not (isinstance(it, tuple) and len(it) == 2):
                raise ValueError("broadcast_parameters: expected a state_dict or (name, tensor) pairs")
    else:
        raise ValueError(f"broadcast_parameters: invalid params of type {type(params).__name__}")
    handles = []
    for _, p in items:
        if p is None:
            continue
        t = p.data if isinstance(p, torch.nn.Parameter) else p
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"broadcast_parameters: {type(t).__name__} is not a tensor")
        handles.append(broadcast_async_(t, root_rank))
    for h in handles:
        synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank):
    """Copies root_rank's optimizer state (its state_dict: hyperparameters and per-parameter state) to every
    rank. The optimizers must hold the same parameters in the same order."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"broadcast_optimizer_state: expected a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")
    state = broadcast_object(optimizer.state_dict() if rank() == root_rank else None, root_rank)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


# ---- names of operations in flight ----

# Horovod matches operations by name: a call with name= waits until every rank has issued that name, and the ranks
# then run their named calls in one agreed order, whatever order each issued them in (_named.py). A call without a
# name runs at once, in call order, as before. Horovod refuses an async operation whose name is that of one still in
# flight on this rank (its tests check it); so does cohort, also where names are not matched (a one-rank job, the MPI
# transport), where the handle is held weakly: a handle that was dropped is no longer in flight for this purpose.
_in_flight = {}  # (process set's id, name) -> weakref to the handle (names not matched)
_tls = threading.local()  # .named: this thread is running a named call (the calls it makes are part of it)


_INLINE = {allreduce: None, allreduce_: None}  # fn -> (its named call, its timed call) (set by _by_name)


def _by_name(fn, blocking):
    params = list(inspect.signature(fn).parameters)
    at_name, at_set = params.index("name"), params.index("process_set")

    def start(args, kwargs, twin_set):
        args, kwargs = list(args), dict(kwargs)
        if len(args) > at_set:
            args[at_set] = twin_set
        else:
            kwargs["process_set"] = twin_set
        return direct(args, kwargs)

    def direct(args, kwargs):  # fn itself: the calls it makes are not named calls of their own
        outer, _tls.named = getattr(_tls, "named", False), True
        try:
            return fn(*args, **kwargs)
        finally:
            _tls.named = outer

    def call(name, args, kwargs):
        ps = kwargs["process_set"] if "process_set" in kwargs else (args[at_set] if len(args) > at_set else None)
        if not isinstance(name, str):
            raise TypeError(f"{fn.__name__}: name must be a str, got {type(name).__name__}")
        m = _named.matcher(ps, fn.__name__)
        if m is not None:
            return m.submit(name, fn.__name__, lambda twin_set: start(args, kwargs, twin_set), blocking)
        if blocking:
            return direct(args, kwargs) if not _timeline.on else _timed(fn, True, lambda: direct(args, kwargs), name)
        key = (0 if ps is None or ps is _core.global_process_set else id(ps), name)
        ref = _in_flight.get(key)
        earlier = ref() if ref is not None else None
        if earlier is not None and not poll(earlier):
            raise ValueError(f"{fn.__name__}: an operation named '{name}' is still in flight on this rank (as in "
                             f"Horovod, a name may not be reused until that operation has completed)")
        handle = (direct(args, kwargs) if not _timeline.on else
                  _timed(fn, False, lambda: direct(args, kwargs), name))
        _in_flight[key] = weakref.ref(handle)
        return handle

    if fn in _INLINE:  # the hot paths check the name themselves (one test less than a wrapper's call)
        _INLINE[fn] = (call, lambda args, kwargs: _timed(fn, blocking, lambda: direct(args, kwargs)))
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        name = kwargs["name"] if "name" in kwargs else (args[at_name] if len(args) > at_name else None)
        if getattr(_tls, "named", False):
            return fn(*args, **kwargs)
        if name is None:
            return fn(*args, **kwargs) if not _timeline.on else _timed(fn, blocking, lambda: direct(args, kwargs))
        return call(name, args, kwargs)
    return wrapper


_timed_handles = weakref.WeakKeyDictionary()  # an async call's handle -> (its timeline row, phase, start)


def _timed(fn, blocking, run, name=None):
    """A call that is not matched by name while hvd.start_timeline runs: run() on the timeline, on a row of its own
    (Horovod's tensor name)."""
    kind = _named.op_kind(fn.__name__)
    row, begin = _timeline.row(kind.lower(), name), _timeline.now()
    out = run()
    if blocking:
        _timeline.span(row, kind, begin)
    elif isinstance(out, Handle):
        _timed_handles[out] = (row, kind, begin)
    return out


def _named_call(fn, name, args, kwargs):
    """A call of a hot path (allreduce, allreduce_) with name= or while the timeline runs: as _by_name's wrapper; None
    inside a named or timed call (fn's own body goes on)."""
    if getattr(_tls, "named", False):
        return None
    if name is None:
        return _INLINE[fn][1](args, kwargs)
    return _INLINE[fn][0](name, args, kwargs)


for _fn in (allreduce_async, allreduce_async_, grouped_allreduce_async, grouped_allreduce_async_, broadcast_async,
            broadcast_async_, allgather_async, reducescatter_async, grouped_allgather_async,
            grouped_reducescatter_async, alltoall_async):
    globals()[_fn.__name__] = _by_name(_fn, blocking=False)
for _fn in (allreduce, allreduce_, grouped_allreduce, grouped_allreduce_, broadcast, broadcast_, allgather,
            reducescatter, grouped_allgather, grouped_reducescatter, alltoall):
    globals()[_fn.__name__] = _by_name(_fn, blocking=True)
del _fn

from cohort.torch._engine import DistributedDataParallel, DistributedOptimizer, join  # noqa: E402,F401

# torch.distributed's backend "cohort": dist.init_process_group("cohort") (docs/torch.md).
from cohort.torch import _adasum  # noqa: E402
from cohort.torch import elastic  # noqa: E402,F401 (hvd.elastic: run, TorchState, ObjectState, ElasticSampler)
from cohort.torch import _backend  # noqa: E402

_backend.register()
