/*
 * batchnorm.c: BatchNorm2d over NCHW input, per channel, with PyTorch's conventions: the batch variance that
 * normalises is biased, the one folded into running_var is unbiased, and running = (1 - momentum) * running +
 * momentum * batch. Statistics are accumulated in double so that large batches of similar values stay accurate.
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

/* mean and 1/sqrt(var + eps) per channel, as used by the last forward. */
static size_t bn_aux(const cohort__layer *l, const cohort_tensor *x) { return 2 * (size_t)l->cin; }

static void bn_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  const int n = (int)x->shape[0], ch = l->cin;
  const size_t hw = (size_t)x->shape[2] * x->shape[3], m = (size_t)n * hw;
  const float *gamma = c->params[l->pidx].value, *beta = c->params[l->pidx + 1].value;
  float *rmean = c->buffers[l->bidx].value, *rvar = c->buffers[l->bidx + 1].value;
  float *mean = l->aux, *invstd = l->aux + ch;
  for (int k = 0; k < ch; k++) {
    if (c->training) {
      double s = 0.0, s2 = 0.0;
      for (int i = 0; i < n; i++) {
        const float *p = x->data + ((size_t)i * ch + k) * hw;
        for (size_t j = 0; j < hw; j++) s += p[j];
      }
      double mu = s / (double)m;
      for (int i = 0; i < n; i++) {
        const float *p = x->data + ((size_t)i * ch + k) * hw;
        for (size_t j = 0; j < hw; j++) s2 += (p[j] - mu) * (p[j] - mu);
      }
      double var = s2 / (double)m;
      mean[k] = (float)mu;
      invstd[k] = (float)(1.0 / sqrt(var + l->eps));
      rmean[k] = (1.0f - l->momentum) * rmean[k] + l->momentum * (float)mu;
      rvar[k] = (1.0f - l->momentum) * rvar[k] + l->momentum * (float)(s2 / (double)(m - 1));
    } else {
      mean[k] = rmean[k];
      invstd[k] = (float)(1.0 / sqrt((double)rvar[k] + l->eps));
    }
    const float a = gamma[k] * invstd[k], b = beta[k] - mean[k] * a;
    for (int i = 0; i < n; i++) {
      const float *p = x->data + ((size_t)i * ch + k) * hw;
      float *q = y->data + ((size_t)i * ch + k) * hw;
      for (size_t j = 0; j < hw; j++) q[j] = p[j] * a + b;
    }
  }
}

static void bn_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y,
                        float *dy, float *dx) {
  const int n = (int)x->shape[0], ch = l->cin;
  const size_t hw = (size_t)x->shape[2] * x->shape[3], m = (size_t)n * hw;
  cohort_param *gamma = &c->params[l->pidx], *beta = &c->params[l->pidx + 1];
  const float *mean = l->aux, *invstd = l->aux + ch;
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
  }
  c->ready(c->ready_arg, l->pidx + 1);
  c->ready(c->ready_arg, l->pidx);
  if (!dx) return;
  for (int k = 0; k < ch; k++) {
    const float gk = gamma->value[k] * invstd[k];
    if (!c->training) {
      for (int i = 0; i < n; i++) {
        const float *g = dy + ((size_t)i * ch + k) * hw;
        float *d = dx + ((size_t)i * ch + k) * hw;
        for (size_t j = 0; j < hw; j++) d[j] = g[j] * gk;
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
      for (size_t j = 0; j < hw; j++) d[j] = gk * (g[j] - mdy - (p[j] - mean[k]) * invstd[k] * mdyx);
    }
  }
}

const cohort__layer_ops cohort__batchnorm2d_ops = {"batchnorm2d", bn_shape, bn_aux, bn_forward, bn_backward, 0};
