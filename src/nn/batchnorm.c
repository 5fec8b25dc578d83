/*
 * batchnorm.c: BatchNorm2d over NCHW input, per channel, with PyTorch's conventions: the batch variance that
 * normalises is biased, the one folded into running_var is unbiased, and running = (1 - momentum) * running +
 * momentum * batch. Statistics are accumulated in double so that large batches of similar values stay accurate.
 *
 * SyncBatchNorm (a sync fn set on the model, training mode): the statistics are those of the batch of all replicas
 * together, as PyTorch's SyncBatchNorm computes them. Forward hands the fn per-channel [sum x, sum x^2] and the
 * sample count, so replicas with different batch sizes weigh their samples correctly; the unbiased running variance
 * uses the global count. Backward hands it per-channel [sum dy, sum dy * xhat] so that the input gradient is the
 * one of the global batch; the weight and bias gradients stay local sums, which the DDP engine averages like any
 * other gradient. The moments come from one pass (E[x^2] - mean^2), which in double loses accuracy only when
 * |mean| exceeds the standard deviation by many orders of magnitude; the two-pass form would cost a second
 * collective per layer. Without a sync fn the code is the original, bit for bit.
 *
 * aux layout: mean[C], invstd[C] as floats, then 2*C + 1 doubles of sums (8-byte aligned, since 2*C floats are
 * 8*C bytes). The last double keeps the global sample count of the last forward, 0 when it did not sync, so that
 * backward knows which statistics it is differentiating.
 */
#include <math.h>

#include "nn/layer.h"

static cohort_status bn_shape(const cohort__layer *l, const cohort_tensor *x, cohort_tensor *y) {
  if (x->ndim != 4 || x->shape[1] != l->cin)
    return cohort__error(COHORT_ERR_INVALID, "batchnorm2d '%s': expects [N, %d, H, W], got %d dims with %lld channels",
                         l->name, l->cin, x->ndim, (long long)(x->ndim >= 2 ? x->shape[1] : 0));
  if (x->shape[0] * x->shape[2] * x->shape[3] < 2)
    return cohort__error(COHORT_ERR_INVALID, "batchnorm2d '%s': needs more than 1 value per channel", l->name);
  cohort__tensor_set_shape(y, 4, x->shape);
  return COHORT_OK;
}

static size_t bn_aux(const cohort__layer *l, const cohort_tensor *x) {
  return 2 * (size_t)l->cin + 2 * (2 * (size_t)l->cin + 1);
}

static double *bn_sums(cohort__layer *l) { return (double *)(void *)(l->aux + 2 * (size_t)l->cin); }

/* Global mean and 1/sqrt(var + eps) per channel from the replicas' sums; updates the running statistics. Returns
 * COHORT_OK or records a failure in c->status. */
