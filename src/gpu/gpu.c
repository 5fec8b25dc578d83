/* gpu.c: device collectives, the host side: the plugin, telling device memory apart, the path, the staged path. */
#include "gpu/gpu.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "core/plugin.h"
#include "gpu/cuda_plugin.h"
#include "transport/frame.h"

_Static_assert(sizeof(cohort__cuda_rank_info) <= COHORT__FRAME_CONTROL_MAX, "a rank's description fits a frame");

struct cohort__gpu {
  const cohort__cuda_api *api;
  cohort__cuda_path path;
  int device;
  cohort__cuda_comm *dev; /* NULL on the staged path */
  /* The staged path's page-locked host buffers. */
  void *host_send, *host_recv;
  size_t host_send_len, host_recv_len;
};

/* ---- is CUDA in this process at all? ---- */

static int count_loads(struct dl_phdr_info *info, size_t size, void *arg) {
  *(unsigned long long *)arg = info->dlpi_adds;
  return 1; /* the first object tells the count of loads; no need to walk the rest */
}

static int env_hides_gpus(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  return v && (v[0] == '\0' || v[0] == '-');
}

/* CUDA_VISIBLE_DEVICES="" (or "-1") hides every GPU from the driver: then no buffer can be device memory either, and
 * cohort need not ask the driver (nor load its plugin) to know it. Scripts hide the GPU so to run CPU-only work on a
 * GPU host; on torch 2.11 there (2026-11-27) a CPU-only test (PowerSGD, tests/python/test_dist_ddp.py) hung in such a
 * process once torch had loaded the driver, a path where cohort then loaded its plugin and called cuInit. The cause
 * was not found in that lease; the driver stays out of such a process now. The driver reads the variable when it
 * starts, which cohort cannot see without calling it: the variable is read when the driver is first seen loaded
 * (about when whoever loaded it started it), kept, and read again in a forked child. */
static _Atomic int hidden_when_seen = -1;

static int gpus_hidden(void) {
  int h = atomic_load_explicit(&hidden_when_seen, memory_order_relaxed);
  if (h < 0) {
    h = env_hides_gpus();
    atomic_store_explicit(&hidden_when_seen, h, memory_order_relaxed);
  }
  return h;
}

/* No buffer can be device memory in a process that never loaded the CUDA driver: a look at whether libcuda.so.1 is
 * loaded settles it, and is only repeated when some library was loaded since the last look. */
static int cuda_in_process(void) {
  static _Atomic int seen;
  static _Atomic unsigned long long looked_at_adds = ~0ull;
  if (atomic_load_explicit(&seen, memory_order_relaxed)) return 1;
  unsigned long long adds = 0;
  dl_iterate_phdr(count_loads, &adds);
  if (adds == atomic_load_explicit(&looked_at_adds, memory_order_relaxed)) return 0;
  atomic_store_explicit(&looked_at_adds, adds, memory_order_relaxed);
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return 0;
  dlclose(h);
  atomic_store(&seen, 1);
  return 1;
}

/* ---- a process forked from one that had loaded CUDA ---- */

/* The CUDA driver does not survive fork(): a child of a process that had loaded it must not touch it again. On the
 * GPU host (torch 2.11, 2026-11-27) cuInit crashed with SIGSEGV in every rank that torch's own test suite forked from
 * a parent whose torch had loaded the driver, at the ranks' first collective on CPU tensors. torch refuses CUDA in
 * such a child ("Cannot re-initialize CUDA in forked subprocess"); cohort treats every buffer there as host memory
 * and refuses the device calls with the reason. The handlers are registered when cohort loads, so they see every
 * fork of a process that loaded cohort first; a child forked before cohort was loaded cannot be told apart. */
static _Atomic int cuda_at_fork, cuda_inherited;

static void before_fork(void) { atomic_store(&cuda_at_fork, cuda_in_process()); }

static void in_forked_child(void) {
  if (atomic_load(&cuda_at_fork)) atomic_store(&cuda_inherited, 1);
  atomic_store(&hidden_when_seen, -1);
}

__attribute__((constructor)) static void watch_forks(void) { pthread_atfork(before_fork, NULL, in_forked_child); }

#define FORKED_AFTER_CUDA                                                                                              \
  "this process was forked from one that had loaded the CUDA driver, which does not survive fork(): start it with "    \
  "exec or multiprocessing's \"spawn\" to use the GPU"

#define GPUS_HIDDEN "CUDA_VISIBLE_DEVICES hides every GPU from this process"

/* ---- the plugin ---- */

