"""Horovod's matching of operations by name (docs/torch.md, "Operations matched by name").

Horovod lets every rank issue its named operations in an order of its own: rank 0 may start allreduce 'a' and then
wait in a barrier that rank 1 reaches before it starts 'a'. cohort's collectives are matched by call order, so a call
with name= (on a communicator of more than one rank) does not start at once. It is parked here under its name, and
rank 0, the coordinator, is told in a message over the communicator's point-to-point channel, which never waits
behind a collective. When every rank has parked that name, the coordinator sends the name to every rank, and on
each rank a runner thread starts the parked operation on the communicator's twin (cohort_comm_twin, made when the
first name is agreed): every rank starts the named operations in the coordinator's order, whatever order each rank
issued them in. Calls without a name keep running in call order on the communicator itself, at the same speed as
before. A blocking call with a name parks too, and runs on its own thread when its turn comes.

A name that some ranks never issue is reported: rank 0 warns after COHORT_STALL_S seconds (the stall inspector's knob:
60; 0, no warning) naming the missing ranks, and after COHORT_OP_TIMEOUT the waiting ranks' operations fail with
TimeoutError naming them. With COHORT_P2P=off (no messages) names are not matched: the calls run in call order as
unnamed ones do. Over COHORT_TRANSPORT=mpi the job's twin runs on a duplicate of MPI_COMM_WORLD that cohort_init
set aside (cohort_comm_twin), and a process set's in a context of the sub-communicators' duplicate
(src/transport/mpi.h).
"""
import ctypes
import os
import struct
import sys
import threading
import time
import weakref

import torch

import cohort as _core
from cohort import _lib
from cohort.torch import _timeline

_c = _core._c
_READY, _GO = 0x7FFFFFF0, 0x7FFFFFF1  # message tags of the coordinator and the runners (reserved: docs/torch.md)
_MAX_MESSAGE = 1 << 16  # a message goes at once up to this size (cohort_send)
_MAX_NAME = 1000  # bytes of UTF-8: a name with its kind fits a message many times over


def _encode(kind, items):
    """One message: a kind byte and length-prefixed UTF-8 strings. To rank 0's coordinator: R (ready: name, kind of
    call), B (this rank stops), T (a tick of its own). To a runner: G (go: names), F (failed: name, why), S (stop)."""
    out = [kind]
    for s in items:
        b = s.encode()
        out.append(struct.pack("<I", len(b)))
        out.append(b)
    return b"".join(out)


def _decode(data):
    kind, items, at = data[:1], [], 1
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        items.append(data[at + 4:at + 4 + n].decode())
        at += 4 + n
    return kind, items


def _send(comm, peer, tag, data):
    buf = ctypes.create_string_buffer(data, len(data))
    return _c.cohort_send(comm, buf, len(data), _lib.U8, peer, tag)


def _recv(comm, tag, buf, peer=-1):
    """(source, bytes) of the next message with tag from peer (-1: any rank); raises the library's error."""
    info = _lib.RecvInfo()
    st = _c.cohort_recv(comm, buf, len(buf), _lib.U8, peer, tag, ctypes.byref(info))
    if st != _lib.OK:
        raise _core._error(st)
    return info.source, buf.raw[:info.count]


def _seconds(var, default):
    try:
        v = float(os.environ.get(var, default))
        return v if v > 0 else float(default)
    except ValueError:
        return float(default)


class _Parked:
    """One named operation waiting for its turn. start(twin_set) starts it on the twin (an async call: returns its
    handle; a blocking call: its result)."""

    def __init__(self, name, what, start, blocking):
        self.name, self.what, self.start, self.blocking = name, what, start, blocking
        self.cv = threading.Condition()
        self.state = "parked"  # then "turn" (a blocking call may run), "done" or "failed"
        self.inner = None  # the async call's own handle
        self.error = None
        self.abandoned = False
        self.grad = torch.is_grad_enabled()
        self.stream = (torch.cuda.current_stream() if torch.cuda.is_available() and torch.cuda.is_initialized()
                       else None)
        # hvd.start_timeline: its row, when it was issued, when its turn came
        self.row = _timeline.row(op_kind(what).lower(), name) if _timeline.on else None
        self.t_submit = self.t_go = _timeline.now() if self.row else 0.0

    def timed(self, phase, since):
        if self.row is not None:
            _timeline.span(self.row, phase, since)

    def settle(self, state, inner=None, error=None):
        with self.cv:
            self.state, self.inner, self.error = state, inner, error
            self.cv.notify_all()

    def wait_turn(self):
        with self.cv:
            while self.state == "parked":
                self.cv.wait()
            return self.state


