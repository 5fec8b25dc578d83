"""The fault scenarios of cohort.torch, one per mode; tests/python/test_faults.sh runs them under cohortrun and
judges what they wrote. usage: test_faults.py kill|mismatch|sigint|left DIR"""
import os
import signal
import sys
import threading
import time

import torch

import cohort.torch as hvd

mode, out = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
hvd.init()
R, N = hvd.rank(), hvd.size()


def write(name, text):
    with open(os.path.join(out, name), "w") as f:
        f.write(text)


if mode == "kill":
    # Rank 1 dies by SIGKILL while both are inside allreduces of 16 MiB; rank 0 must raise RemoteError naming it.
    if R == 0:
        signal.signal(signal.SIGTERM, lambda *a: None)  # cohortrun stops the job: outlive it long enough to report
    t = torch.ones(4 << 20)
    for _ in range(3):
        hvd.allreduce_(t, op=hvd.Sum)
    hvd.barrier()
    if R == 1:
        def die():
            write("killed_at", repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Timer(0.5, die).start()
    try:
        while True:
            hvd.allreduce_(t, op=hvd.Average)
    except hvd.CohortError as e:
        write(f"result.{R}", f"{time.time()!r}\n{type(e).__name__}\n{e}\n")
    sys.exit(0)

if mode == "left":
    # Rank 1 shuts cohort down (its process lives on) while rank 0 waits for it in a barrier it never calls: rank 0
    # must raise RemoteError naming rank 1 at once, not after COHORT_OP_TIMEOUT (Horovod's tests shut down and
    # start again in the middle of a job).
    hvd.allreduce(torch.ones(4))
    if R == 1:
        time.sleep(0.5)
        write("left_at", repr(time.time()))
        hvd.shutdown()
        time.sleep(5)  # alive, and no longer in the communicator
        sys.exit(0)
    try:
        hvd.barrier()
        write(f"result.{R}", f"{time.time()!r}\nno error\n")
    except hvd.CohortError as e:
        write(f"result.{R}", f"{time.time()!r}\n{type(e).__name__}\n{e}\n")
    sys.exit(0)

if mode == "mismatch":
    # Each mismatch is refused on every rank before data moves (MismatchError), and the job goes on, as Horovod's
    # tests expect (they call barrier() next): the ranks reduce different shapes, twice; each rank broadcasts as
    # root of its own; then a barrier and an allreduce whose value is checked.
    lines = []
    calls = [lambda: hvd.allreduce(torch.ones(4 + R, 3), op=hvd.Sum)] * 2
    calls.append(lambda: hvd.broadcast(torch.full((4,), float(R)), root_rank=R))
    for call in calls:
        t0 = time.time()
        try:
            call()
            lines.append("no error")
        except hvd.CohortError as e:
            lines.append(f"{type(e).__name__} {time.time() - t0:.3f} {e}".replace("\n", " "))
    try:
        hvd.barrier()
        v = hvd.allreduce(torch.full((5,), float(R + 1)), op=hvd.Sum)
        lines.append(f"after {v.tolist()}")
    except hvd.CohortError as e:
        lines.append(f"after {type(e).__name__} {e}".replace("\n", " "))
    write(f"result.{R}", "\n".join(lines) + "\n")
    sys.exit(0)

if mode == "sigint":
    # Train-like: reduce forever until cohortrun's Ctrl-C ends the job.
    write(f"pid.{R}", str(os.getpid()))
    t = torch.ones(1 << 18)
    while True:
        hvd.allreduce_(t, op=hvd.Average)
        time.sleep(0.001)
