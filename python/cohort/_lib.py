"""The ctypes binding of libcohort.so: the library's location, its function signatures and its status codes.

Only the public API (include/cohort/cohort.h and ddp.h) is bound; nothing here reaches into cohort__ internals.
ctypes releases the GIL for the duration of every foreign call, so a blocking collective on one Python thread does
not stop the others (or the interpreter's signal handling once the call returns).
"""
import ctypes
import os

c_int, c_size_t, c_void_p, c_char_p, c_int64 = (ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p,
                                                 ctypes.c_int64)

# cohort_status
UNDEFINED = -1  # COHORT_UNDEFINED: the color of a rank that joins no group of a split
OK, ERR_INVALID, ERR_SYSTEM, ERR_TIMEOUT, ERR_REMOTE, ERR_MISMATCH, ERR_AUTH, ERR_INTERNAL, ERR_PROTOCOL = range(9)
# cohort_dtype
F32, F64, F16, BF16, I32, I64, U8, I8, I16, BOOL = range(10)
DTYPE_SIZE = {F32: 4, F64: 8, F16: 2, BF16: 2, I32: 4, I64: 8, U8: 1, I8: 1, I16: 2, BOOL: 1}
# cohort_op (BAND, BOR, BXOR: integer dtypes and bool only)
SUM, AVG, MIN, MAX, PROD, BAND, BOR, BXOR = range(8)
# cohort_ddp_compression
COMPRESS_NONE, COMPRESS_F16, COMPRESS_BF16 = range(3)
# cohort_ddp_span: the timeline's spans of the training loop (COHORT_TIMELINE)
SPAN_FORWARD, SPAN_BACKWARD, SPAN_OPTIMIZER = range(3)


def _find_library():
    """COHORT_LIBRARY if set; else the library of the build (or install) this package was copied from."""
    explicit = os.environ.get("COHORT_LIBRARY")
    if explicit:
        return explicit
    try:
        from cohort import _config  # written by CMake next to this file: the absolute path of libcohort.so
        if os.path.exists(_config.LIBRARY):
            return _config.LIBRARY
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "..", "..", "lib", "libcohort.so"),):  # build/python/cohort -> build/lib
        if os.path.exists(cand):
            return os.path.normpath(cand)
    return "libcohort.so.0"  # the dynamic linker's search path


class RecvInfo(ctypes.Structure):
    """cohort_recv_info: a received message's source, tag and element count."""
    _fields_ = [("source", c_int), ("tag", c_int), ("count", c_size_t)]


class DdpTensor(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("value", c_void_p), ("count", c_size_t), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_int64 * 4)]


class DdpOptions(ctypes.Structure):
    """cohort_ddp_options (include/cohort/ddp.h), field for field: the C struct only grows at its end, and
    tests/python/test_ops.py checks that cohort_ddp_options_init writes no byte beyond this one."""
    _fields_ = [("bucket_bytes", c_size_t), ("first_bucket_bytes", c_size_t), ("broadcast_buffers", c_int),
                ("find_unused_params", c_int), ("compression", c_int), ("static_bucket_order", c_int),
                ("overlap", c_int), ("uneven_inputs", c_int), ("zero_stage", c_int)]


class DdpBucket(ctypes.Structure):
    _fields_ = [("index", c_int), ("data", ctypes.POINTER(ctypes.c_float)), ("count", c_size_t),
                ("num_params", c_int), ("params", ctypes.POINTER(c_int)), ("step", c_int64)]


HOOK_LAUNCH = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, ctypes.POINTER(DdpBucket), ctypes.POINTER(c_void_p))
HOOK_COMPLETE = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, ctypes.POINTER(DdpBucket))


class DdpCommHook(ctypes.Structure):
    _fields_ = [("launch", HOOK_LAUNCH), ("complete", HOOK_COMPLETE), ("user", c_void_p)]


class DdpStats(ctypes.Structure):
    _fields_ = [("steps", c_int64), ("compute_s", ctypes.c_double), ("comm_s", ctypes.c_double),
                ("exposed_comm_s", ctypes.c_double), ("last_compute_s", ctypes.c_double),
                ("last_comm_s", ctypes.c_double), ("last_exposed_comm_s", ctypes.c_double),
                ("bytes_per_step", c_size_t), ("num_buckets", c_int)]


