"""shutdown() then init() again, N times in the same processes (Horovod's tests and elastic mode do it): every
round must init, reduce the right values and shut down; a hang fails on the ctest TIMEOUT. Run over shm and tcp."""
import sys
import time

import torch

import cohort.torch as hvd

for i in range(int(sys.argv[1])):
    t0 = time.time()
    hvd.init()
    n, r = hvd.size(), hvd.rank()
    x = hvd.allreduce(torch.ones(3) * (r + 1), op=hvd.Sum)
    if x.tolist() != [n * (n + 1) / 2] * 3:
        print(f"rank {r}: FAIL round {i}: {x.tolist()}", flush=True)
        sys.exit(1)
    hvd.shutdown()
    if hvd.is_initialized():
        print(f"rank {r}: FAIL round {i}: still initialized after shutdown()", flush=True)
        sys.exit(1)
print(f"reinit ok ({sys.argv[1]} rounds)", flush=True)