static cohort_status bn_sync_stats(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x) {
  const int n = (int)x->shape[0], ch = l->cin;
  const size_t hw = (size_t)x->shape[2] * x->shape[3], m = (size_t)n * hw;
  float *rmean = c->buffers[l->bidx].value, *rvar = c->buffers[l->bidx + 1].value;
  float *mean = l->aux, *invstd = l->aux + ch;
  double *sums = bn_sums(l);
  for (int k = 0; k < ch; k++) {
    double s = 0.0, s2 = 0.0;
    for (int i = 0; i < n; i++) {
      const float *p = x->data + ((size_t)i * ch + k) * hw;
      for (size_t j = 0; j < hw; j++) {
        s += p[j];
        s2 += (double)p[j] * p[j];
      }
    }
    sums[k] = s;
    sums[ch + k] = s2;
  }
  sums[2 * ch] = (double)m;
  cohort_status st = c->bn_sync(c->bn_sync_user, sums, 2 * (size_t)ch + 1);
  if (st != COHORT_OK) {
    sums[2 * ch] = 0.0;
    return cohort__error_prefix(st, "batchnorm2d '%s': syncing the batch statistics of %zu samples", l->name, m);
  }
  const double total = sums[2 * ch];
  /* A total below this replica's own count means the fn did not sum counts (or replicas called out of step). */
  if (!(total >= (double)m) || total != floor(total)) {
    sums[2 * ch] = 0.0;
    return cohort__error(COHORT_ERR_INVALID,
                         "batchnorm2d '%s': the sync fn returned a sample count of %g, expected the sum over replicas "
                         "(this one has %zu)",
                         l->name, total, m);
  }
  for (int k = 0; k < ch; k++) {
    double mu = sums[k] / total, var = sums[ch + k] / total - mu * mu;
    if (var < 0.0) var = 0.0; /* rounding of E[x^2] - mean^2 for a constant channel */
    mean[k] = (float)mu;
    invstd[k] = (float)(1.0 / sqrt(var + l->eps));
    rmean[k] = (1.0f - l->momentum) * rmean[k] + l->momentum * (float)mu;
    rvar[k] = (1.0f - l->momentum) * rvar[k] + l->momentum * (float)(var * total / (total - 1.0));
  }
  return COHORT_OK;
}

static void bn_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  const int n = (int)x->shape[0], ch = l->cin;
  const size_t hw = (size_t)x->shape[2] * x->shape[3], m = (size_t)n * hw;
  const float *gamma = c->params[l->pidx].value, *beta = c->params[l->pidx + 1].value;
  float *rmean = c->buffers[l->bidx].value, *rvar = c->buffers[l->bidx + 1].value;
  float *mean = l->aux, *invstd = l->aux + ch;
  const int sync = c->training && c->bn_sync;
  bn_sums(l)[2 * ch] = 0.0;
  if (sync) {
    c->status = bn_sync_stats(l, c, x);
    if (c->status != COHORT_OK) return;
  }
  for (int k = 0; k < ch; k++) {
    if (c->training && !sync) {
      double s = 0.0, s2 = 0.0;
      for (int i = 0; i < n; i++) {
        const float *p = x->data + ((size_t)i * ch + k) * hw;
        for (size_t j = 0; j < hw; j++)
          s += p[j];
      }
      double mu = s / (double)m;
      for (int i = 0; i < n; i++) {
        const float *p = x->data + ((size_t)i * ch + k) * hw;
        for (size_t j = 0; j < hw; j++)
          s2 += (p[j] - mu) * (p[j] - mu);
      }
      double var = s2 / (double)m;
      mean[k] = (float)mu;
      invstd[k] = (float)(1.0 / sqrt(var + l->eps));
      rmean[k] = (1.0f - l->momentum) * rmean[k] + l->momentum * (float)mu;
      rvar[k] = (1.0f - l->momentum) * rvar[k] + l->momentum * (float)(s2 / (double)(m - 1));
    } else if (!c->training) {
      mean[k] = rmean[k];
      invstd[k] = (float)(1.0 / sqrt((double)rvar[k] + l->eps));
    }
    const float a = gamma[k] * invstd[k], b = beta[k] - mean[k] * a;
    for (int i = 0; i < n; i++) {
      const float *p = x->data + ((size_t)i * ch + k) * hw;
      float *q = y->data + ((size_t)i * ch + k) * hw;
      for (size_t j = 0; j < hw; j++)
        q[j] = p[j] * a + b;
    }
  }
}

