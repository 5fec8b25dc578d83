"""cohort.torch: Horovod's PyTorch API, and a DistributedDataParallel wrapper, over libcohort.

    import cohort.torch as hvd
    hvd.init()
    ...
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Tensors: float32, float64, float16, bfloat16, int32, int64, uint8. A contiguous CPU tensor is handed to the library
as it is (no copy); a non-contiguous one is made contiguous first (and the result copied back for the in-place
forms); a CUDA tensor is staged through pinned host memory and the result put back on its device. docs/torch.md
has the API table against Horovod and torch.distributed, and what differs.
"""
import ctypes
import functools
import inspect
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


def init(comm=None):
    """cohort.init(), and, for a task of a Slurm step started with --cpus-per-task=C (and no OMP_NUM_THREADS of the
    user's), torch.set_num_threads(C): the CPUs Slurm gave the task, where torch would take every CPU of the node."""
    _core.init(comm)
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit() and int(cpus) > 0 and os.environ.get("SLURM_STEP_ID") and not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(cpus))

def _in_process_set(fn):
    """fn's process_set= argument: the call runs on that set's communicator (cohort._on).

    The argument is found by its position, not by inspect's bind_partial: that cost 12 us a call, four times the
    rest of a one-float allreduce_ (bench/torch_vs_gloo.sh's binding overhead)."""
    at = list(inspect.signature(fn).parameters).index("process_set")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ps = args[at] if len(args) > at else kwargs.get("process_set")
        if ps is None:
            return fn(*args, **kwargs)
        with _core._on(ps, fn.__name__):
            return fn(*args, **kwargs)
    return wrapper


_TORCH_DTYPES = {torch.float32: _lib.F32, torch.float64: _lib.F64, torch.float16: _lib.F16,
                 torch.bfloat16: _lib.BF16, torch.int32: _lib.I32, torch.int64: _lib.I64, torch.uint8: _lib.U8}


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


# ---- compression (Horovod's Compression.none / fp16, plus bf16) ----


class Compressor:
    """compress(tensor) -> (tensor to send, context); decompress(tensor, context) -> tensor in the original dtype."""
    ddp_code = _lib.COMPRESS_NONE

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    pass


class _CastCompressor(Compressor):
    wire = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire:
            return tensor.to(cls.wire), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """Floating-point tensors travel as IEEE half; the sums are computed in float32 by the library."""
    wire = torch.float16
    ddp_code = _lib.COMPRESS_F16


class BF16Compressor(_CastCompressor):
    """Floating-point tensors travel as bfloat16 (float32's range, 8 bits of mantissa)."""
    wire = torch.bfloat16
    ddp_code = _lib.COMPRESS_BF16


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


# ---- tensors to pointers ----


def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in _TORCH_DTYPES:
        raise TypeError(f"{what}: unsupported dtype {tensor.dtype} (supported: float32, float64, float16, "
                        f"bfloat16, int32, int64, uint8)")
    if tensor.is_sparse:
        raise TypeError(f"{what}: sparse tensors are not supported")


def _direct(tensor):
    """True for a CUDA tensor that the library takes as it is (its device collectives: docs/gpu.md)."""
    return tensor.is_cuda and _cuda_direct()


_CUDA_DIRECT = None


def _cuda_direct():
    global _CUDA_DIRECT
    if _CUDA_DIRECT is None:
        _CUDA_DIRECT = bool(torch.cuda.is_available() and _c.cohort_cuda_available())
    return _CUDA_DIRECT


def _host(tensor):
    """A contiguous tensor the library can take: tensor itself when it already is one (no copy). CUDA tensors stay
    on their device when the library has its device collectives, else they are staged through host memory."""
    if tensor.device.type == "cpu" or _direct(tensor):
        return tensor if tensor.is_contiguous() else tensor.contiguous()
    # A device tensor without the device collectives: staged through pinned host memory.
    staged = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=torch.cuda.is_available())
    staged.copy_(tensor)
    return staged


def _stream(t):
    """The cudaStream_t of torch's current stream on t's device: the library orders the collective on it."""
    return ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream)


