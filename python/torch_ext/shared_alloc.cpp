/*
 * shared_alloc.cpp: torch's CPU allocator, put in front of torch's own so that large CPU tensors live in a cohort
 * communicator's shared arena (cohort_alloc). The module cohort.torch._shared_alloc; python/cohort/torch/_arena.py
 * loads it and attaches it to a communicator.
 *
 * Why: an allreduce whose buffers lie in every rank's arena is zero copy (the peers read and write them in place,
 * src/transport/shm_coll.c), where a tensor from torch's allocator is staged: copied into the shared staging buffers
 * and out again. On the 2-core machine dist.all_reduce of 64 and 256 MiB took 2.2x less time from the arena
 * (docs/performance.md). torch offers no hook to place one tensor (DDP's reducer allocates its buckets itself), only
 * the process's CPU allocator (c10::SetCPUAllocator), so this is one.
 *
 * What it does:
 *   - An allocation of at least min_bytes, while attached, in the process that attached, takes a block of the arena:
 *     first from the blocks freed earlier with the same page-rounded size (a fresh block costs a reservation in
 *     /dev/shm and a page fault per page: torch allocates the same sizes step after step), else from cohort_alloc.
 *     Anything else, or an arena that is full or absent, goes to the allocator that was there before (torch's), and
 *     so does a fresh block that would leave less than a quarter of /dev/shm free (room_in_dev_shm).
 *   - A freed block is kept for reuse while the kept blocks stay under keep_bytes (the least recently freed go
 *     first); the rest go back to the arena (cohort_free), which gives their pages back to /dev/shm.
 *   - detach() (before the communicator is destroyed) gives the kept blocks back. Blocks still in use stay valid:
 *     the shm transport keeps its arena mapped while any block is out (cohort__shm_destroy), and such a block, once
 *     freed, gives its pages back itself (madvise MADV_REMOVE) and is never handed out again.
 *   - A forked child (DataLoader workers) would share the parent's arena pages (MAP_SHARED): its inherited tensors
 *     are made private copies when it starts (private_copies_in_child), it allocates from torch's allocator only
 *     (the test is the pid) and it frees those copies by unmapping them. The copies are made in the child after
 *     fork() returned, not at the fork's instant: what the parent's other threads (or a peer's zero-copy collective)
 *     write meanwhile may show in them, where fork()'s copy-on-write shows the memory as it was.
 * Thread-safety: torch allocates and frees on any thread; one mutex guards the state.
 */
#include <pthread.h>
#include <sys/mman.h>
#include <sys/statvfs.h>

#include <cstdio>
#include <cstring>
#include <unistd.h>

#include <c10/core/CPUAllocator.h>
#include <pybind11/pybind11.h>
#include <torch/version.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

using alloc_fn = void *(*)(void *comm, size_t bytes);
using free_fn = void (*)(void *comm, void *ptr);
using in_arena_fn = int (*)(const void *comm, const void *ptr, size_t bytes);

constexpr size_t kPage = 4096;
constexpr int kMaxArenas = 64; /* arenas with blocks in use at once (one per init after a shutdown) */

struct Block {
  size_t bytes;       /* page-rounded */
  uint64_t attach_id; /* the attachment it came from: an older one's arena is gone or going */
  int slot;           /* its arena's entry in State::arenas */
  pid_t pid;          /* the process that took it: in another (a forked child), it is a private copy */
};

struct Range {
  std::atomic<uintptr_t> lo{0}, hi{0};
  size_t nlive = 0; /* under the lock: blocks of this arena in use; none, and detached: the entry may be reused */
};

struct State {
  std::mutex mu;
  c10::Allocator *prev = nullptr; /* torch's allocator: everything that is not an arena block */
  c10::DeleterFnPtr prev_raw_deleter = nullptr;
  std::atomic<pid_t> owner{0}; /* the process that attached; 0: never attached */
  void *comm = nullptr;        /* null: detached */
  uint64_t attach_id = 0;
  alloc_fn alloc = nullptr;
  free_fn release = nullptr;
  in_arena_fn in_arena = nullptr;
  size_t min_bytes = 1 << 20, keep_bytes = 256u << 20;
  std::unordered_map<void *, Block> live;      /* handed out */
  std::vector<std::pair<void *, size_t>> kept; /* freed, kept for reuse: least recently freed first */
  size_t kept_bytes = 0;
  /* The address ranges of the arenas attached, the current one and those whose blocks are still in use: frees are
   * told apart without the lock. A range may name memory that is no longer an arena (unmapped when its
   * communicator was destroyed with no block out, then mapped again by anyone, torch's allocator included): an
   * address is a block only when `live` has it. */
  Range arenas[kMaxArenas];
  std::atomic<int> narenas{0};
  int slot = -1; /* the current attachment's entry */
  /* Counters (stats()): blocks taken from the kept ones, from cohort_alloc, and allocations left to torch's
   * allocator although large enough, because the arena was full. */
  uint64_t reused = 0, fresh = 0, full = 0;
  /* The smallest size the arena could not serve since memory last went back to it: a block as large goes to torch's
   * allocator at once, where trying would cost a failed search (and cohort_alloc's malloc) each time; one in 64
   * tries anyway, since other users of the arena (the DDP engine, cohort's own pools) free without telling us. */
  size_t full_from = SIZE_MAX;
  uint64_t skipped = 0;
  bool warned_full = false;
};