_SIGNATURES = {
    # name: (restype, argtypes)
    "cohort_strerror": (c_char_p, [c_int]),
    "cohort_last_error": (c_char_p, []),
    "cohort_version": (c_char_p, []),
    "cohort_init": (c_int, [ctypes.POINTER(c_void_p)]),
    "cohort_comm_destroy": (None, [c_void_p]),
    "cohort_rank": (c_int, [c_void_p]),
    "cohort_size": (c_int, [c_void_p]),
    "cohort_local_rank": (c_int, [c_void_p]),
    "cohort_local_size": (c_int, [c_void_p]),
    "cohort_transport_name": (c_char_p, [c_void_p]),
    "cohort_alloc": (c_void_p, [c_void_p, c_size_t]),
    "cohort_free": (None, [c_void_p, c_void_p]),
    "cohort_in_arena": (c_int, [c_void_p, c_void_p, c_size_t]),
    "cohort_arena_range": (c_int, [c_void_p, ctypes.POINTER(c_void_p), ctypes.POINTER(c_size_t)]),
    "cohort_comm_abort": (None, [c_void_p, c_char_p]),
    "cohort_comm_split": (c_int, [c_void_p, c_int, c_int, ctypes.POINTER(c_void_p)]),
    "cohort_comm_dup": (c_int, [c_void_p, ctypes.POINTER(c_void_p)]),
    "cohort_comm_twin": (c_int, [c_void_p, ctypes.c_char_p, ctypes.POINTER(c_void_p)]),
    "cohort_allreduce": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
    "cohort_broadcast": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int]),
    "cohort_allgather": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int]),
    "cohort_reduce_scatter": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
    "cohort_barrier": (c_int, [c_void_p]),
    "cohort_join": (c_int, [c_void_p, ctypes.POINTER(ctypes.c_int)]),
    "cohort_tag_next_call": (None, [ctypes.c_uint64]),
    "cohort_iallreduce": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, ctypes.POINTER(c_void_p)]),
    "cohort_ibroadcast": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, ctypes.POINTER(c_void_p)]),
    "cohort_iallgather": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, ctypes.POINTER(c_void_p)]),
    "cohort_ireduce_scatter": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int,
                                       ctypes.POINTER(c_void_p)]),
    "cohort_ibarrier": (c_int, [c_void_p, ctypes.POINTER(c_void_p)]),
    # counts and displs: arrays of c_size_t, one per rank (displs None: packed)
    "cohort_allgatherv": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int]),
    "cohort_iallgatherv": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int,
                                   ctypes.POINTER(c_void_p)]),
    "cohort_alltoallv": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int]),
    "cohort_ialltoallv": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int,
                                  ctypes.POINTER(c_void_p)]),
    # Device memory (include/cohort/cohort.h): the stream is a cudaStream_t (torch's Stream.cuda_stream).
    "cohort_cuda_available": (c_int, []),
    "cohort_device_path": (c_char_p, [c_void_p]),
    "cohort_allreduce_stream": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p]),
    "cohort_broadcast_stream": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p]),
    "cohort_allgather_stream": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_void_p]),
    "cohort_reduce_scatter_stream": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p]),
    "cohort_iallreduce_stream": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p,
                                         ctypes.POINTER(c_void_p)]),
    "cohort_ibroadcast_stream": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p,
                                         ctypes.POINTER(c_void_p)]),
    # point-to-point messages (the torch backend's send/recv, cohort.torch's matching of names)
    "cohort_send": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int]),
    "cohort_recv": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, ctypes.POINTER(RecvInfo)]),
    "cohort_irecv": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, ctypes.POINTER(c_void_p)]),
    "cohort_work_recv_info": (c_int, [c_void_p, ctypes.POINTER(RecvInfo)]),
    "cohort_work_wait": (c_int, [c_void_p]),
    "cohort_work_test": (c_int, [c_void_p, ctypes.POINTER(c_int)]),
    "cohort_work_free": (None, [c_void_p]),
    "cohort_ddp_options_init": (None, [ctypes.POINTER(DdpOptions)]),
    "cohort_ddp_create": (c_int, [c_void_p, ctypes.POINTER(DdpTensor), c_int, ctypes.POINTER(DdpTensor), c_int,
                                  ctypes.POINTER(DdpOptions), ctypes.POINTER(c_void_p)]),
    "cohort_ddp_destroy": (None, [c_void_p]),
    "cohort_ddp_grad": (c_void_p, [c_void_p, c_int]),
    "cohort_ddp_num_buckets": (c_int, [c_void_p]),
    "cohort_ddp_overlapping": (c_int, [c_void_p]),
    "cohort_ddp_set_comm_hook": (c_int, [c_void_p, ctypes.POINTER(DdpCommHook)]),
    "cohort_ddp_set_sync": (None, [c_void_p, c_int]),
    "cohort_ddp_prepare": (c_int, [c_void_p]),
    "cohort_ddp_mark_ready": (c_int, [c_void_p, c_int]),
    "cohort_ddp_finish": (c_int, [c_void_p]),
    "cohort_ddp_get_stats": (None, [c_void_p, ctypes.POINTER(DdpStats)]),
    "cohort_ddp_join": (c_int, [c_void_p]),
    "cohort_ddp_span_begin": (None, [c_void_p, c_int]),
    "cohort_ddp_span_end": (None, [c_void_p, c_int]),
    "cohort_ddp_metric": (None, [c_void_p, c_char_p, ctypes.c_double]),
    "cohort_ddp_metrics_open": (c_int, [c_void_p, c_char_p]),
    "cohort_ddp_active_ranks": (c_int, [c_void_p]),
}


def load():
    path = _find_library()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"cohort: cannot load libcohort ({path}): {e}; build it (README) or set "
                          f"COHORT_LIBRARY") from e
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    lib.path = path
    return lib


lib = load()
