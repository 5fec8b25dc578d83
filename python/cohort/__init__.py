"""cohort: data-parallel collectives for Python, over libcohort.so.

The core works on numpy arrays and any object with the buffer protocol; cohort.torch does the same for tensors and
adds Horovod's training API and a DistributedDataParallel wrapper (docs/torch.md).

    import cohort, numpy as np
    cohort.init()                       # reads RANK, WORLD_SIZE, ... as set by cohortrun, torchrun, mpirun or srun
    x = cohort.allreduce(np.ones(4, np.float32), op=cohort.Sum)

Every failure of the library raises a CohortError subclass carrying the C message, which names the rank and the
call. Ranks that call different collectives (kind, dtype, op, root or count) raise MismatchError on every rank,
the root of a broadcast included, naming both calls; that call was refused before any data moved, and the job goes
on (the next call works). After any other error (but a bad argument) the communicator is aborted: later calls raise
the same error at once, and the job should end (cohortrun stops the others).
"""
import atexit
import builtins
import ctypes
import os
import pickle
import threading
import weakref

import numpy as np

from cohort import _lib
from cohort._lib import lib as _c

# The version of the libcohort.so this package binds (cohort_version()).
__version__ = _c.cohort_version().decode()

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "transport",
    "Average", "Sum", "Min", "Max", "Product", "Adasum",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce", "poll", "synchronize",
    "allgather", "broadcast", "broadcast_", "reducescatter", "barrier", "broadcast_object", "allgather_object",
    "CohortError", "HorovodInternalError", "RemoteError", "MismatchError", "TimeoutError", "AuthError", "InvalidArgumentError",
    "Handle", "ProcessSet", "global_process_set", "add_process_set", "remove_process_set", "new_group",
]

# ---- errors ----


class CohortError(RuntimeError):
    """A failure reported by libcohort: .status is the cohort_status, .message the C message (rank and call)."""

    def __init__(self, status, message):
        self.status = status
        self.message = message
        name = _c.cohort_strerror(status).decode()
        super().__init__(f"{name}: {message}" if message else name)


class HorovodInternalError(RuntimeError):
    """Horovod's name for a failure while data moved (a peer died, closed its link or timed out; a malformed frame):
    RemoteError, TimeoutError and ProtocolError are HorovodInternalErrors, as Horovod raises one from synchronize()
    and its elastic mode catches it. MismatchError and InvalidArgumentError are not (nothing moved)."""


class RemoteError(CohortError, HorovodInternalError):
    """A peer died, closed its link or aborted (COHORT_ERR_REMOTE); the message names it."""


class MismatchError(CohortError):
    """Ranks called different collectives, counts, dtypes, ops or roots (COHORT_ERR_MISMATCH). Raised on every rank
    when the ranks compare their calls before data moves, and then the communicator stays usable."""


class TimeoutError(CohortError, HorovodInternalError, builtins.TimeoutError):  # noqa: A001 (Horovod-style name, also a builtin subclass)
    """A peer or the store did not answer within COHORT_OP_TIMEOUT (COHORT_ERR_TIMEOUT)."""


class AuthError(CohortError):
    """A peer or the store failed the COHORT_SECRET handshake (COHORT_ERR_AUTH)."""


class InvalidArgumentError(CohortError, ValueError):
    """libcohort refused an argument (COHORT_ERR_INVALID); nothing was started."""


class ProtocolError(CohortError, HorovodInternalError):
    """A malformed or unexpected frame arrived (COHORT_ERR_PROTOCOL)."""


class SystemError_(CohortError, HorovodInternalError):
    """A system call or the library itself failed while data moved (COHORT_ERR_SYSTEM, COHORT_ERR_INTERNAL)."""


_ERROR_CLASSES = {_lib.ERR_SYSTEM: SystemError_, _lib.ERR_INTERNAL: SystemError_,
                  _lib.ERR_INVALID: InvalidArgumentError, _lib.ERR_TIMEOUT: TimeoutError,
                  _lib.ERR_REMOTE: RemoteError, _lib.ERR_MISMATCH: MismatchError, _lib.ERR_AUTH: AuthError,
                  _lib.ERR_PROTOCOL: ProtocolError}


# The library's words for calls whose tags differ (cohort_tag_next_call); this package's tags are tensor shapes.
_TAG_WORDS = "with another tag (cohort_tag_next_call: e.g. another tensor shape)"


