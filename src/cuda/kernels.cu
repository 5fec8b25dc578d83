/*
 * kernels.cu: the IPC path's reduction and copy kernels. Each launch does several jobs (blockIdx.y picks one), each a
 * grid-stride loop over 16-byte vectors (8 halves, 4 floats, 2 doubles) with a scalar tail; where a pointer is not
 * 16-byte aligned the whole job goes element by element. The half types reduce in float32 and round once, so a sum
 * over N ranks is as exact as float32 allows (the CPU path rounds to the half type after each pairwise step).
 * Integer sums and products wrap around, as on the CPU; AVG divides the wrapped sum, rounding toward zero.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda/internal.h"

namespace {

/* Storage type S, accumulator A, and the conversions between them. */
struct F32 {
  typedef float S;
  typedef float A;
  static __device__ A load(S s) { return s; }
  static __device__ S store(A a) { return a; }
};
struct F64 {
  typedef double S;
  typedef double A;
  static __device__ A load(S s) { return s; }
  static __device__ S store(A a) { return a; }
};
struct F16 {
  typedef uint16_t S;
  typedef float A;
  static __device__ A load(S s) { return __half2float(__ushort_as_half(s)); }
  static __device__ S store(A a) { return __half_as_ushort(__float2half_rn(a)); }
};
struct BF16 {
  typedef uint16_t S;
  typedef float A;
  static __device__ A load(S s) { return __bfloat162float(__ushort_as_bfloat16(s)); }
  static __device__ S store(A a) { return __bfloat16_as_ushort(__float2bfloat16_rn(a)); }
};
template <typename T, typename U> struct Int {
  typedef T S;
  typedef T A;
  static __device__ A load(S s) { return s; }
  static __device__ S store(A a) { return a; }
  typedef U Wrap; /* the unsigned type sums and products wrap in */
};
typedef Int<int32_t, uint32_t> I32;
typedef Int<int64_t, uint64_t> I64;
typedef Int<uint8_t, uint32_t> U8;

template <typename D> struct is_int { static const bool value = false; };
template <typename T, typename U> struct is_int<Int<T, U>> { static const bool value = true; };

template <typename D, int OP> struct Combine {
  static __device__ typename D::A f(typename D::A a, typename D::A b) {
    if (OP == COHORT_MIN) return a < b ? a : b;
    if (OP == COHORT_MAX) return a > b ? a : b;
    if (OP == COHORT_PROD) return a * b;
    return a + b; /* SUM, AVG */
  }
};
template <typename T, typename U, int OP> struct Combine<Int<T, U>, OP> {
  static __device__ T f(T a, T b) {
    if (OP == COHORT_MIN) return a < b ? a : b;
    if (OP == COHORT_MAX) return a > b ? a : b;
    if (OP == COHORT_PROD) return (T)((U)a * (U)b);
    return (T)((U)a + (U)b);
  }
};

template <typename D, int OP> __device__ typename D::S finish(typename D::A acc, int avg_n) {
  if (OP != COHORT_AVG) return D::store(acc);
  if (is_int<D>::value) return (typename D::S)(D::store(acc) / (typename D::S)avg_n);
  return D::store(acc / (typename D::A)avg_n);
}

/* Whether the block is to skip its work: one read of the word (host memory) per block, shared by its threads. */
__device__ bool skipped(const volatile uint32_t *skip) {
  __shared__ int skip_block;
  if (threadIdx.x == 0) skip_block = skip ? (int)*skip : 0;
  __syncthreads();
  return skip_block != 0;
}

struct ReduceParams {
  cc_reduce_job jobs[COHORT__CUDA_IPC_MAX_RANKS];
  int avg_n;
  const volatile uint32_t *skip; /* non-zero there: the communicator was aborted, touch nothing (NULL: never) */
};

