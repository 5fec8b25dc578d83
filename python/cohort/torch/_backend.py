"""torch.distributed's backend "cohort": `dist.init_process_group("cohort")` on libcohort.

`import cohort.torch` registers it (dist.Backend.register_backend). torch then calls _create_process_group for the
default group and for every new_group() this rank belongs to; the ProcessGroup below runs each operation torch asks
of a group on a communicator of its own, through the C API (include/cohort/cohort.h), and hands torch a Work made
from a torch.futures.Future that a completion thread fulfils: DDP's reducer, comm hooks (get_future) and
async_op=True see what they see on gloo, while the collectives themselves run in C with the GIL released.

How a group's ranks meet (docs/torch.md says what each way authenticates):
  - the default group of a job that cohortrun started (COHORT_LAUNCHER_STORE=1, and torch's rank and world size
    are cohortrun's): cohort's own rendezvous, authenticated with the job's COHORT_SECRET;
  - anywhere else (torchrun, mpirun, srun, init_method tcp:// or file://, every subgroup): through the store torch
    hands over. The group's rank 0 serves a cohort store on a free port and writes its address and a fresh run id
    there; the secret is the job's COHORT_SECRET when the environment has one, else one rank 0 draws and passes
    through torch's store, which authenticates nothing: whoever can read that store during set-up can join.
"""
import atexit
import collections
import ctypes
import datetime
import os
import secrets
import socket
import sys
import threading
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, ReduceOp, Work, _create_work_from_future

import cohort as _core
from cohort import _lib
from cohort._lib import lib as _c
from cohort.torch import _arena
from cohort.torch._tensors import _cuda_direct  # asked once a process: it loads the CUDA plugin

BACKEND_NAME = "cohort"


def _load_extension():
    """cohort.torch._c10d, the backend's C++ half (python/torch_ext/process_group.cpp), or None: where it was not
    built (it needs torch 1.13's C++ headers), was built for another torch, or COHORT_TORCH_EXT=0 asks for the
    backend in Python alone. Without it every operation goes through the Python below; with it, a blocking
    dist.all_reduce goes from torch's front end into C without running any of it."""
    if os.environ.get("COHORT_TORCH_EXT", "1") == "0":
        return None
    return _arena.built_module("_c10d", "TORCH_EXT_FOR")


_EXT = _load_extension()

_DTYPES = {torch.float32: _lib.F32, torch.float64: _lib.F64, torch.float16: _lib.F16, torch.bfloat16: _lib.BF16,
           torch.int32: _lib.I32, torch.int64: _lib.I64, torch.uint8: _lib.U8}
for _name, _code in (("int8", "I8"), ("int16", "I16"), ("bool", "BOOL")):
    if hasattr(_lib, _code):
        _DTYPES[getattr(torch, _name)] = getattr(_lib, _code)

_OPS = [(ReduceOp.SUM, _lib.SUM), (ReduceOp.PRODUCT, _lib.PROD), (ReduceOp.MIN, _lib.MIN), (ReduceOp.MAX, _lib.MAX)]
if hasattr(ReduceOp, "AVG"):
    _OPS.append((ReduceOp.AVG, _lib.AVG))
for _name in ("BAND", "BOR", "BXOR"):
    if hasattr(_lib, _name):
        _OPS.append((getattr(ReduceOp, _name), getattr(_lib, _name)))


_OP_OF = {}
for _op, _code in _OPS:
    try:
        _OP_OF[_op] = _code
    except TypeError:  # not hashable in this torch: the loop below
        break


def _op_code(reduce_op, what, tensors=()):
    """The library's code of reduce_op. A complex tensor among tensors goes as its real view (_flat), which is
    element-wise right for SUM and AVG only: the other ops are refused on it, as torch's all_reduce refuses them."""
    try:
        code = _OP_OF.get(reduce_op)
    except TypeError:  # not hashable in this torch
        code = None
    for torch_op, c in _OPS if code is None else ():
        if reduce_op == torch_op:
            code = c
    if code is None:
        raise ValueError(f"cohort backend: {what}: ReduceOp {reduce_op} is not supported (SUM, PRODUCT, MIN, MAX, AVG"
                         f"{', BAND, BOR, BXOR' if hasattr(_lib, 'BAND') else ''})")
    if code not in (_lib.SUM, getattr(_lib, "AVG", _lib.SUM)) and any(isinstance(t, torch.Tensor) and t.is_complex()
                                                                   for t in tensors):
        raise ValueError(f"cohort backend: {what}: {reduce_op} on complex tensors (only SUM and AVG are defined on "
                         f"them, as in torch)")
    return code


def _dtype_code(t, what):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"cohort backend: {what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"cohort backend: {what}: a tensor on {t.device}: the backend takes CPU and CUDA tensors")
    if t.is_sparse:
        raise ValueError(f"cohort backend: {what}: sparse tensors are not supported")
    code = _DTYPES.get(t.dtype)
    if code is None:
        if t.is_complex() and t.dtype in (torch.complex64, torch.complex128):
            return None  # sent as its real view (see _flat)
        raise TypeError(f"cohort backend: {what}: dtype {t.dtype} is not supported "
                        f"({', '.join(str(d).replace('torch.', '') for d in _DTYPES)})")
    return code


def _flat(t, what, direct=False):
    """(contiguous tensor to hand the library, its dtype code, element count). Complex tensors go as their real
    view (two reals each): sums, and copies, are element-wise the same. A CUDA tensor stays on its device where the
    operation runs there (direct, see _direct); else it is staged: a host copy, read as torch's current stream has
    it, whose result the operation's finish copies back."""
    code = _dtype_code(t, what)
    if t.device.type == "cuda" and not direct:
        c = t.detach().to("cpu").contiguous()
    else:
        c = t if t.is_contiguous() else t.contiguous()
    if code is None:
        c = torch.view_as_real(c)
        code = _DTYPES[c.dtype]
    return c, code, c.numel()


