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
import os

import numpy as np
import torch

import cohort as _core
from cohort import __version__  # noqa: F401
from cohort import _lib
from cohort import (AuthError, CohortError, Handle, InvalidArgumentError, MismatchError, RemoteError,  # noqa: F401
                    TimeoutError, Adasum, Average, Max, Min, Product, Sum, allgather_object, barrier,
                    broadcast_object, cross_rank, cross_size, is_initialized, local_rank, local_size,
                    rank, shutdown, size, transport, mpi_threads_supported, abort, ProcessSet,
                    global_process_set, add_process_set, remove_process_set, new_group)
from cohort._lib import lib as _c
from cohort.torch._tensors import (_TORCH_DTYPES, BF16Compressor, Compression, Compressor,  # noqa: F401
                                   FP16Compressor, NoneCompressor, _allreduce_call, _bytes, _check_tensor,
                                   _cuda_direct, _host, _iallreduce_call, _like, _p, _put_back, _stream)


def init(comm=None):
    """cohort.init(), and, for a task of a Slurm step started with --cpus-per-task=C (and no OMP_NUM_THREADS of the
    user's), torch.set_num_threads(C): the CPUs Slurm gave the task, where torch would take every CPU of the node."""
    _core.init(comm)
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit() and int(cpus) > 0 and os.environ.get("SLURM_STEP_ID") and not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(cpus))


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
    return False


def gloo_enabled():
    return False


# ---- arguments ----


def _scales(tensor, prescale_factor, postscale_factor, what):
    if (prescale_factor != 1.0 or postscale_factor != 1.0) and not tensor.dtype.is_floating_point:
        raise ValueError(f"{what}: prescale_factor/postscale_factor apply to floating-point tensors only")


def _resolve_op(op, average, what):
    if average is not None:
        if op is not None:
            raise ValueError(f"{what}: give op or average, not both")
        return Average if average else Sum
    return _core._op(op)


# ---- allreduce ----


def _allreduce_start(comm, tensor, output, op, prescale_factor, postscale_factor, compression, what, async_):
    """Reduces tensor into output (which may be tensor itself) over comm; returns a Handle (async_) or output."""
    _check_tensor(tensor, what)
    _scales(tensor, prescale_factor, postscale_factor, what)
    compression = compression or Compression.none
    with torch.no_grad():
        wire, ctx = compression.compress(tensor)
        if prescale_factor != 1.0:
            wire = wire * prescale_factor
        src = _host(wire)
        # In place straight into the caller's memory when nothing had to be converted.
        dst = src if (src is tensor and output is tensor) else _like(src)

    def finish():
        with torch.no_grad():
            res = dst
            if postscale_factor != 1.0:
                res.mul_(postscale_factor)
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
        ctx.args = (comm, op, prescale_factor, postscale_factor, compression)  # backward reduces over the same ranks
        return _allreduce_start(comm, tensor, _output_for(tensor), op, prescale_factor, postscale_factor, compression,
                                "allreduce", False)

    @staticmethod
    def backward(ctx, grad):
        comm, op, pre, post, compression = ctx.args
        if op not in (Average, Sum):
            raise RuntimeError("allreduce: only Average and Sum are differentiable")
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
    if op is None and average is None:
        op = Average
    dt = _plain(tensor, op, average, prescale_factor, postscale_factor, compression)
    if dt is not None and process_set is None and _core._comm is not None:  # the hot path: one ctypes call
        out = torch.empty_like(tensor)
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
    if op is None and average is None:
        op = Average
    dt = _plain(tensor, op, average, prescale_factor, postscale_factor, compression)
    if dt is not None and process_set is None and _core._comm is not None:  # the hot path: one ctypes call
        ptr = tensor.data_ptr()
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
                flat.mul_(prescale_factor)
            fused.append((dt, idx, flat))

    def finish():
        with torch.no_grad():
            for dt, idx, flat in fused:
                if postscale_factor != 1.0:
                    flat.mul_(postscale_factor)
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
    return _core.poll(handle)


