"""cohort.torch.init() under torchrun: meeting through torch's own store on MASTER_PORT, so that the program may also
call init_process_group, and no second port is needed.

torchrun tells its workers MASTER_ADDR:MASTER_PORT, where a torch store is or is to be:
  - under its c10d rendezvous (--standalone, --rdzv-backend c10d), a free port on which the program's rank 0 is to
    serve torch's TCPStore (env://). cohort's C rendezvous (cohort_init) would serve cohort's store on the same port,
    and whichever of the two came second failed with "Address already in use"; there is no other port every rank can
    derive (the next one is in the kernel's ephemeral range, where outgoing connections take it). torch's env:// and
    tcp:// stores are multi-tenant: a TCPStore made in this process for the same port shares one server. So
    cohort.torch makes that TCPStore itself (rank 0 serves it, in either order with init_process_group);
  - under its static rendezvous (TORCHELASTIC_USE_AGENT_STORE=True), the agent's own store, which every worker
    reaches as a client; cohort_init would serve cohort's store on MASTER_PORT+1, which must then be free.
Through that store cohort.torch meets as the backend does through the store torch hands it (_backend._meet: rank 0
serves cohort's store on a free port and writes its address there). The TCPStore is kept for the life of the
process: rank 0's server must outlive every shutdown() and init() again, as the other ranks may still be connected
to it; each init() meets under keys of its own.

Not under cohortrun, with COHORT_STORE_PORT or COHORT_STORE=file:..., and not in a C program (fmnist-train under
torchrun), where cohort_init meets by itself.
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
    return (bool(e.get("TORCHELASTIC_RUN_ID")) and e.get("COHORT_LAUNCHER_STORE") != "1" and not e.get("COHORT_STORE_PORT")
            and e.get("COHORT_STORE", "tcp") == "tcp" and bool(e.get("MASTER_PORT")) and world > 1)


def join():
    """The job's communicator (c_void_p), met through torch's TCPStore on MASTER_ADDR:MASTER_PORT."""
    global _store, _joins
    from cohort.torch import _backend
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if _store is None or _store[0] != os.getpid():
        import datetime
        try:  # COHORT_TIMEOUT, as cohort_init reads it (which says what is wrong with a bad value)
            seconds = max(1, int(os.environ.get("COHORT_TIMEOUT") or 300))
        except ValueError:
            seconds = 300
        host, port, timeout = os.environ.get("MASTER_ADDR") or "127.0.0.1", int(os.environ["MASTER_PORT"]), \
            datetime.timedelta(seconds=seconds)
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":  # the agent serves it: a client on every rank
            store = dist.TCPStore(host, port, None, False, timeout, wait_for_workers=False)
        else:
            store = dist.TCPStore(host, port, size, rank == 0, timeout, multi_tenant=True)
        _store = (os.getpid(), store)
    _joins += 1
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    keys = dist.PrefixStore(f"cohort.torch/{attempt}/{_joins}", _store[1])
    comm, _ = _backend._meet(keys, rank, size, None, default_group=False)
    return comm
