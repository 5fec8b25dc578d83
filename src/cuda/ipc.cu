/*
 * ipc.cu: the path for ranks of one host that share one GPU (NCCL refuses them: "Duplicate GPU detected").
 *
 * Rank 0 leads. Every other rank waits until its input is ready, then sends rank 0 the CUDA IPC handles of its
 * buffers; rank 0 maps them (once per allocation: the mappings are cached by the driver's buffer id), runs the whole
 * collective in one launch of its own kernels, waits for it, and tells every rank the outcome. On one GPU the ranks'
 * kernels would only take turns (time slicing between processes), so one launch of rank 0's does all the work and
 * moves the fewest bytes: each input read once, each output written once. Nothing waits inside a kernel: every wait
 * is on the host, in frames of the host transport, which fail naming the rank that died or called something else.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
} import_slot;

struct cc_ipc {
  export_slot exports[EXPORT_SLOTS];
  int next_export;
  import_slot (*imports)[IMPORT_SLOTS]; /* [size][IMPORT_SLOTS] on rank 0 */
  uint64_t clock;
};

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
  return COHORT_OK;
}

void cc_ipc_destroy(cohort__cuda_comm *c) {
  if (!c->ipc) return;
  if (c->ipc->imports)
    for (int r = 0; r < c->size; r++)
      for (int i = 0; i < IMPORT_SLOTS; i++)
        if (c->ipc->imports[r][i].mapped) cudaIpcCloseMemHandle(c->ipc->imports[r][i].mapped);
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

/* Rank 0: peer's buffer in this process. An allocation of the peer's that overlaps a cached one means the cached one
 * was freed: its mapping goes, so that it does not keep the peer's freed memory alive. */
static cohort_status map_peer(struct cc_ipc *ipc, int peer, const cc_ipc_desc *d, void **out) {
  *out = NULL;
  if (!d->present) return COHORT_OK;
  import_slot *slots = ipc->imports[peer];
  import_slot *victim = &slots[0];
  for (int i = 0; i < IMPORT_SLOTS; i++) {
    import_slot *s = &slots[i];
    if (s->mapped && s->buffer_id == d->buffer_id && s->base == d->base) {
      s->used = ++ipc->clock;
      *out = (char *)s->mapped + d->offset;
      return COHORT_OK;
    }
    if (s->mapped && s->base < d->base + d->range && d->base < s->base + s->range) {
      cudaIpcCloseMemHandle(s->mapped);
      memset(s, 0, sizeof *s);
    }
    if (!s->mapped || (victim->mapped && s->used < victim->used)) victim = s;
  }
  if (victim->mapped) cudaIpcCloseMemHandle(victim->mapped);
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
  *out = (char *)mapped + d->offset;
  return COHORT_OK;
}

/* The whole collective, on rank 0, over every rank's buffers in this process. */
static cohort_status launch(cohort__cuda_comm *c, const cohort__cuda_call *call, void *const *send, void *const *recv) {
  int n = c->size;
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
    return cc_reduce(&job, 1, call->dtype, call->op, n, c->stream);
  }
  case 2: { /* broadcast: buf is send and recv */
    cc_copy_job jobs[COHORT__CUDA_IPC_MAX_RANKS];
    int k = 0;
    for (int r = 0; r < n; r++)
      if (r != call->root) jobs[k++] = (cc_copy_job){send[call->root], recv[r], bytes};
    return cc_copy(jobs, k, c->stream);
  }
  case 3: { /* allgather */
    cc_copy_job jobs[CC_COPY_MAX_JOBS];
    int k = 0;
    for (int q = 0; q < n; q++)
      for (int r = 0; r < n; r++) {
        char *dst = (char *)recv[q] + (size_t)r * bytes;
        if (dst != send[r]) jobs[k++] = (cc_copy_job){send[r], dst, bytes};
      }
    return cc_copy(jobs, k, c->stream);
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
    return cc_reduce(jobs, n, call->dtype, call->op, n, c->stream);
  }
  default:
    return cc_fail(COHORT_ERR_INTERNAL, "the IPC path has no collective %d", call->coll);
  }
}

static cohort_status lead(cohort__cuda_comm *c, const cohort__cuda_call *call, const cohort__cuda_host *host) {
  struct cc_ipc *ipc = c->ipc;
  void *send[COHORT__CUDA_IPC_MAX_RANKS], *recv[COHORT__CUDA_IPC_MAX_RANKS];
  send[0] = (void *)call->sendbuf;
  recv[0] = call->recvbuf;
  cc_ipc_hello hello[COHORT__CUDA_IPC_MAX_RANKS];
  for (int r = 1; r < c->size; r++) {
    cohort_status st = host->recv(host->ctx, r, &hello[r], sizeof hello[r]);
    if (st != COHORT_OK) return cc_fail(st, "%s", ""); /* the host side's message names the rank */
  }
  cohort_status st = COHORT_OK;
  for (int r = 1; r < c->size && st == COHORT_OK; r++) {
    st = map_peer(ipc, r, &hello[r].send, &send[r]);
    if (st == COHORT_OK) st = map_peer(ipc, r, &hello[r].recv, &recv[r]);
  }
  if (st == COHORT_OK) st = launch(c, call, send, recv);
  if (st == COHORT_OK) {
    cudaError_t err = cudaStreamSynchronize(c->stream);
    if (err != cudaSuccess)
      st = cc_fail(COHORT_ERR_SYSTEM, "rank 0's collective kernel failed: %s", cudaGetErrorString(err));
  }
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

cohort_status cc_ipc_run(cohort__cuda_comm *c, const cohort__cuda_call *call, const cohort__cuda_host *host) {
  size_t send_bytes, recv_bytes;
  cc_call_bytes(call, c->size, &send_bytes, &recv_bytes);
  CC_CHECK(cc_wait_input(call));
  if (c->rank == 0) return lead(c, call, host);
  cc_ipc_hello hello;
  memset(&hello, 0, sizeof hello);
  int bcast = call->coll == 2;
  CC_CHECK(describe(c->ipc, bcast ? call->recvbuf : call->sendbuf, send_bytes, &hello.send));
  CC_CHECK(describe(c->ipc, call->recvbuf, recv_bytes, &hello.recv));
  cohort_status st = host->send(host->ctx, 0, &hello, sizeof hello);
  if (st != COHORT_OK) return cc_fail(st, "%s", "");
  cc_ipc_done done;
  st = host->recv(host->ctx, 0, &done, sizeof done);
  if (st != COHORT_OK) return cc_fail(st, "%s", "");
  if (done.status != COHORT_OK) return cc_fail((cohort_status)done.status, "%s (reported by rank 0)", done.message);
  return COHORT_OK;
}
