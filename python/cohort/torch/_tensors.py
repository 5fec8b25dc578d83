"""Tensors for the library, shared by cohort.torch's modules: the dtypes it takes, Horovod's compression, and a
tensor's memory as the pointer a C call takes (CPU tensors as they are, CUDA tensors on their device when the
library has its device collectives, else staged through pinned host memory).

cohort.torch (the Horovod API), _engine.py (DistributedOptimizer, DistributedDataParallel) and _cuda_engine.py import
from here; nothing here holds a communicator: the callers pass theirs.
"""
import ctypes

import numpy as np
import torch

from cohort import _lib
from cohort._lib import lib as _c

_TORCH_DTYPES = {torch.float32: _lib.F32, torch.float64: _lib.F64, torch.float16: _lib.F16,
                 torch.bfloat16: _lib.BF16, torch.int32: _lib.I32, torch.int64: _lib.I64, torch.uint8: _lib.U8,
                 torch.int8: _lib.I8, torch.int16: _lib.I16, torch.bool: _lib.BOOL}


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
                        f"bfloat16, int64, int32, int16, int8, uint8, bool)")
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


def _tag_shape(t):
    """Gives the library t's shape for the ranks to compare with the rest of the next call (cohort_tag_next_call): an
    allreduce or broadcast of as many elements in another shape (2x3 against 3x2) is refused on every rank, as
    Horovod refuses it. A 1-D tensor needs none (its count is its shape), so the common call pays nothing."""
    if t.dim() > 1:
        _c.cohort_tag_next_call(hash(tuple(t.shape)) & 0xFFFFFFFFFFFFFFFF)


def _allreduce_call(comm, src, dst, dt, op):
    _tag_shape(src)
    if src.is_cuda:
        return _c.cohort_allreduce_stream(comm, _p(src), _p(dst), src.numel(), dt, op, _stream(src))
    return _c.cohort_allreduce(comm, _p(src), _p(dst), src.numel(), dt, op)


def _iallreduce_call(comm, src, dst, dt, op, w):
    _tag_shape(src)
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