static const cohort__cuda_api *plugin(void) {
  static const cohort__cuda_api *_Atomic loaded; /* every device collective asks: no lock once it is known */
  const cohort__cuda_api *known = atomic_load_explicit(&loaded, memory_order_acquire);
  if (known) return known;
  void *entry = NULL;
  if (cohort__plugin_load(COHORT__CUDA_PLUGIN_FILE, "COHORT_CUDA_LIBRARY", COHORT__CUDA_PLUGIN_ENTRY, &entry) !=
      COHORT_OK)
    return NULL;
  const cohort__cuda_api *api = ((cohort__cuda_entry_fn)entry)();
  if (!api || api->version != COHORT__CUDA_PLUGIN_VERSION) {
    cohort__error(COHORT_ERR_INVALID, "%s is of another version of cohort (plugin version %d, this library %d)",
                  COHORT__CUDA_PLUGIN_FILE, api ? api->version : -1, COHORT__CUDA_PLUGIN_VERSION);
    return NULL;
  }
  atomic_store_explicit(&loaded, api, memory_order_release);
  return api;
}

/* The plugin's message for a failure of its own; a failure of the host side's frames kept ours already. */
static cohort_status plugin_error(const cohort__cuda_api *api, cohort_status st) {
  const char *m = api->last_error();
  if (m && *m) cohort__error(st, "%s", m);
  return st;
}

int cohort__gpu_available(void) {
  if (atomic_load(&cuda_inherited)) {
    cohort__error(COHORT_ERR_INVALID, "no CUDA: %s", FORKED_AFTER_CUDA);
    return 0;
  }
  if (cuda_in_process() ? gpus_hidden() : env_hides_gpus()) {
    cohort__error(COHORT_ERR_INVALID, "no GPU: %s", GPUS_HIDDEN);
    return 0;
  }
  const cohort__cuda_api *api = plugin();
  if (!api) return 0;
  cohort_status st = api->available();
  if (st != COHORT_OK) {
    plugin_error(api, st);
    return 0;
  }
  return 1;
}

/* Where the plugin does not load in a process that runs CUDA, the driver itself still tells device memory apart,
 * so that such a buffer gets a clear error rather than a crash in a host copy. The values are the driver API's
 * (cuda.h: CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, CU_POINTER_ATTRIBUTE_IS_MANAGED = 8, CU_MEMORYTYPE_DEVICE = 2). */
static int driver_says_device(const void *ptr) {
  static int (*get)(void *, int, unsigned long long);
  if (!get) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return 0;
    *(void **)&get = dlsym(h, "cuPointerGetAttribute");
    if (!get) return 0;
  }
  unsigned int type = 0, managed = 0;
  if (get(&type, 2, (unsigned long long)(uintptr_t)ptr) != 0) return 0;
  if (get(&managed, 8, (unsigned long long)(uintptr_t)ptr) != 0) managed = 0;
  return type == 2 && !managed;
}

