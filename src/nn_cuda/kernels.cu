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
                              size_t per, int n, float *x, int32_t *y) {
  const long long base = c->cursor;
  const size_t total = (size_t)n * per;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    const size_t row = i / per, col = i % per;
    const long long src = order[base + (long long)row];
    x[i] = xs[(size_t)src * per + col];
    if (col == 0) y[row] = ys[src];
  }
}

int nnc_gather(cudaStream_t s, const long long *order, const nnc_counters *c, const float *xs, const int32_t *ys,
               size_t per, int n, float *x, int32_t *y) {
  gather_kernel<<<blocks_for((size_t)n * per, 256), 256, 0, s>>>(order, c, xs, ys, per, n, x, y);
  NNC_LAUNCHED("gathering the batch (gather_kernel)");
  return 0;
}

/* ---- bias, ReLU ---- */

__global__ void bias_act_kernel(float *y, const float *b, size_t total, int c, int hw, int relu) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    float v = y[i] + b[(i / (size_t)hw) % (size_t)c];
    y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
  }
}

int nnc_bias_act(cudaStream_t s, float *y, const float *b, int n, int c, int hw, int relu) {
  const size_t total = (size_t)n * c * hw;
  bias_act_kernel<<<blocks_for(total, 256), 256, 0, s>>>(y, b, total, c, hw, relu);
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

/* One block per channel: its n * hw gradients, masked in place by the fused ReLU's output when y is given. */
__global__ void bias_grad_kernel(float *dy, const float *y, int n, int c, int hw, float *db) {
  __shared__ float part[256];
  const int ch = blockIdx.x;
  const size_t per_channel = (size_t)n * hw;
  float sum = 0.0f;
  for (size_t k = threadIdx.x; k < per_channel; k += blockDim.x) {
    const size_t img = k / (size_t)hw, at = k % (size_t)hw;
    const size_t i = (img * (size_t)c + (size_t)ch) * (size_t)hw + at;
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
  if (threadIdx.x == 0) db[ch] = part[0];
}

int nnc_bias_grad(cudaStream_t s, float *dy, const float *y, int n, int c, int hw, float *db) {
  bias_grad_kernel<<<c, 256, 0, s>>>(dy, y, n, c, hw, db);
  NNC_LAUNCHED("bias gradient (bias_grad_kernel)");
  return 0;
}

/* ---- max pooling ---- */

__global__ void maxpool_forward_kernel(const float *x, float *y, uint8_t *arg, int planes, int h, int w, int k, int s,
                                       int oh, int ow) {
  const size_t total = (size_t)planes * oh * ow;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    const int ox = (int)(i % (size_t)ow), oy = (int)((i / (size_t)ow) % (size_t)oh);
    const size_t plane = i / ((size_t)oh * ow);
    const float *in = x + plane * (size_t)h * w + (size_t)(oy * s) * w + (size_t)(ox * s);
    float m = in[0];
    int best = 0;
    for (int dy = 0; dy < k; dy++)
      for (int dx = 0; dx < k; dx++) {
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

/* Per input element: the sum of the gradients of the windows whose winner it is (one window unless they overlap). */
__global__ void maxpool_backward_kernel(const float *dy, const uint8_t *arg, float *dx, int planes, int h, int w, int k,
                                        int s, int oh, int ow) {
  const size_t total = (size_t)planes * h * w;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    const int xx = (int)(i % (size_t)w), yy = (int)((i / (size_t)w) % (size_t)h);
    const size_t plane = i / ((size_t)h * w);
    const int oy_lo = yy >= k ? (yy - k) / s + 1 : 0, ox_lo = xx >= k ? (xx - k) / s + 1 : 0;
    const int oy_hi = min(yy / s, oh - 1), ox_hi = min(xx / s, ow - 1);
    float g = 0.0f;
    for (int oy = oy_lo; oy <= oy_hi; oy++)
      for (int ox = ox_lo; ox <= ox_hi; ox++) {
        const size_t o = plane * (size_t)oh * ow + (size_t)oy * ow + ox;
        const int at = arg[o];
        if (oy * s + at / k == yy && ox * s + at % k == xx) g += dy[o];
      }
    dx[i] = g;
  }
}

int nnc_maxpool_forward(cudaStream_t s, const nnc_layer *l, const float *x, int n) {
  const int planes = n * l->in_c;
  const size_t total = (size_t)planes * l->out_h * l->out_w;
  maxpool_forward_kernel<<<blocks_for(total, 256), 256, 0, s>>>(x, l->y, l->argmax, planes, l->in_h, l->in_w,
                                                                l->info.kernel, l->info.stride, l->out_h, l->out_w);
  NNC_LAUNCHED("maxpool2d forward");
  return 0;
}

int nnc_maxpool_backward(cudaStream_t s, const nnc_layer *l, float *dx, int n) {
  const int planes = n * l->in_c;
  const size_t total = (size_t)planes * l->in_h * l->in_w;
  maxpool_backward_kernel<<<blocks_for(total, 256), 256, 0, s>>>(l->dy, l->argmax, dx, planes, l->in_h, l->in_w,
                                                                 l->info.kernel, l->info.stride, l->out_h, l->out_w);
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
