/*
 * kernels.cu: the elementwise and small-reduction kernels of the training stack: the batch gather, bias with ReLU,
 * ReLU, the bias gradients, max pooling, softmax cross-entropy and the accuracy count.
 *
 * Every reduction runs in a fixed order (a fixed grid, per-thread partial sums, then a tree in shared memory), never
 * with floating-point atomics: the same inputs give the same bits on every rank and every run, which keeps replicas
 * identical and runs comparable. Numerics follow the CPU reference (src/nn): the loss in double, the first maximum
 * of a pooling window wins and NaN propagates.
 */
#include <math.h>

#include "nn_cuda/internal.h"

static inline unsigned blocks_for(size_t total, unsigned threads) {
  size_t b = (total + threads - 1) / threads;
  return (unsigned)(b > 65535u * 16u ? 65535u * 16u : (b ? b : 1));
}

/* ---- the batch ---- */

__global__ void gather_kernel(const long long *order, const nnc_counters *c, const float *xs, const int32_t *ys,
                              unsigned per, unsigned n, float *x, int32_t *y) {
  const long long base = c->cursor;
  const unsigned total = n * per;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const unsigned row = i / per, col = i - row * per;
    const long long src = order[base + (long long)row];
    x[i] = xs[(size_t)src * per + col];
    if (col == 0) y[row] = ys[src];
  }
}

int nnc_gather(cudaStream_t s, const long long *order, const nnc_counters *c, const float *xs, const int32_t *ys,
               size_t per, int n, float *x, int32_t *y) {
  if ((size_t)n * per >= (1u << 31)) return nnc_fail("gathering a batch of %d: past 32-bit indexing", n);
  gather_kernel<<<blocks_for((size_t)n * per, 256), 256, 0, s>>>(order, c, xs, ys, (unsigned)per, (unsigned)n, x, y);
  NNC_LAUNCHED("gathering the batch (gather_kernel)");
  return 0;
}

/* ---- bias, ReLU ---- */

__global__ void bias_act_kernel(float *y, const float *b, unsigned total, unsigned c, unsigned hw, int relu) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    float v = y[i] + b[(i / hw) % c];
    y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
  }
}

int nnc_bias_act(cudaStream_t s, float *y, const float *b, int n, int c, int hw, int relu) {
  const size_t total = (size_t)n * c * hw;
  if (total >= (1u << 31)) return nnc_fail("bias: %zu values is past 32-bit indexing", total);
  bias_act_kernel<<<blocks_for(total, 256), 256, 0, s>>>(y, b, (unsigned)total, (unsigned)c, (unsigned)hw, relu);
  NNC_LAUNCHED("bias and activation (bias_act_kernel)");
  return 0;
}

/* x > 0 ? x : 0, the CPU's form (nn/kernels.h masks with x > 0): NaN becomes 0 on both, and the gradient at 0 is 0 as
 * in PyTorch. */
__global__ void relu_forward_kernel(const float *x, float *y, size_t total) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_backward_kernel(const float *y, const float *dy, float *dx, size_t total) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

int nnc_relu_forward(cudaStream_t s, const float *x, float *y, size_t total) {
  relu_forward_kernel<<<blocks_for(total, 256), 256, 0, s>>>(x, y, total);
  NNC_LAUNCHED("relu forward");
  return 0;
}

int nnc_relu_backward(cudaStream_t s, const float *y, const float *dy, float *dx, size_t total) {
  relu_backward_kernel<<<blocks_for(total, 256), 256, 0, s>>>(y, dy, dx, total);
  NNC_LAUNCHED("relu backward");
  return 0;
}

/* Stage one of a bias gradient: block (x, ch) sums every gridDim.x-th run of channel ch's n * hw gradients, masked
 * in place by the fused ReLU's output when y is given; stage two adds a channel's partials in order. Two stages over
 * a fixed grid keep the sum's order fixed (the same bits on every rank) while enough blocks run at once. */
__global__ void bias_grad_partial_kernel(float *dy, const float *y, unsigned n, unsigned c, unsigned hw,
                                         float *partial) {
  __shared__ float part[256];
  const unsigned ch = blockIdx.y, per_channel = n * hw;
  float sum = 0.0f;
  for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < per_channel; k += gridDim.x * blockDim.x) {
    const unsigned img = k / hw, at = k - img * hw;
    const unsigned i = (img * c + ch) * hw + at;
    float g = dy[i];
    if (y && !(y[i] > 0.0f)) {
      g = 0.0f;
      dy[i] = 0.0f;
    }
    sum += g;
  }
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if ((int)threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[ch * gridDim.x + blockIdx.x] = part[0];
}