template <typename D, int OP, bool VEC> __global__ void __launch_bounds__(512) reduce_kernel(ReduceParams p) {
  typedef typename D::S S;
  typedef typename D::A A;
  if (skipped(p.skip)) return;
  const cc_reduce_job &job = p.jobs[blockIdx.y];
  const size_t count = job.count;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (VEC) {
    const int V = 16 / sizeof(S);
    union Vec {
      uint4 raw;
      S e[16 / sizeof(S)];
    };
    const size_t nvec = count / V;
    for (size_t v = first; v < nvec; v += stride) {
      A acc[V];
      Vec x;
      x.raw = ((const uint4 *)job.in[0])[v];
#pragma unroll
      for (int e = 0; e < V; e++)
        acc[e] = D::load(x.e[e]);
      for (int k = 1; k < job.nin; k++) {
        x.raw = ((const uint4 *)job.in[k])[v];
#pragma unroll
        for (int e = 0; e < V; e++)
          acc[e] = Combine<D, OP>::f(acc[e], D::load(x.e[e]));
      }
#pragma unroll
      for (int e = 0; e < V; e++)
        x.e[e] = finish<D, OP>(acc[e], p.avg_n);
      for (int o = 0; o < job.nout; o++)
        ((uint4 *)job.out[o])[v] = x.raw;
    }
    done = nvec * V;
    if (blockIdx.x != 0) return;
  }
  /* The scalar part: the tail after the vectors (block 0 only), or everything of a misaligned job. */
  const size_t step = VEC ? blockDim.x : stride;
  for (size_t i = done + (VEC ? threadIdx.x : first); i < count; i += step) {
    A acc = D::load(((const S *)job.in[0])[i]);
    for (int k = 1; k < job.nin; k++)
      acc = Combine<D, OP>::f(acc, D::load(((const S *)job.in[k])[i]));
    S r = finish<D, OP>(acc, p.avg_n);
    for (int o = 0; o < job.nout; o++)
      ((S *)job.out[o])[i] = r;
  }
}

int sm_count(void) {
  static int count = 0; /* the IPC path serves one device per process */
  if (!count) {
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || count <= 0) count = 32;
  }
  return count;
}

template <typename D, int OP>
cudaError_t launch_reduce(const ReduceParams &p, int njobs, bool vec, size_t max_count, cudaStream_t stream) {
  const int threads = 512;
  size_t per = vec ? 16 / sizeof(typename D::S) : 1;
  size_t want = (max_count / per + threads - 1) / threads;
  size_t cap = (size_t)sm_count() * 4 / (size_t)njobs;
  if (cap < 1) cap = 1;
  unsigned blocks = (unsigned)(want < 1 ? 1 : want > cap ? cap : want);
  dim3 grid(blocks, (unsigned)njobs);
  /* cudaLaunchKernel says whether this launch failed; cudaGetLastError after <<<>>> could return an earlier error of
   * the program's own, and clear it. */
  void *args[] = {(void *)&p};
  const void *fn = vec ? (const void *)reduce_kernel<D, OP, true> : (const void *)reduce_kernel<D, OP, false>;
  return cudaLaunchKernel(fn, grid, dim3((unsigned)threads), args, 0, stream);
}

template <typename D>
cudaError_t dispatch_op(const ReduceParams &p, int njobs, cohort_op op, bool vec, size_t max_count,
                        cudaStream_t stream) {
  switch (op) {
  case COHORT_SUM:
    return launch_reduce<D, COHORT_SUM>(p, njobs, vec, max_count, stream);
  case COHORT_AVG:
    return launch_reduce<D, COHORT_AVG>(p, njobs, vec, max_count, stream);
  case COHORT_MIN:
    return launch_reduce<D, COHORT_MIN>(p, njobs, vec, max_count, stream);
  case COHORT_MAX:
    return launch_reduce<D, COHORT_MAX>(p, njobs, vec, max_count, stream);
  case COHORT_PROD:
    return launch_reduce<D, COHORT_PROD>(p, njobs, vec, max_count, stream);
  default:
    return cudaErrorInvalidValue;
  }
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

struct CopyParams {
  cc_copy_job jobs[CC_COPY_MAX_JOBS];
  const volatile uint32_t *skip; /* as ReduceParams.skip */
};

__global__ void __launch_bounds__(512) copy_kernel(CopyParams p) {
  if (skipped(p.skip)) return;
  const cc_copy_job &job = p.jobs[blockIdx.y];
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t done = 0;
  if ((((uintptr_t)job.src | (uintptr_t)job.dst) & 15) == 0) {
    const size_t nvec = job.bytes / 16;
    const uint4 *s = (const uint4 *)job.src;
    uint4 *d = (uint4 *)job.dst;
    for (size_t v = first; v < nvec; v += stride)
      d[v] = s[v];
    done = nvec * 16;
  }
  const uint8_t *s = (const uint8_t *)job.src;
  uint8_t *d = (uint8_t *)job.dst;
  for (size_t i = done + first; i < job.bytes; i += stride)
    d[i] = s[i];
}

} // namespace

