/*
 * plugin.cu: the plugin's entry (cohort_cuda_plugin_v1) and its small tools: whether memory is on a device, what a
 * rank says of itself, the events that mark an input ready, the staged path's page-locked memory and copies.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/internal.h"

static __thread char message[1024];

cohort_status cc_fail(cohort_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  return status;
}

const char *cc_last_error(void) { return message; }

/* The caller's thread keeps its own current device (a program may drive another GPU from it between calls). A thread
 * with no current context (the progress thread, any thread new to CUDA) is left on the buffer's device: cudaGetDevice
 * says 0 there without a context behind it, and setting device 0 back would create device 0's primary context (CUDA
 * 12 and later), one on GPU 0 for every rank of a host whose ranks each drive another GPU. */
typedef struct device_scope {
  int prev;
} device_scope;

static cohort_status enter_device(int device, device_scope *s) {
  s->prev = -1;
  CUcontext current = NULL;
  if (cuCtxGetCurrent(&current) == CUDA_SUCCESS && current) CC_TRY(cudaGetDevice(&s->prev));
  if (s->prev != device) CC_TRY(cudaSetDevice(device));
  return COHORT_OK;
}

static void leave_device(int device, const device_scope *s) {
  if (s->prev >= 0 && s->prev != device) cudaSetDevice(s->prev);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result;
static int device_count;
static cudaError_t count_result;

static void init_driver(void) {
  init_result = cuInit(0);
  if (init_result == CUDA_SUCCESS) count_result = cudaGetDeviceCount(&device_count);
}

static cohort_status available(void) {
  pthread_once(&init_once, init_driver);
  if (init_result != CUDA_SUCCESS) {
    const char *name = "?";
    cuGetErrorName(init_result, &name);
    return cc_fail(COHORT_ERR_INVALID, "the CUDA driver cannot start here (cuInit: %s)", name);
  }
  if (count_result != cudaSuccess)
    return cc_fail(COHORT_ERR_INVALID, "no usable GPU (cudaGetDeviceCount: %s)", cudaGetErrorString(count_result));
  if (device_count == 0) return cc_fail(COHORT_ERR_INVALID, "no GPU is visible to this process");
  return COHORT_OK;
}

/* One driver call answers for any pointer: memory the driver does not know is host memory; managed memory is
 * reachable from the host, and the host path is right for it. */
static int device_of(const void *ptr) {
  pthread_once(&init_once, init_driver);
  if (init_result != CUDA_SUCCESS || !ptr) return -1;
  unsigned int type = 0, managed = 0;
  int ordinal = -1;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void *values[] = {&type, &managed, &ordinal};
  if (cuPointerGetAttributes(3, attrs, values, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS) return -1;
  if (type != CU_MEMORYTYPE_DEVICE || managed) return -1;
  return ordinal;
}

/* Which host: the boot id tells two machines with the same name apart, and containers of one machine share it. */
static uint64_t host_hash(void) {
  char text[512] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(text, 128, f)) text[0] = '\0';
    fclose(f);
  }
  size_t n = strlen(text);
  gethostname(text + n, sizeof text - n - 1);
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = text; *p; p++)
    h = (h ^ (uint8_t)*p) * 1099511628211ull;
  return h;
}

static cohort_status rank_info(int device, cohort__cuda_rank_info *out) {
  memset(out, 0, sizeof *out);
  CC_CHECK(available());
  cudaDeviceProp prop;
  CC_TRY(cudaGetDeviceProperties(&prop, device));
  memcpy(out->uuid, prop.uuid.bytes, sizeof out->uuid);
  out->device = device;
  out->nccl = cc_nccl_loadable();
  out->host_hash = host_hash();
  out->pid = (int32_t)getpid();
  return COHORT_OK;
}

static cohort_status record_on(void *stream, void **event) {
  cudaEvent_t e;
  CC_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(e, (cudaStream_t)stream);
  if (err != cudaSuccess) {
    cudaEventDestroy(e);
    return cc_fail(COHORT_ERR_SYSTEM, "cudaEventRecord on the caller's stream: %s", cudaGetErrorString(err));
  }
  *event = e;
  return COHORT_OK;
}

static cohort_status record_ready(int device, void *stream, void **event) {
  *event = NULL;
  device_scope scope;
  CC_CHECK(enter_device(device, &scope));
  cohort_status st = record_on(stream, event);
  leave_device(device, &scope);
  return st;
}

static void release_ready(void *event) {
  if (event) cudaEventDestroy((cudaEvent_t)event);
}

/* On the buffer's device: a NULL stream is that device's legacy stream, not the calling thread's current device's. */
static cohort_status wait_ready(int device, void *event, void *stream) {
  device_scope scope;
  CC_CHECK(enter_device(device, &scope));
  cudaError_t err = event ? cudaEventSynchronize((cudaEvent_t)event) : cudaStreamSynchronize((cudaStream_t)stream);
  leave_device(device, &scope);
  if (err != cudaSuccess)
    return cc_fail(COHORT_ERR_SYSTEM, "the work before the collective failed on the device: %s",
                   cudaGetErrorString(err));
  return COHORT_OK;
}