__global__ void bias_grad_sum_kernel(const float *partial, unsigned parts, unsigned c, float *db) {
  const unsigned ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  float sum = 0.0f;
  for (unsigned k = 0; k < parts; k++)
    sum += partial[ch * parts + k];
  db[ch] = sum;
}

int nnc_bias_grad(cudaStream_t s, float *dy, const float *y, int n, int c, int hw, float *db, float *partial) {
  const size_t per_channel = (size_t)n * hw;
  if (per_channel * c >= (1u << 31))
    return nnc_fail("bias gradient: %zu values is past 32-bit indexing", per_channel * c);
  unsigned parts = (unsigned)(per_channel / 4096);
  parts = parts < 1 ? 1 : (parts > NNC_BIAS_PARTS ? NNC_BIAS_PARTS : parts);
  bias_grad_partial_kernel<<<dim3(parts, (unsigned)c), 256, 0, s>>>(dy, y, (unsigned)n, (unsigned)c, (unsigned)hw,
                                                                    partial);
  NNC_LAUNCHED("bias gradient (bias_grad_partial_kernel)");
  bias_grad_sum_kernel<<<(c + 127) / 128, 128, 0, s>>>(partial, parts, (unsigned)c, db);
  NNC_LAUNCHED("bias gradient (bias_grad_sum_kernel)");
  return 0;
}

/* ---- max pooling ---- */

/* Indices in 32 bits (checked by the launchers): 64-bit division is emulated and made pooling compute-bound. */
__global__ void maxpool_forward_kernel(const float *x, float *y, uint8_t *arg, unsigned planes, unsigned h, unsigned w,
                                       unsigned k, unsigned s, unsigned oh, unsigned ow) {
  const unsigned total = planes * oh * ow;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const unsigned row = i / ow, ox = i - row * ow, plane = row / oh, oy = row - plane * oh;
    const float *in = x + (size_t)plane * h * w + (oy * s) * w + ox * s;
    float m = in[0];
    unsigned best = 0;
    for (unsigned dy = 0; dy < k; dy++)
      for (unsigned dx = 0; dx < k; dx++) {
        const float v = in[dy * w + dx];
        if (v > m || v != v) {
          m = v;
          best = dy * k + dx;
        }
      }
    y[i] = m;
    arg[i] = (uint8_t)best;
  }
}

/* Windows that tile the input (stride = kernel, sizes divisible): each output writes its own window of dx, the
 * winner's gradient and zeros, with no search. */
__global__ void maxpool_backward_tiled_kernel(const float *dy, const uint8_t *arg, float *dx, unsigned planes,
                                              unsigned h, unsigned w, unsigned k, unsigned oh, unsigned ow) {
  const unsigned total = planes * oh * ow;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const unsigned row = i / ow, ox = i - row * ow, plane = row / oh, oy = row - plane * oh;
    float *out = dx + (size_t)plane * h * w + (oy * k) * w + ox * k;
    const unsigned at = arg[i];
    const float g = dy[i];
    for (unsigned a = 0; a < k; a++)
      for (unsigned b = 0; b < k; b++)
        out[a * w + b] = a * k + b == at ? g : 0.0f;
  }
}

/* Per input element: the sum of the gradients of the windows whose winner it is (one window unless they overlap). */
__global__ void maxpool_backward_kernel(const float *dy, const uint8_t *arg, float *dx, unsigned planes, int h, int w,
                                        int k, int s, int oh, int ow) {
  const unsigned total = planes * (unsigned)h * (unsigned)w;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const unsigned row = i / (unsigned)w, plane = row / (unsigned)h;
    const int xx = (int)(i - row * (unsigned)w), yy = (int)(row - plane * (unsigned)h);
    const int oy_lo = yy >= k ? (yy - k) / s + 1 : 0, ox_lo = xx >= k ? (xx - k) / s + 1 : 0;
    const int oy_hi = min(yy / s, oh - 1), ox_hi = min(xx / s, ow - 1);
    float g = 0.0f;
    for (int oy = oy_lo; oy <= oy_hi; oy++)
      for (int ox = ox_lo; ox <= ox_hi; ox++) {
        const size_t o = (size_t)plane * oh * ow + (size_t)oy * ow + ox;
        const int at = arg[o];
        if (oy * s + at / k == yy && ox * s + at % k == xx) g += dy[o];
      }
    dx[i] = g;
  }
}