def _allreduce_call(comm, src, dst, dt, op):
    if src.is_cuda:
        return _c.cohort_allreduce_stream(comm, _p(src), _p(dst), src.numel(), dt, op, _stream(src))
    return _c.cohort_allreduce(comm, _p(src), _p(dst), src.numel(), dt, op)


def _iallreduce_call(comm, src, dst, dt, op, w):
    if src.is_cuda:
        return _c.cohort_iallreduce_stream(comm, _p(src), _p(dst), src.numel(), dt, op, _stream(src), w)
    return _c.cohort_iallreduce(comm, _p(src), _p(dst), src.numel(), dt, op, w)


def _put_back(result, dest):
    """Writes result into dest (in place) unless they are the same memory."""
    if result.data_ptr() != dest.data_ptr() or result.device != dest.device or not dest.is_contiguous():
        dest.copy_(result)
    return dest


def _like(tensor):
    return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)


def _p(t):
    return ctypes.c_void_p(t.data_ptr())


def _bytes(t):
    """A numpy uint8 array over a contiguous CPU tensor's memory (no copy)."""
    n = t.numel() * t.element_size()
    if n == 0:
        return np.empty(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(t.data_ptr()))


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


def _allreduce_start(tensor, output, op, prescale_factor, postscale_factor, compression, what, async_):
    """Reduces tensor into output (which may be tensor itself); returns a Handle (async_) or output."""
    _check_tensor(tensor, what)
    _scales(tensor, prescale_factor, postscale_factor, what)
    comm = _core._get_comm()
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
    def forward(ctx, tensor, op, prescale_factor, postscale_factor, compression):
        ctx.args = (op, prescale_factor, postscale_factor, compression)
        ctx.comm = _core._get_comm()  # the process set it ran on: backward reduces over the same ranks
        return _allreduce_start(tensor, _output_for(tensor), op, prescale_factor, postscale_factor, compression,
                                "allreduce", False)

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, compression = ctx.args
        if op not in (Average, Sum):
            raise RuntimeError("allreduce: only Average and Sum are differentiable")
        g = grad.contiguous()
        prev = getattr(_core._state, "comm", None)
        _core._state.comm = ctx.comm
        try:
            return (_allreduce_start(g, _output_for(g), op, pre, post, compression, "allreduce (backward)", False),
                    None, None, None, None)
        finally:
            _core._state.comm = prev


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


@_in_process_set
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
    op = _resolve_op(op, average, "allreduce")
    _check_tensor(tensor, "allreduce")
    if tensor.requires_grad and torch.is_grad_enabled():
        return _AllreduceFunction.apply(tensor, op, prescale_factor, postscale_factor, compression)
    return _allreduce_start(tensor, _output_for(tensor), op, prescale_factor, postscale_factor, compression,
                            "allreduce", False)


@_in_process_set
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
    op = _resolve_op(op, average, "allreduce_")
    return _allreduce_start(tensor, tensor, op, prescale_factor, postscale_factor, compression, "allreduce_", False)


@_in_process_set
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None, compression=Compression.none):
    """Starts allreduce and returns a handle; synchronize(handle) returns the new tensor."""
    op = _resolve_op(op, average, "allreduce_async")
    _check_tensor(tensor, "allreduce_async")
    return _allreduce_start(tensor, _output_for(tensor), op, prescale_factor, postscale_factor, compression,
                            "allreduce_async", True)


@_in_process_set
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None, compression=Compression.none):
    """Starts an in-place allreduce; synchronize(handle) returns tensor. Do not touch tensor until then."""
    op = _resolve_op(op, average, "allreduce_async_")
    return _allreduce_start(tensor, tensor, op, prescale_factor, postscale_factor, compression,
                            "allreduce_async_", True)


def _grouped_start(tensors, outputs, op, prescale_factor, postscale_factor, compression, what, async_):
    tensors = _core._list_arg(tensors, what)
    for t in tensors:
        _check_tensor(t, what)
        _scales(t, prescale_factor, postscale_factor, what)
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError(f"{what}: the tensors are on different devices ({', '.join(map(str, devices))})")
    compression = compression or Compression.none
    comm = _core._get_comm()
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