class NamedHandle(_core.Handle):
    """The handle of an async call with name=: done once its operation was started (every rank issued the name) and
    has completed."""

    def __init__(self, parked):
        super().__init__(None, None)
        self._parked = parked

    def _release(self):
        pass  # the inner handle is the library's, released with the others at shutdown

    def _shut_down(self):
        pass


def _torch_poll(handle):
    from cohort.torch import poll  # the package imports this module first
    return poll(handle)


def op_kind(what):
    """The collective of a call, as Horovod's timeline names it: allreduce_async_ and grouped_allreduce: ALLREDUCE."""
    return what.replace("grouped_", "").replace("_async", "").rstrip("_").upper()


def poll(handle, inner_poll):
    p = handle._parked
    with p.cv:
        if p.state == "parked":
            return False
        if p.state == "failed":
            return True
    return inner_poll(p.inner)


def synchronize(handle, inner_sync):
    p = handle._parked
    state = p.wait_turn()
    if state == "failed":
        raise p.error
    out = inner_sync(p.inner)
    p.timed(op_kind(p.what), p.t_go)
    p.row = None  # once
    return out


class Matcher:
    """The names of one communicator (the job's or a process set's) on this rank: its runner thread, and on rank 0
    the coordinator thread."""

    def __init__(self, comm, process_set):
        self.comm = comm
        self.rank, self.size = _c.cohort_rank(comm), _c.cohort_size(comm)
        self.process_set = process_set
        self.twin = None
        self.twin_set = None
        self.parked = {}  # name -> _Parked
        self.started = {}  # name -> weakref to the handle of the last async call of that name
        self.lock = threading.Lock()
        self.broken = None  # the error that stopped the runner: every later call fails with it
        self.joined = None  # this rank's join of the named calls, settled by the runner
        self.timeout_s = _seconds("COHORT_OP_TIMEOUT", "600")
        try:  # the stall inspector's knob (0: no warning)
            warn = float(os.environ.get("COHORT_STALL_S", "60"))
        except ValueError:
            warn = 60.0
        self.stall_warn_s = self.timeout_s if warn <= 0 else min(warn, self.timeout_s)
        self.runner = threading.Thread(target=self._run, name="cohort-names-runner", daemon=True)
        self.runner.start()
        self.coordinator = None
        if self.rank == 0:
            self.coordinator = threading.Thread(target=self._coordinate, name="cohort-names-coordinator", daemon=True)
            self.coordinator.start()

    # ---- the caller's side ----

    def submit(self, name, what, start, blocking):
        if len(name.encode()) > _MAX_NAME:
            raise ValueError(f"{what}: name= is longer than {_MAX_NAME} bytes")
        p = _Parked(name, what, start, blocking)
        with self.lock:
            if self.broken is not None:
                raise self.broken
            ref = self.started.get(name)  # an async call of that name that may still run
            if name in self.parked or (ref is not None and ref() is not None and not _torch_poll(ref())):
                raise ValueError(f"{what}: an operation named '{name}' is still in flight on this rank (as in "
                                 f"Horovod, a name may not be reused until that operation has completed)")
            self.parked[name] = p
        st = _send(self.comm, 0, _READY, _encode(b"R", [name, what]))
        if st != _lib.OK:
            err = _core._error(st, f"{what} '{name}': telling rank 0 that this rank is ready")
            with self.lock:
                self.parked.pop(name, None)
            raise err
        if not blocking:
            handle = NamedHandle(p)
            with self.lock:
                self.started[name] = weakref.ref(handle)  # held weakly: a dropped handle is in flight no more
                if len(self.started) > 4096:  # names made of counters: forget the ones whose handles are gone
                    self.started = {k: r for k, r in self.started.items() if r() is not None}
            return handle
        try:
            state = p.wait_turn()
        except BaseException:
            with p.cv:
                p.abandoned = True
                p.cv.notify_all()
            raise
        if state == "failed":
            raise p.error
        try:
            return start(self.twin_set)
        finally:
            p.timed(op_kind(what), p.t_go)
            p.settle("done")

    # ---- the runner: starts what the coordinator agreed, in its order ----

    def _run(self):
        buf = ctypes.create_string_buffer(_MAX_MESSAGE)
        try:
            while True:
                _, data = _recv(self.comm, _GO, buf, peer=0)  # every message to a runner comes from rank 0
                kind, items = _decode(data)
                if kind == b"S":
                    break
                if kind == b"J":
                    self._join_twin()
                elif kind == b"F":
                    for name, why in zip(items[0::2], items[1::2]):
                        self._fail(name, _core.TimeoutError(_lib.ERR_TIMEOUT, why))
                elif kind == b"G":
                    for name in items:
                        self._start(name)
        except BaseException as e:  # the communicator failed (a rank died, or left): nothing parked can run
            with self.lock:
                self.broken = e if isinstance(e, _core.CohortError) else _core.RemoteError(
                    _lib.ERR_REMOTE, f"matching names: {e}")
                parked, self.parked = list(self.parked.values()), {}
            for p in parked:
                p.settle("failed", error=self.broken)

    def _fail(self, name, err):
        with self.lock:
            p = self.parked.pop(name, None)
        if p is not None:
            p.settle("failed", error=err)

    def _start(self, name):
        with self.lock:
            p = self.parked.pop(name)  # this rank told rank 0 of it: it is here
        if p.row is not None:
            p.timed("NEGOTIATE_" + op_kind(p.what), p.t_submit)
            p.t_go = _timeline.now()
        if self.twin is None:
            try:
                self._make_twin()
            except _core.CohortError as e:
                p.settle("failed", error=e)
                return
        if p.blocking:
            with p.cv:  # its own thread runs it: wait until it has, so that the order on the twin holds
                p.state = "turn"
                p.cv.notify_all()
                while p.state == "turn" and not p.abandoned:
                    p.cv.wait()
            return
        try:
            with torch.set_grad_enabled(p.grad), (torch.cuda.stream(p.stream) if p.stream is not None
                                                   else _nothing()):
                inner = p.start(self.twin_set)
        except Exception as e:
            p.settle("failed", error=e)
        else:
            p.settle("done", inner=inner)

    def _join_twin(self):
        """This rank's hvd.join() on the twin: until every rank has joined, it adds zeros to the others' named
        allreduces (cohort_join), as the main thread's join does to their unnamed ones."""
        last, err = ctypes.c_int(-1), None
        try:
            if self.twin is None:
                self._make_twin()
            _core._check(_c.cohort_join(self.twin, ctypes.byref(last)), "join (the calls with a name)")
            # Which rank joined last: the coordinator saw the joins come in, and said so once the last one came
            # (the message after this rank's J: while joined, this rank has no names for it to start).
            _, data = _recv(self.comm, _GO, ctypes.create_string_buffer(64), peer=0)
            kind, items = _decode(data)
            if kind != b"L":
                raise _core.ProtocolError(_lib.ERR_PROTOCOL, f"matching names: after a join, got {kind!r}")
            last.value = int(items[0])
        except _core.CohortError as e:
            err = e
        self.joined.settle("failed" if err else "done", inner=last.value, error=err)

    def join(self, what):
        """Starts this rank's join of the named calls; returns what to wait for (a _Parked settled by the runner)."""
        with self.lock:
            if self.broken is not None:
                raise self.broken
            if self.parked:
                raise ValueError(f"{what}: operations named {sorted(self.parked)} are still in flight on this rank: "
                                 f"synchronize them before joining")
            self.joined = _Parked("join", what, None, False)
        _core._check(_send(self.comm, 0, _READY, b"J"), f"{what}: telling rank 0")
        return self.joined

    def _make_twin(self):
        twin = ctypes.c_void_p()
        _core._check(_c.cohort_comm_twin(self.comm, b"names", ctypes.byref(twin)), "matching names")
        ps = _core.ProcessSet.__new__(_core.ProcessSet)
        real = self.process_set
        ps.ranks = None if real is None else real.ranks
        ps.process_set_id = 0 if real is None else real.process_set_id
        ps._comm = twin
        self.twin, self.twin_set = twin, ps
        _twins[twin.value] = self.comm

    # ---- the coordinator (rank 0) ----

    def _coordinate(self):
        ready = {}  # name -> [ranks that issued it, what, first seen, warned]
        joined = set()  # ranks in hvd.join(): they count as having issued every name
        state = {"named_while_joined": False}  # a named call ran while a rank had joined: join()'s rank is by arrival
        ticker = _Ticker(self.comm)
        inbox = _Inbox(self.comm)

        def flush():
            # Each name every rank has issued (a joined rank counts) goes to the ranks that issued it, in one order:
            # one message per rank for all the names ready now. A joined rank adds its zeros in its join.
            go = [name for name, e in ready.items() if len(e[0] | joined) == self.size]
            if not go:
                return
            state["named_while_joined"] |= bool(joined)
            per_rank = {}
            for name in go:
                for r in ready.pop(name)[0]:
                    per_rank.setdefault(r, []).append(name)
            for r, names in sorted(per_rank.items()):
                for msg in _batches(b"G", names):
                    _core._check(_send(self.comm, r, _GO, msg), "matching names: telling the ranks to start")

        try:
            stop = False
            while not stop:
                # Every message that has come in, then the names they made ready (a stream of async names from
                # several ranks goes out in few messages).
                for src, data in inbox.take():
                    kind, items = _decode(data)
                    _timeline.cycle()
                    if kind == b"R":
                        name, what = items
                        ready.setdefault(name, [set(), what, time.monotonic(), False])[0].add(src)
                    elif kind == b"B":  # src stops: its runner's last message, after every name sent to it before
                        flush()
                        _core._check(_send(self.comm, src, _GO, b"S"), f"matching names: stopping rank {src}'s runner")
                        if src == self.rank:
                            stop = True
                            break
                    elif kind == b"J":  # the names ready before src joined go first: it runs them with its data
                        flush()
                        joined.add(src)
                        _core._check(_send(self.comm, src, _GO, b"J"), f"matching names: rank {src}'s join")
                        if len(joined) == self.size:  # every join returns: src joined last (-1: count the calls)
                            msg = _encode(b"L", [str(src) if state["named_while_joined"] else "-1"])
                            state["named_while_joined"] = False
                            for r in range(self.size):
                                _core._check(_send(self.comm, r, _GO, msg), "matching names: the last join")
                            joined.clear()
                if stop:
                    break
                flush()
                self._stalls(ready, joined)
                # a tick (kind T) to itself when the next name is due a warning or its failure
                ticker.set(min((e[2] + (self.timeout_s if e[3] else self.stall_warn_s) for e in ready.values()),
                               default=None))
        except BaseException:
            pass  # the runners see the communicator fail too, and fail what is parked
        finally:
            ticker.stop()
            inbox.close(self.rank)

    def _stalls(self, ready, joined):
        now = time.monotonic()
        for name, entry in list(ready.items()):
            ranks, what, since, warned = entry
            missing = [r for r in range(self.size) if r not in ranks and r not in joined]
            waited = now - since
            if waited >= self.timeout_s:
                del ready[name]
                why = (f"{what} '{name}': rank(s) {missing} never issued an operation of that name; rank(s) "
                       f"{sorted(ranks)} waited {waited:.0f} s (COHORT_OP_TIMEOUT)")
                msg = _encode(b"F", [name, why])
                for r in sorted(ranks):
                    _send(self.comm, r, _GO, msg)
            elif waited >= self.stall_warn_s and not warned:
                entry[3] = True
                print(f"cohort: {what} '{name}' has waited {waited:.0f} s for rank(s) {missing}: rank(s) "
                      f"{sorted(ranks)} issued it (it fails after COHORT_OP_TIMEOUT={self.timeout_s:g} s)",
                      file=sys.stderr, flush=True)

    # ---- the end ----

    def stop(self):
        """Before the communicator's handles are freed: stops both threads and fails what is parked."""
        # The runner's stop comes from rank 0, after every name rank 0 sent it before: a name agreed just now still
        # runs here, as on the ranks that are not stopping (they would wait for this one in the twin's rendezvous).
        # Rank 0 answers at once; once rank 0 itself has stopped, the others' runners fail when it destroys its
        # communicator (as do names parked there).
        if self.runner.is_alive():
            _send(self.comm, 0, _READY, b"B")
            self.runner.join()
        if self.coordinator is not None:
            self.coordinator.join()
        with self.lock:
            parked, self.parked = list(self.parked.values()), {}
            self.broken = RuntimeError("cohort.shutdown() was called")
        for p in parked:
            p.settle("failed", error=RuntimeError(f"{p.what} '{p.name}': cohort.shutdown() was called before every "
                                                  f"rank had issued it"))

    def destroy(self):
        self.stop()
        if self.twin is not None:
            _twins.pop(self.twin.value, None)
            _c.cohort_comm_destroy(self.twin)
            self.twin = None