def _error(status, prefix=None):
    msg = _c.cohort_last_error().decode(errors="replace").replace(_TAG_WORDS, "with a tensor of another shape")
    if prefix:
        msg = f"{prefix}: {msg}" if msg else prefix
    return _ERROR_CLASSES.get(status, CohortError)(status, msg)


def _check(status, prefix=None):
    if status != _lib.OK:
        raise _error(status, prefix)


# ---- ops (Horovod's names; the values are cohort_op) ----

Sum = _lib.SUM
Average = _lib.AVG
Min = _lib.MIN
Max = _lib.MAX
Product = _lib.PROD
Adasum = -1  # Horovod's Adasum is not implemented: passing it raises AdasumNotImplemented


class AdasumNotImplemented(NotImplementedError, ValueError):
    """op=Adasum: not implemented. A NotImplementedError (a RuntimeError, which Horovod's reducescatter raises for
    Adasum and its tests catch) and a ValueError (an argument this library refuses, as it said before)."""
_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product"}


def _op(op):
    if op is None:
        return Average
    if op == Adasum:
        raise AdasumNotImplemented("cohort: op=Adasum is not implemented (use Average or Sum)")
    if op not in _OP_NAMES:
        raise ValueError(f"cohort: unknown reduction op {op!r} (use Average, Sum, Min, Max or Product)")
    return op


# ---- the communicator ----

_lock = threading.RLock()
_comm = None  # c_void_p: the job's communicator (a process set holds its own: ProcessSet._comm)
_pid = None
_engines = weakref.WeakSet()  # DDP engines (cohort.torch), destroyed before the communicator
_handles = weakref.WeakSet()  # outstanding async work, freed before the communicator
# hook(comm, phase) before a communicator is destroyed: phase "stop" (before its handles are freed), then "destroy"
# (cohort.torch's matching of names: its threads, then its twin communicator)
_comm_hooks = []


def init(comm=None, _join=None):
    """Joins the job described by the environment (cohortrun, torchrun, mpirun, srun; none: a 1-rank job).

    Calling it again is a no-op, as in Horovod. comm (a list of ranks, Horovod's sub-communicators) is not
    supported. _join (cohort.torch's): a function that meets the other ranks some other way and returns the
    communicator (c_void_p).
    """
    global _comm, _pid
    if comm is not None:
        raise ValueError("cohort.init: sub-communicators (comm=...) are not supported")
    with _lock:
        if _comm is not None and _pid == os.getpid():
            return
        if _join is not None:
            p = _join()
        else:
            p = ctypes.c_void_p()
            _check(_c.cohort_init(ctypes.byref(p)), "cohort.init")
        _comm, _pid = p, os.getpid()
        _gather_cross(p)


# (cross_rank, cross_size): Horovod's cross communicator is the ranks that share this rank's local rank, one per
# node. Gathered once by init() from every rank's local rank: the launcher's layout may be uneven (srun -N2 -n3 puts
# 2 ranks on one node, 1 on the other) or cyclic (srun -m cyclic), where rank // local_size says nothing.
_cross = (0, 1)


def _gather_cross(comm):
    global _cross
    n = _c.cohort_size(comm)
    mine = np.array([_c.cohort_local_rank(comm)], np.int32)
    every = np.empty(n, np.int32)
    _check(_c.cohort_allgather(comm, _ptr(mine), _ptr(every), 1, _lib.I32), "cohort.init")
    same = [r for r in range(n) if every[r] == mine[0]]
    _cross = (same.index(_c.cohort_rank(comm)), len(same))


def shutdown():
    """Destroys the communicator (engines and outstanding handles first). Safe to call twice."""
    global _comm, _pid
    with _lock:
        if _comm is None:
            return
        if _pid != os.getpid():  # a forked child must not tear down its parent's links
            _comm, _pid = None, None
            return
        for hook in _comm_hooks:  # first, so that nothing starts more work below
            hook(_comm, "stop")
            for ps in list(_process_sets.values()):
                if ps._comm is not None:
                    hook(ps._comm, "stop")
        for h in list(_handles):
            h._release()
            h._shut_down()
        for e in list(_engines):
            e.close()
        for ps in list(_process_sets.values()):
            remove_process_set(ps)
        for hook in _comm_hooks:
            hook(_comm, "destroy")
        _drop_arena_pool(_comm)
        _c.cohort_comm_destroy(_comm)
        _comm, _pid = None, None


atexit.register(shutdown)


# ---- process sets (Horovod's) and groups (torch.distributed's new_group) ----


