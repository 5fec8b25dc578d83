/*
 * pool.c: 2-d max pooling (no padding, floor mode, as F.max_pool2d's defaults). Forward records the argmax of each
 * window (the first maximum, as PyTorch) so that backward routes each gradient to exactly one input.
 */
#include <stdint.h>
#include <string.h>

#include "nn/layer.h"

static cohort_status pool_shape(const cohort__layer *l, const cohort_tensor *x, cohort_tensor *y) {
  if (x->ndim != 4 || x->shape[2] < l->kernel || x->shape[3] < l->kernel)
    return cohort__error(COHORT_ERR_INVALID, "maxpool2d (layer %s): expects [N, C, H, W] with H, W >= %d, got %d dims",
                         l->name, l->kernel, x->ndim);
  int64_t shape[4] = {x->shape[0], x->shape[1], (x->shape[2] - l->kernel) / l->stride + 1,
                      (x->shape[3] - l->kernel) / l->stride + 1};
  cohort__tensor_set_shape(y, 4, shape);
  return COHORT_OK;
}

/* One int32 input offset per output element. */
static size_t pool_aux(const cohort__layer *l, const cohort_tensor *x) {
  return (size_t)x->shape[0] * x->shape[1] * ((x->shape[2] - l->kernel) / l->stride + 1) *
         ((x->shape[3] - l->kernel) / l->stride + 1);
}

/*
 * The reference CNN's pooling, 4 windows at a time: the even and odd columns of both rows are split apart with
 * shuffles and compared in the same order as the general loop (first maximum wins, NaN propagates).
 */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4i take(v4i mask, v4i a, v4i b) { return (a & mask) | (b & ~mask); }

static void pool2x2(const float *restrict xs, int planes, int h, int w, int oh, int ow, float *restrict ys,
                    int32_t *restrict arg) {
  for (int p = 0; p < planes; p++) {
    const float *in = xs + (size_t)p * h * w;
    float *out = ys + (size_t)p * oh * ow;
    int32_t *a = arg + (size_t)p * oh * ow;
    for (int oy = 0; oy < oh; oy++) {
      const float *r0 = in + (size_t)(2 * oy) * w, *r1 = r0 + w;
      const int base = 2 * oy * w;
      int ox = 0;
      for (; ox + 4 <= ow && 2 * ox + 8 <= w; ox += 4) {
        v4f a0, a1, b0, b1;
        memcpy(&a0, r0 + 2 * ox, 16);
        memcpy(&a1, r0 + 2 * ox + 4, 16);
        memcpy(&b0, r1 + 2 * ox, 16);
        memcpy(&b1, r1 + 2 * ox + 4, 16);
        v4f cand[3] = {__builtin_shufflevector(a0, a1, 1, 3, 5, 7), __builtin_shufflevector(b0, b1, 0, 2, 4, 6),
                       __builtin_shufflevector(b0, b1, 1, 3, 5, 7)};
        const int offs[3] = {1, w, w + 1};
        v4f m = __builtin_shufflevector(a0, a1, 0, 2, 4, 6);
        v4i idx = {base + 2 * ox, base + 2 * ox + 2, base + 2 * ox + 4, base + 2 * ox + 6}, first = idx;
        for (int c = 0; c < 3; c++) {
          v4i better = (cand[c] > m) | (cand[c] != cand[c]);
          m = (v4f)take(better, (v4i)cand[c], (v4i)m);
          idx = take(better, first + offs[c], idx);
        }
        memcpy(out + oy * ow + ox, &m, 16);
        memcpy(a + oy * ow + ox, &idx, 16);
      }
      for (; ox < ow; ox++) {
        float m = r0[2 * ox];
        int best = base + 2 * ox;
        if (r0[2 * ox + 1] > m || r0[2 * ox + 1] != r0[2 * ox + 1]) m = r0[2 * ox + 1], best = base + 2 * ox + 1;
        if (r1[2 * ox] > m || r1[2 * ox] != r1[2 * ox]) m = r1[2 * ox], best = base + w + 2 * ox;
        if (r1[2 * ox + 1] > m || r1[2 * ox + 1] != r1[2 * ox + 1]) m = r1[2 * ox + 1], best = base + w + 2 * ox + 1;
        out[oy * ow + ox] = m;
        a[oy * ow + ox] = best;
      }
    }
  }
}

static void pool_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  const int planes = (int)(x->shape[0] * x->shape[1]), h = (int)x->shape[2], w = (int)x->shape[3];
  const int oh = (int)y->shape[2], ow = (int)y->shape[3], k = l->kernel, s = l->stride;
  int32_t *arg = (int32_t *)l->aux;
  if (k == 2 && s == 2) {
    pool2x2(x->data, planes, h, w, oh, ow, y->data, arg);
    return;
  }
  for (int p = 0; p < planes; p++) {
    const float *in = x->data + (size_t)p * h * w;
    float *out = y->data + (size_t)p * oh * ow;
    int32_t *a = arg + (size_t)p * oh * ow;
    for (int oy = 0; oy < oh; oy++) {
      for (int ox = 0; ox < ow; ox++) {
        int best = oy * s * w + ox * s;
        float m = in[best];
        for (int ky = 0; ky < k; ky++) {
          for (int kx = 0; kx < k; kx++) {
            int idx = (oy * s + ky) * w + ox * s + kx;
            if (in[idx] > m || in[idx] != in[idx]) {
              m = in[idx];
              best = idx;
            }
          }
        }
        out[oy * ow + ox] = m;
        a[oy * ow + ox] = best;
      }
    }
  }
}

static void pool_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y, float *dy,
                          float *dx) {
  if (!dx) return;
  const int planes = (int)(x->shape[0] * x->shape[1]);
  const size_t hw = (size_t)x->shape[2] * x->shape[3], ohw = (size_t)y->shape[2] * y->shape[3];
  const int32_t *arg = (const int32_t *)l->aux;
  if (l->stride >= l->kernel) {
    /* Windows do not overlap: clear the input rows a row of windows covers just before scattering into them, so
     * that dx is written once while it is in cache instead of cleared as a whole and then revisited. */
    const int h = (int)x->shape[2], w = (int)x->shape[3], oh = (int)y->shape[2], ow = (int)y->shape[3];
    const int k = l->kernel, s = l->stride;
    for (int p = 0; p < planes; p++) {
      float *d = dx + p * hw;
      const float *g = dy + p * ohw;
      const int32_t *a = arg + p * ohw;
      int cleared = 0; /* rows [0, cleared) are cleared */
      for (int oy = 0; oy < oh; oy++) {
        int last = oy * s + k;
        memset(d + (size_t)cleared * w, 0, (size_t)(last - cleared) * w * sizeof(float));
        cleared = last;
        for (int ox = 0; ox < ow; ox++)
          d[a[oy * ow + ox]] += g[oy * ow + ox];
      }
      if (cleared < h) memset(d + (size_t)cleared * w, 0, (size_t)(h - cleared) * w * sizeof(float));
    }
    return;
  }
  memset(dx, 0, x->numel * sizeof(float));
  for (int p = 0; p < planes; p++) {
    float *d = dx + p * hw;
    const float *g = dy + p * ohw;
    const int32_t *a = arg + p * ohw;
    for (size_t i = 0; i < ohw; i++)
      d[a[i]] += g[i];
  }
}

const cohort__layer_ops cohort__maxpool2d_ops = {"maxpool2d", pool_shape, pool_aux, pool_forward, pool_backward, 0};
