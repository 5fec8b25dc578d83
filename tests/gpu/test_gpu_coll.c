/*
 * test_gpu_coll.c: the collectives on device memory, run by cohortrun with every rank on the GPU host's one GPU (the
 * cuda-ipc path), or with COHORT_GPU_PATH forcing another path (staged; nccl at 1 rank).
 *
 * Every collective, every dtype and op, counts from 0 to past a million, in place and not, blocking, _stream and
 * asynchronous: inputs are small integers, so that every path computes every result exactly (sums and products stay
 * in the range where f16 and bf16 hold integers exactly) and the check is bitwise. Outputs are poisoned first, so an
 * element that was not written shows. Exits 77 (ctest's SKIP) with the reason where there is no usable GPU.
 *
 *   test_gpu_coll [matrix] [stream] [stream_order] [faults_kill] [faults_kill_stream] [faults_mismatch]
 *   (no argument: matrix, stream and stream_order)
 */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "core/reduce.h"
#include "test.h"

static cohort_comm *comm;
static int R, N;

#define CUDA_OK(call)                                                                                                  \
  do {                                                                                                                 \
    cudaError_t e__ = (call);                                                                                          \
    if (e__ != cudaSuccess) TEST_FAIL_("%s: %s", #call, cudaGetErrorString(e__));                                      \
  } while (0)

#define COHORT_OK_(call)                                                                                               \
  do {                                                                                                                 \
    cohort_status s__ = (call);                                                                                        \
    if (s__ != COHORT_OK) TEST_FAIL_("%s: %s: %s", #call, cohort_strerror(s__), cohort_last_error());                  \
  } while (0)

/* Element i of rank r's input, as a double: small integers (products over 8 ranks stay at most 2^8). */
static double input_value(int r, size_t i, cohort_op op) {
  if (op == COHORT_PROD) return (double)(1 + (int)((i + (size_t)r) % 2));
  return (double)((int)((i * 7 + (size_t)r * 3) % 17) - (op == COHORT_SUM || op == COHORT_AVG ? 8 : 0));
}

static void put(void *buf, cohort_dtype d, size_t i, double v) {
  switch (d) {
  case COHORT_F32:
    ((float *)buf)[i] = (float)v;
    break;
  case COHORT_F64:
    ((double *)buf)[i] = v;
    break;
  case COHORT_F16:
    ((uint16_t *)buf)[i] = cohort__f32_to_f16((float)v);
    break;
  case COHORT_BF16:
    ((uint16_t *)buf)[i] = cohort__f32_to_bf16((float)v);
    break;
  case COHORT_I32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case COHORT_I64:
    ((int64_t *)buf)[i] = (int64_t)v;
    break;
  case COHORT_U8:
    ((uint8_t *)buf)[i] = (uint8_t)(int)v;
    break;
  default:
    break;
  }
}

/* What every path must give: the op over the ranks' values, AVG as the library defines it per dtype. */
static void expected(void *buf, cohort_dtype d, cohort_op op, size_t i, int first_rank_offset) {
  double acc = input_value(0, i + (size_t)first_rank_offset, op);
  int64_t iacc = (int64_t)acc;
  for (int r = 1; r < N; r++) {
    double v = input_value(r, i + (size_t)first_rank_offset, op);
    if (op == COHORT_MIN) acc = v < acc ? v : acc;
    if (op == COHORT_MAX) acc = v > acc ? v : acc;
    if (op == COHORT_PROD) acc *= v;
    if (op == COHORT_SUM || op == COHORT_AVG) acc += v;
    iacc = (int64_t)acc;
  }
  if (op == COHORT_AVG) {
    if (d == COHORT_U8) {
      put(buf, d, i, (double)((uint8_t)iacc / N));
      return;
    }
    if (d == COHORT_I32 || d == COHORT_I64) {
      put(buf, d, i, (double)(iacc / N));
      return;
    }
    if (d == COHORT_F64) {
      put(buf, d, i, acc / N);
      return;
    }
    put(buf, d, i, (double)((float)acc / (float)N));
    return;
  }
  if (d == COHORT_U8) iacc = (uint8_t)iacc;
  put(buf, d, i, d == COHORT_U8 ? (double)iacc : acc);
}

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) return NULL;
  return p;
}

