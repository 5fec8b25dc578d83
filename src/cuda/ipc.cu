/*
 * ipc.cu: the path for ranks of one host that share one GPU (NCCL refuses them: "Duplicate GPU detected").
 *
 * Rank 0 leads. Every other rank sends rank 0 the CUDA IPC handles of its buffers; rank 0 maps them (once per
 * allocation: the mappings are cached by the driver's buffer id), runs the whole collective in one launch of its own
 * kernels, and tells every rank the outcome. On one GPU the ranks' kernels would only take turns (time slicing
 * between processes), so one launch of rank 0's does all the work and moves the fewest bytes: each input read once,
 * each output written once. Nothing waits inside a kernel.
 *
 * When the ranks' streams meet: a page of flags in shared host memory, registered with CUDA in every process
 * (struct ipc_flags). Each call has a number, the same on every rank. A rank's stream writes ready[rank] = number
 * when its input is ready (cuStreamWriteValue32, behind the caller's work); rank 0's stream waits for every ready
 * flag (cuStreamWaitValue32), runs the kernel and writes done = number; every other rank's stream waits for done.
 * So a stream-ordered call (cohort_allreduce_stream) returns once its work is queued, as NCCL's do, and the GPU
 * never drains between the ranks' steps; the host only swaps the buffers' handles and the outcome, in frames of
 * the host transport, which fail naming the rank that died or called something else. A blocking call waits for
 * its input and for done on the host. Because the flags are host memory, an abort (a peer died) releases every
 * stream still waiting on them by writing them from the host. Where the flags cannot be set up (or
 * COHORT_GPU_IPC_SYNC=host on some rank), every wait is on the host as before: the input's event or stream, then
 * rank 0's stream, then the frames.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cuda/internal.h"

#define EXPORT_SLOTS 64
#define IMPORT_SLOTS 64

/* How a rank names one of its buffers to rank 0. */
typedef struct cc_ipc_desc {
  cudaIpcMemHandle_t handle;
  uint64_t buffer_id; /* the driver's id of the allocation: a new allocation at the same address has another */
  uint64_t offset;    /* of the buffer in its allocation */
  uint64_t base, range;
  int32_t present;
  int32_t pad;
} cc_ipc_desc;

typedef struct cc_ipc_hello {
  cc_ipc_desc send, recv;
  int32_t status; /* COHORT_OK, or why this rank's input is not there (its message follows) */
  char message[252];
} cc_ipc_hello;

typedef struct cc_ipc_done {
  int32_t status;
  char message[252];
} cc_ipc_done;

typedef struct export_slot {
  uint64_t base, buffer_id;
  cudaIpcMemHandle_t handle;
} export_slot;

typedef struct import_slot {
  uint64_t buffer_id, base, range;
  void *mapped;
  uint64_t used; /* a clock for eviction */
  uint32_t last; /* the number of the last call whose kernel uses it (maybe still queued on a caller's stream) */
} import_slot;

/* The flags the ranks' streams meet at, one cache line each (see the top of the file). */
#define FLAG_STRIDE 16 /* uint32_t: 64 bytes */
typedef struct ipc_flags {
  uint32_t aborted[FLAG_STRIDE]; /* 1 once any rank aborted: the kernels that start after it touch nothing */
  uint32_t done[FLAG_STRIDE];
  uint32_t ready[COHORT__CUDA_IPC_MAX_RANKS][FLAG_STRIDE];
} ipc_flags;
#define FLAGS_BYTES 4096
typedef char flags_fit_a_page[sizeof(ipc_flags) <= FLAGS_BYTES ? 1 : -1];

struct cc_ipc {
  export_slot exports[EXPORT_SLOTS];
  int next_export;
  import_slot (*imports)[IMPORT_SLOTS]; /* [size][IMPORT_SLOTS] on rank 0 */
  uint64_t clock;
  ipc_flags *flags;     /* NULL: every wait on the host */
  CUdeviceptr dflags;   /* the same page as the device sees it */
  uint32_t number;      /* of the last call; the same on every rank */
  volatile int aborted; /* 1: the flags were forced, nothing may wait on them again */
  /* The callers' streams that hold flag operations (stream-ordered calls), each with an event after its last one:
   * the page stays registered until they are through (cc_ipc_destroy); untracked: more streams than slots. */
  struct {
    CUstream stream;
    cudaEvent_t after;
  } users[8];
  int untracked;
};

/* After a stream-ordered call's last flag operation on stream: an event, so that destroy knows when the page is free.
 */