cohort_status cc_wait_input(const cohort__cuda_call *call) {
  if (call->ready) {
    cudaError_t err = cudaEventSynchronize((cudaEvent_t)call->ready);
    if (err != cudaSuccess)
      return cc_fail(COHORT_ERR_SYSTEM, "the work before the collective failed on the device: %s",
                     cudaGetErrorString(err));
    return COHORT_OK;
  }
  cudaError_t err = cudaStreamSynchronize((cudaStream_t)call->stream);
  if (err != cudaSuccess)
    return cc_fail(COHORT_ERR_SYSTEM, "the work before the collective failed on the device: %s",
                   cudaGetErrorString(err));
  return COHORT_OK;
}

void cc_call_bytes(const cohort__cuda_call *call, int size, size_t *send_bytes, size_t *recv_bytes) {
  size_t bytes = call->count * cc_dtype_size(call->dtype);
  *send_bytes = *recv_bytes = bytes;
  if (call->coll == 3) *recv_bytes = bytes * (size_t)size; /* allgather */
  if (call->coll == 4) *send_bytes = bytes * (size_t)size; /* reduce_scatter */
}

static cohort_status create_on(cohort__cuda_path path, int device, const cohort__cuda_rank_info *infos,
                               const cohort__cuda_host *host, cohort__cuda_comm **out);

static cohort_status comm_create(cohort__cuda_path path, int device, const cohort__cuda_rank_info *infos,
                                 const cohort__cuda_host *host, cohort__cuda_comm **out) {
  *out = NULL;
  device_scope scope;
  CC_CHECK(enter_device(device, &scope));
  cohort_status st = create_on(path, device, infos, host, out);
  leave_device(device, &scope);
  return st;
}

static cohort_status create_on(cohort__cuda_path path, int device, const cohort__cuda_rank_info *infos,
                               const cohort__cuda_host *host, cohort__cuda_comm **out) {
  cohort__cuda_comm *c = (cohort__cuda_comm *)calloc(1, sizeof *c);
  if (!c) return cc_fail(COHORT_ERR_SYSTEM, "out of memory");
  c->path = path;
  c->device = device;
  c->rank = host->rank;
  c->size = host->size;
  cohort_status st = COHORT_OK;
  cudaError_t err = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (err != cudaSuccess)
    st = cc_fail(COHORT_ERR_SYSTEM, "cudaStreamCreateWithFlags: %s", cudaGetErrorString(err));
  else if (path == COHORT__CUDA_PATH_IPC)
    st = cc_ipc_create(c, infos, host);
  else if (path == COHORT__CUDA_PATH_NCCL)
    st = cc_nccl_create(c, infos, host);
  else
    st = cc_fail(COHORT_ERR_INTERNAL, "the plugin has no device communicator for path %d", (int)path);
  if (st != COHORT_OK) {
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
    return st;
  }
  *out = c;
  return COHORT_OK;
}

static cohort_status run(cohort__cuda_comm *c, const cohort__cuda_call *call, const cohort__cuda_host *host) {
  device_scope scope;
  CC_CHECK(enter_device(c->device, &scope));
  cohort_status st = c->path == COHORT__CUDA_PATH_IPC ? cc_ipc_run(c, call, host) : cc_nccl_run(c, call, host);
  leave_device(c->device, &scope);
  return st;
}

static void comm_abort(cohort__cuda_comm *c) {
  if (c && c->path == COHORT__CUDA_PATH_NCCL) cc_nccl_abort(c);
  if (c && c->path == COHORT__CUDA_PATH_IPC) cc_ipc_abort(c);
}

static void comm_destroy(cohort__cuda_comm *c) {
  if (!c) return;
  device_scope scope;
  if (enter_device(c->device, &scope) != COHORT_OK) scope.prev = -1;
  if (c->path == COHORT__CUDA_PATH_IPC) cc_ipc_destroy(c);
  if (c->path == COHORT__CUDA_PATH_NCCL) cc_nccl_destroy(c);
  if (c->stream) cudaStreamDestroy(c->stream);
  leave_device(c->device, &scope);
  free(c);
}

static void *host_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) return NULL;
  return p;
}

static void host_free(void *p) {
  if (p) cudaFreeHost(p);
}

static cohort_status copy_on(void *dst, const void *src, size_t bytes, void *stream) {
  CC_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream));
  CC_TRY(cudaStreamSynchronize((cudaStream_t)stream));
  return COHORT_OK;
}

static cohort_status copy(int device, void *dst, const void *src, size_t bytes, void *stream) {
  if (!bytes) return COHORT_OK;
  device_scope scope;
  CC_CHECK(enter_device(device, &scope));
  cohort_status st = copy_on(dst, src, bytes, stream);
  leave_device(device, &scope);
  return st;
}

static const cohort__cuda_api api = {
    COHORT__CUDA_PLUGIN_VERSION,
    cc_last_error,
    available,
    device_of,
    rank_info,
    record_ready,
    wait_ready,
    release_ready,
    comm_create,
    run,
    comm_abort,
    comm_destroy,
    host_alloc,
    host_free,
    copy,
};

extern "C" __attribute__((visibility("default"))) const cohort__cuda_api *cohort_cuda_plugin_v1(void) { return &api; }
