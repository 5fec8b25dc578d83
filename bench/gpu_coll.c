/*
 * gpu_coll.c: collectives on device memory, beside their anchors, in one run (scripts/gpu/10-collectives.sh).
 *
 *   cohortrun -np N gpu_coll [MAX_MB]         allreduce busbw by size on the communicator's device path, blocking calls
 *                                              and then stream-ordered ones; rank 0 first measures the device-to-device
 *                                              copy (the HBM ceiling) alone
 *   gpu_coll --nccl-direct [MAX_MB]           1 rank: cohort's NCCL path against ncclAllReduce called directly,
 *                                              interleaved call by call, the ratio per size
 *
 * Columns as nccl-tests: algbw = bytes / time; busbw = algbw * 2(n-1)/n for allreduce. On one GPU shared by all ranks
 * the floor of an allreduce is each input read once and each output written once (2 n bytes per byte of vector), so
 * the script also prints that floor's busbw from the measured copy bandwidth: busbw_max = copy_bw * 2(n-1)/n^2 (half
 * the copy bandwidth at 2 ranks, 3/8 at 4).
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cohort/cohort.h"

#define CHECK_CUDA(call)                                                                                               \
  do {                                                                                                                 \
    cudaError_t e__ = (call);                                                                                          \
    if (e__ != cudaSuccess) {                                                                                          \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e__));                                                     \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)
#define CHECK_COHORT(call)                                                                                             \
  do {                                                                                                                 \
    cohort_status s__ = (call);                                                                                        \
    if (s__ != COHORT_OK) {                                                                                            \
      fprintf(stderr, "%s: %s\n", #call, cohort_last_error());                                                         \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int iters_for(size_t bytes) {
  size_t it = ((size_t)4 << 30) / (bytes ? bytes : 1);
  return it < 10 ? 10 : it > 500 ? 500 : (int)it;
}

/* Device-to-device copy of bytes, GB/s counted as bytes copied (nccl-tests' algbw of a copy). */
static double copy_bw(size_t bytes) {
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 3; i++)
    CHECK_CUDA(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  int iters = 20;
  cudaEventRecord(e0, 0);
  for (int i = 0; i < iters; i++)
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0);
  cudaEventRecord(e1, 0);
  CHECK_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaFree(a);
  cudaFree(b);
  return (double)bytes * iters / (ms * 1e-3) / 1e9;
}

static void fill(float *d, size_t n, float v) {
  float *h = malloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++)
    h[i] = v;
  CHECK_CUDA(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice));
  free(h);
}

/* One allreduce of count floats: blocking (stream NULL), or queued on stream. */
static void allreduce_once(cohort_comm *comm, const float *send, float *recv, size_t count, cudaStream_t stream) {
  if (stream)
    CHECK_COHORT(cohort_allreduce_stream(comm, send, recv, count, COHORT_F32, COHORT_SUM, stream));
  else
    CHECK_COHORT(cohort_allreduce(comm, send, recv, count, COHORT_F32, COHORT_SUM));
}

/* The table of one way of calling: blocking calls (stream NULL; each returns with its result in place), or every
 * iteration queued on stream and one synchronize at the end. Returns 1 on a wrong result. */
static int time_sizes(cohort_comm *comm, const float *send, float *recv, size_t max_bytes, cudaStream_t stream,
                      double copy) {
  int rank = cohort_rank(comm), n = cohort_size(comm);
  double bus = 2.0 * (n - 1) / n;
  if (rank == 0)
    printf("%12s %8s %12s %12s %12s %10s\n", "bytes", "iters", "time_us", "algbw_GBs", "busbw_GBs", "of_copy");
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    size_t count = bytes / sizeof(float);
    int iters = iters_for(bytes);
    for (int i = 0; i < 3; i++)
      allreduce_once(comm, send, recv, count, stream);
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_COHORT(cohort_barrier(comm));
    double t0 = now_s();
    for (int i = 0; i < iters; i++)
      allreduce_once(comm, send, recv, count, stream);
    CHECK_CUDA(cudaDeviceSynchronize());
    double t = (now_s() - t0) / iters;
    float check = 0;
    CHECK_CUDA(cudaMemcpy(&check, recv + count - 1, sizeof check, cudaMemcpyDeviceToHost));
    if (check != (float)n) {
      fprintf(stderr, "rank %d: wrong result %g at %zu bytes (expected %d)\n", rank, (double)check, bytes, n);
      return 1;
    }
    double alg = (double)bytes / t / 1e9;
    if (rank == 0)
      printf("%12zu %8d %12.2f %12.2f %12.2f %9.0f%%\n", bytes, iters, t * 1e6, alg, alg * bus,
             n > 1 ? 100.0 * alg * bus / copy : 100.0 * alg / copy);
    fflush(stdout);
  }
  return 0;
}

