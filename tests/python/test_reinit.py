"""shutdown() then init() again, N times in the same processes (Horovod's tests and elastic mode do it): every
round must init, reduce the right values and shut down; a hang fails on the ctest TIMEOUT. Run over shm and tcp,
and over the MPI transport under mpirun at 3 ranks, where each round also reduces on a process set of ranks 1 and 2
(a split, whose context on MPI must not meet an earlier round's)."""
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
    if n >= 3:
        ps = hvd.add_process_set([1, 2])
        if r in (1, 2):
            y = hvd.allreduce(torch.ones(2) * (r + 1), op=hvd.Sum, process_set=ps)
            if y.tolist() != [5.0, 5.0]:
                print(f"rank {r}: FAIL round {i}: the process set's allreduce gave {y.tolist()}", flush=True)
                sys.exit(1)
        hvd.remove_process_set(ps)
    hvd.shutdown()
    if hvd.is_initialized():
        print(f"rank {r}: FAIL round {i}: still initialized after shutdown()", flush=True)
        sys.exit(1)
print(f"reinit ok ({sys.argv[1]} rounds)", flush=True)