cohort_status cohort__gpu_classify(cohort__coll_args *a, int stream_call) {
  a->on_device = 0;
  a->device = -1;
  if (cohort__coll_flags(a->coll) & COHORT__CALL_NO_DATA) return COHORT_OK;
  const char *fn = cohort__coll_api_name(a->coll);
  if (!cuda_in_process()) {
    if (stream_call)
      return cohort__error(COHORT_ERR_INVALID,
                           "%s_stream: this process has not loaded CUDA, so its buffers are host memory: call %s", fn,
                           fn);
    return COHORT_OK;
  }
  if (atomic_load(&cuda_inherited))
    return stream_call ? cohort__error(COHORT_ERR_INVALID, "%s_stream: %s", fn, FORKED_AFTER_CUDA) : COHORT_OK;
  if (gpus_hidden())
    return stream_call ? cohort__error(COHORT_ERR_INVALID, "%s_stream: %s: call %s", fn, GPUS_HIDDEN, fn) : COHORT_OK;
  const cohort__cuda_api *api = plugin();
  if (!api) {
    char why[1024];
    snprintf(why, sizeof why, "%s", cohort_last_error());
    if ((a->sendbuf && driver_says_device(a->sendbuf)) || (a->recvbuf && driver_says_device(a->recvbuf)) || stream_call)
      return cohort__error(COHORT_ERR_INVALID, "%s: device memory needs cohort's CUDA plugin, which does not load: %s",
                           fn, why);
    cohort__error_clear();
    return COHORT_OK;
  }
  int ds = a->sendbuf ? api->device_of(a->sendbuf) : -2;
  int dr = a->recvbuf == a->sendbuf ? ds : a->recvbuf ? api->device_of(a->recvbuf) : -2;
  if (ds == -2) ds = dr;
  if (dr == -2) dr = ds;
  if (ds != dr) {
    if (ds >= 0 && dr >= 0)
      return cohort__error(COHORT_ERR_INVALID, "%s: sendbuf is on device %d and recvbuf on device %d: use one device",
                           fn, ds, dr);
    return cohort__error(COHORT_ERR_INVALID, "%s: %s is device memory (device %d) and %s host memory: use one kind", fn,
                         ds >= 0 ? "sendbuf" : "recvbuf", ds >= 0 ? ds : dr, ds >= 0 ? "recvbuf" : "sendbuf");
  }
  if (ds < 0) {
    if (stream_call && a->count > 0)
      return cohort__error(COHORT_ERR_INVALID, "%s_stream: the buffers are host memory: call %s", fn, fn);
    if (!stream_call) return COHORT_OK;
    ds = 0; /* a _stream call with no data */
  }
  /* The rooted and personalized collectives, the dtypes i8, i16 and bool and the bitwise ops have no device path
   * yet (src/gpu would need them): refused here, before anything is sent. */
  unsigned f = cohort__coll_flags(a->coll);
  if (a->coll >= COHORT__COLL_REDUCE)
    return cohort__error(COHORT_ERR_INVALID, "%s: not on device memory yet (copy the buffers to host memory)", fn);
  if (a->dtype >= COHORT_I8 || ((f & COHORT__CALL_OP) && a->op >= COHORT_BAND))
    return cohort__error(COHORT_ERR_INVALID, "%s: %s %s: not on device memory yet (copy the buffers to host memory)",
                         fn, cohort_dtype_name(a->dtype), f & COHORT__CALL_OP ? cohort_op_name(a->op) : "");
  cohort_status st = api->available();
  if (st != COHORT_OK) return plugin_error(api, st);
  a->on_device = 1;
  a->device = ds;
  return COHORT_OK;
}

cohort_status cohort__gpu_mark_ready(cohort__coll_args *a) {
  const cohort__cuda_api *api = plugin();
  if (!api) return COHORT_ERR_INVALID; /* classify loaded it: unreachable */
  cohort_status st = api->record_ready(a->device, a->stream, &a->ready);
  return st == COHORT_OK ? st : plugin_error(api, st);
}

void cohort__gpu_release_ready(cohort__coll_args *a) {
  if (!a->ready) return;
  const cohort__cuda_api *api = plugin();
  if (api) api->release_ready(a->ready);
  a->ready = NULL;
}

/* ---- the host side's frames, for the plugin ---- */

static cohort_status host_send(void *ctx, int peer, const void *buf, size_t bytes) {
  cohort__transport *t = ctx;
  cohort__req req;
  memset(&req, 0, sizeof req);
  COHORT_CHECK(t->ops->isend(t, peer, buf, bytes, &req));
  return t->ops->wait(t, &req);
}

static cohort_status host_recv(void *ctx, int peer, void *buf, size_t bytes) {
  cohort__transport *t = ctx;
  cohort__req req;
  memset(&req, 0, sizeof req);
  COHORT_CHECK(t->ops->irecv(t, peer, buf, bytes, &req));
  return t->ops->wait(t, &req);
}

static cohort_status host_poll(void *ctx) {
  cohort__transport *t = ctx;
  return t->ops->poll ? t->ops->poll(t) : COHORT_OK;
}

static cohort__cuda_host host_of(cohort__transport *t, const cohort__config *cfg) {
  return (cohort__cuda_host){.ctx = t,
                             .rank = t->rank,
                             .size = t->size,
                             .send = host_send,
                             .recv = host_recv,
                             .poll = host_poll,
                             .timeout_s = (double)cfg->op_timeout_s};
}

/* Every rank's bytes from every rank (small: the ranks' descriptions at the first device collective). */
static cohort_status exchange(cohort__transport *t, const void *mine, void *all, size_t bytes) {
  int n = t->size, me = t->rank;
  memcpy((char *)all + (size_t)me * bytes, mine, bytes);
  cohort__req *reqs = calloc((size_t)2 * (size_t)n, sizeof *reqs);
  if (!reqs) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort_status st = COHORT_OK;
  for (int p = 0; p < n && st == COHORT_OK; p++) {
    if (p == me) continue;
    st = t->ops->irecv(t, p, (char *)all + (size_t)p * bytes, bytes, &reqs[2 * p]);
    if (st == COHORT_OK) st = t->ops->isend(t, p, mine, bytes, &reqs[2 * p + 1]);
  }
  if (st == COHORT_OK) st = t->ops->wait(t, NULL);
  free(reqs);
  return st;
}