static int bench_paths(size_t max_bytes) {
  cohort_comm *comm;
  CHECK_COHORT(cohort_init(&comm));
  int rank = cohort_rank(comm), n = cohort_size(comm), ndev = 0;
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  CHECK_CUDA(cudaSetDevice(cohort_local_rank(comm) % ndev));
  CHECK_CUDA(cudaFree(0));
  double copy = 0;
  if (rank == 0) copy = copy_bw((size_t)256 << 20);
  CHECK_COHORT(cohort_barrier(comm));
  size_t maxn = max_bytes / sizeof(float);
  float *send, *recv;
  CHECK_CUDA(cudaMalloc((void **)&send, max_bytes));
  CHECK_CUDA(cudaMalloc((void **)&recv, max_bytes));
  fill(send, maxn, 1.0f);
  CHECK_COHORT(cohort_allreduce(comm, send, recv, 1, COHORT_F32, COHORT_SUM)); /* the path */
  if (rank == 0) {
    printf("# %d ranks, transport %s, device path %s, %s\n", n, cohort_transport_name(comm), cohort_device_path(comm),
           "f32 sum, out of place, blocking calls");
    printf("# device-to-device copy, 256 MiB: %.1f GB/s; the shared-HBM floor of an allreduce at %d ranks gives "
           "busbw <= %.1f GB/s\n",
           copy, n, n > 1 ? copy * 2.0 * (n - 1) / ((double)n * n) : copy);
  }
  int wrong = time_sizes(comm, send, recv, max_bytes, NULL, copy);
  /* The same, stream-ordered: each call returns once queued (NCCL; cuda-ipc with its waits on the device), so the
   * host's part of a call overlaps the kernels of the calls before it, as in a training step. */
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (!wrong && rank == 0)
    printf("# the same, stream-ordered: cohort_allreduce_stream, every iteration queued on one stream, then one "
           "synchronize\n");
  if (!wrong) wrong = time_sizes(comm, send, recv, max_bytes, s, copy);
  CHECK_CUDA(cudaStreamDestroy(s));
  cudaFree(send);
  cudaFree(recv);
  cohort_comm_destroy(comm);
  return wrong;
}

/* ---- 1 rank: cohort's NCCL path against NCCL called directly ---- */

typedef struct {
  char internal[128];
} nccl_id;
typedef int (*get_id_fn)(nccl_id *);
typedef int (*init_fn)(void **, int, nccl_id, int);
typedef int (*allreduce_fn)(const void *, void *, size_t, int, int, void *, cudaStream_t);
typedef int (*destroy_fn)(void *);

/* What the host side of one device call costs, call by call, to tell where cohort's extra microseconds per call below
 * 16 MiB go (docs/performance.md, "NCCL at 1 rank"): the driver's pointer query that classifies a buffer (cohort makes
 * one per distinct buffer, src/cuda/plugin.cu device_of), the current device's query and the event that an async call
 * records. Means over 20000 calls each, in ns. */
static void print_host_costs(const void *send, const void *recv) {
  enum { N = 20000 };
  struct cudaPointerAttributes attr;
  int dev = 0;
  double t0 = now_s();
  for (int i = 0; i < N; i++)
    (void)cudaPointerGetAttributes(&attr, (i & 1) ? send : recv);
  double ptr_ns = (now_s() - t0) / N * 1e9;
  t0 = now_s();
  for (int i = 0; i < N; i++)
    (void)cudaGetDevice(&dev);
  double dev_ns = (now_s() - t0) / N * 1e9;
  cudaEvent_t e;
  t0 = now_s();
  for (int i = 0; i < N; i++) {
    (void)cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    (void)cudaEventRecord(e, 0);
    (void)cudaEventDestroy(e);
  }
  double ev_ns = (now_s() - t0) / N * 1e9;
  (void)cudaDeviceSynchronize();
  printf("# host costs per call, ns: cudaPointerGetAttributes %.0f, cudaGetDevice %.0f, "
         "cudaEventCreate+Record+Destroy %.0f\n",
         ptr_ns, dev_ns, ev_ns);
  fflush(stdout);
}