static void track_stream(struct cc_ipc *ipc, CUstream stream) {
  int i, n = (int)(sizeof ipc->users / sizeof ipc->users[0]);
  for (i = 0; i < n && ipc->users[i].after && ipc->users[i].stream != stream; i++) {
  }
  if (i == n) /* every slot holds another stream: one whose operations are through is free again */
    for (i = 0; i < n && cudaEventQuery(ipc->users[i].after) == cudaErrorNotReady; i++) {
    }
  if (i == n) {
    ipc->untracked = 1;
    return;
  }
  if (!ipc->users[i].after && cudaEventCreateWithFlags(&ipc->users[i].after, cudaEventDisableTiming) != cudaSuccess) {
    ipc->users[i].after = NULL;
    ipc->untracked = 1;
    return;
  }
  ipc->users[i].stream = stream;
  if (cudaEventRecord(ipc->users[i].after, (cudaStream_t)stream) != cudaSuccess) ipc->untracked = 1;
}

/* ---- the flags: shared host memory, registered with CUDA ---- */

typedef struct flags_offer {
  int32_t ok; /* rank 0 has the page: name is its shared memory object */
  char name[60];
} flags_offer;

static volatile uint32_t *host_flag(ipc_flags *f, int rank) { return rank < 0 ? &f->done[0] : &f->ready[rank][0]; }
static CUdeviceptr device_flag(struct cc_ipc *ipc, int rank) {
  return ipc->dflags + (CUdeviceptr)((char *)(uintptr_t)host_flag(ipc->flags, rank) - (char *)ipc->flags);
}

static void unmap_flags(struct cc_ipc *ipc) {
  if (!ipc->flags) return;
  cuMemHostUnregister(ipc->flags);
  munmap(ipc->flags, FLAGS_BYTES);
  ipc->flags = NULL;
  ipc->dflags = 0;
}