def _batches(kind, names):
    """Messages of kind carrying names, each under the size a message goes at once."""
    out, size = [], 1
    for name in names:
        n = 4 + len(name.encode())
        if out and size + n > _MAX_MESSAGE:
            yield _encode(kind, out)
            out, size = [], 1
        out.append(name)
        size += n
    if out:
        yield _encode(kind, out)


class _Inbox:
    """The coordinator's receive, kept posted (cohort_irecv): take() waits for one message, then also returns every
    other one already in, without waiting."""

    def __init__(self, comm):
        self.comm = comm
        self.buf = ctypes.create_string_buffer(_MAX_MESSAGE)
        self.work = None

    def _post(self):
        self.work = ctypes.c_void_p()
        st = _c.cohort_irecv(self.comm, self.buf, len(self.buf), _lib.U8, -1, _READY, ctypes.byref(self.work))
        if st != _lib.OK:
            self.work = None
            raise _core._error(st)

    def _collect(self):
        info = _lib.RecvInfo()
        st = _c.cohort_work_wait(self.work)
        if st == _lib.OK:
            st = _c.cohort_work_recv_info(self.work, ctypes.byref(info))
        _c.cohort_work_free(self.work)
        self.work = None
        if st != _lib.OK:
            raise _core._error(st)
        return info.source, self.buf.raw[:info.count]

    def take(self):
        if self.work is None:
            self._post()
        out = [self._collect()]
        while True:
            self._post()
            done = ctypes.c_int(0)
            if _c.cohort_work_test(self.work, ctypes.byref(done)) != _lib.OK or not done.value:
                return out
            out.append(self._collect())

    def close(self, rank):
        """When the coordinator stops: the receive still posted is completed by a last message to itself (Z), so
        that nothing is left writing into this buffer (messages after it are dropped with the communicator)."""
        try:
            if self.work is not None:
                _send(self.comm, rank, _READY, b"Z")
            while self.work is not None:
                src, data = self._collect()
                if src != rank or data != b"Z":
                    self._post()
        except _core.CohortError:
            self.work = None  # the communicator failed: the receive failed with it