/* Compares got with want (bytes), naming the first element that differs. Returns 0 when equal. */
static int differs(const void *got, const void *want, size_t count, size_t es, const char *what) {
  for (size_t i = 0; i < count; i++) {
    if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0) {
      uint64_t g = 0, w = 0;
      memcpy(&g, (const char *)got + i * es, es);
      memcpy(&w, (const char *)want + i * es, es);
      fprintf(stderr, "[rank %d] %s: element %zu of %zu is 0x%llx, expected 0x%llx\n", R, what, i, count,
              (unsigned long long)g, (unsigned long long)w);
      return 1;
    }
  }
  return 0;
}

enum { BLOCKING, STREAM, ASYNC };
static const char *mode_name[] = {"blocking", "stream", "async"};

static cudaStream_t stream;

static cohort_status run_allreduce(int mode, const void *s, void *r, size_t n, cohort_dtype d, cohort_op o) {
  if (mode == BLOCKING) return cohort_allreduce(comm, s, r, n, d, o);
  if (mode == STREAM) return cohort_allreduce_stream(comm, s, r, n, d, o, stream);
  cohort_work *w = NULL;
  cohort_status st = cohort_iallreduce_stream(comm, s, r, n, d, o, stream, &w);
  if (st != COHORT_OK) return st;
  st = cohort_work_wait(w);
  cohort_work_free(w);
  return st;
}

static void check_allreduce(size_t count, cohort_dtype d, cohort_op op, int in_place, int mode) {
  size_t es = cohort_dtype_size(d), bytes = count * es;
  char *host = malloc(bytes + 1), *want = malloc(bytes + 1), *got = malloc(bytes + 1);
  void *ds = dev_alloc(bytes), *dr = in_place ? ds : dev_alloc(bytes);
  ASSERT_TRUE(host && want && got && ds && dr);
  for (size_t i = 0; i < count; i++) {
    put(host, d, i, input_value(R, i, op));
    expected(want, d, op, i, 0);
  }
  CUDA_OK(cudaMemcpy(ds, host, bytes, cudaMemcpyHostToDevice));
  if (!in_place) CUDA_OK(cudaMemset(dr, 0xA5, bytes ? bytes : 1));
  CUDA_OK(cudaDeviceSynchronize());
  COHORT_OK_(run_allreduce(mode, ds, dr, count, d, op));
  if (mode == STREAM) CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(got, dr, bytes, cudaMemcpyDeviceToHost));
  char what[160];
  snprintf(what, sizeof what, "allreduce(%zu, %s, %s%s, %s)", count, cohort_dtype_name(d), cohort_op_name(op),
           in_place ? ", in place" : "", mode_name[mode]);
  ASSERT_TRUE(!differs(got, want, count, es, what));
  cudaFree(ds);
  if (!in_place) cudaFree(dr);
  free(host);
  free(want);
  free(got);
}

