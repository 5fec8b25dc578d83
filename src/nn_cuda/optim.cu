/*
 * optim.cu: the update on the GPU: SGD (momentum, dampening, Nesterov, coupled weight decay, LARS/LARC's trust ratio
 * per weight tensor) and AdamW, with torch.optim's rules as src/nn/optim.c writes them, every tensor in one launch.
 *
 * Four launches, all capturable (they read the rate, the step count and the position from device memory):
 *   norms   LARS only: partial sums of w^2 and g^2 per tensor over a fixed grid, in double;
 *   prep    one block: the trust ratio per tensor from those partials (in a fixed order: the same bits on every rank,
 *           so replicas stay identical) and the step's scalars (rate, first step, AdamW's bias corrections);
 *   update  the rule, element by element;
 *   advance the counters: position, schedule, optimizer steps, loss sum.
 * The elementwise arithmetic uses __fmul_rn/__fadd_rn where the CPU's C (ISO mode: no contraction) rounds each
 * operation, so that one step is the CPU's to the last bit or very near it.
 */
#include <math.h>

#include "nn_cuda/internal.h"

enum { SC_LR = 0, SC_FIRST, SC_STEP_SIZE, SC_BC2_SQRT, SC_DECAY, SC_COUNT };

__global__ void norms_kernel(const float *w, const float *g, nnc_tensors t, double *partial) {
  __shared__ double sw[256], sg[256];
  const int k = blockIdx.y;
  double a = 0.0, b = 0.0;
  if (t.layerwise[k]) {
    const float *wk = w + t.off[k], *gk = g + t.off[k];
    for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < t.numel[k];
         j += (long long)gridDim.x * blockDim.x) {
      a += (double)wk[j] * wk[j];
      b += (double)gk[j] * gk[j];
    }
  }
  sw[threadIdx.x] = a;
  sg[threadIdx.x] = b;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if ((int)threadIdx.x < stride) {
      sw[threadIdx.x] += sw[threadIdx.x + stride];
      sg[threadIdx.x] += sg[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partial[(size_t)(k * gridDim.x + blockIdx.x) * 2] = sw[0];
    partial[(size_t)(k * gridDim.x + blockIdx.x) * 2 + 1] = sg[0];
  }
}

__global__ void prep_kernel(nnc_tensors t, nnc_optim o, const double *partial, int nblocks, const float *lr_sched,
                            long long lr_n, const nnc_counters *c, float *trust, float *scalars) {
  long long at = c->lr_step < lr_n ? c->lr_step : lr_n - 1;
  const float lr = lr_sched[at < 0 ? 0 : at];
  const int k = threadIdx.x;
  if (k < t.n) {
    float r = 1.0f;
    if (t.layerwise[k]) {
      double ww = 0.0, gg = 0.0;
      for (int i = 0; i < nblocks; i++) {
        ww += partial[(size_t)(k * nblocks + i) * 2];
        gg += partial[(size_t)(k * nblocks + i) * 2 + 1];
      }
      const double wn = sqrt(ww), gn = sqrt(gg);
      if (wn > 0.0 && gn > 0.0) {
        const double q = (double)o.trust_coefficient * wn / (gn + (double)o.weight_decay * wn);
        if (o.trust_clip)
          r = lr > 0.0f && q < (double)lr ? (float)(q / (double)lr) : 1.0f;
        else
          r = (float)q;
      }
    }
    trust[k] = r;
  }
  if (k == 0) {
    const double steps = (double)c->optim_steps + 1.0;
    scalars[SC_LR] = lr;
    scalars[SC_FIRST] = c->optim_steps == 0 ? 1.0f : 0.0f;
    scalars[SC_STEP_SIZE] = (float)((double)lr / (1.0 - pow((double)o.beta1, steps)));
    scalars[SC_BC2_SQRT] = (float)sqrt(1.0 - pow((double)o.beta2, steps));
    scalars[SC_DECAY] = 1.0f - lr * o.weight_decay;
  }
}