class _Ticker:
    """One thread that sends the coordinator a tick (kind T) at the time it was last set to (None: never), so that
    stalls are seen while no message comes; setting it costs a lock, not a thread."""

    def __init__(self, comm):
        self.comm, self.due, self.done, self.until = comm, None, False, 0.0
        self.cv = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="cohort-names-ticker", daemon=True)
        self.thread.start()

    def set(self, due):
        # The thread looks at least once a second; it is woken only for a tick due before it would look (names
        # come and go many times a second: most never get near their due time).
        with self.cv:
            self.due = due
            if due is not None and due < self.until:
                self.cv.notify()

    def _run(self):
        with self.cv:
            while not self.done:
                now = time.monotonic()
                if self.due is not None and now >= self.due:
                    self.due = None
                    _send(self.comm, 0, _READY, b"T")
                    continue
                self.until = min(now + 1.0, self.due if self.due is not None else now + 1.0)
                self.cv.wait(self.until - now)

    def stop(self):
        """Before the communicator may be destroyed: no tick is sent after this returns."""
        with self.cv:
            self.done = True
            self.cv.notify()
        self.thread.join()


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_matchers = {}  # communicator handle -> Matcher
_twins = {}  # twin handle -> its communicator: a twin's autograd backward runs on the communicator itself
_matchers_lock = threading.Lock()


def matcher(process_set, what):
    """The Matcher of the communicator a call with process_set= runs on, or None where names are not matched."""
    comm = _core._comm_of(process_set, what)
    m = _matchers.get(comm.value)
    if m is not None:
        return m
    if _c.cohort_size(comm) == 1 or os.environ.get("COHORT_P2P", "on") == "off":
        return None
    with _matchers_lock:
        m = _matchers.get(comm.value)
        if m is None:
            m = _matchers[comm.value] = Matcher(comm, process_set)
    return m


def ordered(comm):
    """The communicator whose calls are matched by order: comm itself, or the one a twin was made for."""
    parent = _twins.get(comm.value if isinstance(comm, ctypes.c_void_p) else comm)
    return parent if parent is not None else comm


def _on_destroy(comm, phase):
    """cohort's hook before comm is destroyed: "stop" its matcher's threads, then "destroy" its twin."""
    with _matchers_lock:
        m = _matchers.get(comm.value) if phase == "stop" else _matchers.pop(comm.value, None)
    if m is not None:
        m.stop() if phase == "stop" else m.destroy()


_core._comm_hooks.append(_on_destroy)
