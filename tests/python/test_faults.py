"""The fault scenarios of cohort.torch, one per mode; tests/python/test_faults.sh runs them under cohortrun and
judges what they wrote. usage: test_faults.py kill|mismatch|sigint DIR"""
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

if mode == "mismatch":
    # The ranks reduce different shapes: both raise MismatchError, and so does every later call (aborted).
    lines = []
    for attempt in range(2):
        t0 = time.time()
        try:
            hvd.allreduce(torch.ones(4 + R, 3), op=hvd.Sum)
            lines.append("no error")
        except hvd.CohortError as e:
            lines.append(f"{type(e).__name__} {time.time() - t0:.3f} {e}".replace("\n", " "))
    write(f"result.{R}", "\n".join(lines) + "\n")
    sys.exit(0)

if mode == "sigint":
    # Train-like: reduce forever until cohortrun's Ctrl-C ends the job.
    write(f"pid.{R}", str(os.getpid()))
    t = torch.ones(1 << 18)
    while True:
        hvd.allreduce_(t, op=hvd.Average)
        time.sleep(0.001)
