"""Horovod's runtime timeline (hvd.start_timeline / hvd.stop_timeline) for cohort.torch's collectives.

While it runs, rank 0 records every collective call of cohort.torch on this process, on a row of its own per tensor
name as Horovod's timeline does ("allreduce.<name>"; calls without a name: "allreduce.noname.<n>"): a NEGOTIATE_<OP>
span while a named call waits for the other ranks to issue its name (docs/torch.md, "Operations matched by name"),
then an <OP> span until the call has completed (an async call: until synchronize() saw it complete). With
mark_cycles, each round of rank 0's coordinator is an instant CYCLE_START event. stop_timeline() (or a start with
another file, or shutdown()) writes the Chrome trace (the format of COHORT_TIMELINE's, docs/env.md, which covers the
DDP engine's buckets) to "<path>.tmp", fsyncs it and renames it over path, so a reader never sees half a file.
Only rank 0 writes, as in Horovod; the other ranks record nothing. Off, a call pays one test of a module flag.
"""
import itertools
import json
import os
import threading
import time

on = False  # read by the calls' hot paths: nothing else is touched while it is False
_lock = threading.Lock()
_path = None
_cycles = False
_events = []
_rows = {}  # row name -> tid
_t0_ns = 0
_noname = itertools.count()


def _now_us():
    return (time.monotonic_ns() - _t0_ns) / 1e3


def start(path, mark_cycles, rank):
    global on, _path, _cycles, _events, _rows, _t0_ns
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValueError(f"start_timeline: file_path must be a path, got {path!r}")
    if rank != 0:
        return
    with _lock:
        if on and _path == os.fspath(path):
            _cycles = bool(mark_cycles)
            return
    stop()
    with _lock:
        _path, _cycles, _events, _rows = os.fspath(path), bool(mark_cycles), [], {}
        _t0_ns = time.monotonic_ns()
        _events.append({"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
                        "args": {"name": "rank 0 (cohort.torch)",
                                 "start_time_since_epoch_in_micros": time.time_ns() // 1000}})
        on = True


def row(kind, name):
    """The row of a call: Horovod's tensor name."""
    return f"{kind}.{name}" if name is not None else f"{kind}.noname.{next(_noname)}"


def span(row_name, phase, begin_us, end_us=None):
    """Records phase (e.g. ALLREDUCE, NEGOTIATE_ALLREDUCE) on row_name from begin_us to end_us (now if None)."""
    end_us = _now_us() if end_us is None else end_us
    with _lock:
        if not on:
            return
        tid = _rows.get(row_name)
        if tid is None:
            tid = _rows[row_name] = len(_rows) + 1
            _events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": row_name}})
        _events.append({"name": phase, "ph": "X", "pid": 0, "tid": tid, "ts": round(begin_us, 3),
                        "dur": round(max(end_us - begin_us, 0.0), 3)})


def now():
    return _now_us()


def cycle():
    """An instant CYCLE_START (mark_cycles): a round of rank 0's coordinator."""
    if on and _cycles:
        with _lock:
            _events.append({"name": "CYCLE_START", "ph": "i", "s": "p", "pid": 0, "tid": 0, "ts": round(_now_us(), 3)})


def stop():
    """Writes the timeline, if one runs on this rank, atomically; then records nothing more."""
    global on
    with _lock:
        if not on:
            return
        on = False
        path, events = _path, _events
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _on_destroy(comm, phase):
    """shutdown() writes a timeline still running (before the job's communicator goes)."""
    import cohort as _core
    if phase == "stop" and comm is _core._comm:
        stop()


def _register():
    import cohort as _core
    _core._comm_hooks.append(_on_destroy)


_register()