/* Maps the shared page (rank 0 made it with create) and registers it with CUDA: 0 on success. */
static int map_flags(struct cc_ipc *ipc, const char *name, int create) {
  int fd = create ? shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600) : shm_open(name, O_RDWR, 0600);
  if (fd < 0) return -1;
  void *p = MAP_FAILED;
  if (!create || ftruncate(fd, FLAGS_BYTES) == 0)
    p = mmap(NULL, FLAGS_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return -1;
  CUdeviceptr d = 0;
  if (cuMemHostRegister(p, FLAGS_BYTES, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS) {
    munmap(p, FLAGS_BYTES);
    return -1;
  }
  if (cuMemHostGetDevicePointer(&d, p, 0) != CUDA_SUCCESS) {
    cuMemHostUnregister(p);
    munmap(p, FLAGS_BYTES);
    return -1;
  }
  ipc->flags = (ipc_flags *)p;
  ipc->dflags = d;
  return 0;
}

/* Collective: every rank maps rank 0's page, or none does (then every wait is on the host). Only a failure of the
 * frames fails it. */
static cohort_status setup_flags(cohort__cuda_comm *c, const cohort__cuda_rank_info *infos,
                                 const cohort__cuda_host *host) {
  struct cc_ipc *ipc = c->ipc;
  int want = 1; /* stream memory operations are always there from CUDA 12 on; registration may still fail */
  for (int r = 0; r < c->size; r++)
    if (infos[r].ipc_sync == COHORT__CUDA_IPC_SYNC_HOST) want = 0;
  if (c->rank == 0) {
    static int made;
    flags_offer offer;
    memset(&offer, 0, sizeof offer);
    /* The clock too: a segment left by a process that died between creating and unlinking it, whose pid came back,
     * would otherwise make O_EXCL fail and every wait fall back to the host. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(offer.name, sizeof offer.name, "/cohort-cuda-ipc-%d-%d-%llx", (int)getpid(),
             __atomic_fetch_add(&made, 1, __ATOMIC_RELAXED),
             (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec);
    offer.ok = want && map_flags(ipc, offer.name, 1) == 0;
    int all = offer.ok;
    cohort_status st = COHORT_OK;
    for (int r = 1; r < c->size && st == COHORT_OK; r++)
      st = host->send(host->ctx, r, &offer, sizeof offer);
    for (int r = 1; r < c->size && st == COHORT_OK; r++) {
      int32_t ok = 0;
      st = host->recv(host->ctx, r, &ok, sizeof ok);
      all &= ok;
    }
    if (offer.ok) shm_unlink(offer.name); /* every rank has it mapped now, or never will */
    int32_t verdict = all;
    for (int r = 1; r < c->size && st == COHORT_OK; r++)
      st = host->send(host->ctx, r, &verdict, sizeof verdict);
    if (st != COHORT_OK || !verdict) unmap_flags(ipc);
    return st == COHORT_OK ? st : cc_fail(st, "%s", "");
  }
  flags_offer offer;
  cohort_status st = host->recv(host->ctx, 0, &offer, sizeof offer);
  if (st != COHORT_OK) return cc_fail(st, "%s", "");
  offer.name[sizeof offer.name - 1] = '\0';
  int32_t ok = offer.ok && want && map_flags(ipc, offer.name, 0) == 0;
  int32_t verdict = 0;
  st = host->send(host->ctx, 0, &ok, sizeof ok);
  if (st == COHORT_OK) st = host->recv(host->ctx, 0, &verdict, sizeof verdict);
  if (st != COHORT_OK || !verdict) unmap_flags(ipc);
  return st == COHORT_OK ? st : cc_fail(st, "%s", "");
}

/* Any thread: every flag jumps far ahead, so that no stream waits on them any longer (a cyclic comparison: a wait
 * for any number up to 2^30 calls from now is met). */
void cc_ipc_abort(cohort__cuda_comm *c) {
  struct cc_ipc *ipc = c->ipc;
  if (!ipc || !ipc->flags) return;
  ipc->aborted = 1;
  __atomic_store_n(&ipc->flags->aborted[0], 1u, __ATOMIC_RELEASE); /* before the waits are released */
  uint32_t far = ipc->number + (1u << 30);
  __atomic_store_n(host_flag(ipc->flags, -1), far, __ATOMIC_RELEASE);
  for (int r = 0; r < c->size; r++)
    __atomic_store_n(host_flag(ipc->flags, r), far, __ATOMIC_RELEASE);
}

/* Whether any rank aborted (the aborted word of the page, which only ever goes from 0 to 1). A forced flag alone does
 * not tell it: a live rank's queued stream write may move the flag back to a plain number after the abort forced it,
 * and a kernel released by the abort skipped its work (kernels.cu) although the flags then read as if it was done. */
static int page_aborted(const struct cc_ipc *ipc) {
  return ipc->flags && __atomic_load_n(&ipc->flags->aborted[0], __ATOMIC_ACQUIRE) != 0;
}

/* Whether stream is being captured into a CUDA graph, or cannot be told apart from one (the legacy stream while a
 * blocking stream captures). Nothing of a call may go on such a stream: the graph would replay the flags' waits and
 * writes with this call's number unchanged, while the host's frames and the numbers move on: on a replay rank 0's
 * waits are met at once (its kernel reads inputs not yet written, the peers' waits for done pass before it ran), and
 * a replayed write moves a flag back below a later call's, whose waits then never end. */
#define CAPTURED_MESSAGE                                                                                               \
  "the caller's stream is being captured into a CUDA graph, which the cuda-ipc path's stream-ordered calls cannot be " \
  "(its flags carry each call's number): call it outside the capture"
static int capturing(CUstream stream) {
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  return cuStreamIsCapturing(stream, &cs) != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The host waits until flag reaches number (cyclically), watching the peers: a blocking call's wait for done. */
static cohort_status host_wait_flag(cohort__cuda_comm *c, int rank, uint32_t number, const cohort__cuda_host *host) {
  volatile uint32_t *flag = host_flag(c->ipc->flags, rank);
  struct timespec last, now;
  clock_gettime(CLOCK_MONOTONIC, &last);
  const double start = (double)last.tv_sec + (double)last.tv_nsec * 1e-9;
  for (unsigned spins = 0;
       (int32_t)(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - number) < 0 && !c->ipc->aborted && !page_aborted(c->ipc);
       spins++) {
    if (spins < 1000) {
      sched_yield();
      continue;
    }
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - last.tv_sec) * 1000000000L + (now.tv_nsec - last.tv_nsec) > 1000000L) { /* once a millisecond */
      last = now;
      cohort_status st = host->poll(host->ctx);
      if (st != COHORT_OK) {
        cc_ipc_abort(c);
        return cc_fail(st, "%s", "");
      }
      const double waited = (double)now.tv_sec + (double)now.tv_nsec * 1e-9 - start;
      if (host->timeout_s > 0 && waited > host->timeout_s) { /* alive, but not there: a stuck stream or kernel */
        cc_ipc_abort(c);
        if (rank < 0)
          return cc_fail(COHORT_ERR_TIMEOUT, "waited %.0f s (COHORT_OP_TIMEOUT) for rank 0's collective kernel",
                         waited);
        return cc_fail(COHORT_ERR_TIMEOUT,
                       "waited %.0f s (COHORT_OP_TIMEOUT) for rank %d's input to be ready on its "
                       "stream",
                       waited, rank);
      }
    }
  }
  /* An abort forces the flags: what they say then is not a result. Another process's abort shows only in the flag:
   * a value far past number (cc_ipc_abort's 2^30; a live rank is never more than a few calls ahead). */
  if (c->ipc->aborted) return cc_fail(COHORT_ERR_REMOTE, "the device collective was aborted");
  if (page_aborted(c->ipc) || (int32_t)(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - number) >= (int32_t)(1u << 29))
    return cc_fail(COHORT_ERR_REMOTE, "the device collective was aborted by another rank (its flags were forced)");
  return COHORT_OK;
}