void lock_for_fork();
void unlock_in_parent();
void private_copies_in_child();

State &state() {
  static State *s = [] {
    State *made = new State; /* never destroyed: tensors are freed during and after interpreter exit */
    pthread_atfork(lock_for_fork, unlock_in_parent, private_copies_in_child);
    return made;
  }();
  return *s;
}

/* fork() holds the lock, so that the child's copy of the state is whole. */
void lock_for_fork() { state().mu.lock(); }
void unlock_in_parent() { state().mu.unlock(); }

/* In a forked child: the arena is a shared mapping, so the tensors the child inherited would be the parent's own
 * memory, not the copies fork() promises (a DataLoader worker that wrote into one would change the parent's). Each
 * block in use becomes a private copy at the same address (a fresh mapping, filled, moved over it), at the cost of
 * copying those bytes once per fork. Only system calls and memcpy: the child of a threaded process must not take
 * locks that other threads may have held. */
void private_copies_in_child() {
  State &s = state();
  for (auto &kv : s.live) {
    void *p = kv.first;
    size_t bytes = kv.second.bytes;
    void *copy = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) continue; /* out of memory: the block stays shared, as cohort's other arena buffers are */
    memcpy(copy, p, bytes);
    if (mremap(copy, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, p) == MAP_FAILED) munmap(copy, bytes);
  }
  s.mu.unlock();
}

