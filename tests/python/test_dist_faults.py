"""Faults of torch.distributed on backend "cohort", one scenario per mode; tests/python/test_dist_faults.sh runs them
under cohortrun and judges what each rank wrote. usage: test_dist_faults.py kill|mismatch|timeout DIR VIA

VIA says how each rank waits for its collectives: "future" (async_op=True, then work.get_future().wait(): what
DDP's reducer and torch's comm hooks see) or "wait" (dist.all_reduce(...) blocking, and work.wait() on
async_op=True works: what a training script sees).

  kill      (3 ranks) rank 2 SIGKILLs itself while all three are inside all_reduces of 16 MiB; the survivors
            (reducing again and again, as VIA says) each write when it raised,
            the exception's type and message.
  mismatch  (2 ranks) all_reduce of different shapes (twice: with "wait", blocking, then async), broadcast with
            each rank its own root, all_reduce of 2x3 against 3x2, all_to_all_single whose split sizes disagree:
            each call's error (type, seconds, message) on one line; then an all_reduce whose value is checked
            ("after [...]").
  timeout   (2 ranks) init_process_group(timeout=timedelta(seconds=3)); after one all_reduce together, rank 1
            stays away (it waits for rank 0's result file, at most 30 s, then leaves) while rank 0 calls
            all_reduce: rank 0 writes how long it took to raise and the message.
"""
import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

import cohort.torch  # noqa: F401 (registers the backend "cohort")

mode, out, via = sys.argv[1], sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
if mode == "timeout":
    dist.init_process_group("cohort", timeout=datetime.timedelta(seconds=3))
else:
    dist.init_process_group("cohort")
R, N = dist.get_rank(), dist.get_world_size()


def write(name, text):
    with open(os.path.join(out, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(out, name + ".tmp"), os.path.join(out, name))


def call(fn, *args, **kw):
    """One collective, waited for as VIA says (blocking when fn has no async form to wait on)."""
    if via == "future":
        return fn(*args, async_op=True, **kw).get_future().wait()
    if call.n % 2:
        call.n += 1
        return fn(*args, async_op=True, **kw).wait()
    call.n += 1
    return fn(*args, **kw)


call.n = 0


def one_line(e):
    return f"{type(e).__name__} {e}".replace("\n", " ")


if mode == "kill":
    assert N == 3, "run on 3 ranks"
    if R != 2:
        signal.signal(signal.SIGTERM, lambda *a: None)  # cohortrun stops the job: outlive it long enough to report
    t = torch.ones(4 << 20)
    for _ in range(3):
        dist.all_reduce(t)
    assert t[0].item() == 27.0 and t[-1].item() == 27.0, t  # 1 -> 3 -> 9 -> 27: the collectives worked
    dist.barrier()
    if R == 2:
        def die():
            write("killed_at", repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Timer(0.5, die).start()
    try:
        while True:
            call(dist.all_reduce, t, op=dist.ReduceOp.MAX)
    except Exception as e:  # noqa: BLE001 (what it raises is what the test judges)
        write(f"result.{R}", f"{time.time()!r}\n{type(e).__name__}\n{e}\n")
    os._exit(0)  # destroy_process_group would wait on a dead peer

if mode == "mismatch":
    assert N == 2, "run on 2 ranks"
    lines = []
    calls = [lambda: call(dist.all_reduce, torch.ones(4 + R, 3)),
             lambda: call(dist.all_reduce, torch.ones(4 + R, 3)),
             lambda: call(dist.broadcast, torch.full((4,), float(R)), src=R),
             # as many elements in another shape: gloo would reduce them element by element
             lambda: call(dist.all_reduce, torch.ones(2, 3) if R == 0 else torch.ones(3, 2)),
             # rank 0 expects 2 elements from rank 1, which sends it 1
             lambda: call(dist.all_to_all_single, torch.zeros(3 - R), torch.ones(2), [1, 2 - R], [1, 1])]
    for c in calls:
        t0 = time.time()
        try:
            c()
            lines.append("no error")
        except Exception as e:  # noqa: BLE001
            lines.append(f"{type(e).__name__} {time.time() - t0:.3f} {one_line(e)}")
    try:
        dist.barrier()
        v = torch.full((5,), float(R + 1))
        dist.all_reduce(v)
        lines.append(f"after {v.tolist()}")
    except Exception as e:  # noqa: BLE001
        lines.append(f"after {one_line(e)}")
    write(f"result.{R}", "\n".join(lines) + "\n")
    dist.destroy_process_group()
    sys.exit(0)

if mode == "timeout":
    assert N == 2, "run on 2 ranks"
    t = torch.full((8,), float(R))
    dist.all_reduce(t)
    assert t.tolist() == [1.0] * 8, t
    if R == 1:
        deadline = time.time() + 30
        while not os.path.exists(os.path.join(out, "result.0")) and time.time() < deadline:
            time.sleep(0.05)
        os._exit(0)
    t0 = time.time()
    try:
        call(dist.all_reduce, t)
        write("result.0", f"no error after {time.time() - t0:.3f} s\n")
    except Exception as e:  # noqa: BLE001
        write("result.0", f"{time.time() - t0:.3f}\n{type(e).__name__}\n{e}\n")
    os._exit(0)

sys.exit(f"unknown mode {mode}")