int nnc_maxpool_forward(cudaStream_t s, const nnc_layer *l, const float *x, int n) {
  const size_t planes = (size_t)n * l->in_c, total = planes * l->out_h * l->out_w;
  if (planes * l->in_h * l->in_w >= (1u << 31)) return nnc_fail("maxpool2d: past 32-bit indexing");
  maxpool_forward_kernel<<<blocks_for(total, 256), 256, 0, s>>>(x, l->y, l->argmax, (unsigned)planes, l->in_h, l->in_w,
                                                                l->info.kernel, l->info.stride, l->out_h, l->out_w);
  NNC_LAUNCHED("maxpool2d forward");
  return 0;
}

int nnc_maxpool_backward(cudaStream_t s, const nnc_layer *l, float *dx, int n) {
  const size_t planes = (size_t)n * l->in_c, total = planes * l->in_h * l->in_w;
  const int k = l->info.kernel;
  if (total >= (1u << 31)) return nnc_fail("maxpool2d: past 32-bit indexing");
  if (l->info.stride == k && l->in_h == l->out_h * k && l->in_w == l->out_w * k) {
    const size_t outs = planes * l->out_h * l->out_w;
    maxpool_backward_tiled_kernel<<<blocks_for(outs, 256), 256, 0, s>>>(l->dy, l->argmax, dx, (unsigned)planes, l->in_h,
                                                                        l->in_w, k, l->out_h, l->out_w);
  } else {
    maxpool_backward_kernel<<<blocks_for(total, 256), 256, 0, s>>>(l->dy, l->argmax, dx, (unsigned)planes, l->in_h,
                                                                   l->in_w, k, l->info.stride, l->out_h, l->out_w);
  }
  NNC_LAUNCHED("maxpool2d backward");
  return 0;
}

/* ---- loss ---- */

/* One block: each thread takes rows i, i + 256, ...; the row's log-sum-exp in double as loss.c computes it; the
 * gradient (softmax - onehot) / n rounded the same way; the mean loss from a tree of double partial sums. */
__global__ void softmax_xent_kernel(const float *logits, const int32_t *labels, int n, int c, float *dlogits,
                                    float *loss) {
  __shared__ double part[256];
  double total = 0.0;
  const float inv_n = (float)(1.0 / (double)n);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float *z = logits + (size_t)i * c;
    int arg = 0;
    for (int j = 1; j < c; j++)
      if (z[j] > z[arg]) arg = j;
    const double zmax = z[arg];
    double sum = 0.0;
    for (int j = 0; j < c; j++)
      sum += exp((double)z[j] - zmax);
    const double lse = zmax + log(sum);
    const int label = labels[i];
    total += lse - (double)z[label];
    float *g = dlogits + (size_t)i * c;
    for (int j = 0; j < c; j++)
      g[j] = (float)(exp((double)z[j] - lse) / (double)n);
    g[label] -= inv_n;
  }
  part[threadIdx.x] = total;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if ((int)threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = (float)(part[0] / (double)n);
}

int nnc_softmax_xent(cudaStream_t s, const float *logits, const int32_t *labels, int n, int classes, float *dlogits,
                     float *loss) {
  softmax_xent_kernel<<<1, 256, 0, s>>>(logits, labels, n, classes, dlogits, loss);
  NNC_LAUNCHED("softmax cross-entropy");
  return 0;
}

/* Integer atomics are exact, so their order does not matter. */
__global__ void count_correct_kernel(const float *logits, const int32_t *labels, int n, int c, long long *correct) {
  __shared__ int hits;
  if (threadIdx.x == 0) hits = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float *z = logits + (size_t)i * c;
    int arg = 0;
    for (int j = 1; j < c; j++)
      if (z[j] > z[arg]) arg = j;
    if (arg == labels[i]) atomicAdd(&hits, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0 && hits) atomicAdd((unsigned long long *)correct, (unsigned long long)hits);
}

int nnc_count_correct(cudaStream_t s, const float *logits, const int32_t *labels, int n, int classes,
                      long long *correct) {
  count_correct_kernel<<<blocks_for((size_t)n, 256), 256, 0, s>>>(logits, labels, n, classes, correct);
  NNC_LAUNCHED("counting the correct answers");
  return 0;
}