/* The host writes flag = number where a stream could not, once the previous number is there (a stream, of an
 * earlier stream-ordered call, may still hold its write): so the flag never moves back below number, and no wait of
 * the previous call (rank 0's for ready, a peer's for done) is met before that call's own write. Keeps this thread's
 * message. */
static void host_write_flag(cohort__cuda_comm *c, int rank, uint32_t number, const cohort__cuda_host *host) {
  char keep[1024];
  snprintf(keep, sizeof keep, "%s", cc_last_error());
  host_wait_flag(c, rank, number - 1, host); /* fails only where the flags are forced: written anyway */
  __atomic_store_n(host_flag(c->ipc->flags, rank), number, __ATOMIC_RELEASE);
  cc_fail(COHORT_OK, "%s", keep);
}

cohort_status cc_ipc_create(cohort__cuda_comm *c, const cohort__cuda_rank_info *infos, const cohort__cuda_host *host) {
  c->ipc = (struct cc_ipc *)calloc(1, sizeof *c->ipc);
  if (!c->ipc) return cc_fail(COHORT_ERR_SYSTEM, "out of memory");
  if (c->rank == 0) {
    c->ipc->imports = (import_slot(*)[IMPORT_SLOTS])calloc((size_t)c->size, sizeof *c->ipc->imports);
    if (!c->ipc->imports) {
      free(c->ipc);
      c->ipc = NULL;
      return cc_fail(COHORT_ERR_SYSTEM, "out of memory");
    }
  }
  cohort_status st = c->size > 1 ? setup_flags(c, infos, host) : COHORT_OK;
  if (st != COHORT_OK) {
    free(c->ipc->imports);
    free(c->ipc);
    c->ipc = NULL;
  }
  return st;
}

/* Whether every stream that waits on or writes the page is through with it. A failed communicator's flags are
 * forced at once and again while waiting (a live peer's queued write may move one back), for up to 2 s: its peers
 * may be dead. A healthy one's are never forced: forcing sets the aborted word, and every rank's kernels after it
 * would skip their work; destroy is not collective, and a peer's stream may lag. Its streams get 30 s. */