/* ---- the path ---- */

static const char *path_name(cohort__cuda_path p) {
  switch (p) {
  case COHORT__CUDA_PATH_NCCL:
    return "nccl";
  case COHORT__CUDA_PATH_IPC:
    return "cuda-ipc";
  case COHORT__CUDA_PATH_STAGED:
    return "staged";
  default:
    return NULL;
  }
}

const char *cohort__gpu_path_name(const cohort__gpu *g) { return g ? path_name(g->path) : NULL; }

cohort_status cohort__gpu_choose_path(const cohort__cuda_rank_info *infos, int n, const char *forced,
                                      cohort__cuda_path *out) {
  int one_host = 1, one_gpu = 1, distinct = 1, nccl = 1;
  for (int r = 0; r < n; r++) {
    one_host &= infos[r].host_hash == infos[0].host_hash;
    one_gpu &= one_host && memcmp(infos[r].uuid, infos[0].uuid, sizeof infos[r].uuid) == 0;
    nccl &= infos[r].nccl;
    for (int q = 0; q < r; q++)
      if (infos[q].host_hash == infos[r].host_hash && memcmp(infos[q].uuid, infos[r].uuid, 16) == 0) distinct = 0;
  }
  int ipc_ok = one_gpu && n <= COHORT__CUDA_IPC_MAX_RANKS;
  if (strcmp(forced, "nccl") == 0) {
    if (!distinct)
      return cohort__error(COHORT_ERR_INVALID, "COHORT_GPU_PATH=nccl: two ranks share a GPU, which NCCL refuses "
                                               "(cuda-ipc serves ranks that share one GPU)");
    if (!nccl)
      return cohort__error(COHORT_ERR_INVALID, "COHORT_GPU_PATH=nccl: libnccl.so.2 does not load on some rank");
    *out = COHORT__CUDA_PATH_NCCL;
  } else if (strcmp(forced, "ipc") == 0) {
    if (!ipc_ok)
      return cohort__error(COHORT_ERR_INVALID,
                           "COHORT_GPU_PATH=ipc needs every rank on one GPU of one host, at most %d ranks (%d ranks; "
                           "%s)",
                           COHORT__CUDA_IPC_MAX_RANKS, n, one_gpu ? "one GPU" : "not all on one GPU");
    *out = COHORT__CUDA_PATH_IPC;
  } else if (strcmp(forced, "staged") == 0) {
    *out = COHORT__CUDA_PATH_STAGED;
  } else {
    *out = distinct && nccl ? COHORT__CUDA_PATH_NCCL : ipc_ok ? COHORT__CUDA_PATH_IPC : COHORT__CUDA_PATH_STAGED;
  }
  return COHORT_OK;
}

static cohort_status setup(cohort__gpu **out, cohort__transport *t, const cohort__config *cfg, int device) {
  const cohort__cuda_api *api = plugin();
  if (!api) return COHORT_ERR_INVALID;
  cohort__gpu *g = calloc(1, sizeof *g);
  if (!g) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  g->api = api;
  g->device = device;
  cohort__cuda_rank_info mine, *infos = calloc((size_t)t->size, sizeof *infos);
  cohort_status st = infos ? api->rank_info(device, &mine) : cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  if (infos && st != COHORT_OK) plugin_error(api, st);
  mine.ipc_sync = strcmp(cfg->gpu_ipc_sync, "host") == 0 ? COHORT__CUDA_IPC_SYNC_HOST : COHORT__CUDA_IPC_SYNC_DEVICE;
  if (st == COHORT_OK) st = exchange(t, &mine, infos, sizeof mine);
  if (st == COHORT_OK) st = cohort__gpu_choose_path(infos, t->size, cfg->gpu_path, &g->path);
  if (st == COHORT_OK && g->path != COHORT__CUDA_PATH_STAGED) {
    cohort__cuda_host host = host_of(t, cfg);
    st = api->comm_create(g->path, device, infos, &host, &g->dev);
    if (st != COHORT_OK) plugin_error(api, st);
  }
  free(infos);
  if (st != COHORT_OK) {
    free(g);
    return st;
  }
  COHORT_LOG_INFO("device collectives on GPU %d over %s (COHORT_GPU_PATH=%s)", device, path_name(g->path),
                  cfg->gpu_path);
  *out = g;
  return COHORT_OK;
}

/* ---- the staged path: device -> page-locked host -> the host collective -> device ---- */