class ProcessSet:
    """Some ranks of the job, as in Horovod 0.23+: made by add_process_set (collectively), passed as process_set= to
    the collectives, which then run among those ranks only, numbered 0..n-1 in ascending order of job rank. Each set
    is a sub-communicator (cohort_comm_split) with a transport of its own, so collectives on different sets run
    independently. ranks=None: every rank (global_process_set)."""

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted({int(r) for r in ranks})
        self.process_set_id = None
        self._comm = None  # c_void_p on a member, None elsewhere

    def _world_rank(self):
        return _c.cohort_rank(_comm if _comm is not None else _get_comm())

    def included(self):
        """Whether this rank is in the set."""
        return self.ranks is None or self._world_rank() in self.ranks

    def size(self):
        return _c.cohort_size(_comm) if self.ranks is None else len(self.ranks)

    def rank(self):
        """This rank's number within the set; -1 when it is not in it."""
        if self.ranks is None:
            return self._world_rank()
        me = self._world_rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks if self.ranks is not None else 'all'})"


global_process_set = ProcessSet()
global_process_set.process_set_id = 0
_process_sets = {}  # id -> ProcessSet, for shutdown
_next_set_id = [1]


def add_process_set(process_set):
    """Makes a process set of a ProcessSet or a list of ranks. Collective: every rank of the job calls it, with the
    same ranks, in the same order relative to its other calls. Returns the ProcessSet (registered: it has an id)."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.ranks is None:
        raise ValueError("add_process_set: the global process set exists already (global_process_set)")
    if ps.process_set_id is not None:
        raise ValueError(f"add_process_set: {ps} was added already")
    world = _comm if _comm is not None else _get_comm()
    n, me = _c.cohort_size(world), _c.cohort_rank(world)
    if not ps.ranks or ps.ranks[0] < 0 or ps.ranks[-1] >= n:
        raise ValueError(f"add_process_set: ranks {ps.ranks} must be a non-empty subset of 0..{n - 1}")
    out = ctypes.c_void_p()
    color, key = (0, ps.ranks.index(me)) if me in ps.ranks else (_lib.UNDEFINED, 0)
    _check(_c.cohort_comm_split(world, color, key, ctypes.byref(out)), "add_process_set")
    with _lock:
        ps._comm = out if out.value else None
        ps.process_set_id = _next_set_id[0]
        _next_set_id[0] += 1
        _process_sets[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Destroys a process set's communicator (on every rank, like add_process_set). Returns True, or False for a set
    that was not added (or the global one)."""
    ps = process_set
    with _lock:
        if ps is global_process_set or ps.process_set_id not in _process_sets:
            return False
        del _process_sets[ps.process_set_id]
        ps.process_set_id = None
        comm, ps._comm = ps._comm, None
    if comm is not None:
        # Engines on the set (DistributedOptimizer(process_set=), DistributedDataParallel(process_group=)) go
        # first: an engine outliving its communicator would touch it when it is destroyed.
        for hook in _comm_hooks:
            hook(comm, "stop")
        for e in list(_engines):
            if getattr(e, "_comm", None) is comm:
                e.close()
        for hook in _comm_hooks:
            hook(comm, "destroy")
        _drop_arena_pool(comm)
        _c.cohort_comm_destroy(comm)
    return True


def new_group(ranks=None, timeout=None, backend=None, pg_options=None):
    """torch.distributed.new_group: a ProcessSet of ranks (None: all ranks, a new communicator of its own).
    Collective over the job, as in torch. timeout, backend and pg_options are accepted and ignored."""
    world = _comm if _comm is not None else _get_comm()
    return add_process_set(range(_c.cohort_size(world)) if ranks is None else ranks)


def _comm_of(process_set, what):
    """The communicator a call of what with process_set= runs on: the job's (None, global_process_set) or the set's.
    Every call takes its communicator from here and passes it down, so that calls on different sets (a process group
    each) run side by side, on any thread."""
    if process_set is None or process_set is global_process_set:
        return _get_comm()
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"{what}: process_set must be a ProcessSet (add_process_set), got {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ValueError(f"{what}: {process_set} has not been added (add_process_set) or was removed")
    if process_set._comm is None:
        raise ValueError(f"{what}: this rank ({process_set._world_rank()}) is not in {process_set}")
    return process_set._comm


def _forget_after_fork():
    """A forked child shares its parent's links but is not a rank: it forgets the communicator without touching
    it (so that the hot paths need no getpid check)."""
    global _comm, _pid
    _comm, _pid = None, None
    _handles.clear()
    _engines.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def is_initialized():
    return _comm is not None