static int bench_nccl_direct(size_t max_bytes) {
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    printf("SKIP nccl-direct: %s\n", dlerror());
    return 77;
  }
  get_id_fn get_id = (get_id_fn)dlsym(h, "ncclGetUniqueId");
  init_fn init = (init_fn)dlsym(h, "ncclCommInitRank");
  allreduce_fn allreduce = (allreduce_fn)dlsym(h, "ncclAllReduce");
  destroy_fn destroy = (destroy_fn)dlsym(h, "ncclCommDestroy");
  if (!get_id || !init || !allreduce || !destroy) {
    printf("SKIP nccl-direct: libnccl lacks a symbol\n");
    return 77;
  }
  setenv("COHORT_GPU_PATH", "nccl", 1);
  cohort_comm *comm;
  CHECK_COHORT(cohort_init(&comm));
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaFree(0));
  nccl_id id;
  void *nc = NULL;
  if (get_id(&id) != 0 || init(&nc, 1, id, 0) != 0) {
    printf("FAIL nccl-direct: ncclCommInitRank\n");
    return 1;
  }
  float *send, *recv;
  CHECK_CUDA(cudaMalloc((void **)&send, max_bytes));
  CHECK_CUDA(cudaMalloc((void **)&recv, max_bytes));
  fill(send, max_bytes / sizeof(float), 1.0f);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK_COHORT(cohort_allreduce_stream(comm, send, recv, 1, COHORT_F32, COHORT_SUM, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  printf("# 1 rank: cohort_allreduce_stream (device path %s) against ncclAllReduce called directly, the same stream, "
         "batches of calls interleaved; us per call, median of 7 batches\n",
         cohort_device_path(comm));
  printf("%12s %8s %12s %12s %10s\n", "bytes", "iters", "nccl_us", "cohort_us", "cohort/nccl");
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    size_t count = bytes / sizeof(float);
    int iters = iters_for(bytes);
    double tn[7], tc[7];
    for (int b = 0; b < 7; b++) {
      for (int sys = 0; sys < 2; sys++) {
        CHECK_CUDA(cudaStreamSynchronize(s));
        double t0 = now_s();
        for (int i = 0; i < iters; i++) {
          if (sys == 0)
            allreduce(send, recv, count, 7 /* ncclFloat32 */, 0 /* ncclSum */, nc, s);
          else
            CHECK_COHORT(cohort_allreduce_stream(comm, send, recv, count, COHORT_F32, COHORT_SUM, s));
        }
        CHECK_CUDA(cudaStreamSynchronize(s));
        (sys == 0 ? tn : tc)[b] = (now_s() - t0) / iters;
      }
    }
    for (int i = 0; i < 7; i++) /* medians */
      for (int j = i + 1; j < 7; j++) {
        if (tn[j] < tn[i]) {
          double x = tn[i];
          tn[i] = tn[j];
          tn[j] = x;
        }
        if (tc[j] < tc[i]) {
          double x = tc[i];
          tc[i] = tc[j];
          tc[j] = x;
        }
      }
    printf("%12zu %8d %12.2f %12.2f %9.3fx\n", bytes, iters, tn[3] * 1e6, tc[3] * 1e6, tc[3] / tn[3]);
    fflush(stdout);
  }
  print_host_costs(send, recv);
  destroy(nc);
  cudaFree(send);
  cudaFree(recv);
  cohort_comm_destroy(comm);
  return 0;
}

int main(int argc, char **argv) {
  int direct = argc > 1 && strcmp(argv[1], "--nccl-direct") == 0;
  const char *mb = argc > 1 + direct ? argv[1 + direct] : "256";
  size_t max_bytes = (size_t)atol(mb) << 20;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("SKIP: no GPU here\n");
    return 77;
  }
  return direct ? bench_nccl_direct(max_bytes) : bench_paths(max_bytes);
}