static void *grow(const cohort__cuda_api *api, void **buf, size_t *len, size_t bytes) {
  if (*len >= bytes && *buf) return *buf;
  api->host_free(*buf);
  *buf = api->host_alloc(bytes);
  *len = *buf ? bytes : 0;
  return *buf;
}

static cohort_status staged(cohort__gpu *g, cohort__coll_ctx *coll, const cohort__coll_args *a, uint32_t seq) {
  const cohort__cuda_api *api = g->api;
  size_t es = cohort_dtype_size(a->dtype), bytes = a->count * es, n = (size_t)coll->size;
  size_t send_bytes = a->coll == COHORT__COLL_REDUCE_SCATTER ? bytes * n : bytes;
  size_t recv_bytes = a->coll == COHORT__COLL_ALLGATHER ? bytes * n : bytes;
  void *stream = a->ready ? NULL : a->stream;
  cohort_status st = api->wait_ready(g->device, a->ready, a->stream);
  if (st != COHORT_OK) return plugin_error(api, st);
  void *hs = grow(api, &g->host_send, &g->host_send_len, send_bytes);
  void *hr = a->coll == COHORT__COLL_BROADCAST ? hs : grow(api, &g->host_recv, &g->host_recv_len, recv_bytes);
  if (!hs || !hr)
    return cohort__error(COHORT_ERR_SYSTEM, "cannot allocate %zu bytes of page-locked host memory",
                         send_bytes + recv_bytes);
  int copy_in = a->coll != COHORT__COLL_BROADCAST || a->root == coll->rank;
  if (copy_in && (st = api->copy(g->device, hs, a->coll == COHORT__COLL_BROADCAST ? a->recvbuf : a->sendbuf, send_bytes,
                                 stream)) != COHORT_OK)
    return plugin_error(api, st);
  cohort__coll_args h = *a;
  h.sendbuf = hs;
  h.recvbuf = hr;
  h.on_device = 0;
  COHORT_CHECK(cohort__coll_run(coll, &h, seq));
  int copy_out = a->coll != COHORT__COLL_BROADCAST || a->root != coll->rank;
  if (copy_out && (st = api->copy(g->device, a->recvbuf, hr, recv_bytes, stream)) != COHORT_OK)
    return plugin_error(api, st);
  return COHORT_OK;
}

cohort_status cohort__gpu_run(cohort__gpu **gp, cohort__transport *t, cohort__coll_ctx *coll, const cohort__config *cfg,
                              const cohort__coll_args *a, uint32_t seq) {
  cohort__call call = cohort__call_make(seq, a->coll, a->dtype, a->op, COHORT__ALGO_DEVICE, a->root, a->count, 0);
  t->ops->set_call(t, &call);
  if (!*gp) COHORT_CHECK(setup(gp, t, cfg, a->device));
  cohort__gpu *g = *gp;
  if (a->device != g->device)
    return cohort__error(COHORT_ERR_INVALID,
                         "%s: the buffers are on device %d, but this communicator's device collectives run on device "
                         "%d (its first one chose it)",
                         cohort__coll_api_name(a->coll), a->device, g->device);
  if (g->path == COHORT__CUDA_PATH_STAGED) return staged(g, coll, a, seq); /* the host collective agrees first */
  /* The ranks agree on the call before the device path's own control plane runs (coll/agree.c): a mismatch is
   * refused on every rank, and the communicator goes on. */
  cohort__signature sig = {.call = call, .counts_hash = a->tag};
  COHORT_CHECK(cohort__coll_agree(coll, &sig));
  t->ops->set_call(t, &call);
  cohort__cuda_call dc = {.coll = (int)a->coll,
                          .sendbuf = a->coll == COHORT__COLL_BROADCAST ? a->recvbuf : a->sendbuf,
                          .recvbuf = a->recvbuf,
                          .count = a->count,
                          .dtype = a->dtype,
                          .op = a->op,
                          .root = a->root,
                          .stream = a->stream,
                          .ready = a->ready,
                          .wait = !a->stream_ordered,
                          .agreed = coll->call_check};
  cohort__cuda_host host = host_of(t, cfg);
  cohort_status st = g->api->run(g->dev, &dc, &host);
  return st == COHORT_OK ? st : plugin_error(g->api, st);
}

void cohort__gpu_abort(cohort__gpu *g) {
  if (g && g->dev) g->api->abort(g->dev);
}

void cohort__gpu_destroy(cohort__gpu *g) {
  if (!g) return;
  if (g->dev) g->api->comm_destroy(g->dev);
  g->api->host_free(g->host_send);
  g->api->host_free(g->host_recv);
  free(g);
}