def _shape_tag(t):
    """t's shape, for the ranks to compare with the rest of the call (cohort_tag_next_call): an all_reduce, broadcast,
    reduce or all_gather of as many elements in another shape (2x3 against 3x2) is refused on every rank, as
    Horovod refuses it and torch's TORCH_DISTRIBUTED_DEBUG=DETAIL reports it, where gloo and NCCL run it element by
    element. 0 (no tag) for at most one dimension, whose count is its shape: DDP's buckets and the common call pay
    nothing. FNV-1a over the dims, one step a dim: the C++ half's shape_tag gives the same number, since one rank's
    call may go through it and another's through here."""
    if t.dim() <= 1:
        return 0
    h = 0xCBF29CE484222325
    for d in t.shape:
        h = ((h ^ d) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h or 1


def _tagged(call, tag):
    def tagged(*args):
        _c.cohort_tag_next_call(tag)
        return call(*args)
    return tagged


# ---- CUDA tensors ----
# allreduce, broadcast, all_gather and reduce_scatter (the forms with _tensor and coalesced too) run on the tensors'
# device, ordered on torch's current stream there, through the library's device collectives (docs/gpu.md: cuda-ipc
# between ranks that share a GPU, NCCL with a GPU each, staged through pinned memory across hosts). The rest (reduce,
# gather, scatter, all_to_all, send and recv), the dtypes int8, int16 and bool, the bitwise ops, and every CUDA
# tensor where this libcohort has no device collectives, are staged through host memory (_flat): correct everywhere,
# at a copy each way.

_DEVICE_CODES = {_lib.F32, _lib.F64, _lib.F16, _lib.BF16, _lib.I32, _lib.I64, _lib.U8}
_DEVICE_OPS = {_lib.SUM, _lib.PROD, _lib.MIN, _lib.MAX, _lib.AVG}


def _direct(tensors, op=None):
    """True where an operation of the device path runs on these tensors' memory: all on one CUDA device, of a dtype
    (and op) the device path has, and the device collectives available."""
    if not any(t.is_cuda for t in tensors):  # the common case, at the cost of an attribute each
        return False
    if all(t.numel() == 0 for t in tensors):  # no memory to name a device by: the host call does nothing as well
        return False
    devices = {t.device for t in tensors}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        return False
    for t in tensors:
        code = _DTYPES.get(t.dtype, _lib.F32 if t.dtype == torch.complex64 else _lib.F64 if t.dtype == torch.complex128
                           else None)
        if code not in _DEVICE_CODES:
            return False
    return (op is None or op in _DEVICE_OPS) and _cuda_direct()


class _OnStream:
    """torch's current stream on a tensor's device where an operation is issued: the library orders the operation on
    it (an operation held behind an async one starts later, on another thread, whose current stream is another; it
    then reads its input as this stream has it when it starts). The finish of a direct operation runs on it too: its
    copies into the caller's tensors follow the completed collective there, ahead of the caller's next work, and the
    temporaries it frees are reused on that stream only after those copies (the caching allocator's order)."""

    def __init__(self, t):
        self.stream = torch.cuda.current_stream(t.device)  # held, so that the cudaStream_t outlives the operation
        self.ptr = ctypes.c_void_p(self.stream.cuda_stream)

    def finish(self, fn):
        # On the stream's device first: torch.cuda.stream() alone, on a completer thread (current device 0), switches
        # to the stream's device and back to device 0 with cudaSetDevice, which since CUDA 12 creates device 0's
        # primary context: every rank of a multi-GPU host would hold one on GPU 0. torch.cuda.device restores the
        # previous device only where it has a context already.
        def run():
            with torch.cuda.device(self.stream.device), torch.cuda.stream(self.stream):
                return fn()
        return run


_SIZES = ctypes.POINTER(ctypes.c_size_t)
_VP, _INT, _SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_WORK = ctypes.POINTER(ctypes.c_void_p)
_NEWER = {
    "cohort_ireduce": [_VP, _VP, _VP, _SZ, _INT, _INT, _INT, _WORK],
    "cohort_igather": [_VP, _VP, _VP, _SZ, _INT, _INT, _WORK],
    "cohort_iscatter": [_VP, _VP, _VP, _SZ, _INT, _INT, _WORK],
    "cohort_ialltoall": [_VP, _VP, _VP, _SZ, _INT, _WORK],
    "cohort_ialltoallv": [_VP, _VP, _SIZES, _SIZES, _VP, _SIZES, _SIZES, _INT, _WORK],
    "cohort_isend": [_VP, _VP, _SZ, _INT, _INT, _INT, _WORK],
    "cohort_iallgather_stream": [_VP, _VP, _VP, _SZ, _INT, _VP, _WORK],
    "cohort_ireduce_scatter_stream": [_VP, _VP, _VP, _SZ, _INT, _INT, _VP, _WORK],
}


class _Lib:
    """The C calls this module needs beyond _lib's table, bound on first use (a library without one raises a clear
    error for that operation only)."""

    def __getattr__(self, name):
        fn = getattr(_c, name, None)
        if fn is None:
            raise RuntimeError(f"cohort backend: {_c.path} has no {name}: rebuild libcohort")
        if name in _NEWER:
            fn.restype, fn.argtypes = ctypes.c_int, _NEWER[name]
        setattr(self, name, fn)
        return fn


_C = _Lib()


def _core_any_source():
    return -1  # COHORT_ANY_SOURCE


def _counts(split_sizes, tensor, flat, n, what):
    """Elements per peer from torch's split sizes (rows of dim 0), packed."""
    if len(split_sizes) != n:
        raise ValueError(f"cohort backend: all_to_all_single: {what} has {len(split_sizes)} entries for a group of {n}")
    rows = tensor.shape[0] if tensor.dim() else 1
    per_row = flat.numel() // rows if rows else 0
    if sum(split_sizes) != rows:
        raise ValueError(f"cohort backend: all_to_all_single: {what} sums to {sum(split_sizes)}, not the tensor's "
                         f"{rows} rows")
    return (ctypes.c_size_t * n)(*[s * per_row for s in split_sizes])


def _one_dtype(tensors, what):
    """The tensors as _flat gives them, and their one dtype code (U8 for none): the coalesced forms move one buffer."""
    flats = [_flat(t, what) for t in tensors]
    codes = {code for _, code, _ in flats}
    if len(codes) > 1:
        raise TypeError(f"cohort backend: {what}: the tensors have different dtypes")
    return flats, codes.pop() if codes else _lib.U8


def _copy_back(dst, flat):
    """Writes a result from the library's flat buffer (a complex tensor's real view, see _flat) into dst."""
    dst.copy_(torch.view_as_complex(flat) if dst.is_complex() else flat.view_as(dst))


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


def _error_of(status, what):
    """The exception for the library's last error on this thread. Where the ranks compared shapes, what names this
    rank's (_with_shape): the library's message says only that another rank's differs."""
    return _core._error(status, f"cohort backend: {what}")


def _with_shape(what, t):
    return f"{what} of a {'x'.join(str(d) for d in t.shape)} tensor"


def _raise(status, what):
    raise _error_of(status, what)


# ---- rendezvous ----

_env_lock = threading.Lock()


def _host_address():
    """An address of this host that the group's other ranks can reach: MASTER_ADDR's route when torch's launcher
    set it, else the address of the host's name."""
    master = os.environ.get("MASTER_ADDR")
    if master:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((master, 9))
                return s.getsockname()[0]
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _free_port(host):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _host_identity():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return socket.gethostname() + "/" + f.read().strip()
    except OSError:
        return socket.gethostname()


def _init_with_env(env):
    """cohort_init() with the environment changed by env (None removes a variable) for the call only."""
    with _env_lock:
        saved = {k: os.environ.get(k) for k in env}
        try:
            for k, v in env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = str(v)
            p = ctypes.c_void_p()
            st = _c.cohort_init(ctypes.byref(p))
            if st != _lib.OK:
                _raise(st, "joining the group")
            return p
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _under_cohortrun(rank, size):
    return (os.environ.get("COHORT_LAUNCHER_STORE") == "1" and os.environ.get("RANK") == str(rank)
            and os.environ.get("WORLD_SIZE") == str(size))


def _timeouts(timeout):
    """init_process_group(timeout=) as cohort's knobs: the rendezvous' wait (COHORT_TIMEOUT) and, when the caller
    chose it (not torch's 30-minute default), how long an operation waits on a silent peer (COHORT_OP_TIMEOUT; else
    cohort's own default, docs/env.md)."""
    if not isinstance(timeout, datetime.timedelta):
        return {}
    seconds = max(1, int(round(timeout.total_seconds())))
    env = {"COHORT_TIMEOUT": seconds}
    if timeout != getattr(dist, "default_pg_timeout", None):
        env["COHORT_OP_TIMEOUT"] = seconds
    return env


def _meet(store, rank, size, timeout, default_group):
    if default_group and _under_cohortrun(rank, size):
        return _init_with_env(_timeouts(timeout)), "cohortrun"
    job_secret = os.environ.get("COHORT_SECRET")
    if rank == 0:
        host = _host_address()
        port = _free_port(host)
        store.set("cohort/store", f"{host} {port} {secrets.token_hex(8)}")
        if not job_secret:
            store.set("cohort/secret", secrets.token_hex(32))
    host, port, run_id = store.get("cohort/store").decode().split()
    secret = job_secret or store.get("cohort/secret").decode()
    # Which ranks share this host (LOCAL_RANK of the group): the host identities every rank writes.
    me = _host_identity()
    store.set(f"cohort/host/{rank}", me)
    hosts = [me if r == rank else store.get(f"cohort/host/{r}").decode() for r in range(size)]
    local = [r for r in range(size) if hosts[r] == me]
    env = {"RANK": rank, "WORLD_SIZE": size, "LOCAL_RANK": local.index(rank), "LOCAL_WORLD_SIZE": len(local),
           "MASTER_ADDR": host, "COHORT_STORE": "tcp", "COHORT_STORE_ADDR": host, "COHORT_STORE_PORT": port,
           "COHORT_LAUNCHER_STORE": "0", "COHORT_RUN_ID": run_id, "COHORT_SECRET": secret, **_timeouts(timeout)}
    # A launcher's variables describe the job, not this group: cohort_init must not read them.
    for k in ("GROUP_RANK", "GROUP_WORLD_SIZE", "COHORT_HEARTBEAT_FD", "TORCHELASTIC_USE_AGENT_STORE"):
        env[k] = None
    return _init_with_env(env), "torch's store"


# ---- work: torch's Work over a Future the completion thread fulfils ----


class _Pending:
    __slots__ = ("work", "future", "finish", "keep", "what", "release")

    def __init__(self, work, future, finish, keep, what, release=None):
        self.work, self.future, self.finish, self.keep, self.what = work, future, finish, keep, what
        self.release = release  # called once the future's callbacks have run (see ProcessGroupCohort._issue)


class _Held:
    """An operation issued while an earlier Python async operation's callbacks may still issue: it is started (and
    given its place in the communicator's call order) once they have run."""

    __slots__ = ("start", "future", "finish", "keep", "what", "barrier")

    def __init__(self, start, future, finish, keep, what, barrier):
        self.start, self.future, self.finish, self.keep, self.what = start, future, finish, keep, what
        self.barrier = barrier


# How deep this thread is in a cohort future's callbacks (see ProcessGroupCohort._issue).
_tls = threading.local()


class _Completer:
    """The threads of a group that wait on its cohort_work handles (in issue order, the order they complete on one
    communicator) and fulfil each Future: with the result, or with _Failed(error). A thread waits for each operation
    in flight, up to MAX_THREADS: a future's callback runs on the thread that fulfils it and may wait on a later
    operation of the same group (PowerSGD's hook does), which that busy thread could never fulfil (gloo, for the
    same reason, gives each group two worker threads)."""

    MAX_THREADS = 4

    def __init__(self, name):
        self._cv = threading.Condition()
        self._queue = collections.deque()
        self._closed = False
        self._idle = 0
        self._name = name
        self._threads = []
        self._spawn()

    def _spawn(self):
        t = threading.Thread(target=self._run, name=f"cohort-{self._name}-{len(self._threads)}", daemon=True)
        self._threads.append(t)
        t.start()

    def put(self, pending):
        with self._cv:
            self._queue.append(pending)
            if self._idle < len(self._queue) and len(self._threads) < self.MAX_THREADS:
                self._spawn()
            self._cv.notify()

    def close(self):
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()

    def _run(self):
        while True:
            with self._cv:
                self._idle += 1
                while not self._queue and not self._closed:
                    self._cv.wait()
                self._idle -= 1
                if not self._queue:
                    return
                p = self._queue.popleft()
            st = _c.cohort_work_wait(p.work) if p.work else _lib.OK
            err = None
            if st != _lib.OK:
                err = _error_of(st, p.what)
            if p.work:
                _c.cohort_work_free(p.work)
            if err is None:
                try:
                    result = p.finish() if p.finish else None
                except Exception as e:  # noqa: BLE001 (handed to the waiter)
                    err = e
            _tls.depth = getattr(_tls, "depth", 0) + 1
            try:
                p.future.set_result(_Failed(err) if err is not None else result)
            finally:
                _tls.depth -= 1
                if p.release is not None:
                    p.release()


class _Failed:
    """A failed operation's error as the raw Future's value. torch 1.13's Future.set_exception is Python-only (it
    completes the C++ future successfully, with the exception as its value: DDP's reducer, comm hooks and
    Work.get_future() would take it for a result); _unwrap raises it inside a then() callback, which marks the
    chained future failed in C++ too."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


def _unwrap(fut):
    v = fut.value()
    if isinstance(v, _Failed):
        raise v.error
    return v


class _FutureWork(Work):
    """The Work handed to torch's Python API (dist.all_reduce and the rest call the group from
    torch/distributed/distributed_c10d.py, then wait() in Python): wait() raises the operation's error. torch 1.13's
    Work made from a future (_create_work_from_future) waits without raising, so an error would pass unseen there;
    that one is kept for callers in C++ (DDP's reducer reads get_future().value(), which raises; its construction's
    broadcast and shape check call the C++ wait(), which a Python Work cannot serve in 1.13)."""

    def __init__(self, future):
        super().__init__()
        self._fut = future

    def wait(self, timeout=None):
        self._fut.wait()  # raises the operation's error, on every waiter
        return True

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        return self._fut.done() and self.exception() is None

    def exception(self):
        if not self._fut.done():
            return None
        try:
            self._fut.value()
            return None
        except Exception as e:  # noqa: BLE001 (the operation's error, returned)
            return e

    def result(self):
        return self._fut.value()

    def synchronize(self):
        pass

    def get_future(self):
        return self._fut


def _torch_python_frame():
    """The frame of torch's Python API (distributed_c10d.py) that called the group's method, or None when C++ did
    (DDP's reducer runs on autograd's threads; its set-up calls come through torch's C++ functions)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back  # out of this module
    if frame is not None and frame.f_globals.get("__name__") == "torch.distributed.distributed_c10d":
        return frame
    return None


def _blocking(frame):
    """True when that caller waits for the Work as soon as it has it: dist.all_reduce(t) and the rest with
    async_op=False (each of them reads `if async_op: return work else: work.wait()`). Such a call is waited for on the
    caller's own thread, without the completer's hand-over (a thread switch each way, most of a small operation's
    time); async_op=True, DDP's reducer and every C++ caller keep the Future path."""
    return frame is not None and frame.f_locals.get("async_op", True) is False


def _work_of(future, frame):
    return _FutureWork(future) if frame is not None else _create_work_from_future(future)


class _DoneWork(Work):
    """A Work that has already completed successfully on the caller's thread (see _blocking)."""

    def __init__(self, result):
        super().__init__()
        self._result = result

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def result(self):
        return self._result

    def synchronize(self):
        pass

    def get_future(self):
        f = torch.futures.Future()
        f.set_result(self._result)
        return f


class _P2PWork(Work):
    """A message's Work: waits on its own cohort_work handle (Python callers: dist.send/recv, isend/irecv,
    batch_isend_irecv), and knows a receive's source (dist.recv with src=None asks _source_rank)."""

    def __init__(self, handle, what, tensor, buf):
        super().__init__()
        self._handle, self._what, self._tensor, self._buf = handle, what, tensor, buf
        self._status, self._source, self._lock = None, -1, threading.Lock()

    def _finish(self, status):
        self._status = status
        if status == _lib.OK and self._what == "recv":
            info = _lib.RecvInfo()
            if _C.cohort_work_recv_info(self._handle, ctypes.byref(info)) == _lib.OK:
                self._source = info.source
            if self._buf.data_ptr() != self._tensor.data_ptr():
                t = self._tensor
                _copy_back(t, self._buf)
        _c.cohort_work_free(self._handle)
        self._handle = None

    def wait(self, timeout=None):
        with self._lock:
            if self._status is None:
                self._finish(_c.cohort_work_wait(self._handle))
        if self._status != _lib.OK:
            _raise(self._status, self._what)
        return True

    def is_completed(self):
        with self._lock:
            if self._status is None:
                done = ctypes.c_int(0)
                st = _c.cohort_work_test(self._handle, ctypes.byref(done))
                if done.value or st != _lib.OK:
                    self._finish(st)
            return self._status is not None

    def is_success(self):
        return self.is_completed() and self._status == _lib.OK

    def exception(self):
        return None if self._status in (None, _lib.OK) else _core._error(self._status, self._what)

    def _source_rank(self):
        self.wait()
        return self._source

    source_rank = _source_rank

    def get_future(self):
        self.wait()
        f = torch.futures.Future()
        f.set_result([self._tensor])
        return f

    def __del__(self):
        if self._handle is not None:
            try:
                _c.cohort_work_free(self._handle)  # waits for it: the buffer stays valid until then
            except Exception:  # noqa: BLE001 (interpreter shutdown)
                pass


# ---- the process group ----


_groups = weakref.WeakSet()  # the live groups, closed at exit


def _forget_groups_after_fork():
    """A forked child shares its parent's links and has none of its threads: it must leave the groups alone. Closing
    one there waited for completer threads that exist only in the parent, so a child that left by sys.exit() hung in
    _close_groups (and its parent, waiting for it) before this. Its copies of the groups refuse every operation."""
    for group in list(_groups):
        group._closed = True
        group._comm = None
    _groups.clear()


os.register_at_fork(after_in_child=_forget_groups_after_fork)


@atexit.register
def _close_groups():
    """Closes every group still alive when the interpreter exits (a DDP model or a comm hook's state often keeps one
    past destroy_process_group): its completer threads end here, before finalization. Left to finalization, a
    daemon thread that wakes to take the GIL is ended by pthread_exit, whose unwinding through torch's C++ frames
    aborts the process ("terminate called without an active exception")."""
    for group in list(_groups):
        try:
            group.close()
        except Exception:  # noqa: BLE001 (exiting: nothing to report it to)
            pass


class ProcessGroupCohort(_EXT.ProcessGroupCohortBase if _EXT else ProcessGroup):
    """A torch.distributed process group whose operations run on one cohort communicator. With the C++ half (_EXT),
    `allreduce` is its method (a blocking call runs there; the rest comes back to _allreduce_py), and torch's C++
    callers reach the methods below through it."""

    def __init__(self, store, rank, size, timeout, default_group=False):
        super().__init__(rank, size)
        self._comm, self.rendezvous = _meet(store, rank, size, timeout, default_group)
        if _EXT:
            self._bind_comm(self._comm.value, ctypes.cast(_c.cohort_allreduce, ctypes.c_void_p).value,
                            ctypes.cast(_c.cohort_tag_next_call, ctypes.c_void_p).value)
        # Large CPU tensors made from now on live in this group's shared arena, where the collectives on them are
        # zero copy (_arena.py): the first group of the whole world takes it (a subgroup's arena serves only it).
        if default_group or size == dist.get_world_size():
            _arena.attach(self._comm)
        self._lock = threading.Lock()
        self._completer = _Completer(f"pg{rank}of{size}")
        self._closed = False
        self._held = collections.deque()  # _Held operations, in issue order
        self._barriers = 0  # Python async operations started whose callbacks have not all run
        _groups.add(self)

    # torch asks for these by name
    def getBackendName(self):
        return BACKEND_NAME

    def name(self):
        return BACKEND_NAME

    def transport(self):
        return _c.cohort_transport_name(self._comm).decode()

    # The group's name, which torch gives it (_set_group_name) and looks it up by: destroy_process_group(group),
    # DeviceMesh and the functional collectives' registry. torch 2's C++ keeps a name on the Backend objects it
    # registers per device, and reads it back from the first (ProcessGroup::getGroupName); a group that is its own
    # backend, as this one is, has none, so the name torch set was dropped and reading it failed with "ProcessGroup
    # name not set" (torch 2.11 on the GPU host, 2026-11-27: DeviceMesh, FSDP2, test_destroy_group). It lives here.
    def _set_group_name(self, name):
        self._cohort_group_name = name

    # torch 2 asks a group for its backend on a device (ProcessGroup._get_backend), and after making any group whose
    # default group was bound to a device (init_process_group(device_id=...), new_group's device_id) whether that
    # backend "supports_splitting", to connect it eagerly; this group registers no Backend objects (above), so
    # torch's C++ would answer "No backend type associated with device type cuda" and the group could not be made.
    # The group is its own backend on every device it serves, and splits only through cohort (cohort_comm_split).
    supports_splitting = False

    def _get_backend(self, device=None):
        return self

    @property
    def group_name(self):
        name = getattr(self, "_cohort_group_name", None)
        if name is None:
            raise RuntimeError("ProcessGroup name not set")  # torch's words, where torch has not named the group yet
        return name

    def close(self):
        if self._closed:
            return
        self._closed = True
        if _EXT:
            self._bind_comm(0, 0, 0)  # the C++ half's blocking calls see a closed group (see _fast_failed)
        self._completer.close()
        with self._lock:
            held, self._held = list(self._held), collections.deque()
        for h in held:
            h.future.set_result(_Failed(RuntimeError(f"cohort backend: {h.what}: the process group was destroyed "
                                                     f"before the operation started")))
        _arena.detach(self._comm)
        _c.cohort_comm_destroy(self._comm)
        self._comm = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass

    # -- issuing --

    def _issue(self, what, start, finish=None, keep=(), run=None, like=None):
        """start(work_ptr) issues one async C call; finish() makes the Future's value once it has completed. run(),
        where given, is the same call blocking, for callers that wait at once (see _blocking): the library runs it
        on this thread when nothing is queued before it, without the progress thread's hand-over.

        The order in which a group's operations start is the order the ranks match them in, so it must be the same
        on every rank. A callback chained on an async operation's future (a DDP comm hook's then(): PowerSGD
        allreduces its P and Q factors there) runs on a completer thread when that operation completes, while the
        thread that issued it goes on issuing (DDP's next bucket): left alone, which of the two starts first is
        timing, and differs between ranks (seen on torch 2.11: rank 0 started PowerSGD's 159-element allreduce where
        rank 1 started the next bucket's). NCCL sidesteps this by completing its futures at issue time, so that the
        callbacks run inline. Here an operation issued from Python with async_op=True (the only kind a Python
        callback can be chained on) is a barrier: what the group is asked for after it, outside its callbacks, is
        held and started once it has completed and its callbacks have run; what its callbacks issue starts at once.
        The order is then the program's on every rank. DDP's own allreduces (issued from C++) and blocking calls
        hold nothing back, so they keep their overlap and speed.

        like: the tensor whose shape the ranks compare (_shape_tag), if any. Its tag goes to the library right before
        the C call, on the thread that makes it (a held operation starts on a completer thread; tags are per thread),
        and its shape into what the errors say."""
        tag = _shape_tag(like) if like is not None else 0
        if tag:
            start, run = _tagged(start, tag), _tagged(run, tag) if run is not None else None
            what = _with_shape(what, like)
        if self._closed:
            raise RuntimeError(f"cohort backend: {what} on a destroyed process group")
        frame = _torch_python_frame()
        blocking = _blocking(frame)
        barrier = frame is not None and not blocking
        inside = getattr(_tls, "depth", 0) > 0
        # Read without the lock: nothing can start behind our back while no barrier is out (only a barrier's
        # callbacks issue from another thread, and held operations exist only while one is).
        if run is not None and blocking and not inside:
            if self._barriers == 0 and not self._held:
                st = run()
                if st != _lib.OK:
                    _raise(st, what)
                return _DoneWork(finish() if finish else None)
        w = ctypes.c_void_p()
        with self._lock:  # issue order is completion order: the completer waits in the same order
            if not inside and (self._barriers > 0 or self._held):
                fut = torch.futures.Future()
                self._held.append(_Held(start, fut, finish, keep, what, barrier))
                return _work_of(fut.then(_unwrap), frame)
            st = start(ctypes.byref(w))
            if st != _lib.OK:
                _raise(st, what)
            if not blocking:
                fut = torch.futures.Future()
                if barrier:
                    self._barriers += 1
                self._completer.put(_Pending(w, fut, finish, keep, what, self._release if barrier else None))
                return _work_of(fut.then(_unwrap), frame)
        # The caller would wait at once: wait here (the library completes a communicator's calls in issue order,
        # so an earlier operation still with the completer is unaffected), outside the lock.
        st = _c.cohort_work_wait(w)
        _c.cohort_work_free(w)
        if st != _lib.OK:
            _raise(st, what)
        return _DoneWork(finish() if finish else None)

    def _release(self):
        """A barrier's callbacks have run: start what was held behind it, in order, up to the next barrier."""
        failed = []
        with self._lock:
            self._barriers -= 1
            while self._barriers == 0 and self._held and not self._closed:
                h = self._held.popleft()
                w = ctypes.c_void_p()
                st = h.start(ctypes.byref(w))
                if st != _lib.OK:
                    failed.append((h, st))
                    continue
                if h.barrier:
                    self._barriers += 1
                self._completer.put(_Pending(w, h.future, h.finish, h.keep, h.what,
                                             self._release if h.barrier else None))
        for h, st in failed:
            h.future.set_result(_Failed(_error_of(st, h.what)))

    # -- the collectives --

    def _allreduce_py(self, tensors, opts=None):
        op = _op_code(opts.reduceOp if opts is not None else ReduceOp.SUM, "all_reduce", tensors)
        return self._allreduce_many(tensors, op, "all_reduce")

    def _fast_failed(self, status, what, like=None):
        """The C++ half's blocking call failed: the same error the Python path raises."""
        _raise(status, _with_shape(what, like) if like is not None and _shape_tag(like) else what)

    def allreduce_coalesced(self, tensors, opts=None):
        op = _op_code(opts.reduceOp if opts is not None else ReduceOp.SUM, "all_reduce_coalesced", tensors)
        return self._allreduce_many(tensors, op, "all_reduce_coalesced")

    def _allreduce_many(self, tensors, op, what):
        direct = _direct(tensors, op)
        flats = [_flat(t, what, direct) for t in tensors]
        if len(flats) == 1:
            src, code, n = flats[0]
            t = tensors[0]

            def finish():
                if src.data_ptr() != t.data_ptr():
                    _copy_back(t, src)
                return tensors

            return self._issue_allreduce(what, src, n, code, op, finish, direct, t)
        # Several tensors: one fused buffer per call keeps one collective per operation on every rank.
        codes = {code for _, code, _ in flats}
        if len(codes) != 1:
            raise TypeError(f"cohort backend: {what}: the tensors have different dtypes")
        code = codes.pop()
        fused = torch.cat([f.reshape(-1) for f, _, _ in flats])

        def finish():
            off = 0
            for t, (f, _, n) in zip(tensors, flats):
                piece = fused[off:off + n].view_as(f)
                _copy_back(t, piece)
                off += n
            return tensors

        return self._issue_allreduce(what, fused, fused.numel(), code, op, finish, direct)

    def _issue_allreduce(self, what, buf, n, code, op, finish, direct, like=None):
        """An in-place allreduce of buf: on its device, ordered on torch's current stream there (direct), or on host
        memory."""
        p = buf.data_ptr()
        if direct:
            on = _OnStream(buf)
            s = on.ptr
            return self._issue(what, lambda w: _c.cohort_iallreduce_stream(self._comm, p, p, n, code, op, s, w),
                               on.finish(finish), (buf, on),
                               lambda: _c.cohort_allreduce_stream(self._comm, p, p, n, code, op, s), like)
        return self._issue(what, lambda w: _c.cohort_iallreduce(self._comm, p, p, n, code, op, w), finish, (buf,),
                           lambda: _c.cohort_allreduce(self._comm, p, p, n, code, op), like)

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "broadcast")
        if len(tensors) != 1:
            raise ValueError("cohort backend: broadcast: one tensor per call (the CPU backend has one device)")
        t = tensors[0]
        direct = _direct(tensors)
        buf, code, n = _flat(t, "broadcast", direct)

        def finish():
            if buf.data_ptr() != t.data_ptr():
                _copy_back(t, buf)
            return tensors

        p = buf.data_ptr()
        if direct:
            on = _OnStream(buf)
            s = on.ptr
            return self._issue("broadcast", lambda w: _c.cohort_ibroadcast_stream(self._comm, p, n, code, root, s, w),
                               on.finish(finish), (buf, on),
                               lambda: _c.cohort_broadcast_stream(self._comm, p, n, code, root, s), t)
        return self._issue("broadcast", lambda w: _c.cohort_ibroadcast(self._comm, p, n, code, root, w), finish, (buf,),
                           lambda: _c.cohort_broadcast(self._comm, p, n, code, root), t)

    def allgather(self, output_tensors, input_tensors, opts=None):
        if len(input_tensors) != 1 or len(output_tensors) != 1:
            raise ValueError("cohort backend: all_gather: one input tensor per call")
        inp, outs = input_tensors[0], output_tensors[0]
        if len(outs) != self.size():
            raise ValueError(f"cohort backend: all_gather: {len(outs)} output tensors for a group of {self.size()}")
        for o in outs:
            if o.dtype != inp.dtype or o.numel() != inp.numel():
                raise ValueError(f"cohort backend: all_gather: an output tensor of {o.numel()} {o.dtype} elements "
                                 f"for an input of {inp.numel()} {inp.dtype}")
        direct = _direct([inp] + list(outs))
        src, code, n = _flat(inp, "all_gather", direct)
        whole = torch.empty((self.size(),) + tuple(src.shape), dtype=src.dtype, device=src.device)

        def finish():
            for r, o in enumerate(outs):
                _copy_back(o, whole[r])
            return output_tensors

        if direct:
            on = _OnStream(src)
            s = on.ptr
            return self._issue("all_gather", lambda w: _C.cohort_iallgather_stream(self._comm, _ptr(src), _ptr(whole),
                                                                                   n, code, s, w), on.finish(finish),
                               (src, whole, on), like=inp)
        return self._issue("all_gather", lambda w: _c.cohort_iallgather(self._comm, _ptr(src), _ptr(whole), n, code,
                                                                        w), finish, (src, whole), like=inp)

    def _allgather_base(self, output, input, opts=None):
        direct = _direct([output, input])
        src, code, n = _flat(input, "all_gather_into_tensor", direct)
        if output.numel() != n * self.size() or output.dtype != input.dtype:
            raise ValueError(f"cohort backend: all_gather_into_tensor: the output has {output.numel()} {output.dtype} "
                             f"elements, not {self.size()} x {input.numel()} {input.dtype}")
        if output.device.type == "cuda" and not direct:  # staged: the result comes to host memory first
            _dtype_code(output, "all_gather_into_tensor")
            dst = torch.empty(output.shape, dtype=output.dtype)
        else:
            dst = output if output.is_contiguous() else torch.empty_like(output, memory_format=torch.contiguous_format)
        dflat = torch.view_as_real(dst) if dst.is_complex() else dst

        def finish():
            if dst is not output:
                output.copy_(dst)
            return [output]

        if direct:
            on = _OnStream(src)
            s = on.ptr
            return self._issue("all_gather_into_tensor",
                               lambda w: _C.cohort_iallgather_stream(self._comm, _ptr(src), _ptr(dflat), n, code, s, w),
                               on.finish(finish), (src, dst, on), like=input)
        return self._issue("all_gather_into_tensor",
                           lambda w: _c.cohort_iallgather(self._comm, _ptr(src), _ptr(dflat), n, code, w), finish,
                           (src, dst), like=input)

    def _gather_packed(self, tensors, what):
        """tensors flattened (_flat) and packed end to end into one buffer of their one dtype, and the [size, packed]
        buffer an allgather of it fills: (flats, dtype code, packed, whole)."""
        flats, code = _one_dtype(tensors, what)
        packed = torch.cat([f.reshape(-1) for f, _, _ in flats]) if flats else torch.empty(0, dtype=torch.uint8)
        return flats, code, packed, torch.empty((self.size(), packed.numel()), dtype=packed.dtype)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """output_lists[r][i] gets rank r's input_list[i]: one allgather of the inputs packed end to end."""
        n = self.size()
        if len(output_lists) != n or any(len(o) != len(input_list) for o in output_lists):
            raise ValueError(f"cohort backend: all_gather_coalesced: the outputs must be {n} lists of "
                             f"{len(input_list)} tensors")
        flats, code, packed, whole = self._gather_packed(input_list, "all_gather_coalesced")

        def finish():
            for r in range(n):
                off = 0
                for t, (f, _, m) in zip(output_lists[r], flats):
                    piece = whole[r, off:off + m].view_as(f)
                    _copy_back(t, piece)
                    off += m
            return output_lists

        return self._issue("all_gather_coalesced",
                           lambda w: _c.cohort_iallgather(self._comm, _ptr(packed), _ptr(whole), packed.numel(), code,
                                                          w), finish, (packed, whole))

    # torch 2's functional collectives (DTensor, and with it FSDP2 and tensor parallelism) reach a group for
    # several tensors at once through these two; a group without them fails there with "No backend type associated
    # with device type cpu". Each packs its tensors (one dtype) and runs one collective, as allgather_coalesced does.
    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        """outputs[i] (size x inputs[i].numel() elements) gets every rank's inputs[i], rank by rank."""
        n = self.size()
        if len(outputs) != len(inputs):
            raise ValueError(f"cohort backend: all_gather_into_tensor_coalesced: {len(outputs)} outputs for "
                             f"{len(inputs)} inputs")
        for o, i in zip(outputs, inputs):
            if o.numel() != n * i.numel() or o.dtype != i.dtype:
                raise ValueError(f"cohort backend: all_gather_into_tensor_coalesced: an output of {o.numel()} "
                                 f"{o.dtype} elements for an input of {i.numel()} {i.dtype} ({n} ranks)")
        flats, code, packed, whole = self._gather_packed(inputs, "all_gather_into_tensor_coalesced")

        def finish():
            off = 0
            for o, (f, _, m) in zip(outputs, flats):
                piece = whole[:, off:off + m].reshape(-1)
                _copy_back(o, piece.reshape(o.shape + (2,)) if o.is_complex() else piece)
                off += m
            return outputs

        return self._issue("all_gather_into_tensor_coalesced",
                           lambda w: _c.cohort_iallgather(self._comm, _ptr(packed), _ptr(whole), packed.numel(), code,
                                                          w), finish, (packed, whole))

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        """outputs[i] gets this rank's slice (outputs[i].numel() elements, in rank order) of inputs[i] reduced."""
        n = self.size()
        op = _op_code(opts.reduceOp if opts is not None else ReduceOp.SUM, "reduce_scatter_tensor_coalesced",
                      inputs)
        if len(outputs) != len(inputs):
            raise ValueError(f"cohort backend: reduce_scatter_tensor_coalesced: {len(outputs)} outputs for "
                             f"{len(inputs)} inputs")
        for o, i in zip(outputs, inputs):
            if o.numel() * n != i.numel() or o.dtype != i.dtype:
                raise ValueError(f"cohort backend: reduce_scatter_tensor_coalesced: an input of {i.numel()} {i.dtype} "
                                 f"elements for an output of {o.numel()} {o.dtype} ({n} ranks)")
        flats, code = _one_dtype(inputs, "reduce_scatter_tensor_coalesced")
        # Rank r's slices of every input side by side: the reduce-scatter hands rank r row r, reduced.
        rows = [f.reshape(n, -1) for f, _, _ in flats]
        whole = torch.cat(rows, dim=1).contiguous() if rows else torch.empty((n, 0), dtype=torch.uint8)
        dst = torch.empty(whole.shape[1], dtype=whole.dtype)
        m = dst.numel()

        def finish():
            off = 0
            for o, r in zip(outputs, rows):
                k = r.shape[1]
                piece = dst[off:off + k]
                _copy_back(o, piece.reshape(o.shape + (2,)) if o.is_complex() else piece)
                off += k
            return outputs

        return self._issue("reduce_scatter_tensor_coalesced",
                           lambda w: _c.cohort_ireduce_scatter(self._comm, _ptr(whole), _ptr(dst), m, code, op, w),
                           finish, (whole, dst))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        if len(output_tensors) != 1 or len(input_tensors) != 1:
            raise ValueError("cohort backend: reduce_scatter: one output tensor per call")
        out, ins = output_tensors[0], input_tensors[0]
        op = _op_code(opts.reduceOp if opts is not None else ReduceOp.SUM, "reduce_scatter", output_tensors)
        if len(ins) != self.size():
            raise ValueError(f"cohort backend: reduce_scatter: {len(ins)} input tensors for a group of "
                             f"{self.size()}")
        for i in ins:
            if i.numel() != out.numel() or i.dtype != out.dtype:
                raise ValueError(f"cohort backend: reduce_scatter: an input of {i.numel()} {i.dtype} elements for "
                                 f"an output of {out.numel()} {out.dtype}")
        direct = _direct([out] + list(ins), op)
        whole = torch.cat([_flat(i, "reduce_scatter", direct)[0].reshape(-1) for i in ins])
        dst, code, n = _flat(out, "reduce_scatter", direct)

        def finish():
            if dst.data_ptr() != out.data_ptr():
                _copy_back(out, dst)
            return output_tensors

        if direct:
            on = _OnStream(dst)
            s = on.ptr
            return self._issue("reduce_scatter",
                               lambda w: _C.cohort_ireduce_scatter_stream(self._comm, _ptr(whole), _ptr(dst), n, code,
                                                                          op, s, w), on.finish(finish),
                               (whole, dst, on))
        return self._issue("reduce_scatter", lambda w: _c.cohort_ireduce_scatter(self._comm, _ptr(whole), _ptr(dst),
                                                                                 n, code, op, w), finish,
                           (whole, dst))

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _op_code(opts.reduceOp if opts is not None else ReduceOp.SUM, "reduce_scatter_tensor", [input])
        direct = _direct([output, input], op)
        src, code, n = _flat(input, "reduce_scatter_tensor", direct)
        if output.dtype != input.dtype or output.numel() * self.size() != input.numel():
            raise ValueError(f"cohort backend: reduce_scatter_tensor: the input has {input.numel()} {input.dtype} "
                             f"elements, not {self.size()} x the output's {output.numel()} {output.dtype}")
        dst, _, m = _flat(output, "reduce_scatter_tensor", direct)

        def finish():
            if dst.data_ptr() != output.data_ptr():
                _copy_back(output, dst)
            return [output]

        if direct:
            on = _OnStream(dst)
            s = on.ptr
            return self._issue("reduce_scatter_tensor",
                               lambda w: _C.cohort_ireduce_scatter_stream(self._comm, _ptr(src), _ptr(dst), m, code, op,
                                                                          s, w), on.finish(finish), (src, dst, on))
        return self._issue("reduce_scatter_tensor",
                           lambda w: _c.cohort_ireduce_scatter(self._comm, _ptr(src), _ptr(dst), m, code, op, w),
                           finish, (src, dst))

    def barrier(self, opts=None):
        return self._issue("barrier", lambda w: _c.cohort_ibarrier(self._comm, w),
                           run=lambda: _c.cohort_barrier(self._comm))

    def reduce(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "reduce")
        op = _op_code(opts.reduceOp if opts is not None else ReduceOp.SUM, "reduce", tensors)
        if len(tensors) != 1:
            raise ValueError("cohort backend: reduce: one tensor per call")
        t = tensors[0]
        buf, code, n = _flat(t, "reduce")

        def finish():
            if buf.data_ptr() != t.data_ptr() and self.rank() == root:
                _copy_back(t, buf)
            return tensors

        return self._issue("reduce", lambda w: _C.cohort_ireduce(self._comm, _ptr(buf), _ptr(buf), n, code, op, root,
                                                                 w), finish, (buf,), like=t)

    def gather(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "gather")
        if len(input_tensors) != 1:
            raise ValueError("cohort backend: gather: one input tensor per call")
        src, code, n = _flat(input_tensors[0], "gather")
        outs = output_tensors[0] if self.rank() == root else []
        if self.rank() == root:
            if len(output_tensors) != 1 or len(outs) != self.size():
                raise ValueError(f"cohort backend: gather: the root needs {self.size()} output tensors")
            for o in outs:
                if o.numel() != input_tensors[0].numel() or o.dtype != input_tensors[0].dtype:
                    raise ValueError(f"cohort backend: gather: an output of {o.numel()} {o.dtype} elements for an "
                                     f"input of {input_tensors[0].numel()} {input_tensors[0].dtype}")
        whole = torch.empty((self.size(),) + tuple(src.shape), dtype=src.dtype) if self.rank() == root else src

        def finish():
            for r, o in enumerate(outs):
                _copy_back(o, whole[r])
            return output_tensors

        return self._issue("gather", lambda w: _C.cohort_igather(self._comm, _ptr(src), _ptr(whole), n, code, root, w),
                           finish, (src, whole))

    def scatter(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "scatter")
        if len(output_tensors) != 1:
            raise ValueError("cohort backend: scatter: one output tensor per call")
        out = output_tensors[0]
        dst, code, n = _flat(out, "scatter")
        if self.rank() == root:
            ins = input_tensors[0] if len(input_tensors) == 1 else []
            if len(ins) != self.size():
                raise ValueError(f"cohort backend: scatter: the root needs {self.size()} input tensors")
            for i in ins:
                if i.numel() != out.numel() or i.dtype != out.dtype:
                    raise ValueError(f"cohort backend: scatter: an input of {i.numel()} {i.dtype} elements for an "
                                     f"output of {out.numel()} {out.dtype}")
            whole = torch.cat([_flat(i, "scatter")[0].reshape(-1) for i in ins])
        else:
            whole = dst

        def finish():
            if dst.data_ptr() != out.data_ptr():
                _copy_back(out, dst)
            return output_tensors

        return self._issue("scatter", lambda w: _C.cohort_iscatter(self._comm, _ptr(whole), _ptr(dst), n, code, root,
                                                                   w), finish, (whole, dst))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        n = self.size()
        src, code, total_in = _flat(input, "all_to_all_single")
        if output.dtype != input.dtype:
            raise ValueError(f"cohort backend: all_to_all_single: output {output.dtype}, input {input.dtype}")
        dst, _, total_out = _flat(output, "all_to_all_single")
        if not output_split_sizes and not input_split_sizes:
            if total_in % n or total_in != total_out:
                raise ValueError(f"cohort backend: all_to_all_single: {total_in} input and {total_out} output "
                                 f"elements do not split evenly over {n} ranks")
            start = lambda w: _C.cohort_ialltoall(self._comm, _ptr(src), _ptr(dst), total_in // n, code, w)  # noqa
            keep = (src, dst)
        else:
            send = _counts(input_split_sizes, input, src, n, "input_split_sizes")
            recv = _counts(output_split_sizes, output, dst, n, "output_split_sizes")
            start = lambda w: _C.cohort_ialltoallv(self._comm, _ptr(src), send, None, _ptr(dst), recv, None,  # noqa
                                                   code, w)
            keep = (src, dst, send, recv)

        def finish():
            if dst.data_ptr() != output.data_ptr():
                _copy_back(output, dst)
            return [output]

        return self._issue("all_to_all_single", start, finish, keep)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        n = self.size()
        if len(output_tensors) != n or len(input_tensors) != n:
            raise ValueError(f"cohort backend: all_to_all: {len(input_tensors)} inputs and {len(output_tensors)} "
                             f"outputs for a group of {n}")
        flats_in = [_flat(t, "all_to_all") for t in input_tensors]
        flats_out = [_flat(t, "all_to_all") for t in output_tensors]
        codes = {c for _, c, _ in flats_in + flats_out}
        if len(codes) != 1:
            raise TypeError("cohort backend: all_to_all: the tensors have different dtypes")
        code = codes.pop()
        src = torch.cat([f.reshape(-1) for f, _, _ in flats_in])
        dst = torch.empty(sum(m for _, _, m in flats_out), dtype=src.dtype)
        send = (ctypes.c_size_t * n)(*[m for _, _, m in flats_in])
        recv = (ctypes.c_size_t * n)(*[m for _, _, m in flats_out])

        def finish():
            off = 0
            for t, (f, _, m) in zip(output_tensors, flats_out):
                piece = dst[off:off + m].view_as(f)
                _copy_back(t, piece)
                off += m
            return output_tensors

        return self._issue("all_to_all", lambda w: _C.cohort_ialltoallv(self._comm, _ptr(src), send, None, _ptr(dst),
                                                                        recv, None, code, w), finish,
                           (src, dst, send, recv))

    # -- point to point: not collectives, so not in the completer's issue order (a receive may wait on a message
    # that another rank sends only after a later collective): their Work waits on its own handle.

    def send(self, tensors, dst_rank, tag):
        return self._p2p("send", tensors, dst_rank, tag, _C.cohort_isend)

    def recv(self, tensors, src_rank, tag):
        return self._p2p("recv", tensors, src_rank, tag, _C.cohort_irecv)

    def recv_anysource(self, tensors, tag):
        return self._p2p("recv", tensors, _core_any_source(), tag, _C.cohort_irecv)

    def _p2p(self, what, tensors, peer, tag, call):
        if len(tensors) != 1:
            raise ValueError(f"cohort backend: {what}: one tensor per call")
        if self._closed:
            raise RuntimeError(f"cohort backend: {what} on a destroyed process group")
        t = tensors[0]
        buf, code, n = _flat(t, what)
        w = ctypes.c_void_p()
        st = call(self._comm, _ptr(buf), n, code, peer, tag, ctypes.byref(w))
        if st != _lib.OK:
            _raise(st, what)
        return _P2PWork(w, what, t, buf)

    def _check_root(self, root, what):
        if not 0 <= root < self.size():
            raise ValueError(f"cohort backend: {what}: root {root} is not a rank of this group of {self.size()}")


if _EXT:
    # What the C++ half asks of Python to decide that a call may run on the caller's thread (_blocking's test):
    # the front-end functions that wait at once unless async_op, and the callbacks' depth (_issue).
    _EXT.set_python_state([dist.distributed_c10d.all_reduce.__code__], _tls)
else:
    ProcessGroupCohort.allreduce = ProcessGroupCohort._allreduce_py


def _create_process_group(opts, pg_options=None):
    # Registered with extended_api=True (torch 1.13 and 2.x): opts carries the group's name (group_name above; torch 2
    # sets it again after this returns). The default group is the first one torch makes (init_process_group), before
    # GroupMember.WORLD is set.
    default_group = dist.distributed_c10d.GroupMember.WORLD is None
    pg = ProcessGroupCohort(opts.store, opts.group_rank, opts.group_size, opts.timeout, default_group=default_group)
    pg._set_group_name(opts.group_id)
    return pg


def register():
    """Registers the backend with torch.distributed (once per process)."""
    if hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    # torch 2 asks which devices a backend serves (without the argument it assumes cpu and cuda, and warns): both
    # (CUDA tensors: "CUDA tensors" above). Nothing here asks CUDA anything until a CUDA tensor comes: a process that
    # imports cohort.torch and then forks its ranks must not have started the driver (docs/gpu.md).
    try:
        dist.Backend.register_backend(BACKEND_NAME, _create_process_group, extended_api=True, devices=["cpu", "cuda"])
    except TypeError:  # torch 1.x: no devices argument
        dist.Backend.register_backend(BACKEND_NAME, _create_process_group, extended_api=True)
