/*
 * nccl.cu: the path for one GPU per rank: NCCL's kernels under cohort's control plane.
 *
 * libnccl.so.2 is opened with dlopen (a process that already holds torch's NCCL gets that one), so the plugin loads
 * where NCCL is absent. The unique id travels over cohort's authenticated links. Before each collective the ranks
 * compare their calls over the host transport (src/coll/agree.c, before the call reaches this plugin; where
 * COHORT_CALL_CHECK turned that off, a ring of small frames here: any two neighbours that disagree are a mismatch, so
 * all agree when no neighbour does) and only then queue NCCL's kernel: a mismatch never reaches NCCL, where it would
 * hang or corrupt. The communicator is non-blocking, so that a wait can watch the peers: a call that
 * waits polls its event and, every millisecond, the host transport (a rank that died or aborted) and NCCL's own
 * error; either aborts the NCCL communicator (ncclCommAbort) so that no kernel waits for a rank that is gone.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/internal.h"

#ifdef COHORT_HAVE_NCCL_H
#include <nccl.h>

typedef struct nccl_fns {
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommFinalize)(ncclComm_t);
  ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  const char *(*GetErrorString)(ncclResult_t);
  const char *(*GetLastError)(ncclComm_t);
  ncclResult_t (*GetVersion)(int *);
} nccl_fns;

static nccl_fns fns;
static int loaded = -1; /* -1 not tried, 0 failed, 1 loaded */
static char load_error[512];
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;