static void check_broadcast(size_t count, cohort_dtype d, int root, int mode) {
  size_t es = cohort_dtype_size(d), bytes = count * es;
  char *host = malloc(bytes + 1), *want = malloc(bytes + 1);
  void *db = dev_alloc(bytes);
  ASSERT_TRUE(host && want && db);
  for (size_t i = 0; i < count; i++) {
    put(want, d, i, input_value(root, i, COHORT_MAX));
    put(host, d, i, R == root ? input_value(root, i, COHORT_MAX) : -99);
  }
  CUDA_OK(cudaMemcpy(db, host, bytes, cudaMemcpyHostToDevice));
  /* A copy from pageable memory may still be on its way when cudaMemcpy returns, on the legacy stream, which the
   * non-blocking stream of the _stream forms does not wait for (the first GPU-host run read this rank's -99 back). */
  CUDA_OK(cudaDeviceSynchronize());
  if (mode == BLOCKING)
    COHORT_OK_(cohort_broadcast(comm, db, count, d, root));
  else if (mode == STREAM) {
    COHORT_OK_(cohort_broadcast_stream(comm, db, count, d, root, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
  } else {
    cohort_work *w = NULL;
    COHORT_OK_(cohort_ibroadcast_stream(comm, db, count, d, root, stream, &w));
    COHORT_OK_(cohort_work_wait(w));
    cohort_work_free(w);
  }
  CUDA_OK(cudaMemcpy(host, db, bytes, cudaMemcpyDeviceToHost));
  char what[128];
  snprintf(what, sizeof what, "broadcast(%zu, %s, root %d, %s)", count, cohort_dtype_name(d), root, mode_name[mode]);
  ASSERT_TRUE(!differs(host, want, count, es, what));
  cudaFree(db);
  free(host);
  free(want);
}

static void check_allgather(size_t count, cohort_dtype d, int in_place) {
  size_t es = cohort_dtype_size(d), bytes = count * es, total = bytes * (size_t)N;
  char *host = malloc(total + 1), *want = malloc(total + 1);
  char *dr = dev_alloc(total), *ds = in_place ? dr + (size_t)R * bytes : dev_alloc(bytes);
  ASSERT_TRUE(host && want && dr && ds);
  for (int r = 0; r < N; r++)
    for (size_t i = 0; i < count; i++)
      put(want + (size_t)r * bytes, d, i, input_value(r, i, COHORT_MAX));
  CUDA_OK(cudaMemset(dr, 0x5A, total ? total : 1));
  CUDA_OK(cudaMemcpy(ds, want + (size_t)R * bytes, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize());
  COHORT_OK_(cohort_allgather(comm, ds, dr, count, d));
  CUDA_OK(cudaMemcpy(host, dr, total, cudaMemcpyDeviceToHost));
  char what[128];
  snprintf(what, sizeof what, "allgather(%zu, %s%s)", count, cohort_dtype_name(d), in_place ? ", in place" : "");
  ASSERT_TRUE(!differs(host, want, count * (size_t)N, es, what));
  cudaFree(dr);
  if (!in_place) cudaFree(ds);
  free(host);
  free(want);
}

static void check_reduce_scatter(size_t count, cohort_dtype d, cohort_op op) {
  size_t es = cohort_dtype_size(d), bytes = count * es, total = bytes * (size_t)N;
  char *host = malloc(total + 1), *want = malloc(bytes + 1), *got = malloc(bytes + 1);
  void *ds = dev_alloc(total), *dr = dev_alloc(bytes);
  ASSERT_TRUE(host && want && got && ds && dr);
  for (size_t i = 0; i < count * (size_t)N; i++)
    put(host, d, i, input_value(R, i, op));
  for (size_t i = 0; i < count; i++)
    expected(want, d, op, i, (int)((size_t)R * count));
  CUDA_OK(cudaMemcpy(ds, host, total, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dr, 0xC3, bytes ? bytes : 1));
  CUDA_OK(cudaDeviceSynchronize());
  COHORT_OK_(cohort_reduce_scatter(comm, ds, dr, count, d, op));
  CUDA_OK(cudaMemcpy(got, dr, bytes, cudaMemcpyDeviceToHost));
  char what[128];
  snprintf(what, sizeof what, "reduce_scatter(%zu, %s, %s)", count, cohort_dtype_name(d), cohort_op_name(op));
  ASSERT_TRUE(!differs(got, want, count, es, what));
  cudaFree(ds);
  cudaFree(dr);
  free(host);
  free(want);
  free(got);
}

static const size_t counts[] = {0, 1, 7, 4097, (1u << 20) + 3};
#define NCOUNTS (sizeof counts / sizeof counts[0])

TEST(matrix) {
  /* The device paths take the dtypes and ops before i8 and the bitwise ones (cohort.h: "not on device memory yet"). */
  for (int d = 0; d < COHORT_I8; d++) {
    for (int op = 0; op < COHORT_BAND; op++)
      for (size_t c = 0; c < NCOUNTS; c++) {
        check_allreduce(counts[c], (cohort_dtype)d, (cohort_op)op, (int)(c % 2), BLOCKING);
        if (cohort_test_failed) return;
      }
    for (size_t c = 0; c < NCOUNTS; c++) {
      for (int root = 0; root < N; root += (N > 2 ? N - 1 : 1))
        check_broadcast(counts[c], (cohort_dtype)d, root, BLOCKING);
      check_allgather(counts[c], (cohort_dtype)d, (int)(c % 2));
      check_reduce_scatter(counts[c], (cohort_dtype)d, c % 2 ? COHORT_SUM : COHORT_MAX);
      if (cohort_test_failed) return;
    }
  }
  if (R == 0) printf("matrix: every collective, dtype and op on device memory, path %s\n", cohort_device_path(comm));
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A host function queued on a stream: the stream stalls for that long (the stream's work is late, not the host). */
static void CUDART_CB stall_stream(void *ms) {
  struct timespec ts = {0, (long)(intptr_t)ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* Whether a _stream call returns once queued (cuda-ipc with its waits on the device; NCCL), not once done. */
static int returns_once_queued(void) {
  const char *path = cohort_device_path(comm), *sync = getenv("COHORT_GPU_IPC_SYNC");
  return path && strcmp(path, "cuda-ipc") == 0 && !(sync && strcmp(sync, "host") == 0);
}

/* The ranks' streams meet where they should, whoever is late: one rank's stream stalls 150 ms before its input is
 * written, then the allreduce_stream, then a copy of the result out, then its buffer is overwritten with -1. The
 * sum is right only if the kernel waited for the late rank's input (ready) and no rank overwrote its buffer before
 * the kernel was done with it (done). Each rank is the late one in turn, rank 0 (which runs the kernel) too. Where
 * the path's waits are on the device, the call returns long before its stream reaches it. */
TEST(stream_order) {
  size_t count = (1u << 20) + 3, bytes = count * sizeof(float);
  float *pin_in = NULL, *pin_out = NULL, *minus = NULL;
  CUDA_OK(cudaMallocHost((void **)&pin_in, bytes));
  CUDA_OK(cudaMallocHost((void **)&pin_out, bytes));
  CUDA_OK(cudaMallocHost((void **)&minus, bytes));
  float *dbuf = dev_alloc(bytes);
  ASSERT_TRUE(dbuf != NULL && pin_in && pin_out && minus);
  for (size_t i = 0; i < count; i++)
    minus[i] = -1.0f;
  double slowest_return = 0;
  /* The first device collective sets the path up (outside the timing: this case may run alone). */
  COHORT_OK_(cohort_allreduce_stream(comm, dbuf, dbuf, count, COHORT_F32, COHORT_SUM, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  for (int late = 0; late < N; late++) {
    for (size_t i = 0; i < count; i++)
      pin_in[i] = (float)(R + late + (int)(i % 7));
    CUDA_OK(cudaMemcpyAsync(dbuf, minus, bytes, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    COHORT_OK_(cohort_barrier(comm));
    if (R == late) CUDA_OK(cudaLaunchHostFunc(stream, stall_stream, (void *)(intptr_t)150));
    CUDA_OK(cudaMemcpyAsync(dbuf, pin_in, bytes, cudaMemcpyHostToDevice, stream));
    double t0 = now_s();
    COHORT_OK_(cohort_allreduce_stream(comm, dbuf, dbuf, count, COHORT_F32, COHORT_SUM, stream));
    double took = now_s() - t0;
    if (took > slowest_return) slowest_return = took;
    CUDA_OK(cudaMemcpyAsync(pin_out, dbuf, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaMemcpyAsync(dbuf, minus, bytes, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < count; i++) {
      float want = (float)(N * (late + (int)(i % 7)) + N * (N - 1) / 2);
      if (pin_out[i] != want) {
        TEST_FAIL_("rank %d late: element %zu is %g, expected %g", late, i, (double)pin_out[i], (double)want);
        break;
      }
    }
    if (cohort_test_failed) break;
  }
  if (R == 0)
    printf("stream_order: the slowest return of allreduce_stream took %.1f ms (path %s%s)\n", slowest_return * 1e3,
           cohort_device_path(comm), returns_once_queued() ? ", waits on the device" : "");
  if (returns_once_queued() && N > 1 && slowest_return >= 0.1)
    TEST_FAIL_("allreduce_stream waited %.1f ms for a stream 150 ms late: the IPC path's waits were on the host, not "
               "at its flags on the device (did the flags fail to set up?)",
               slowest_return * 1e3);
  cudaFree(dbuf);
  cudaFreeHost(pin_in);
  cudaFreeHost(pin_out);
  cudaFreeHost(minus);
}

/* The _stream and asynchronous forms, and their order on the caller's stream: the input is written by a copy queued
 * on the stream just before the call, the result read by a copy queued just after it. */
TEST(stream) {
  for (int mode = STREAM; mode <= ASYNC; mode++)
    for (size_t c = 0; c < NCOUNTS; c++) {
      check_allreduce(counts[c], COHORT_F32, COHORT_SUM, 0, mode);
      check_allreduce(counts[c], COHORT_BF16, COHORT_AVG, 1, mode);
      check_broadcast(counts[c], COHORT_F16, N - 1, mode);
      if (cohort_test_failed) return;
    }
  size_t count = (1u << 22) + 5, bytes = count * sizeof(float);
  float *pin_in = NULL, *pin_out = NULL;
  CUDA_OK(cudaMallocHost((void **)&pin_in, bytes));
  CUDA_OK(cudaMallocHost((void **)&pin_out, bytes));
  float *dbuf = dev_alloc(bytes);
  ASSERT_TRUE(dbuf != NULL);
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < count; i++)
      pin_in[i] = (float)(R + round + (int)(i % 5));
    CUDA_OK(cudaMemcpyAsync(dbuf, pin_in, bytes, cudaMemcpyHostToDevice, stream));
    COHORT_OK_(cohort_allreduce_stream(comm, dbuf, dbuf, count, COHORT_F32, COHORT_SUM, stream));
    CUDA_OK(cudaMemcpyAsync(pin_out, dbuf, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < count; i++) {
      float want = (float)(N * (round + (int)(i % 5)) + N * (N - 1) / 2);
      if (pin_out[i] != want)
        TEST_FAIL_("stream order, round %d: element %zu is %g, expected %g", round, i, (double)pin_out[i],
                   (double)want);
    }
  }
  /* The per-thread default stream names the calling thread's: a _stream call on it made while an asynchronous call
   * is in flight runs on this thread after it (ordered on this thread's stream), not on the progress thread, whose
   * per-thread stream is another. The input lands 100 ms late on this thread's stream. */
  float *dasync = dev_alloc(bytes);
  ASSERT_TRUE(dasync != NULL);
  for (size_t i = 0; i < count; i++)
    pin_in[i] = (float)(R + 1 + (int)(i % 3));
  CUDA_OK(cudaMemcpy(dasync, pin_in, bytes, cudaMemcpyHostToDevice));
  cohort_work *w = NULL;
  COHORT_OK_(cohort_iallreduce(comm, dasync, dasync, count, COHORT_F32, COHORT_SUM, &w));
  CUDA_OK(cudaLaunchHostFunc(cudaStreamPerThread, stall_stream, (void *)(intptr_t)100));
  CUDA_OK(cudaMemcpyAsync(dbuf, pin_in, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
  COHORT_OK_(cohort_allreduce_stream(comm, dbuf, dbuf, count, COHORT_F32, COHORT_SUM, cudaStreamPerThread));
  CUDA_OK(cudaMemcpyAsync(pin_out, dbuf, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread));
  CUDA_OK(cudaStreamSynchronize(cudaStreamPerThread));
  COHORT_OK_(cohort_work_wait(w));
  cohort_work_free(w);
  for (size_t i = 0; i < count; i++) {
    float want = (float)(N * (1 + (int)(i % 3)) + N * (N - 1) / 2);
    if (pin_out[i] != want) {
      TEST_FAIL_("per-thread stream: element %zu is %g, expected %g", i, (double)pin_out[i], (double)want);
      break;
    }
  }
  cudaFree(dasync);
  cudaFree(dbuf);
  cudaFreeHost(pin_in);
  cudaFreeHost(pin_out);
}

/* The last rank dies mid-way through a series of large allreduces: every survivor's call fails within 2 s, naming
 * it. Run with cohortrun --keep-going (or as the test's script does) so that the survivors report. */
TEST(faults_kill) {
  size_t count = 1u << 24;
  float *d = dev_alloc(count * sizeof(float));
  ASSERT_TRUE(d != NULL);
  CUDA_OK(cudaMemset(d, 0, count * sizeof(float)));
  for (int i = 0; i < 20; i++) {
    if (R == N - 1 && i == 5) {
      fprintf(stderr, "[rank %d] dying now, in allreduce number %d\n", R, i);
      raise(SIGKILL);
    }
    double t0 = now_s();
    cohort_status st = cohort_allreduce(comm, d, d, count, COHORT_F32, COHORT_SUM);
    if (st != COHORT_OK) {
      double took = now_s() - t0;
      char want[32];
      snprintf(want, sizeof want, "rank %d", N - 1);
      printf("[rank %d] allreduce %d failed after %.3f s: %s: %s\n", R, i, took, cohort_strerror(st),
             cohort_last_error());
      ASSERT_TRUE(strstr(cohort_last_error(), want) != NULL);
      ASSERT_TRUE(took < 2.0);
      ASSERT_TRUE(i >= 5);
      printf("[rank %d] FAULT-OK\n", R);
      cudaFree(d);
      return;
    }
  }
  TEST_FAIL_("no allreduce failed although rank %d died", N - 1);
}

static void give_up(int sig) {
  (void)sig;
  static const char text[] = "the stream still waits for the dead rank 2 s after the failure: FAIL\n";
  if (write(1, text, sizeof text - 1) < 0) _exit(1);
  _exit(1);
}

/* The last rank dies while the others' streams may be waiting for it (stream-ordered allreduces, queued without
 * waiting): a survivor's call fails naming it, and then its stream does not wait for the dead rank any longer (the
 * abort releases it): synchronizing the stream returns within 2 s. */
TEST(faults_kill_stream) {
  size_t count = 1u << 22;
  float *d = dev_alloc(count * sizeof(float));
  ASSERT_TRUE(d != NULL);
  CUDA_OK(cudaMemset(d, 0, count * sizeof(float)));
  for (int i = 0; i < 200; i++) {
    if (R == N - 1 && i == 50) {
      fprintf(stderr, "[rank %d] dying now, in stream allreduce number %d\n", R, i);
      raise(SIGKILL);
    }
    if (R == N - 1) CUDA_OK(cudaLaunchHostFunc(stream, stall_stream, (void *)(intptr_t)2)); /* the others wait */
    cohort_status st = cohort_allreduce_stream(comm, d, d, count, COHORT_F32, COHORT_SUM, stream);
    if (st != COHORT_OK) {
      char want[32];
      snprintf(want, sizeof want, "rank %d", N - 1);
      printf("[rank %d] stream allreduce %d failed: %s: %s\n", R, i, cohort_strerror(st), cohort_last_error());
      ASSERT_TRUE(strstr(cohort_last_error(), want) != NULL);
      ASSERT_TRUE(i >= 50);
      signal(SIGALRM, give_up);
      alarm(2);
      cudaError_t e = cudaStreamSynchronize(stream); /* whatever it says: it must return */
      alarm(0);
      printf("[rank %d] the stream returned after the failure (%s)\n", R, cudaGetErrorString(e));
      printf("[rank %d] FAULT-OK\n", R);
      cudaFree(d);
      return;
    }
  }
  TEST_FAIL_("no allreduce failed although rank %d died", N - 1);
}

/* Rank 1 calls with another count, then with host memory: every rank fails with a mismatch naming both calls. */
TEST(faults_mismatch) {
  size_t count = 1000;
  float *d = dev_alloc(2 * count * sizeof(float)), host[1001];
  ASSERT_TRUE(d != NULL);
  memset(host, 0, sizeof host);
  CUDA_OK(cudaMemset(d, 0, 2 * count * sizeof(float)));
  COHORT_OK_(cohort_allreduce(comm, d, d, count, COHORT_F32, COHORT_SUM)); /* the path is set up */
  cohort_status st;
  if (getenv("COHORT_TEST_MISMATCH_HOST"))
    st = R == 1 ? cohort_allreduce(comm, host, host, count, COHORT_F32, COHORT_SUM)
                : cohort_allreduce(comm, d, d, count, COHORT_F32, COHORT_SUM);
  else
    st = cohort_allreduce(comm, d, d, count + (R == 1), COHORT_F32, COHORT_SUM);
  printf("[rank %d] mismatched allreduce: %s: %s\n", R, cohort_strerror(st), cohort_last_error());
  ASSERT_EQ(st, COHORT_ERR_MISMATCH);
  printf("[rank %d] FAULT-OK\n", R);
  cudaFree(d);
}

int main(int argc, char **argv) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    printf("SKIP: no usable GPU here (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    return expect_gpu_skip();
  }
  if (cohort_init(&comm) != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s\n", cohort_last_error());
    return 1;
  }
  R = cohort_rank(comm);
  N = cohort_size(comm);
  cudaSetDevice(cohort_local_rank(comm) % count);
  cudaFree(0); /* the context, so that the library sees CUDA loaded */
  if (!cohort_cuda_available()) {
    printf("SKIP: device collectives unavailable: %s\n", cohort_last_error());
    cohort_comm_destroy(comm);
    return expect_gpu_skip();
  }
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  static const cohort_test_case cases[] = {TEST_CASE(matrix),
                                           TEST_CASE(stream),
                                           TEST_CASE(stream_order),
                                           TEST_CASE(faults_kill),
                                           TEST_CASE(faults_kill_stream),
                                           TEST_CASE(faults_mismatch)};
  /* The fault cases only when named: they kill a rank or fail the communicator. */
  int rc = cohort_test_run(argc, argv, cases, argc > 1 ? 6 : 3);
  if (R == 0) printf("transport %s, device path %s\n", cohort_transport_name(comm), cohort_device_path(comm));
  cudaStreamDestroy(stream);
  cohort_comm_destroy(comm);
  return rc;
}