cohort_status cc_reduce(const cc_reduce_job *jobs, int njobs, cohort_dtype dtype, cohort_op op, int avg_n,
                        cudaStream_t stream, const uint32_t *skip) {
  if (njobs <= 0) return COHORT_OK;
  if (njobs > COHORT__CUDA_IPC_MAX_RANKS) return cc_fail(COHORT_ERR_INTERNAL, "cc_reduce: %d jobs", njobs);
  ReduceParams p;
  memset(&p, 0, sizeof p);
  p.avg_n = avg_n;
  p.skip = skip;
  bool vec = true;
  size_t max_count = 0;
  for (int j = 0; j < njobs; j++) {
    p.jobs[j] = jobs[j];
    for (int k = 0; k < jobs[j].nin; k++)
      vec = vec && aligned16(jobs[j].in[k]);
    for (int o = 0; o < jobs[j].nout; o++)
      vec = vec && aligned16(jobs[j].out[o]);
    if (jobs[j].count > max_count) max_count = jobs[j].count;
  }
  if (!max_count) return COHORT_OK;
  cudaError_t err;
  switch (dtype) {
  case COHORT_F32:
    err = dispatch_op<F32>(p, njobs, op, vec, max_count, stream);
    break;
  case COHORT_F64:
    err = dispatch_op<F64>(p, njobs, op, vec, max_count, stream);
    break;
  case COHORT_F16:
    err = dispatch_op<F16>(p, njobs, op, vec, max_count, stream);
    break;
  case COHORT_BF16:
    err = dispatch_op<BF16>(p, njobs, op, vec, max_count, stream);
    break;
  case COHORT_I32:
    err = dispatch_op<I32>(p, njobs, op, vec, max_count, stream);
    break;
  case COHORT_I64:
    err = dispatch_op<I64>(p, njobs, op, vec, max_count, stream);
    break;
  case COHORT_U8:
    err = dispatch_op<U8>(p, njobs, op, vec, max_count, stream);
    break;
  default:
    return cc_fail(COHORT_ERR_INVALID, "the device reduction has no dtype %d", (int)dtype);
  }
  if (err != cudaSuccess)
    return cc_fail(COHORT_ERR_SYSTEM, "the reduction kernel (dtype %d, op %d) did not launch: %s", (int)dtype, (int)op,
                   cudaGetErrorString(err));
  return COHORT_OK;
}

cohort_status cc_copy(const cc_copy_job *jobs, int njobs, cudaStream_t stream, const uint32_t *skip) {
  if (njobs <= 0) return COHORT_OK;
  if (njobs > CC_COPY_MAX_JOBS) return cc_fail(COHORT_ERR_INTERNAL, "cc_copy: %d jobs", njobs);
  CopyParams p;
  memset(&p, 0, sizeof p);
  p.skip = skip;
  size_t max_bytes = 0;
  for (int j = 0; j < njobs; j++) {
    p.jobs[j] = jobs[j];
    if (jobs[j].bytes > max_bytes) max_bytes = jobs[j].bytes;
  }
  if (!max_bytes) return COHORT_OK;
  const int threads = 512;
  size_t want = (max_bytes / 16 + threads - 1) / threads;
  size_t cap = (size_t)sm_count() * 4 / (size_t)njobs;
  if (cap < 1) cap = 1;
  dim3 grid((unsigned)(want < 1 ? 1 : want > cap ? cap : want), (unsigned)njobs);
  void *args[] = {(void *)&p};
  cudaError_t err = cudaLaunchKernel((const void *)copy_kernel, grid, dim3((unsigned)threads), args, 0, stream);
  if (err != cudaSuccess)
    return cc_fail(COHORT_ERR_SYSTEM, "the copy kernel did not launch: %s", cudaGetErrorString(err));
  return COHORT_OK;
}