bool in_some_arena(const State &s, const void *p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int n = s.narenas.load(std::memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (a >= s.arenas[i].lo.load(std::memory_order_relaxed) && a < s.arenas[i].hi.load(std::memory_order_relaxed))
      return true;
  return false;
}

/* Under the lock: gives kept blocks back to the arena until at most `limit` bytes are kept. */
void trim_kept(State &s, size_t limit) {
  size_t drop = 0;
  while (drop < s.kept.size() && s.kept_bytes > limit) {
    s.release(s.comm, s.kept[drop].first);
    s.kept_bytes -= s.kept[drop].second;
    drop++;
  }
  s.kept.erase(s.kept.begin(), s.kept.begin() + static_cast<std::ptrdiff_t>(drop));
  if (drop) s.full_from = SIZE_MAX;
}

void free_block(void *p);

/* Whether /dev/shm, where the arena's pages are reserved, can spare `bytes` and keep a quarter of its size (at least
 * 256 MiB) free for others: torch's DataLoader workers pass their batches through it, and a container's /dev/shm is
 * often small (Docker's default is 64 MiB, where the allocator then stays out of the way). True when it cannot be
 * told (cohort_alloc's own reservation still fails cleanly on a full /dev/shm). */
bool room_in_dev_shm(size_t bytes) {
  struct statvfs v;
  if (statvfs("/dev/shm", &v) != 0) return true;
  uint64_t size = static_cast<uint64_t>(v.f_blocks) * v.f_frsize, free = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
  uint64_t reserve = size / 4 > (256u << 20) ? size / 4 : (256u << 20);
  return free >= reserve && free - reserve >= bytes;
}

/* Under the lock: a block of `bytes` (page-rounded) from the kept ones or the arena, or null. */
void *take_block(State &s, size_t bytes) {
  for (size_t i = s.kept.size(); i-- > 0;) {
    if (s.kept[i].second != bytes) continue;
    void *p = s.kept[i].first;
    s.kept.erase(s.kept.begin() + static_cast<std::ptrdiff_t>(i));
    s.kept_bytes -= bytes;
    s.reused++;
    return p;
  }
  const Range &arena = s.arenas[s.slot];
  if (bytes > arena.hi.load(std::memory_order_relaxed) - arena.lo.load(std::memory_order_relaxed)) {
    s.full++; /* larger than the whole arena: no use giving the kept blocks back for it */
    return nullptr;
  }
  if (bytes >= s.full_from && ++s.skipped % 64 != 0) {
    s.full++;
    return nullptr;
  }
  bool room = true;
  for (int attempt = 0; attempt < 2; attempt++) {
    room = room_in_dev_shm(bytes);
    void *p = room ? s.alloc(s.comm, bytes) : nullptr;
    if (p && s.in_arena(s.comm, p, bytes)) {
      s.fresh++;
      return p;
    }
    if (p) s.release(s.comm, p); /* cohort_alloc fell back to malloc: the arena is full */
    /* The kept blocks may be what fills it; giving them back helps only where they could hold this one (else the
     * next tensors of their sizes would take fresh blocks again, or none). */
    if (s.kept_bytes < bytes) break;
    trim_kept(s, 0);
  }
  if (bytes < s.full_from) s.full_from = bytes;
  if (!s.warned_full) { /* once per attachment: what happened, and what to do about it */
    s.warned_full = true;
    uintptr_t size = arena.hi.load(std::memory_order_relaxed) - arena.lo.load(std::memory_order_relaxed);
    if (room)
      fprintf(stderr,
              "cohort W: the shared arena (%zu MiB a rank, COHORT_SHM_ARENA_BYTES) is full: CPU tensors of %zu MiB "
              "and more made from now on come from torch's allocator and are staged in the collectives, not zero "
              "copy; a larger COHORT_SHM_ARENA_BYTES (only address space until used) keeps them in it\n",
              static_cast<size_t>(size >> 20), bytes >> 20);
    else
      fprintf(stderr,
              "cohort W: /dev/shm has too little room for the shared arena's tensors (it keeps a quarter of its size, "
              "and at least 256 MiB, for others): CPU tensors come from torch's allocator and are staged in the "
              "collectives, not zero copy; a larger /dev/shm (docker run --shm-size) gives them room\n");
  }
  s.full++;
  return nullptr;
}

/* torch 2.3 made allocate() non-const and copy_data() a pure virtual of the allocator. */
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define COHORT_ALLOCATE_CONST
#define COHORT_ALLOCATOR_COPIES 1
#else
#define COHORT_ALLOCATE_CONST const
#define COHORT_ALLOCATOR_COPIES 0
#endif

class ArenaAllocator final : public c10::Allocator {
public:
  c10::DataPtr allocate(size_t n) COHORT_ALLOCATE_CONST override {
    State &s = state();
    if (n >= s.min_bytes && s.owner.load(std::memory_order_relaxed) == getpid()) {
      size_t bytes = (n + kPage - 1) / kPage * kPage;
      std::lock_guard<std::mutex> hold(s.mu);
      if (s.comm) {
        if (void *p = take_block(s, bytes)) {
          s.live.emplace(p, Block{bytes, s.attach_id, s.slot, getpid()});
          s.arenas[s.slot].nlive++;
          return {p, p, &free_block, c10::Device(c10::DeviceType::CPU)};
        }
      }
    }
    /* torch's memory, with free_block as its deleter too: raw_deleter()'s contract is that every DataPtr from
     * allocate() carries it (free_block passes torch's memory on to torch's raw deleter). */
    c10::DataPtr theirs = s.prev->allocate(n);
    if (theirs.get() != theirs.get_context() || theirs.get_deleter() != s.prev_raw_deleter) return theirs;
    void *p = theirs.release_context();
    return {p, p, &free_block, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
#if COHORT_ALLOCATOR_COPIES
  void copy_data(void *dest, const void *src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif
};

ArenaAllocator the_allocator;

void free_block(void *p) {
  State &s = state();
  if (!p) return;
  if (!in_some_arena(s, p)) {
    s.prev_raw_deleter(p);
    return;
  }
  std::unique_lock<std::mutex> hold(s.mu);
  auto it = s.live.find(p);
  if (it == s.live.end()) { /* torch's memory, where an arena that is gone was (see State::arenas) */
    hold.unlock();
    s.prev_raw_deleter(p);
    return;
  }
  Block b = it->second;
  s.live.erase(it);
  s.arenas[b.slot].nlive--;
  if (b.pid != getpid()) { /* a forked child: its private copy (see private_copies_in_child) */
    munmap(p, b.bytes);
    return;
  }
  if (s.comm && b.attach_id == s.attach_id) {
    s.kept.emplace_back(p, b.bytes);
    s.kept_bytes += b.bytes;
    trim_kept(s, s.keep_bytes);
  } else {
    madvise(p, b.bytes, MADV_REMOVE); /* its communicator is gone: the pages go back to /dev/shm */
  }
}

/* Puts the allocator in front of torch's (once) and lends it comm's arena, [lo, hi) in this process; false where
 * another communicator has it, or too many have had it. */
bool attach(uintptr_t comm, uintptr_t lo, uintptr_t hi, uintptr_t alloc, uintptr_t release, uintptr_t in_arena,
            size_t min_bytes, size_t keep_bytes) {
  State &s = state();
  std::lock_guard<std::mutex> hold(s.mu);
  if (s.comm && s.owner.load() == getpid()) return false; /* another communicator has it */
  if (s.owner.load() != getpid()) { /* first attach, or a forked child's: its kept blocks are the parent's */
    s.kept.clear(); /* (its live ones are its private copies: they stay in `live`, to be unmapped when freed) */
    s.kept_bytes = 0;
  }
  /* An entry whose blocks have all been freed is reused: a free that reads it while it changes may take an address
   * for an arena's, and then finds it is not in `live`. */
  int n = s.narenas.load(), slot = 0;
  while (slot < n && s.arenas[slot].nlive)
    slot++;
  if (slot == kMaxArenas) return false; /* as many arenas with tensors still alive: this one does without */
  if (!s.prev) {
    s.prev = c10::GetCPUAllocator();
    s.prev_raw_deleter = s.prev->raw_deleter();
    TORCH_CHECK(s.prev_raw_deleter, "cohort: torch's CPU allocator has no raw deleter");
    c10::SetCPUAllocator(&the_allocator, /*priority=*/100);
  }
  s.arenas[slot].lo.store(lo);
  s.arenas[slot].hi.store(hi);
  if (slot == n) s.narenas.store(n + 1, std::memory_order_release);
  s.slot = slot;
  s.comm = reinterpret_cast<void *>(comm);
  s.alloc = reinterpret_cast<alloc_fn>(alloc);
  s.release = reinterpret_cast<free_fn>(release);
  s.in_arena = reinterpret_cast<in_arena_fn>(in_arena);
  s.min_bytes = min_bytes;
  s.keep_bytes = keep_bytes;
  s.attach_id++;
  s.full_from = SIZE_MAX;
  s.warned_full = false;
  s.owner.store(getpid());
  return true;
}

/* Before comm is destroyed: no more blocks from it, the kept ones back to it. Returns the blocks still in use. */
size_t detach(uintptr_t comm) {
  State &s = state();
  std::lock_guard<std::mutex> hold(s.mu);
  if (!s.comm || s.comm != reinterpret_cast<void *>(comm) || s.owner.load() != getpid()) return 0;
  trim_kept(s, 0);
  s.comm = nullptr;
  return s.live.size();
}

py::dict stats() {
  State &s = state();
  std::lock_guard<std::mutex> hold(s.mu);
  size_t live_bytes = 0;
  for (auto &kv : s.live)
    live_bytes += kv.second.bytes;
  py::dict d;
  d["attached"] = s.comm != nullptr && s.owner.load() == getpid();
  d["installed"] = c10::GetCPUAllocator() == &the_allocator;
  d["live_blocks"] = s.live.size();
  d["live_bytes"] = live_bytes;
  d["kept_blocks"] = s.kept.size();
  d["kept_bytes"] = s.kept_bytes;
  d["reused"] = s.reused;
  d["fresh"] = s.fresh;
  d["full"] = s.full;
  d["min_bytes"] = s.min_bytes;
  d["keep_bytes"] = s.keep_bytes;
  return d;
}

} // namespace

PYBIND11_MODULE(_shared_alloc, m) {
  m.doc() = "torch's CPU allocator on a cohort communicator's shared arena (python/torch_ext/shared_alloc.cpp)";
  m.def("attach", &attach);
  m.def("detach", &detach);
  m.def("stats", &stats);
  m.def("is_arena", [](uintptr_t p) {
    State &s = state();
    if (!in_some_arena(s, reinterpret_cast<void *>(p))) return false;
    std::lock_guard<std::mutex> hold(s.mu);
    for (auto &kv : s.live) /* a block in use (a view's address lies inside one) */
      if (p >= reinterpret_cast<uintptr_t>(kv.first) && p < reinterpret_cast<uintptr_t>(kv.first) + kv.second.bytes)
        return true;
    return false;
  });
  /* For the tests: torch's raw interface (c10::Allocator::raw_allocate/raw_deallocate, oneDNN's scratch memory). */
  m.def("_raw_allocate", [](size_t n) { return reinterpret_cast<uintptr_t>(c10::GetCPUAllocator()->raw_allocate(n)); });
  m.def("_raw_deallocate", [](uintptr_t p) { c10::GetCPUAllocator()->raw_deallocate(reinterpret_cast<void *>(p)); });
}