def synchronize(handle):
    """Waits for the work of handle (from any *_async call) and returns its result."""
    if isinstance(handle, _GroupHandle):
        return _group_sync(handle)
    return _core.synchronize(handle)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """New tensors: each of tensors reduced over the ranks, in one fused allreduce per dtype."""
    comm = _core._comm_of(process_set, "grouped_allreduce")
    op = _resolve_op(op, average, "grouped_allreduce")
    outs = [_output_for(t) if isinstance(t, torch.Tensor) else None
            for t in _core._list_arg(tensors, "grouped_allreduce")]
    return _grouped_start(comm, tensors, outs, op, prescale_factor, postscale_factor, compression, "grouped_allreduce",
                          False)


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
                                lambda w: _c.cohort_ibroadcast_stream(comm, _p(buf), buf.numel(), dt, root_rank,
                                                                      _stream(buf), w))
        return _core._start(Handle(finish, (tensor, buf, output)),
                            lambda w: _c.cohort_ibroadcast(comm, _p(buf), buf.numel(), dt, root_rank, w))
    if buf.is_cuda:
        _core._check(_c.cohort_broadcast_stream(comm, _p(buf), buf.numel(), dt, root_rank, _stream(buf)))
    else:
        _core._check(_c.cohort_broadcast(comm, _p(buf), buf.numel(), dt, root_rank))
    return finish()


def broadcast(tensor, root_rank, name=None, process_set=None):
    """A new tensor holding root_rank's tensor."""
    comm = _core._comm_of(process_set, "broadcast")
    return _broadcast_start(comm, tensor, _output_for(tensor), root_rank, "broadcast", False)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """In place: tensor becomes root_rank's tensor. Returns tensor."""
    comm = _core._comm_of(process_set, "broadcast_")
    return _broadcast_start(comm, tensor, tensor, root_rank, "broadcast_", False)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    comm = _core._comm_of(process_set, "broadcast_async")
    return _broadcast_start(comm, tensor, _output_for(tensor), root_rank, "broadcast_async", True)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    comm = _core._comm_of(process_set, "broadcast_async_")
    return _broadcast_start(comm, tensor, tensor, root_rank, "broadcast_async_", True)


def allgather(tensor, name=None, process_set=None):
    """Every rank's tensor concatenated along dimension 0 (ranks may pass different first dimensions)."""
    comm = _core._comm_of(process_set, "allgather")
    _check_tensor(tensor, "allgather")
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
    """allgather, run now; the handle returns its result (the uneven case needs the sizes first)."""
    return _core._completed(allgather(tensor, name, process_set=process_set))


def reducescatter(tensor, op=Average, name=None, compression=Compression.none, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """tensor reduced over the ranks, then split along dimension 0: rank r gets its part (the first
    dim % size ranks get one row more, as in Horovod)."""
    comm = _core._comm_of(process_set, "reducescatter")
    _check_tensor(tensor, "reducescatter")
    op = _core._op(op)
    if tensor.dim() == 0:
        raise ValueError("reducescatter: a scalar cannot be scattered along dimension 0")
    _scales(tensor, prescale_factor, postscale_factor, "reducescatter")
    n, r = _c.cohort_size(comm), _c.cohort_rank(comm)
    with torch.no_grad():
        wire, ctx = (compression or Compression.none).compress(tensor)
        if prescale_factor != 1.0:
            wire = wire * prescale_factor
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
        if postscale_factor != 1.0:
            out.mul_(postscale_factor)
        out = (compression or Compression.none).decompress(out, ctx)
        return out.to(tensor.device) if tensor.device.type != "cpu" else out


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


from cohort.torch._engine import DistributedDataParallel, DistributedOptimizer, join  # noqa: E402,F401

# torch.distributed's backend "cohort": dist.init_process_group("cohort") (docs/torch.md).
from cohort.torch import _backend  # noqa: E402

_backend.register()
