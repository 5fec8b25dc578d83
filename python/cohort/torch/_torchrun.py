"""cohort.torch.init() under torchrun's c10d rendezvous (--standalone, --rdzv-backend c10d): meeting through torch's
own store on MASTER_PORT, so that the program may also call init_process_group there.

Under that rendezvous torchrun gives the workers a free MASTER_PORT on which the program's rank 0 is to serve torch's
TCPStore (env://). cohort's C rendezvous (cohort_init) would serve cohort's store on the same port, and whichever of
the two came second failed with "Address already in use"; there is no other port every rank can derive (the next
one is in the kernel's ephemeral range, where outgoing connections take it). torch's env:// and tcp:// stores are
multi-tenant: a TCPStore made in this process for the same port shares one server. So cohort.torch makes that
TCPStore itself (rank 0 serves it, in either order with init_process_group) and meets through it as the backend
does through the store torch hands it (_backend._meet: rank 0 serves cohort's store on a free port and writes its
address there). The TCPStore is kept for the life of the process: rank 0's server must outlive every shutdown() and
init() again, as the other ranks may still be connected to it; each init() meets under keys of its own.

Not under torchrun's static rendezvous (its agent serves the store on MASTER_PORT and cohort's goes on
MASTER_PORT+1, TORCHELASTIC_USE_AGENT_STORE=True), cohortrun, COHORT_STORE_PORT or COHORT_STORE=file:..., where
cohort_init meets by itself as before.
"""
import os

import torch.distributed as dist

_store = None  # (pid, TCPStore) of this process
_joins = 0  # init() calls that met through it: every rank makes the same sequence of them


def wanted():
    e = os.environ
    try:
        world = int(e.get("WORLD_SIZE", "1"))
    except ValueError:
        return False  # cohort_init says what is wrong with it
    return (bool(e.get("TORCHELASTIC_RUN_ID")) and e.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
            and e.get("COHORT_LAUNCHER_STORE") != "1" and not e.get("COHORT_STORE_PORT")
            and e.get("COHORT_STORE", "tcp") == "tcp" and bool(e.get("MASTER_PORT")) and world > 1)


def join():
    """The job's communicator (c_void_p), met through torch's TCPStore on MASTER_ADDR:MASTER_PORT."""
    global _store, _joins
    from cohort.torch import _backend
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if _store is None or _store[0] != os.getpid():
        import datetime
        seconds = int(os.environ.get("COHORT_TIMEOUT") or 300)
        store = dist.TCPStore(os.environ.get("MASTER_ADDR") or "127.0.0.1", int(os.environ["MASTER_PORT"]), size,
                              rank == 0, datetime.timedelta(seconds=seconds), multi_tenant=True)
        _store = (os.getpid(), store)
    _joins += 1
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    keys = dist.PrefixStore(f"cohort.torch/{attempt}/{_joins}", _store[1])
    comm, _ = _backend._meet(keys, rank, size, None, default_group=False)
    return comm