static int flags_released(cohort__cuda_comm *c) {
  struct cc_ipc *ipc = c->ipc;
  int n = (int)(sizeof ipc->users / sizeof ipc->users[0]);
  if (ipc->untracked) return 0;
  const int failed = ipc->aborted || page_aborted(ipc);
  for (int tries = 0; tries < (failed ? 2000 : 30000); tries++) {
    int busy = 0;
    for (int i = 0; i < n; i++)
      if (ipc->users[i].after && cudaEventQuery(ipc->users[i].after) == cudaErrorNotReady) busy = 1;
    if (!busy) return 1;
    if (failed) cc_ipc_abort(c);
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
  return 0;
}

void cc_ipc_destroy(cohort__cuda_comm *c) {
  if (!c->ipc) return;
  /* Rank 0's kernels may still be queued on the callers' streams behind the flags: they run before the mappings go. */
  if (c->ipc->flags && !flags_released(c)) {
    /* A stream still holds an operation on the page: unregistering it would fault that stream's context. The page
     * (and the peers' mappings, which the queued kernels use) are left to the process's end. */
    c->ipc->flags = NULL;
    if (c->ipc->imports) memset(c->ipc->imports, 0, (size_t)c->size * sizeof *c->ipc->imports);
  }
  for (size_t i = 0; i < sizeof c->ipc->users / sizeof c->ipc->users[0]; i++)
    if (c->ipc->users[i].after) cudaEventDestroy(c->ipc->users[i].after);
  if (c->ipc->imports)
    for (int r = 0; r < c->size; r++)
      for (int i = 0; i < IMPORT_SLOTS; i++)
        if (c->ipc->imports[r][i].mapped) cudaIpcCloseMemHandle(c->ipc->imports[r][i].mapped);
  unmap_flags(c->ipc);
  free(c->ipc->imports);
  free(c->ipc);
  c->ipc = NULL;
}

/* The allocation that holds ptr, and its IPC handle (asked of the driver once per allocation). */
static cohort_status describe(struct cc_ipc *ipc, const void *ptr, size_t bytes, cc_ipc_desc *d) {
  memset(d, 0, sizeof *d);
  if (!bytes) return COHORT_OK;
  CUdeviceptr base = 0;
  size_t range = 0;
  unsigned long long id = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void *values[] = {&base, &range, &id};
  CUresult r = cuPointerGetAttributes(3, attrs, values, (CUdeviceptr)(uintptr_t)ptr);
  if (r != CUDA_SUCCESS) return cc_fail(COHORT_ERR_INVALID, "device buffer %p: the driver does not know it", ptr);
  if ((uintptr_t)ptr + bytes > (uintptr_t)base + range)
    return cc_fail(COHORT_ERR_INVALID, "device buffer %p of %zu bytes runs past the end of its allocation", ptr, bytes);
  d->present = 1;
  d->buffer_id = id;
  d->base = (uint64_t)base;
  d->range = range;
  d->offset = (uint64_t)((uintptr_t)ptr - (uintptr_t)base);
  for (int i = 0; i < EXPORT_SLOTS; i++) {
    if (ipc->exports[i].buffer_id == id && ipc->exports[i].base == (uint64_t)base) {
      d->handle = ipc->exports[i].handle;
      return COHORT_OK;
    }
  }
  cudaError_t err = cudaIpcGetMemHandle(&d->handle, (void *)(uintptr_t)base);
  if (err != cudaSuccess)
    return cc_fail(COHORT_ERR_INVALID,
                   "device buffer %p cannot be shared with the other ranks through CUDA IPC (%s): memory from "
                   "cudaMalloc can, memory from cudaMallocAsync pools or cuMemCreate cannot",
                   ptr, cudaGetErrorString(err));
  export_slot *s = &ipc->exports[ipc->next_export];
  ipc->next_export = (ipc->next_export + 1) % EXPORT_SLOTS;
  s->base = (uint64_t)base;
  s->buffer_id = id;
  s->handle = d->handle;
  return COHORT_OK;
}

/* Rank 0 closes a mapping once no kernel queued for an earlier call uses it: a stream-ordered call's kernel may still
 * wait on its caller's stream, and done is written behind it. */
static void close_mapping(cohort__cuda_comm *c, import_slot *s, uint32_t number, const cohort__cuda_host *host) {
  struct cc_ipc *ipc = c->ipc;
  if (ipc->flags && s->last != number &&
      (int32_t)(__atomic_load_n(host_flag(ipc->flags, -1), __ATOMIC_ACQUIRE) - s->last) < 0) {
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", cc_last_error());
    host_wait_flag(c, -1, s->last, host); /* fails only where the flags are forced: the kernels skip then */
    cc_fail(COHORT_OK, "%s", keep);
  }
  cudaIpcCloseMemHandle(s->mapped);
  memset(s, 0, sizeof *s);
}

/* Rank 0: peer's buffer in this process. An allocation of the peer's that overlaps a cached one means the cached one
 * was freed: its mapping goes, so that it does not keep the peer's freed memory alive. */
static cohort_status map_peer(cohort__cuda_comm *c, int peer, const cc_ipc_desc *d, void **out, uint32_t number,
                              const cohort__cuda_host *host) {
  struct cc_ipc *ipc = c->ipc;
  *out = NULL;
  if (!d->present) return COHORT_OK;
  import_slot *slots = ipc->imports[peer];
  import_slot *victim = &slots[0];
  for (int i = 0; i < IMPORT_SLOTS; i++) {
    import_slot *s = &slots[i];
    if (s->mapped && s->buffer_id == d->buffer_id && s->base == d->base) {
      s->used = ++ipc->clock;
      s->last = number;
      *out = (char *)s->mapped + d->offset;
      return COHORT_OK;
    }
    if (s->mapped && s->base < d->base + d->range && d->base < s->base + s->range) close_mapping(c, s, number, host);
    if (!s->mapped || (victim->mapped && s->used < victim->used)) victim = s;
  }
  if (victim->mapped) close_mapping(c, victim, number, host);
  memset(victim, 0, sizeof *victim);
  void *mapped = NULL;
  cudaError_t err = cudaIpcOpenMemHandle(&mapped, d->handle, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess)
    return cc_fail(COHORT_ERR_SYSTEM, "rank 0 cannot map rank %d's device buffer (cudaIpcOpenMemHandle: %s)", peer,
                   cudaGetErrorString(err));
  victim->buffer_id = d->buffer_id;
  victim->base = d->base;
  victim->range = d->range;
  victim->mapped = mapped;
  victim->used = ++ipc->clock;
  victim->last = number;
  *out = (char *)mapped + d->offset;
  return COHORT_OK;
}

/* The whole collective, on rank 0, over every rank's buffers in this process. */
static cohort_status launch(cohort__cuda_comm *c, const cohort__cuda_call *call, void *const *send, void *const *recv,
                            cudaStream_t stream) {
  int n = c->size;
  /* The kernels released from their waits by an abort skip their work: a dead rank's buffers may be gone. */
  const uint32_t *skip =
      c->ipc->flags ? (const uint32_t *)(uintptr_t)(c->ipc->dflags + offsetof(ipc_flags, aborted)) : NULL;
  size_t es = cc_dtype_size(call->dtype), bytes = call->count * es;
  switch (call->coll) {
  case 1: { /* allreduce */
    cc_reduce_job job;
    memset(&job, 0, sizeof job);
    for (int r = 0; r < n; r++) {
      job.in[r] = send[r];
      job.out[r] = recv[r];
    }
    job.nin = job.nout = n;
    job.count = call->count;
    return cc_reduce(&job, 1, call->dtype, call->op, n, stream, skip);
  }
  case 2: { /* broadcast: buf is send and recv */
    cc_copy_job jobs[COHORT__CUDA_IPC_MAX_RANKS];
    int k = 0;
    for (int r = 0; r < n; r++)
      if (r != call->root) jobs[k++] = (cc_copy_job){send[call->root], recv[r], bytes};
    return cc_copy(jobs, k, stream, skip);
  }
  case 3: { /* allgather */
    cc_copy_job jobs[CC_COPY_MAX_JOBS];
    int k = 0;
    for (int q = 0; q < n; q++)
      for (int r = 0; r < n; r++) {
        char *dst = (char *)recv[q] + (size_t)r * bytes;
        if (dst != send[r]) jobs[k++] = (cc_copy_job){send[r], dst, bytes};
      }
    return cc_copy(jobs, k, stream, skip);
  }
  case 4: { /* reduce_scatter: block q of every input into rank q's output */
    cc_reduce_job jobs[COHORT__CUDA_IPC_MAX_RANKS];
    memset(jobs, 0, sizeof jobs);
    for (int q = 0; q < n; q++) {
      for (int r = 0; r < n; r++)
        jobs[q].in[r] = (const char *)send[r] + (size_t)q * bytes;
      jobs[q].out[0] = recv[q];
      jobs[q].nin = n;
      jobs[q].nout = 1;
      jobs[q].count = call->count;
    }
    return cc_reduce(jobs, n, call->dtype, call->op, n, stream, skip);
  }
  default:
    return cc_fail(COHORT_ERR_INTERNAL, "the IPC path has no collective %d", call->coll);
  }
}

/* Rank 0 tells every other rank the outcome (its message where it failed); returns st. */
static cohort_status tell_peers(cohort__cuda_comm *c, cohort_status st, const cohort__cuda_host *host) {
  cc_ipc_done done;
  memset(&done, 0, sizeof done);
  done.status = st;
  if (st != COHORT_OK) snprintf(done.message, sizeof done.message, "%s", cc_last_error());
  char keep[1024];
  snprintf(keep, sizeof keep, "%s", cc_last_error());
  for (int r = 1; r < c->size; r++) {
    cohort_status sst = host->send(host->ctx, r, &done, sizeof done);
    if (sst != COHORT_OK && st == COHORT_OK) return cc_fail(sst, "%s", "");
  }
  if (st != COHORT_OK) return cc_fail(st, "%s", keep);
  return COHORT_OK;
}

/* The peers' hellos and the mappings of their buffers (send[r], recv[r] for r >= 1). *frames_failed: the host
 * transport failed (a peer died or aborted): its own message names the rank, and nothing more can be told. */
static cohort_status gather_buffers(cohort__cuda_comm *c, const cohort__cuda_host *host, cc_ipc_hello *hello,
                                    void **send, void **recv, int *frames_failed, uint32_t number) {
  *frames_failed = 0;
  for (int r = 1; r < c->size; r++) {
    cohort_status st = host->recv(host->ctx, r, &hello[r], sizeof hello[r]);
    if (st != COHORT_OK) {
      *frames_failed = 1;
      return cc_fail(st, "%s", ""); /* the host side's message names the rank */
    }
  }
  for (int r = 1; r < c->size; r++) {
    if (hello[r].status != COHORT_OK) {
      hello[r].message[sizeof hello[r].message - 1] = '\0';
      return cc_fail((cohort_status)hello[r].status, "rank %d: %s", r, hello[r].message);
    }
  }
  for (int r = 1; r < c->size; r++) {
    CC_CHECK(map_peer(c, r, &hello[r].send, &send[r], number, host));
    CC_CHECK(map_peer(c, r, &hello[r].recv, &recv[r], number, host));
  }
  return COHORT_OK;
}

/* Every wait on the host: the input, rank 0's stream, then the frames (where the flags could not be set up). */
static cohort_status lead_on_host(cohort__cuda_comm *c, const cohort__cuda_call *call, const cohort__cuda_host *host) {
  void *send[COHORT__CUDA_IPC_MAX_RANKS], *recv[COHORT__CUDA_IPC_MAX_RANKS];
  send[0] = (void *)call->sendbuf;
  recv[0] = call->recvbuf;
  cc_ipc_hello hello[COHORT__CUDA_IPC_MAX_RANKS];
  int frames_failed;
  cohort_status st = cc_wait_input(call);
  cohort_status got = gather_buffers(c, host, hello, send, recv, &frames_failed, 0);
  if (frames_failed) return got;
  if (st == COHORT_OK) st = got;
  if (st == COHORT_OK) st = launch(c, call, send, recv, c->stream);
  if (st == COHORT_OK) {
    cudaError_t err = cudaStreamSynchronize(c->stream);
    if (err != cudaSuccess)
      st = cc_fail(COHORT_ERR_SYSTEM, "rank 0's collective kernel failed: %s", cudaGetErrorString(err));
  }
  return tell_peers(c, st, host);
}

/* The streams meet at the flags: rank 0's stream (the caller's for a stream-ordered call, else its own) waits for
 * every peer's ready flag, runs the kernel and writes done, even when something failed before it (the peers' streams
 * wait for done). A blocking call then waits for its stream on the host. */
static cohort_status lead_on_device(cohort__cuda_comm *c, const cohort__cuda_call *call, uint32_t number,
                                    const cohort__cuda_host *host) {
  struct cc_ipc *ipc = c->ipc;
  int ordered = !call->wait && !call->ready;
  cudaStream_t stream = ordered ? (cudaStream_t)call->stream : c->stream;
  void *send[COHORT__CUDA_IPC_MAX_RANKS], *recv[COHORT__CUDA_IPC_MAX_RANKS];
  send[0] = (void *)call->sendbuf;
  recv[0] = call->recvbuf;
  cc_ipc_hello hello[COHORT__CUDA_IPC_MAX_RANKS];
  int frames_failed;
  cohort_status st = ordered ? COHORT_OK : cc_wait_input(call);
  cohort_status got = gather_buffers(c, host, hello, send, recv, &frames_failed, number);
  if (st == COHORT_OK) st = got;
  int captured = ordered && capturing((CUstream)stream); /* then nothing goes on the stream, done included */
  if (captured && st == COHORT_OK) st = cc_fail(COHORT_ERR_INVALID, "%s", CAPTURED_MESSAGE);
  if (ordered && !captured) {
    for (int r = 1; r < c->size && st == COHORT_OK; r++) {
      CUresult cr = cuStreamWaitValue32(stream, device_flag(ipc, r), number, CU_STREAM_WAIT_VALUE_GEQ);
      if (cr != CUDA_SUCCESS)
        st = cc_fail(COHORT_ERR_SYSTEM, "cuStreamWaitValue32 on rank %d's flag failed (%d)", r, cr);
    }
  } else {
    /* A blocking or asynchronous call waits for the peers on the host, watching them (host_wait_flag polls the
     * host transport): rank 0's own stream then never waits for another process, and its synchronization below
     * cannot hang on a peer that died with its ready write still queued. The previous done (maybe written by
     * another stream, that of an earlier stream-ordered call) lands first, so that done never goes back. */
    for (int r = 1; r < c->size && st == COHORT_OK; r++)
      st = host_wait_flag(c, r, number, host);
    if (st == COHORT_OK) st = host_wait_flag(c, -1, number - 1, host);
  }
  int launched = 0;
  if (st == COHORT_OK) {
    st = launch(c, call, send, recv, stream);
    launched = st == COHORT_OK;
  }
  /* done only moves forward: where this call's stream is not the stream of the last done, it waits for that one
   * (already met on the same stream). With the default flags the write is fenced: the kernel's output is visible to
   * the peers before done is. */
  CUresult wr = CUDA_SUCCESS;
  if (captured) {
    host_write_flag(c, -1, number, host);
  } else {
    if (ordered) wr = cuStreamWaitValue32(stream, device_flag(ipc, -1), number - 1, CU_STREAM_WAIT_VALUE_GEQ);
    if (wr == CUDA_SUCCESS)
      wr = cuStreamWriteValue32(stream, device_flag(ipc, -1), number, CU_STREAM_WRITE_VALUE_DEFAULT);
  }
  if (wr != CUDA_SUCCESS) {
    if (st == COHORT_OK) st = cc_fail(COHORT_ERR_SYSTEM, "cuStreamWriteValue32 on rank 0's done flag failed (%d)", wr);
    if (launched) cudaStreamSynchronize(stream); /* the peers must not see done before the kernel is through */
    host_write_flag(c, -1, number, host);        /* never leave a peer's stream waiting */
  }
  if (ordered && !captured) track_stream(ipc, (CUstream)stream);
  if (frames_failed) return got;
  if (st == COHORT_OK && !ordered) {
    cudaError_t err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess)
      st = cc_fail(COHORT_ERR_SYSTEM, "rank 0's collective kernel failed: %s", cudaGetErrorString(err));
    else if (page_aborted(ipc)) /* another rank aborted after the waits above: the kernel may have skipped its work */
      st = cc_fail(COHORT_ERR_REMOTE, "the device collective was aborted by another rank (its flags were forced)");
  }
  return tell_peers(c, st, host);
}

