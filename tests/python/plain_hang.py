"""A plain torch program (nothing of cohort in it) whose rank HANG_RANK hangs after 5 allreduces while the others
wait for it in the 6th: cohortrun's COHORT_HEARTBEAT_S must name that rank (python.plain_hang, test_launcher_waits.sh
does the same with shell programs). HANG_HOW: sleep (the default) or lock (a deadlock on a lock of its own)."""
import os
import threading
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank = dist.get_rank()
t = torch.ones(1000)
for _ in range(5):
    dist.all_reduce(t)
print(f"rank {rank} did 5 allreduces", flush=True)
if rank == int(os.environ.get("HANG_RANK", "1")):
    if os.environ.get("HANG_HOW", "sleep") == "lock":
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()
    time.sleep(3600)
dist.all_reduce(t)
print("never here", flush=True)
