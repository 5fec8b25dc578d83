"""Large CPU tensors in the shared arena (python/cohort/torch/_arena.py, python/torch_ext/shared_alloc.cpp), under
cohortrun at 2 or 3 ranks with a small arena (COHORT_SHM_ARENA_BYTES) and keep (COHORT_TORCH_ARENA_KEEP_BYTES), so
that "full" and the trimming happen:

  - where the allocator is expected (COHORT_TEST_ARENA, below), tensors of at least COHORT_TORCH_ARENA_MIN_BYTES made after
    init_process_group lie in the arena, smaller ones and earlier ones do not; elsewhere none does, and stats() or
    the transport says why;
  - all_reduce on them is right, all in the arena, mixed with ordinary memory across ranks, and beyond a full arena;
  - a freed block serves the next tensor of its size; kept bytes stay under the keep; a full arena gives torch's
    memory and the kept blocks back;
  - a forked child gets private copies of the parent's tensors (its writes do not reach the parent) and allocates
    from torch's allocator;
  - tensors outlive destroy_process_group: still readable and writable, then freed;
  - on a 64 MiB /dev/shm (COHORT_TEST_SMALL_SHM=1, a tmpfs mounted in a mount namespace of its own) it stays out of
    the way: no tensor in the arena, everything right.
Prints "arena ok" at the end; any failed check raises.
"""
import ctypes
import contextlib
import gc
import os
import sys

import torch
import torch.distributed as dist

import cohort.torch  # noqa: F401 (registers the backend "cohort")
from cohort._lib import lib as _c
from cohort.torch import _arena

MiB = 1 << 20