static void bn_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y, float *dy,
                        float *dx) {
  const int n = (int)x->shape[0], ch = l->cin;
  const size_t hw = (size_t)x->shape[2] * x->shape[3], m = (size_t)n * hw;
  cohort_param *gamma = &c->params[l->pidx], *beta = &c->params[l->pidx + 1];
  const float *mean = l->aux, *invstd = l->aux + ch;
  double *sums = bn_sums(l);
  /* Differentiate what forward computed: global statistics need global gradient sums, and the other way round. */
  const double total = c->training ? sums[2 * ch] : 0.0;
  if (total > 0.0 && !c->bn_sync) {
    c->status = cohort__error(COHORT_ERR_INVALID,
                              "batchnorm2d '%s': forward synced the batch statistics but the sync fn was cleared "
                              "before backward",
                              l->name);
    return;
  }
  /* Parameter gradients first, so that their hooks fire before the (longer) input-gradient pass. */
  for (int k = 0; k < ch; k++) {
    double sdy = 0.0, sdyx = 0.0;
    for (int i = 0; i < n; i++) {
      const float *p = x->data + ((size_t)i * ch + k) * hw, *g = dy + ((size_t)i * ch + k) * hw;
      for (size_t j = 0; j < hw; j++) {
        sdy += g[j];
        sdyx += g[j] * (p[j] - mean[k]) * invstd[k];
      }
    }
    gamma->grad[k] += (float)sdyx;
    beta->grad[k] += (float)sdy;
    if (total > 0.0) {
      sums[k] = sdy;
      sums[ch + k] = sdyx;
    }
  }
  c->ready(c->ready_arg, l->pidx + 1);
  c->ready(c->ready_arg, l->pidx);
  if (!dx) return;
  if (total > 0.0) {
    cohort_status st = c->bn_sync(c->bn_sync_user, sums, 2 * (size_t)ch);
    if (st != COHORT_OK) {
      c->status = cohort__error_prefix(st, "batchnorm2d '%s': syncing the gradient sums", l->name);
      return;
    }
    /* PyTorch's SyncBatchNorm backward: the local dy against the global means of dy and dy * xhat. */
    for (int k = 0; k < ch; k++) {
      const float gk = gamma->value[k] * invstd[k];
      const float mdy = (float)(sums[k] / total), mdyx = (float)(sums[ch + k] / total);
      for (int i = 0; i < n; i++) {
        const float *p = x->data + ((size_t)i * ch + k) * hw, *g = dy + ((size_t)i * ch + k) * hw;
        float *d = dx + ((size_t)i * ch + k) * hw;
        for (size_t j = 0; j < hw; j++)
          d[j] = gk * (g[j] - mdy - (p[j] - mean[k]) * invstd[k] * mdyx);
      }
    }
    return;
  }
  for (int k = 0; k < ch; k++) {
    const float gk = gamma->value[k] * invstd[k];
    if (!c->training) {
      for (int i = 0; i < n; i++) {
        const float *g = dy + ((size_t)i * ch + k) * hw;
        float *d = dx + ((size_t)i * ch + k) * hw;
        for (size_t j = 0; j < hw; j++)
          d[j] = g[j] * gk;
      }
      continue;
    }
    /* dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)); the sums are recomputed (cheap, one pass)
     * rather than stored, since gamma->grad may already include earlier micro-batches. */
    double sdy = 0.0, sdyx = 0.0;
    for (int i = 0; i < n; i++) {
      const float *p = x->data + ((size_t)i * ch + k) * hw, *g = dy + ((size_t)i * ch + k) * hw;
      for (size_t j = 0; j < hw; j++) {
        sdy += g[j];
        sdyx += g[j] * (p[j] - mean[k]) * invstd[k];
      }
    }
    const float mdy = (float)(sdy / (double)m), mdyx = (float)(sdyx / (double)m);
    for (int i = 0; i < n; i++) {
      const float *p = x->data + ((size_t)i * ch + k) * hw, *g = dy + ((size_t)i * ch + k) * hw;
      float *d = dx + ((size_t)i * ch + k) * hw;
      for (size_t j = 0; j < hw; j++)
        d[j] = gk * (g[j] - mdy - (p[j] - mean[k]) * invstd[k] * mdyx);
    }
  }
}

const cohort__layer_ops cohort__batchnorm2d_ops = {"batchnorm2d", bn_shape, bn_aux, bn_forward, bn_backward, 0};