def _get_comm():
    """The job's communicator (cohort.init)."""
    if _comm is None:
        raise RuntimeError("cohort has not been initialized: call cohort.init() (hvd.init()) first")
    return _comm


# ---- buffers of the binding's own in the shared arena ----


class _ArenaPool:
    """Blocks of one communicator's shared arena (cohort_alloc) for buffers that the binding makes and never hands
    out, such as grouped_allreduce's fused buffer. An allreduce whose buffers lie in every rank's arena is zero copy
    (the peers read and write them in place) instead of going through the staging buffers: grouped_allreduce_ of
    4 to 256 MiB went 1.2x to 2.5x faster on the 2-core machine (docs/performance.md, "Grouped allreduce").

    A block comes back when the last view of it dies (a finalizer on its ctypes array: nothing to release by hand,
    even on an error) and is kept for the next buffer of the same size, because a fresh block is slow: cohort_alloc
    reserves its pages and the first touches fault them in (a block allocated and freed per call made the zero-copy
    allreduce 4x slower than staging). At most KEEP bytes are kept, the least recently returned blocks going first,
    except that the last one returned is always kept (so that a buffer larger than KEEP, used call after call, is
    not reserved and faulted in anew each time). When the arena cannot hold a new block, the idle ones are given
    back and the allocation tried once more.
    Finalizers may run in any thread, even inside this class's own code (a garbage collection): they only append to
    a list, which take() drains under the lock."""

    KEEP = 256 << 20
    PAGE = 4096

    def __init__(self, comm):
        self.comm = comm
        self.alive = True
        self.free = []  # (page-rounded bytes, address), least recently returned first
        self.kept = 0
        self.returned = []  # (bytes, address) given back by finalizers, not yet filed
        self.too_big = None  # the arena could not hold a block this large (or has none): do not try again
        self.lock = threading.Lock()

    def _file_returned(self):
        """Under the lock: keeps what the finalizers gave back, up to KEEP bytes, and frees the rest."""
        while self.returned:
            block = self.returned.pop(0)
            self.free.append(block)
            self.kept += block[0]
        while self.kept > self.KEEP and len(self.free) > 1:
            nbytes, addr = self.free.pop(0)
            self.kept -= nbytes
            _c.cohort_free(self.comm, addr)

    def take(self, nbytes):
        """A writable ctypes uint8 array of nbytes in the arena, or None (no arena, or it is full)."""
        size = -(-nbytes // self.PAGE) * self.PAGE
        if self.too_big is not None and size >= self.too_big:
            return None
        with self.lock:
            self._file_returned()
            addr = None
            for i in range(len(self.free) - 1, -1, -1):
                if self.free[i][0] == size:
                    addr = self.free.pop(i)[1]
                    self.kept -= size
                    break
        if addr is None:
            addr = self._alloc(size)
            if addr is None:
                with self.lock:
                    idle, self.free, self.kept = self.free, [], 0
                for _, a in idle:
                    _c.cohort_free(self.comm, a)
                addr = self._alloc(size) if idle else None
            if addr is None:
                self.too_big = size
                return None
        buf = (ctypes.c_uint8 * nbytes).from_address(addr)
        weakref.finalize(buf, self._give_back, size, addr)
        return buf

    def _alloc(self, size):
        addr = _c.cohort_alloc(self.comm, size)
        if addr and not _c.cohort_in_arena(self.comm, addr, size):  # cohort_alloc fell back to malloc
            _c.cohort_free(self.comm, addr)
            addr = None
        return addr or None

    def idle_bytes(self):
        """Bytes of arena kept for reuse (after filing what the finalizers gave back)."""
        with self.lock:
            self._file_returned()
            return self.kept

    def _give_back(self, size, addr):
        if self.alive:
            self.returned.append((size, addr))
        else:  # its communicator is gone: the arena stays mapped while blocks are out, and this one's pages go back
            _libc.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(size), _MADV_REMOVE)

    def drop(self):
        """Before the communicator is destroyed: frees the kept blocks. A block still in use stays valid (the shm
        transport keeps its arena mapped while blocks are out) and gives its pages back when its last view dies."""
        with self.lock:
            self.alive = False
            self._file_returned()
            for _, addr in self.free:
                _c.cohort_free(self.comm, addr)
            self.free, self.kept = [], 0


_arena_pools = {}  # communicator address -> _ArenaPool
_libc = ctypes.CDLL(None, use_errno=True)
_MADV_REMOVE = 9  # linux/mman.h


