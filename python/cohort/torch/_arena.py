"""Large CPU tensors in the shared arena: torch's CPU allocator lent a communicator's arena (cohort_alloc), so that
the collectives on them are zero copy (python/torch_ext/shared_alloc.cpp says how, docs/torch.md when).

The first to come attaches its communicator, and detaches it before destroying it: cohort.torch.init (hvd.init) the
job's, or the backend "cohort" its first group of the whole world (_backend.py).
COHORT_TORCH_ARENA=0 leaves torch's allocator alone; COHORT_TORCH_ARENA_MIN_BYTES (default 1 MiB) is the smallest
tensor placed there, COHORT_TORCH_ARENA_KEEP_BYTES (default 256 MiB) how much freed memory is kept for reuse.
Both are read when a communicator is attached."""
import ctypes
import importlib
import os

import torch

import cohort as _core
from cohort._lib import lib as _c


def built_module(name, built_for_key):
    """cohort.torch.<name>, a C++ module of the package, or None where CMake did not build it or built it for another
    torch than this one (_config.<built_for_key> names that torch; its C++ calls and class layouts are that torch's,
    so such a module must not even load)."""
    try:
        from cohort import _config
    except ImportError:
        return None
    built_for = getattr(_config, built_for_key, None)
    if not built_for or built_for.split(".")[:2] != torch.__version__.split(".")[:2]:
        return None
    try:
        return importlib.import_module(f"cohort.torch.{name}")
    except ImportError:
        return None


# Built under torch 1.13 with the rest, under another torch on request (python/CMakeLists.txt).
_MODULE = built_module("_shared_alloc", "TORCH_ALLOC_FOR")


def _bytes_from_env(name, default):
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{name}={text!r}: expected a number of bytes (an integer >= 0)")
    return value


def why_not():
    """None when attach() would lend the allocator an arena, else the reason it would not (before any arena)."""
    if os.environ.get("COHORT_TORCH_ARENA", "1") == "0":
        return "COHORT_TORCH_ARENA=0"
    if _MODULE is None:
        return f"cohort.torch._shared_alloc is not built for torch {torch.__version__}"
    return None


def attach(comm):
    """Lends torch's CPU allocator comm's arena; False (and nothing changed) where comm's transport has none, where
    another communicator has it, while tensors of 64 earlier arenas are still alive in this process, or where
    why_not() says why not."""
    if why_not() is not None:
        return False
    base, nbytes = ctypes.c_void_p(), ctypes.c_size_t()
    if not _c.cohort_arena_range(comm, ctypes.byref(base), ctypes.byref(nbytes)) or not nbytes.value:
        return False
    if _MODULE.stats()["attached"]:
        return False
    min_bytes = _bytes_from_env("COHORT_TORCH_ARENA_MIN_BYTES", 1 << 20)
    keep_bytes = _bytes_from_env("COHORT_TORCH_ARENA_KEEP_BYTES", 256 << 20)
    fn = ctypes.c_void_p
    return _MODULE.attach(comm.value, base.value, base.value + nbytes.value, ctypes.cast(_c.cohort_alloc, fn).value,
                          ctypes.cast(_c.cohort_free, fn).value, ctypes.cast(_c.cohort_in_arena, fn).value,
                          max(min_bytes, 1), keep_bytes)


def _on_destroy(comm, phase):
    if phase == "destroy":
        detach(comm)


_core._comm_hooks.append(_on_destroy)  # cohort.shutdown() (hvd.shutdown) destroys the job's communicator


def detach(comm):
    """Before comm is destroyed: no more tensors from its arena. Those still alive stay valid (the arena stays mapped
    while any is); returns how many there are."""
    return _MODULE.detach(comm.value) if _MODULE is not None and comm else 0


def stats():
    """What the allocator holds in this process: attached, live_blocks/live_bytes (tensors in the arena now),
    kept_blocks/kept_bytes (freed, kept for reuse), reused, fresh (blocks taken from the kept ones, from the arena),
    full (allocations left to torch's allocator because the arena was full), min_bytes, keep_bytes. None where the
    module is absent."""
    return _MODULE.stats() if _MODULE is not None else None


def in_arena(tensor):
    """True when tensor's memory lies in an arena this process attached (zero copy in the collectives)."""
    return _MODULE is not None and bool(_MODULE.is_arena(tensor.data_ptr()))