@contextlib.contextmanager
def stderr_to(path):
    """Points file descriptor 2 at path while the block runs (the allocator's warnings are C's stderr); yields a
    function that returns what was written there."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    text = []
    try:
        yield lambda: text[0]
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        with open(path) as f:
            text.append(f.read())
        os.unlink(path)


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {os.environ.get('RANK')}: {what}")


before = torch.ones(MiB)  # 4 MiB, made before the group: torch's memory
check(not _arena.in_arena(before), "a tensor made before init_process_group is in an arena")
dist.init_process_group("cohort")
r, n = dist.get_rank(), dist.get_world_size()
pg = dist.distributed_c10d._get_default_group()
# COHORT_TEST_ARENA: 1 where CMake built the module with everything (torch 1.13), auto where only on request (another
# torch: scripts/gpu-check.sh builds it there), 0 where it cannot.
expected = os.environ["COHORT_TEST_ARENA"]
want = (expected == "1" or (expected == "auto" and _arena._MODULE is not None)) \
    and os.environ.get("COHORT_TORCH_ARENA", "1") == "1" and pg.transport() == "shm"
stats = _arena.stats()
if not want:
    t = torch.ones(MiB)
    check(not _arena.in_arena(t), "a tensor is in the arena where no allocator was expected")
    check(stats is None or not stats["attached"], f"attached where not expected: {stats}")
    dist.all_reduce(t)
    check(torch.equal(t, torch.full_like(t, n)), "all_reduce")
    print(f"arena ok (not expected here: module {stats is not None}, COHORT_TORCH_ARENA="
          f"{os.environ.get('COHORT_TORCH_ARENA', '1')}, transport {pg.transport()})", flush=True)
    sys.exit(0)

check(stats["attached"] and stats["installed"], f"stats after init: {stats}")
shm = os.statvfs("/dev/shm")
shm_room = shm.f_bavail * shm.f_frsize - max(shm.f_blocks * shm.f_frsize // 4, 256 * MiB)
if os.environ.get("COHORT_TEST_SMALL_SHM") == "1" or shm_room < 64 * MiB:  # (a container's /dev/shm, here too)
    # A container's /dev/shm (64 MiB here): the allocator keeps a quarter of it, and at least 256 MiB, for others
    # (DataLoader workers pass batches there), so every tensor comes from torch's allocator; nothing breaks.
    with stderr_to(f"/tmp/cohort-arena-{os.getpid()}.err") as said:
        ts = [torch.full((4 * MiB // 4,), float(r + 1)) for _ in range(4)]
    check("/dev/shm has too little room" in said() and said().count("cohort W:") == 1,
          f"the warning of a small /dev/shm, once: {said()!r}")
    s1 = _arena.stats()
    check(not any(_arena.in_arena(t) for t in ts), "a tensor in the arena on a 64 MiB /dev/shm")
    check(s1["full"] >= 4 and s1["fresh"] == 0 and s1["live_blocks"] == 0, f"stats on a 64 MiB /dev/shm: {s1}")
    for t in ts:
        dist.all_reduce(t)
        check(torch.equal(t, torch.full_like(t, n * (n + 1) / 2)), "all_reduce on a 64 MiB /dev/shm")
    print(f"arena ok (a /dev/shm of {shm.f_blocks * shm.f_frsize >> 20} MiB: {s1['full']} tensors left to torch's "
          f"allocator)", flush=True)
    sys.exit(0)
min_bytes, keep = stats["min_bytes"], stats["keep_bytes"]
check(min_bytes == int(os.environ.get("COHORT_TORCH_ARENA_MIN_BYTES", MiB)), f"min_bytes {min_bytes}")

# Placement by size.
small = torch.ones(min_bytes // 4 - 1)
exact = torch.ones(min_bytes // 4)
big = torch.full((4 * MiB // 4,), float(r + 1))
check(not _arena.in_arena(small), f"a tensor of {small.numel() * 4} bytes (below {min_bytes}) is in the arena")
check(_arena.in_arena(exact), f"a tensor of exactly {min_bytes} bytes is not in the arena")
check(_arena.in_arena(big), "a 4 MiB tensor is not in the arena")
check(big.data_ptr() % 4096 == 0, "an arena tensor is not page-aligned")

# all_reduce: every rank in the arena (zero copy), then one rank from torch's memory (rank 0 staged, the rest zero
# copy), sum and average; values exact (small integers).
total = n * (n + 1) / 2
dist.all_reduce(big)
check(torch.equal(big, torch.full_like(big, total)), f"all_reduce in the arena: {big[:4]}")
mixed = before.fill_(r + 1) if r == 0 else torch.full((MiB,), float(r + 1))
check(_arena.in_arena(mixed) == (r != 0), "the mixed case's placement")
dist.all_reduce(mixed, op=dist.ReduceOp.AVG if hasattr(dist.ReduceOp, "AVG") else dist.ReduceOp.SUM)
want_mixed = total / n if hasattr(dist.ReduceOp, "AVG") else total
check(torch.allclose(mixed, torch.full_like(mixed, want_mixed), rtol=0, atol=1e-6), f"mixed all_reduce: {mixed[:4]}")

# Reuse: the block of a freed tensor serves the next tensor of the same page-rounded size.
addr = big.data_ptr()
s0 = _arena.stats()
del big
again = torch.empty(4 * MiB // 4)
s1 = _arena.stats()
check(again.data_ptr() == addr and s1["reused"] == s0["reused"] + 1, f"reuse: {s0} -> {s1}")
del again

# The keep: freed blocks beyond it go back to the arena.
many = [torch.empty(3 * MiB // 4) for _ in range(6)]
del many
s2 = _arena.stats()
check(s2["kept_bytes"] <= keep, f"kept {s2['kept_bytes']} bytes, more than the keep {keep}")
check(s2["kept_blocks"] >= 1, f"nothing kept: {s2}")

# A tensor larger than the whole arena goes to torch's allocator at once, without giving the kept blocks back.
arena_bytes = int(os.environ["COHORT_SHM_ARENA_BYTES"])
huge = torch.ones(arena_bytes // 4 + MiB)
s_huge = _arena.stats()
check(not _arena.in_arena(huge) and s_huge["kept_bytes"] == s2["kept_bytes"] and s_huge["full"] == s2["full"] + 1,
      f"a tensor larger than the arena: {s2} -> {s_huge}")
del huge

# A full arena: the rest comes from torch's allocator; kept blocks are given back before that; the values hold.
with stderr_to(f"/tmp/cohort-arena-{os.getpid()}.err") as said:
    blocks = [torch.full((2 * MiB // 4,), float(i)) for i in range(arena_bytes // (2 * MiB) + 4)]
check("the shared arena (32 MiB a rank, COHORT_SHM_ARENA_BYTES) is full" in said() and said().count("cohort W:") == 1,
      f"the warning of a full arena, once: {said()!r}")
inside = sum(_arena.in_arena(b) for b in blocks)
s3 = _arena.stats()
check(0 < inside < len(blocks), f"{inside} of {len(blocks)} 2 MiB tensors in an arena of {arena_bytes} bytes")
check(s3["full"] > s2["full"] and s3["kept_bytes"] == 0, f"after filling the arena: {s3}")
check(all(torch.equal(b, torch.full_like(b, float(i))) for i, b in enumerate(blocks)), "values beyond a full arena")
last = blocks[-1]
dist.all_reduce(last)
check(torch.equal(last, torch.full_like(last, float(len(blocks) - 1) * n)), "all_reduce of torch's memory")
# In a full arena a freed block is kept, and a larger tensor, which the kept blocks could not hold, does not take them
# back from the arena (the next tensor of their size reuses them instead of going to torch's allocator).
first = next(i for i, b in enumerate(blocks) if _arena.in_arena(b))
del blocks[first]
s4 = _arena.stats()
larger = torch.empty(4 * MiB // 4)
s5 = _arena.stats()
check(not _arena.in_arena(larger) and s5["kept_bytes"] == s4["kept_bytes"] == 2 * MiB, f"a full arena: {s4} -> {s5}")
again2 = torch.empty(2 * MiB // 4)
check(_arena.in_arena(again2) and _arena.stats()["reused"] == s5["reused"] + 1, "the kept block was not reused")
del blocks, last, larger, again2

# fork: the child's inherited tensors are private copies; it allocates from torch's allocator.
shared = torch.full((2 * MiB // 4,), 5.0)
check(_arena.in_arena(shared), "the tensor before the fork is not in the arena")
pid = os.fork()
if pid == 0:
    ok = torch.equal(shared, torch.full_like(shared, 5.0))
    shared.fill_(-1.0)  # must not reach the parent
    fresh = torch.ones(4 * MiB // 4)
    ok = ok and not _arena.stats()["attached"] and not _arena.in_arena(fresh) and float(fresh.sum()) == MiB
    del shared  # the child's copy is unmapped
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
check(os.waitstatus_to_exitcode(status) == 0, f"the forked child's checks failed: status {status}")
check(torch.equal(shared, torch.full_like(shared, 5.0)), "the child's write reached the parent's tensor")
dist.all_reduce(shared)
check(torch.equal(shared, torch.full_like(shared, 5.0 * n)), "all_reduce after the fork")

# Tensors outlive the group: readable, writable, then freed.
alive = torch.full((4 * MiB // 4,), float(r))
check(_arena.in_arena(alive), "the last tensor is not in the arena")
del pg  # the group closes (and its communicator goes) when torch and we let it go
dist.destroy_process_group()
gc.collect()
s4 = _arena.stats()
check(not s4["attached"] and s4["kept_blocks"] == 0 and s4["live_blocks"] >= 2, f"after destroy: {s4}")
check(torch.equal(alive, torch.full_like(alive, float(r))), "a tensor read after destroy_process_group")
alive.add_(1.0)
check(float(alive.sum()) == (r + 1) * MiB, "a tensor written after destroy_process_group")
after = torch.ones(4 * MiB // 4)
check(not _arena.in_arena(after), "a tensor made after destroy_process_group is in the arena")
del alive, shared, exact, mixed
check(_arena.stats()["live_blocks"] == 0, f"blocks left after freeing every tensor: {_arena.stats()}")

# A second group destroyed with no tensor of its arena alive: its arena is unmapped, and torch's allocator may map
# memory at those addresses later. Such memory is torch's: not "in the arena", and freed by torch's allocator (the
# raw interface, oneDNN's scratch memory, goes through this allocator's raw deleter), not leaked.
dist.init_process_group("cohort")
dist.barrier()  # every rank is past init's barrier on rank 0's store before rank 0 may end
pg = dist.distributed_c10d._get_default_group()
lo, nbytes = ctypes.c_void_p(), ctypes.c_size_t()
check(_c.cohort_arena_range(pg._comm, ctypes.byref(lo), ctypes.byref(nbytes)) and nbytes.value, "the second arena")
lo, hi = lo.value, lo.value + nbytes.value
check(_arena.stats()["attached"], f"the second group is not attached: {_arena.stats()}")
del pg
dist.destroy_process_group()
gc.collect()
check(_arena.stats()["live_blocks"] == 0, f"blocks left: {_arena.stats()}")


def mapped(addr):
    with open("/proc/self/maps") as f:
        for line in f:
            a, b = (int(x, 16) for x in line.split()[0].split("-"))
            if a <= addr < b:
                return True
    return False


landed = 0
for size in (2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 24 * MiB):
    t = torch.empty(size // 4)
    check(not _arena.in_arena(t), f"torch's memory at {t.data_ptr():#x}, where an unmapped arena was, is in the arena")
    addr = _arena._MODULE._raw_allocate(size)
    check(not _arena._MODULE.is_arena(addr), f"raw memory at {addr:#x}, where an unmapped arena was, is in the arena")
    inside = lo <= addr < hi
    landed += inside
    _arena._MODULE._raw_deallocate(addr)
    check(not (inside and mapped(addr)), f"raw memory of {size} bytes at {addr:#x} (in the unmapped arena) leaked")
    del t
print(f"arena ok (rank {r} of {n}, {s3['fresh']} fresh, {s3['reused']} reused, {s3['full']} full, "
      f"{landed} raw blocks where an unmapped arena was)", flush=True)