def _arena_buffer(comm, nbytes):
    """A ctypes uint8 array of nbytes in comm's shared arena, returned to a pool when its last view dies; None when
    the transport has no arena or it is full (then use ordinary memory: the call is staged, as before)."""
    pool = _arena_pools.get(comm.value)
    if pool is None:
        with _lock:
            pool = _arena_pools.setdefault(comm.value, _ArenaPool(comm))
    return pool.take(nbytes)


def _drop_arena_pool(comm):
    pool = _arena_pools.pop(comm.value, None)
    if pool is not None:
        pool.drop()


def rank():
    return _c.cohort_rank(_get_comm())


def size():
    return _c.cohort_size(_get_comm())


def local_rank():
    return _c.cohort_local_rank(_get_comm())


def local_size():
    return _c.cohort_local_size(_get_comm())


def cross_rank():
    """This rank's place among the ranks with its local rank (its node's place, on an even layout)."""
    _get_comm()
    return _cross[0]


def cross_size():
    """How many ranks share this rank's local rank (the number of nodes, on an even layout)."""
    _get_comm()
    return _cross[1]


def transport():
    """The transport in use: "shm", "tcp", "tcp+shm", "inproc"."""
    return _c.cohort_transport_name(_get_comm()).decode()


def mpi_threads_supported():
    return True


def abort(reason="aborted by the application"):
    """Makes every later call on every rank fail with RemoteError naming this rank and reason."""
    _c.cohort_comm_abort(_get_comm(), reason.encode())


# ---- asynchronous work ----


_SHUT_DOWN = -1  # Handle._status of work that shutdown() released before it was synchronized


class Handle:
    """Outstanding work from an *_async call. poll(h) tells whether it is done; synchronize(h) waits and returns
    the result. The buffers involved belong to the library until then."""

    __slots__ = ("_work", "_keep", "_finish", "_done", "_result", "_status", "__weakref__")

    def __init__(self, finish, keep):
        self._work = ctypes.c_void_p()
        self._keep = keep  # the buffers the C call reads and writes: kept alive until the work completes
        self._finish = finish  # () -> result, run once after the work succeeded
        self._done = False
        self._result = None
        self._status = _lib.OK

    def _release(self):
        if self._work:
            _c.cohort_work_free(self._work)  # waits if still running
            self._work = ctypes.c_void_p()

    def _shut_down(self):
        """shutdown() came before synchronize(): the result was never completed, and its buffers may be gone."""
        if not self._done:
            self._done, self._status, self._keep, self._finish = True, _SHUT_DOWN, None, None

    def __del__(self):
        try:
            self._release()
        except Exception:
            pass


def _start(handle, start_fn):
    """Runs start_fn(byref(work)) (a cohort_i* call); raises on an argument error."""
    st = start_fn(ctypes.byref(handle._work))
    if st != _lib.OK:
        handle._work = ctypes.c_void_p()
        raise _error(st)
    _handles.add(handle)
    return handle


def _completed(result):
    h = Handle(None, None)
    h._done, h._result = True, result
    return h


def poll(handle):
    """True once the work of handle has completed (successfully or not); never blocks."""
    if not isinstance(handle, Handle):
        raise TypeError(f"cohort.poll: expected a handle from an *_async call, got {type(handle).__name__}")
    if handle._done or not handle._work:
        return True
    done = ctypes.c_int(0)
    st = _c.cohort_work_test(handle._work, ctypes.byref(done))
    if done.value or st != _lib.OK:
        return True
    return False


def synchronize(handle):
    """Waits for the work of handle and returns its result (the output tensor/array). Raises its error."""
    if not isinstance(handle, Handle):
        raise TypeError(f"cohort.synchronize: expected a handle from an *_async call, got {type(handle).__name__}")
    if handle._done:
        if handle._status == _SHUT_DOWN:
            raise RuntimeError("cohort.synchronize: cohort.shutdown() was called before this work was synchronized; "
                               "its result was discarded")
        if handle._status != _lib.OK:
            raise _error(handle._status)
        return handle._result
    if handle._work:
        st = _c.cohort_work_wait(handle._work)
        err = _error(st) if st != _lib.OK else None
        handle._release()
        _handles.discard(handle)
        handle._done = True
        if err is not None:
            handle._status = st
            handle._keep = None
            raise err
    handle._done = True
    handle._result = handle._finish() if handle._finish else None
    handle._keep = handle._finish = None
    return handle._result


def wait_all(handles):
    return [synchronize(h) for h in handles]


# ---- numpy and buffers ----