__global__ void sgd_kernel(float *w, const float *g, float *buf, nnc_tensors t, nnc_optim o, const float *trust,
                           const float *scalars) {
  const int k = blockIdx.y;
  const float lr = scalars[SC_LR], tr = trust[k], wd = o.weight_decay, mu = o.momentum, damp = 1.0f - o.dampening;
  const int first = scalars[SC_FIRST] != 0.0f;
  float *wk = w + t.off[k];
  const float *gk = g + t.off[k];
  float *bk = buf ? buf + t.off[k] : NULL;
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < t.numel[k];
       j += (long long)gridDim.x * blockDim.x) {
    const float wj = wk[j];
    const float d = __fmul_rn(wd != 0.0f ? __fadd_rn(gk[j], __fmul_rn(wd, wj)) : gk[j], tr);
    float step = d;
    if (bk) {
      const float b = first ? d : __fadd_rn(__fmul_rn(bk[j], mu), __fmul_rn(damp, d));
      bk[j] = b;
      step = o.nesterov ? __fadd_rn(d, __fmul_rn(mu, b)) : b;
    }
    wk[j] = __fadd_rn(wj, -__fmul_rn(lr, step));
  }
}

/* AdamW's state for parameter k: exp_avg at 2 * off[k], exp_avg_sq right after it (cohort_optim_state's order). */
__global__ void adamw_kernel(float *w, const float *g, float *state, nnc_tensors t, nnc_optim o, const float *scalars) {
  const int k = blockIdx.y;
  const float b1 = o.beta1, b2 = o.beta2, eps = o.eps;
  const float step_size = scalars[SC_STEP_SIZE], bc2_sqrt = scalars[SC_BC2_SQRT], decay = scalars[SC_DECAY];
  float *wk = w + t.off[k], *m = state + 2 * t.off[k], *v = m + t.numel[k];
  const float *gk = g + t.off[k];
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < t.numel[k];
       j += (long long)gridDim.x * blockDim.x) {
    const float gj = gk[j];
    float wj = __fmul_rn(wk[j], decay);
    const float mj = __fadd_rn(__fmul_rn(m[j], b1), __fmul_rn(1.0f - b1, gj));
    const float vj = __fadd_rn(__fmul_rn(v[j], b2), __fmul_rn(__fmul_rn(1.0f - b2, gj), gj));
    m[j] = mj;
    v[j] = vj;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vj), bc2_sqrt), eps);
    wk[j] = __fadd_rn(wj, -__fmul_rn(step_size, __fdiv_rn(mj, denom)));
  }
}

__global__ void advance_kernel(nnc_counters *c, int batch, const float *loss) {
  c->cursor += batch;
  c->lr_step += 1;
  c->optim_steps += 1;
  c->loss_sum += (double)*loss;
  c->loss_steps += 1;
}

int nnc_optim_update(cohort__nnc_net *net, int batch) {
  cudaStream_t s = net->stream;
  const nnc_tensors *t = &net->tensors;
  long long most = 1;
  int layerwise = 0;
  for (int k = 0; k < t->n; k++) {
    if (t->numel[k] > most) most = t->numel[k];
    layerwise |= t->layerwise[k];
  }
  if (layerwise) {
    norms_kernel<<<dim3(NNC_NORM_BLOCKS, t->n), 256, 0, s>>>(net->params, net->grads, *t, net->norm_partial);
    NNC_LAUNCHED("optimizer: LARS norms (norms_kernel)");
  }
  prep_kernel<<<1, 32, 0, s>>>(*t, net->optim, net->norm_partial, NNC_NORM_BLOCKS, net->lr, (long long)net->lr_n,
                               net->counters, net->trust, net->scalars);
  NNC_LAUNCHED("optimizer: trust ratios and scalars (prep_kernel)");
  long long blocks = (most + 1023) / 1024;
  dim3 grid((unsigned)(blocks > 4096 ? 4096 : blocks), (unsigned)t->n);
  if (net->optim.kind == COHORT__NNC_ADAMW) {
    adamw_kernel<<<grid, 256, 0, s>>>(net->params, net->grads, net->state, *t, net->optim, net->scalars);
    NNC_LAUNCHED("optimizer: AdamW update (adamw_kernel)");
  } else {
    sgd_kernel<<<grid, 256, 0, s>>>(net->params, net->grads, net->optim.momentum != 0.0f ? net->state : NULL, *t,
                                    net->optim, net->trust, net->scalars);
    NNC_LAUNCHED("optimizer: SGD update (sgd_kernel)");
  }
  advance_kernel<<<1, 1, 0, s>>>(net->counters, batch, net->grads + net->count);
  NNC_LAUNCHED("optimizer: advancing the counters (advance_kernel)");
  return 0;
}