@_in_process_set
def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """New tensors: each of tensors reduced over the ranks, in one fused allreduce per dtype."""
    op = _resolve_op(op, average, "grouped_allreduce")
    outs = [_output_for(t) if isinstance(t, torch.Tensor) else None
            for t in _core._list_arg(tensors, "grouped_allreduce")]
    return _grouped_start(tensors, outs, op, prescale_factor, postscale_factor, compression, "grouped_allreduce",
                          False)


@_in_process_set
def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=None, compression=Compression.none):
    op = _resolve_op(op, average, "grouped_allreduce_")
    tensors = _core._list_arg(tensors, "grouped_allreduce_")
    return _grouped_start(tensors, list(tensors), op, prescale_factor, postscale_factor, compression,
                          "grouped_allreduce_", False)


@_in_process_set
def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=None, compression=Compression.none):
    op = _resolve_op(op, average, "grouped_allreduce_async")
    outs = [_output_for(t) if isinstance(t, torch.Tensor) else None
            for t in _core._list_arg(tensors, "grouped_allreduce_async")]
    return _grouped_start(tensors, outs, op, prescale_factor, postscale_factor, compression,
                          "grouped_allreduce_async", True)


@_in_process_set
def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=None, compression=Compression.none):
    op = _resolve_op(op, average, "grouped_allreduce_async_")
    tensors = _core._list_arg(tensors, "grouped_allreduce_async_")
    return _grouped_start(tensors, list(tensors), op, prescale_factor, postscale_factor, compression,
                          "grouped_allreduce_async_", True)


# ---- broadcast, allgather, reducescatter ----


def _broadcast_start(tensor, output, root_rank, what, async_):
    _check_tensor(tensor, what)
    _core._root(root_rank, what)
    comm = _core._get_comm()
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


@_in_process_set
def broadcast(tensor, root_rank, name=None, process_set=None):
    """A new tensor holding root_rank's tensor."""
    return _broadcast_start(tensor, _output_for(tensor), root_rank, "broadcast", False)


@_in_process_set
def broadcast_(tensor, root_rank, name=None, process_set=None):
    """In place: tensor becomes root_rank's tensor. Returns tensor."""
    return _broadcast_start(tensor, tensor, root_rank, "broadcast_", False)


@_in_process_set
def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return _broadcast_start(tensor, _output_for(tensor), root_rank, "broadcast_async", True)


@_in_process_set
def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    return _broadcast_start(tensor, tensor, root_rank, "broadcast_async_", True)


@_in_process_set
def allgather(tensor, name=None, process_set=None):
    """Every rank's tensor concatenated along dimension 0 (ranks may pass different first dimensions)."""
    _check_tensor(tensor, "allgather")
    with torch.no_grad():
        src = _host(tensor)
        firsts = _core._gather_headers(tuple(src.shape), _TORCH_DTYPES[src.dtype], "allgather")
        if src.is_cuda and len(set(firsts)) == 1:  # equal parts: the device allgather, on the device
            out = torch.empty((sum(firsts),) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
            _core._check(_c.cohort_allgather_stream(_core._get_comm(), _p(src), _p(out), src.numel(),
                                                    _TORCH_DTYPES[src.dtype], _stream(src)), "allgather")
            return out
        if src.is_cuda:
            src = src.cpu()
        out = torch.empty((sum(firsts),) + tuple(src.shape[1:]), dtype=src.dtype)
        row = src.element_size() * (src[0].numel() if src.shape[0] > 0 else int(np.prod(src.shape[1:])))
        _core._allgatherv_bytes(_bytes(src), firsts, row, _bytes(out))
        return out.to(tensor.device) if tensor.device.type != "cpu" else out


@_in_process_set
def allgather_async(tensor, name=None, process_set=None):
    """allgather, run now; the handle returns its result (the uneven case needs the sizes first)."""
    return _core._completed(allgather(tensor, name))


@_in_process_set
def reducescatter(tensor, op=Average, name=None, compression=Compression.none, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """tensor reduced over the ranks, then split along dimension 0: rank r gets its part (the first
    dim % size ranks get one row more, as in Horovod)."""
    _check_tensor(tensor, "reducescatter")
    op = _core._op(op)
    if tensor.dim() == 0:
        raise ValueError("reducescatter: a scalar cannot be scattered along dimension 0")
    _scales(tensor, prescale_factor, postscale_factor, "reducescatter")
    comm = _core._get_comm()
    n, r = size(), rank()
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