_NP_DTYPES = {np.dtype(np.float32): _lib.F32, np.dtype(np.float64): _lib.F64, np.dtype(np.float16): _lib.F16,
              np.dtype(np.int32): _lib.I32, np.dtype(np.int64): _lib.I64, np.dtype(np.uint8): _lib.U8,
              np.dtype(np.int8): _lib.I8, np.dtype(np.int16): _lib.I16, np.dtype(np.bool_): _lib.BOOL}


def _as_array(obj, writable=False, what="cohort"):
    if isinstance(obj, np.ndarray):
        a = obj
    else:
        try:
            a = np.asarray(memoryview(obj))
        except TypeError:
            raise TypeError(f"{what}: expected a numpy array or an object with the buffer protocol, "
                            f"got {type(obj).__name__}") from None
    if a.dtype not in _NP_DTYPES:
        raise TypeError(f"{what}: unsupported dtype {a.dtype} (supported: float32, float64, float16, int32, "
                        f"int64, uint8; bfloat16 through cohort.torch)")
    if writable and not a.flags.writeable:
        raise ValueError(f"{what}: the buffer is read-only and the operation writes into it")
    return a


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def _scale_ok(a, prescale, postscale, what):
    if (prescale != 1.0 or postscale != 1.0) and a.dtype.kind not in "f":
        raise ValueError(f"{what}: prescale_factor/postscale_factor apply to floating-point data only")


def _np_allreduce(comm, a, out, op, prescale, postscale, async_):
    if prescale != 1.0:
        a = (a * a.dtype.type(prescale)).astype(a.dtype)
    src = np.ascontiguousarray(a)
    dst = out if out.flags.c_contiguous else np.empty_like(src)

    def finish():
        if dst is not out:
            out[...] = dst
        if postscale != 1.0:
            out[...] = out * out.dtype.type(postscale)
        return out

    dt = _NP_DTYPES[src.dtype]
    if async_:
        return _start(Handle(finish, (src, dst, out)),
                      lambda w: _c.cohort_iallreduce(comm, _ptr(src), _ptr(dst), src.size, dt, op, w))
    _check(_c.cohort_allreduce(comm, _ptr(src), _ptr(dst), src.size, dt, op))
    return finish()


def allreduce(x, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None):
    """A new array: op over the ranks of x, element by element (Average of integers rounds toward zero)."""
    a = _as_array(x, what="cohort.allreduce")
    _scale_ok(a, prescale_factor, postscale_factor, "cohort.allreduce")
    out = np.empty(a.shape, a.dtype)
    return _np_allreduce(_get_comm(), a, out, _op(op), prescale_factor, postscale_factor, False)


def allreduce_(x, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None):
    """In place: x becomes op over the ranks of x. Returns x (as an array)."""
    if type(x) is np.ndarray and prescale_factor == 1.0 and postscale_factor == 1.0 and type(op) is int \
            and op in _OP_NAMES and _comm is not None and x.flags.c_contiguous and x.flags.writeable:
        dt = _NP_DTYPES.get(x.dtype)
        if dt is not None:  # the hot path: one ctypes call
            ptr = x.ctypes.data
            _check(_c.cohort_allreduce(_comm, ptr, ptr, x.size, dt, op))
            return x
    a = _as_array(x, writable=True, what="cohort.allreduce_")
    _scale_ok(a, prescale_factor, postscale_factor, "cohort.allreduce_")
    return _np_allreduce(_get_comm(), a, a, _op(op), prescale_factor, postscale_factor, False)


def allreduce_async(x, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None):
    a = _as_array(x, what="cohort.allreduce_async")
    _scale_ok(a, prescale_factor, postscale_factor, "cohort.allreduce_async")
    out = np.empty(a.shape, a.dtype)
    return _np_allreduce(_get_comm(), a, out, _op(op), prescale_factor, postscale_factor, True)


def allreduce_async_(x, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None):
    a = _as_array(x, writable=True, what="cohort.allreduce_async_")
    _scale_ok(a, prescale_factor, postscale_factor, "cohort.allreduce_async_")
    return _np_allreduce(_get_comm(), a, a, _op(op), prescale_factor, postscale_factor, True)