/* A rank other than 0: its input is marked ready (by its stream, or by the host once it has waited for it), its
 * buffers go to rank 0, and it waits for rank 0's done (its stream waits, or the host). */
static cohort_status follow(cohort__cuda_comm *c, const cohort__cuda_call *call, uint32_t number,
                            const cohort__cuda_host *host) {
  struct cc_ipc *ipc = c->ipc;
  size_t send_bytes, recv_bytes;
  cc_call_bytes(call, c->size, &send_bytes, &recv_bytes);
  int on_device = ipc->flags != NULL;
  int ordered = on_device && !call->wait && !call->ready;
  cc_ipc_hello hello;
  memset(&hello, 0, sizeof hello);
  cohort_status st = COHORT_OK;
  /* The ready flag only moves forward: this call's write waits for the previous one, which another stream (an
   * earlier stream-ordered call on another stream) may still hold queued. Were it to land after this one, rank 0's
   * wait for this call would have been met early (a stale input read) and its wait for the next one never would. */
  if (ordered && capturing((CUstream)call->stream)) {
    st = cc_fail(COHORT_ERR_INVALID, "%s", CAPTURED_MESSAGE); /* nothing goes on the stream; ready from the host */
  } else if (ordered) {
    CUstream s = (CUstream)call->stream;
    if (cuStreamWaitValue32(s, device_flag(ipc, c->rank), number - 1, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS ||
        cuStreamWriteValue32(s, device_flag(ipc, c->rank), number, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS)
      st = cc_fail(COHORT_ERR_SYSTEM, "cuStreamWaitValue32/cuStreamWriteValue32 on the caller's stream failed");
    track_stream(ipc, s);
  } else {
    st = cc_wait_input(call);
    if (st == COHORT_OK && on_device) st = host_wait_flag(c, c->rank, number - 1, host);
  }
  if (on_device && !ordered && st == COHORT_OK) /* host_wait_flag above saw the previous number */
    __atomic_store_n(host_flag(ipc->flags, c->rank), number, __ATOMIC_RELEASE);
  else if (on_device && st != COHORT_OK) /* rank 0's stream must never wait for a flag nobody writes */
    host_write_flag(c, c->rank, number, host);
  int bcast = call->coll == 2;
  if (st == COHORT_OK) st = describe(ipc, bcast ? call->recvbuf : call->sendbuf, send_bytes, &hello.send);
  if (st == COHORT_OK) st = describe(ipc, call->recvbuf, recv_bytes, &hello.recv);
  hello.status = st;
  if (st != COHORT_OK) snprintf(hello.message, sizeof hello.message, "%s", cc_last_error());
  cohort_status sst = host->send(host->ctx, 0, &hello, sizeof hello);
  if (sst != COHORT_OK) return cc_fail(sst, "%s", "");
  cc_ipc_done done;
  sst = host->recv(host->ctx, 0, &done, sizeof done); /* also after a failure here: the frames stay in step */
  if (sst != COHORT_OK) return cc_fail(sst, "%s", "");
  if (st != COHORT_OK) return cc_fail(st, "%s", hello.message); /* rank 0 told the others */
  if (ordered) {
    CUresult cr = cuStreamWaitValue32((CUstream)call->stream, device_flag(ipc, -1), number, CU_STREAM_WAIT_VALUE_GEQ);
    track_stream(ipc, (CUstream)call->stream);
    if (cr != CUDA_SUCCESS && done.status == COHORT_OK)
      return cc_fail(COHORT_ERR_SYSTEM, "cuStreamWaitValue32 on rank 0's flag failed (%d)", cr);
  } else if (on_device && done.status == COHORT_OK) {
    CC_CHECK(host_wait_flag(c, -1, number, host));
  }
  done.message[sizeof done.message - 1] = '\0';
  if (done.status != COHORT_OK) return cc_fail((cohort_status)done.status, "%s (reported by rank 0)", done.message);
  return COHORT_OK;
}

cohort_status cc_ipc_run(cohort__cuda_comm *c, const cohort__cuda_call *call, const cohort__cuda_host *host) {
  struct cc_ipc *ipc = c->ipc;
  if (ipc->aborted) return cc_fail(COHORT_ERR_REMOTE, "the device collectives of this communicator were aborted");
  uint32_t number = ++ipc->number;
  if (c->rank == 0) return ipc->flags ? lead_on_device(c, call, number, host) : lead_on_host(c, call, host);
  return follow(c, call, number, host);
}