static int load(void) {
  pthread_mutex_lock(&load_mu);
  if (loaded < 0) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
    loaded = 0;
    if (!h) {
      const char *why = dlerror();
      snprintf(load_error, sizeof load_error, "libnccl.so.2 does not load here (%s)", why ? why : "?");
    } else {
#define SYM(name)                                                                                                      \
  do {                                                                                                                 \
    if (!(*(void **)&fns.name = dlsym(h, "nccl" #name)))                                                               \
      snprintf(load_error, sizeof load_error, "libnccl has no nccl" #name);                                            \
  } while (0)
      SYM(GetUniqueId);
      SYM(CommInitRankConfig);
      SYM(CommGetAsyncError);
      SYM(CommAbort);
      SYM(CommDestroy);
      SYM(CommFinalize);
      SYM(AllReduce);
      SYM(Broadcast);
      SYM(AllGather);
      SYM(ReduceScatter);
      SYM(GetErrorString);
      SYM(GetLastError);
      SYM(GetVersion);
#undef SYM
      if (!load_error[0]) loaded = 1;
    }
  }
  int ok = loaded;
  pthread_mutex_unlock(&load_mu);
  return ok;
}

int cc_nccl_loadable(void) { return load(); }

/* cc_nccl_abort may come from another thread (cohort_comm_abort, documented as callable from any) while the
 * collective's own thread polls the communicator: guard makes the two never overlap, so that the abort happens once
 * and nothing reads the communicator that ncclCommAbort has freed. */
struct cc_nccl {
  ncclComm_t comm;
  int aborted; /* under guard */
  pthread_mutex_t guard;
  /* What a waiting call (blocking, or asynchronous with a handle) polls: made with the communicator and kept, since
   * creating and destroying one cost 0.66 us a call on the GPU host (gpu_coll's host costs, 2026-11-27), a tenth of
   * a small allreduce. One suffices: the communicator runs one call at a time (src/comm/work.c). */
  cudaEvent_t done;
};

/* ncclCommGetAsyncError under the guard; 0 once the communicator is aborted (it is gone: nothing to ask). */
static int query(cohort__cuda_comm *c, ncclResult_t *r, ncclResult_t *state) {
  pthread_mutex_lock(&c->nccl->guard);
  int live = !c->nccl->aborted;
  if (live) *r = fns.CommGetAsyncError(c->nccl->comm, state);
  pthread_mutex_unlock(&c->nccl->guard);
  return live;
}

static cohort_status aborted_error(const char *what) {
  return cc_fail(COHORT_ERR_REMOTE, "%s: the NCCL communicator was aborted", what);
}

static cohort_status nccl_fail(cohort__cuda_comm *c, ncclResult_t r, const char *what) {
  const char *detail = "";
  if (c->nccl) {
    pthread_mutex_lock(&c->nccl->guard);
    if (!c->nccl->aborted && c->nccl->comm) detail = fns.GetLastError(c->nccl->comm);
    pthread_mutex_unlock(&c->nccl->guard);
  }
  return cc_fail(COHORT_ERR_SYSTEM, "%s: %s%s%s", what, fns.GetErrorString(r), detail && *detail ? ": " : "",
                 detail ? detail : "");
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(void) {
  struct timespec ts = {0, 1000000};
  nanosleep(&ts, NULL);
}

/* Until NCCL's non-blocking call completes, watching the peers; a failure aborts the NCCL communicator. */
static cohort_status settle(cohort__cuda_comm *c, const cohort__cuda_host *host, const char *what, double limit_s) {
  double deadline = now_s() + limit_s;
  for (;;) {
    ncclResult_t state = ncclSuccess, r = ncclSuccess;
    if (!query(c, &r, &state)) return aborted_error(what);
    if (r != ncclSuccess) {
      cohort_status st = nccl_fail(c, r, what);
      cc_nccl_abort(c); /* whatever it is doing, it cannot be asked: it must not be finalized later */
      return st;
    }
    if (state == ncclSuccess) return COHORT_OK;
    if (state != ncclInProgress) {
      cohort_status st = nccl_fail(c, state, what);
      cc_nccl_abort(c);
      return st;
    }
    if (host->size > 1) {
      cohort_status st = host->poll(host->ctx);
      if (st != COHORT_OK) {
        cc_nccl_abort(c);
        return cc_fail(st, "%s", "");
      }
    }
    if (now_s() > deadline) {
      cc_nccl_abort(c);
      return cc_fail(COHORT_ERR_TIMEOUT, "%s: NCCL did not finish within %.0f s", what, limit_s);
    }
    sleep_ms();
  }
}

cohort_status cc_nccl_create(cohort__cuda_comm *c, const cohort__cuda_rank_info *infos, const cohort__cuda_host *host) {
  if (!load()) return cc_fail(COHORT_ERR_INVALID, "the NCCL path needs NCCL: %s", load_error);
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (c->rank == 0) {
    ncclResult_t r = fns.GetUniqueId(&id);
    if (r != ncclSuccess) return nccl_fail(c, r, "ncclGetUniqueId");
    for (int p = 1; p < c->size; p++) {
      cohort_status st = host->send(host->ctx, p, &id, sizeof id);
      if (st != COHORT_OK) return cc_fail(st, "%s", "");
    }
  } else {
    cohort_status st = host->recv(host->ctx, 0, &id, sizeof id);
    if (st != COHORT_OK) return cc_fail(st, "%s", "");
  }
  c->nccl = (struct cc_nccl *)calloc(1, sizeof *c->nccl);
  if (!c->nccl) return cc_fail(COHORT_ERR_SYSTEM, "out of memory");
  pthread_mutex_init(&c->nccl->guard, NULL);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = fns.CommInitRankConfig(&c->nccl->comm, c->size, id, c->rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    cohort_status st = nccl_fail(c, r, "ncclCommInitRankConfig");
    cc_nccl_abort(c); /* NCCL may have made the communicator before it failed */
    cc_nccl_destroy(c);
    return st;
  }
  cohort_status st = settle(c, host, "ncclCommInitRankConfig", 300);
  /* Made here, on the communicator's device (plugin.cu's comm_create entered it), not at a first wait that might run
   * with another device current. */
  if (st == COHORT_OK && cudaEventCreateWithFlags(&c->nccl->done, cudaEventDisableTiming) != cudaSuccess)
    st = cc_fail(COHORT_ERR_SYSTEM, "cudaEventCreate for the NCCL path's waits failed");
  if (st != COHORT_OK) {
    cc_nccl_destroy(c);
    return st;
  }
  return COHORT_OK;
}

static int nccl_type(cohort_dtype d, ncclDataType_t *t) {
  switch (d) {
  case COHORT_F32:
    *t = ncclFloat32;
    return 1;
  case COHORT_F64:
    *t = ncclFloat64;
    return 1;
  case COHORT_F16:
    *t = ncclFloat16;
    return 1;
  case COHORT_BF16:
    *t = ncclBfloat16;
    return 1;
  case COHORT_I32:
    *t = ncclInt32;
    return 1;
  case COHORT_I64:
    *t = ncclInt64;
    return 1;
  case COHORT_U8:
    *t = ncclUint8;
    return 1;
  default:
    return 0;
  }
}

static ncclRedOp_t nccl_op(cohort_op op, int is_float) {
  switch (op) {
  case COHORT_PROD:
    return ncclProd;
  case COHORT_MIN:
    return ncclMin;
  case COHORT_MAX:
    return ncclMax;
  case COHORT_AVG:
    return is_float ? ncclAvg : ncclSum; /* integers: the sum, divided after (rounding toward zero, as the CPU) */
  default:
    return ncclSum;
  }
}

cohort_status cc_nccl_run(cohort__cuda_comm *c, const cohort__cuda_call *call, const cohort__cuda_host *host) {
  if (!c->nccl) return cc_fail(COHORT_ERR_REMOTE, "the NCCL communicator was aborted");
  ncclDataType_t type;
  if (!nccl_type(call->dtype, &type)) return cc_fail(COHORT_ERR_INVALID, "NCCL has no dtype %d", (int)call->dtype);
  /* Every rank's call against its neighbours' before any kernel is queued, unless the ranks compared their calls
   * already: the ring would be a second host round trip per call, the NCCL path's cost for small vectors. */
  if (c->size > 1 && !call->agreed) {
    uint8_t token = 1, got = 0;
    cohort_status st = host->send(host->ctx, (c->rank + 1) % c->size, &token, 1);
    if (st == COHORT_OK) st = host->recv(host->ctx, (c->rank + c->size - 1) % c->size, &got, 1);
    if (st != COHORT_OK) return cc_fail(st, "%s", "");
  }
  cudaStream_t stream = (cudaStream_t)call->stream;
  if (call->ready) { /* an asynchronous call: its input is ready at the event, on the comm's own stream */
    stream = c->stream;
    CC_TRY(cudaStreamWaitEvent(stream, (cudaEvent_t)call->ready, 0));
  }
  int is_float =
      call->dtype == COHORT_F32 || call->dtype == COHORT_F64 || call->dtype == COHORT_F16 || call->dtype == COHORT_BF16;
  /* One rank: the average is the value. (NCCL 2.28's ncclAvg on one rank left the elements past 2^20 of a 2^20 + 3
   * float vector unwritten on the GPU host: tests/gpu, 2026-11-26.) */
  ncclRedOp_t op = c->size == 1 && call->op == COHORT_AVG ? ncclSum : nccl_op(call->op, is_float);
  ncclResult_t r = ncclSuccess;
  const char *what = "the NCCL call";
  /* Queued under the guard: an abort from another thread comes before (the call is refused) or after (the queued
   * kernels are ended by it), never while NCCL reads the communicator. */
  pthread_mutex_lock(&c->nccl->guard);
  int aborted = c->nccl->aborted;
  if (!aborted) {
    switch (call->coll) {
    case 1:
      what = "ncclAllReduce";
      r = fns.AllReduce(call->sendbuf, call->recvbuf, call->count, type, op, c->nccl->comm, stream);
      break;
    case 2:
      what = "ncclBroadcast";
      r = fns.Broadcast(call->recvbuf, call->recvbuf, call->count, type, call->root, c->nccl->comm, stream);
      break;
    case 3:
      what = "ncclAllGather";
      r = fns.AllGather(call->sendbuf, call->recvbuf, call->count, type, c->nccl->comm, stream);
      break;
    case 4:
      what = "ncclReduceScatter";
      r = fns.ReduceScatter(call->sendbuf, call->recvbuf, call->count, type, op, c->nccl->comm, stream);
      break;
    default:
      pthread_mutex_unlock(&c->nccl->guard);
      return cc_fail(COHORT_ERR_INTERNAL, "the NCCL path has no collective %d", call->coll);
    }
  }
  pthread_mutex_unlock(&c->nccl->guard);
  if (aborted) return aborted_error(what);
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(c, r, what);
  if (r == ncclInProgress) CC_CHECK(settle(c, host, what, host->timeout_s > 0 ? host->timeout_s : 600));
  if (call->op == COHORT_AVG && !is_float && call->coll != 2 && call->coll != 3 && c->size > 1) {
    cc_reduce_job job;
    memset(&job, 0, sizeof job);
    job.in[0] = job.out[0] = call->recvbuf;
    job.nin = job.nout = 1;
    job.count = call->count;
    CC_CHECK(cc_reduce(&job, 1, call->dtype, COHORT_AVG, c->size, stream, NULL));
  }
  if (!call->wait && !call->ready) return COHORT_OK; /* stream-ordered: queued is done */
  cudaEvent_t done = c->nccl->done;
  cudaError_t err = cudaEventRecord(done, stream);
  double last_poll = now_s(), deadline = host->timeout_s > 0 ? last_poll + host->timeout_s : 0;
  while (err == cudaSuccess) {
    err = cudaEventQuery(done);
    if (err == cudaSuccess) break;
    if (err != cudaErrorNotReady) break;
    err = cudaSuccess;
    if (now_s() - last_poll > 1e-3) { /* the peers and NCCL, once a millisecond */
      last_poll = now_s();
      ncclResult_t state = ncclSuccess, r = ncclSuccess;
      if (!query(c, &r, &state)) return aborted_error(what);
      if (r != ncclSuccess) state = r;
      cohort_status st = state != ncclSuccess && state != ncclInProgress ? nccl_fail(c, state, what)
                         : c->size > 1                                   ? host->poll(host->ctx)
                                                                         : COHORT_OK;
      if (st == COHORT_OK && deadline > 0 && last_poll > deadline)
        st = cc_fail(COHORT_ERR_TIMEOUT, "%s did not finish within %.0f s (COHORT_OP_TIMEOUT)", what, host->timeout_s);
      if (st != COHORT_OK) {
        if ((state == ncclSuccess || state == ncclInProgress) && st != COHORT_ERR_TIMEOUT) cc_fail(st, "%s", "");
        cc_nccl_abort(c);
        return st;
      }
    }
  }
  if (err != cudaSuccess)
    return cc_fail(COHORT_ERR_SYSTEM, "%s failed on the device: %s", what, cudaGetErrorString(err));
  return COHORT_OK;
}

void cc_nccl_abort(cohort__cuda_comm *c) {
  if (!c->nccl) return;
  pthread_mutex_lock(&c->nccl->guard);
  if (!c->nccl->aborted) {
    c->nccl->aborted = 1;
    if (c->nccl->comm) fns.CommAbort(c->nccl->comm);
    c->nccl->comm = NULL;
  }
  pthread_mutex_unlock(&c->nccl->guard);
}

void cc_nccl_destroy(cohort__cuda_comm *c) {
  if (!c->nccl) return;
  if (c->nccl->comm && !c->nccl->aborted) {
    /* Finalize flushes the queued work (non-blocking: it may return before; wait for it a while, then destroy). A
     * finalize that failed or did not settle in 10 s (a peer gone: the flush waits on it) is aborted instead:
     * destroying a communicator that has not finalized may wait on that peer for ever. */
    ncclResult_t r = fns.CommFinalize(c->nccl->comm), state = r == ncclInProgress ? ncclInProgress : r;
    for (double limit = now_s() + 10; state == ncclInProgress && now_s() < limit;) {
      if (fns.CommGetAsyncError(c->nccl->comm, &state) != ncclSuccess) state = ncclInternalError;
      if (state == ncclInProgress) sleep_ms();
    }
    if (state == ncclSuccess)
      fns.CommDestroy(c->nccl->comm);
    else
      fns.CommAbort(c->nccl->comm);
  }
  if (c->nccl->done) cudaEventDestroy(c->nccl->done);
  pthread_mutex_destroy(&c->nccl->guard);
  free(c->nccl);
  c->nccl = NULL;
}

#else /* built without nccl.h */

int cc_nccl_loadable(void) { return 0; }
cohort_status cc_nccl_create(cohort__cuda_comm *c, const cohort__cuda_rank_info *infos, const cohort__cuda_host *host) {
  return cc_fail(COHORT_ERR_INVALID, "this build of cohort has no NCCL path (nccl.h was not found when it was built)");
}
cohort_status cc_nccl_run(cohort__cuda_comm *c, const cohort__cuda_call *call, const cohort__cuda_host *host) {
  return cc_fail(COHORT_ERR_INVALID, "this build of cohort has no NCCL path");
}
void cc_nccl_abort(cohort__cuda_comm *c) {}
void cc_nccl_destroy(cohort__cuda_comm *c) {}

#endif