def grouped_allreduce(xs, op=Average, name=None):
    """A list of new arrays, reduced as one fused allreduce per dtype."""
    comm = _get_comm()
    arrays = [_as_array(x, what="cohort.grouped_allreduce") for x in _list_arg(xs, "cohort.grouped_allreduce")]
    out = [None] * len(arrays)
    for dt in sorted({a.dtype.str for a in arrays}):
        idx = [i for i, a in enumerate(arrays) if a.dtype.str == dt]
        parts = [arrays[i].ravel() for i in idx]
        numel = sum(p.size for p in parts)
        # Over 1 MiB the fused buffer lies in the shared arena: zero copy (_ArenaPool; cohort.torch's threshold).
        nbytes = numel * np.dtype(dt).itemsize
        buf = _arena_buffer(comm, nbytes) if nbytes > 1 << 20 else None
        flat = np.frombuffer(buf, dtype=dt) if buf is not None else np.empty(numel, dt)
        np.concatenate(parts, out=flat)
        _np_allreduce(comm, flat, flat, _op(op), 1.0, 1.0, False)
        off = 0
        for i in idx:
            n = arrays[i].size
            out[i] = flat[off:off + n].reshape(arrays[i].shape).copy()
            off += n
    return out


def _list_arg(xs, what):
    if not isinstance(xs, (list, tuple)):
        raise TypeError(f"{what}: expected a list of tensors/arrays, got {type(xs).__name__}")
    if len(xs) == 0:
        raise ValueError(f"{what}: the list is empty")
    return list(xs)


def broadcast_(x, root_rank, name=None):
    comm = _get_comm()
    a = _as_array(x, writable=True, what="cohort.broadcast_")
    _root(comm, root_rank, "cohort.broadcast_")
    buf = a if a.flags.c_contiguous else np.ascontiguousarray(a)
    _check(_c.cohort_broadcast(comm, _ptr(buf), buf.size, _NP_DTYPES[a.dtype], root_rank))
    if buf is not a:
        a[...] = buf
    return a


def broadcast(x, root_rank, name=None):
    a = _as_array(x, what="cohort.broadcast")
    return broadcast_(np.array(a, copy=True), root_rank)


def _root(comm, root_rank, what):
    if not isinstance(root_rank, (int, np.integer)) or isinstance(root_rank, bool):
        raise TypeError(f"{what}: root_rank must be an int, got {type(root_rank).__name__}")
    n = _c.cohort_size(comm)
    if not 0 <= root_rank < n:
        raise ValueError(f"{what}: root_rank {root_rank} is out of range (the job has {n} ranks)")


# The header every rank contributes before an allgather: the shapes and dtypes may differ in the first dimension
# only, and every rank must see the same verdict, so each learns all the others' headers.
_MAX_NDIM = 8


def _gather_headers(comm, shape, dtype_code, what):
    if len(shape) > _MAX_NDIM:
        raise ValueError(f"{what}: at most {_MAX_NDIM} dimensions")
    if len(shape) == 0:
        raise ValueError(f"{what}: a scalar cannot be gathered along dimension 0 (give it one dimension)")
    hdr = np.full(2 + _MAX_NDIM, -1, np.int64)
    hdr[0], hdr[1] = dtype_code, len(shape)
    hdr[2:2 + len(shape)] = shape
    n, me = _c.cohort_size(comm), _c.cohort_rank(comm)
    allh = np.empty((n, hdr.size), np.int64)
    _check(_c.cohort_allgather(comm, _ptr(hdr), _ptr(allh), hdr.size, _lib.I64), what)
    for r in range(n):
        h = allh[r]
        if h[0] != hdr[0] or h[1] != hdr[1] or np.any(h[3:2 + h[1]] != hdr[3:2 + hdr[1]]):
            raise MismatchError(_lib.ERR_MISMATCH,
                                f"{what}: rank {me} has dtype {_lib_dtype_name(hdr[0])} shape "
                                f"{tuple(int(v) for v in hdr[2:2 + hdr[1]])}, rank {r} has dtype "
                                f"{_lib_dtype_name(h[0])} shape {tuple(int(v) for v in h[2:2 + h[1]])}: the tensors "
                                f"must agree in dtype and in every dimension but the first")
    return [int(allh[r, 2]) for r in range(n)]


def _lib_dtype_name(code):
    return {_lib.F32: "float32", _lib.F64: "float64", _lib.F16: "float16", _lib.BF16: "bfloat16",
            _lib.I32: "int32", _lib.I64: "int64", _lib.U8: "uint8", _lib.I8: "int8", _lib.I16: "int16",
            _lib.BOOL: "bool"}.get(int(code), f"code {int(code)}")


def _allgatherv_bytes(comm, src, firsts, row_bytes, dst):
    """src: a contiguous uint8 view of this rank's rows; dst: uint8 of sum(firsts) rows (cohort_allgatherv)."""
    if len(set(firsts)) == 1:
        _check(_c.cohort_allgather(comm, _ptr(src), _ptr(dst), src.size, _lib.U8), "cohort.allgather")
        return
    counts = np.array([f * row_bytes for f in firsts], np.uintp)
    _check(_c.cohort_allgatherv(comm, _ptr(src), _ptr(dst), _ptr(counts), None, _lib.U8), "cohort.allgather")


def allgather(x, name=None):
    """Concatenates every rank's x along dimension 0; the first dimensions may differ between ranks."""
    comm = _get_comm()
    a = np.ascontiguousarray(_as_array(x, what="cohort.allgather"))
    firsts = _gather_headers(comm, a.shape, _NP_DTYPES[a.dtype], "cohort.allgather")
    out = np.empty((sum(firsts),) + a.shape[1:], a.dtype)
    row = a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
    _allgatherv_bytes(comm, a.reshape(-1).view(np.uint8), firsts, row, out.reshape(-1).view(np.uint8))
    return out


def reducescatter(x, op=Average, name=None):
    """Reduces x over the ranks and returns this rank's part of dimension 0 (the first dim % size ranks get one
    row more, as in Horovod)."""
    a = np.ascontiguousarray(_as_array(x, what="cohort.reducescatter"))
    if a.ndim == 0:
        raise ValueError("cohort.reducescatter: a scalar cannot be scattered")
    op = _op(op)
    n, r = size(), rank()
    rows = [a.shape[0] // n + (1 if i < a.shape[0] % n else 0) for i in range(n)]
    start = sum(rows[:r])
    if a.shape[0] % n == 0:
        per = a.size // n
        out = np.empty((rows[r],) + a.shape[1:], a.dtype)
        _check(_c.cohort_reduce_scatter(_get_comm(), _ptr(a), _ptr(out), per, _NP_DTYPES[a.dtype], op))
        return out
    full = np.empty_like(a)
    _check(_c.cohort_allreduce(_get_comm(), _ptr(a), _ptr(full), a.size, _NP_DTYPES[a.dtype], op))
    return full[start:start + rows[r]].copy()


def barrier(process_set=None):
    """Returns once every rank (of process_set, if given) has entered the barrier."""
    _check(_c.cohort_barrier(_comm_of(process_set, "cohort.barrier")), "cohort.barrier")


def _set_root(comm, process_set, root_rank, what):
    """The rank within comm of root_rank, which is a rank of the job (as in Horovod, also with process_set=)."""
    _root(_get_comm(), root_rank, what)
    if process_set is None or process_set is global_process_set or process_set.ranks is None:
        return root_rank
    if root_rank not in process_set.ranks:
        raise ValueError(f"{what}: root_rank {root_rank} is not in {process_set} (root_rank is a rank of the job)")
    return process_set.ranks.index(root_rank)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """root_rank's obj (pickled) on every rank (of process_set: root_rank is still a rank of the job)."""
    comm = _comm_of(process_set, "cohort.broadcast_object")
    root = _set_root(comm, process_set, root_rank, "cohort.broadcast_object")
    me = _c.cohort_rank(comm)
    data = pickle.dumps(obj) if me == root else b""
    n = np.array([len(data)], np.int64)
    _check(_c.cohort_broadcast(comm, _ptr(n), 1, _lib.I64, root), "cohort.broadcast_object")
    buf = np.frombuffer(data, np.uint8).copy() if me == root else np.empty(int(n[0]), np.uint8)
    if buf.size:
        _check(_c.cohort_broadcast(comm, _ptr(buf), buf.size, _lib.U8, root), "cohort.broadcast_object")
    return obj if me == root else pickle.loads(buf.tobytes())


def allgather_object(obj, name=None, process_set=None):
    """The list of every rank's obj (of process_set, if given), in rank order."""
    comm = _comm_of(process_set, "cohort.allgather_object")
    data = np.frombuffer(pickle.dumps(obj), np.uint8).copy()
    sizes = np.empty(_c.cohort_size(comm), np.int64)
    mine = np.array([data.size], np.int64)
    _check(_c.cohort_allgather(comm, _ptr(mine), _ptr(sizes), 1, _lib.I64), "cohort.allgather_object")
    out = np.empty(int(sizes.sum()), np.uint8)
    _allgatherv_bytes(comm, data, [int(s) for s in sizes], 1, out)
    objs, off = [], 0
    for s in sizes:
        objs.append(pickle.loads(out[off:off + int(s)].tobytes()))
        off += int(s)
    return objs
