/*
 * conv2d.c: 2-d convolution of NCHW input by im2col + sgemm, one image at a time.
 *
 * Per image, the columns (cin*k*k rows by oh*ow) fit in L2 for the reference CNN, so they are rebuilt in backward
 * instead of being kept for the whole batch (which would be tens of MB and slower to stream back). Weight
 * gradients are finished for every image before any input gradient is computed, so the grad hook can fire early.
 */
#include <cblas.h>
#include <string.h>

#include "nn/kernels.h"
#include "nn/layer.h"

static cohort_status conv_shape(const cohort__layer *l, const cohort_tensor *x, cohort_tensor *y) {
  if (x->ndim != 4 || x->shape[1] != l->cin)
    return cohort__error(COHORT_ERR_INVALID, "conv2d '%s': expects input [N, %d, H, W], got %d dims with %lld channels",
                         l->name, l->cin, x->ndim, (long long)(x->ndim >= 2 ? x->shape[1] : 0));
  int64_t oh = (x->shape[2] + 2 * l->padding - l->kernel) / l->stride + 1;
  int64_t ow = (x->shape[3] + 2 * l->padding - l->kernel) / l->stride + 1;
  if (x->shape[2] + 2 * l->padding < l->kernel || x->shape[3] + 2 * l->padding < l->kernel)
    return cohort__error(COHORT_ERR_INVALID, "conv2d '%s': input %lldx%lld (padding %d) smaller than kernel %d",
                         l->name, (long long)x->shape[2], (long long)x->shape[3], l->padding, l->kernel);
  int64_t shape[4] = {x->shape[0], l->cout, oh, ow};
  cohort__tensor_set_shape(y, 4, shape);
  return COHORT_OK;
}

/* Columns for one image: cin*k*k rows of oh*ow. */
static size_t conv_aux(const cohort__layer *l, const cohort_tensor *x) {
  size_t oh = (size_t)((x->shape[2] + 2 * l->padding - l->kernel) / l->stride + 1);
  size_t ow = (size_t)((x->shape[3] + 2 * l->padding - l->kernel) / l->stride + 1);
  return (size_t)l->cin * l->kernel * l->kernel * oh * ow;
}

static void im2col(const float *img, int c, int h, int w, int k, int s, int pad, int oh, int ow, float *col) {
  for (int ci = 0; ci < c; ci++) {
    const float *plane = img + (size_t)ci * h * w;
    for (int ky = 0; ky < k; ky++) {
      for (int kx = 0; kx < k; kx++) {
        float *dst = col + (((size_t)ci * k + ky) * k + kx) * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
          int iy = oy * s - pad + ky;
          float *d = dst + (size_t)oy * ow;
          if (iy < 0 || iy >= h) {
            memset(d, 0, (size_t)ow * sizeof(float));
            continue;
          }
          const float *src = plane + (size_t)iy * w;
          if (s == 1 && pad == 0) {
            cohort__vcopy(d, src + kx, (size_t)ow);
            continue;
          }
          for (int ox = 0; ox < ow; ox++) {
            int ix = ox * s - pad + kx;
            d[ox] = (ix >= 0 && ix < w) ? src[ix] : 0.0f;
          }
        }
      }
    }
  }
}

/* Adds the columns back onto the image they came from (the adjoint of im2col). img must be zeroed first. */
static void col2im(const float *col, int c, int h, int w, int k, int s, int pad, int oh, int ow, float *img) {
  for (int ci = 0; ci < c; ci++) {
    float *plane = img + (size_t)ci * h * w;
    for (int ky = 0; ky < k; ky++) {
      for (int kx = 0; kx < k; kx++) {
        const float *srcc = col + (((size_t)ci * k + ky) * k + kx) * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
          int iy = oy * s - pad + ky;
          if (iy < 0 || iy >= h) continue;
          const float *sr = srcc + (size_t)oy * ow;
          float *d = plane + (size_t)iy * w;
          if (s == 1 && pad == 0) {
            cohort__vadd(d + kx, sr, (size_t)ow);
            continue;
          }
          for (int ox = 0; ox < ow; ox++) {
            int ix = ox * s - pad + kx;
            if (ix >= 0 && ix < w) d[ix] += sr[ox];
          }
        }
      }
    }
  }
}

typedef struct dims {
  int n, c, h, w, oc, oh, ow, k, kk; /* kk = c*k*k, the gemm's inner dimension */
} dims;

static dims conv_dims(const cohort__layer *l, const cohort_tensor *x, const cohort_tensor *y) {
  dims d = {(int)x->shape[0], (int)x->shape[1], (int)x->shape[2],
            (int)x->shape[3], (int)y->shape[1], (int)y->shape[2],
            (int)y->shape[3], l->kernel,        l->cin * l->kernel * l->kernel};
  return d;
}

static void conv_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  dims d = conv_dims(l, x, y);
  const float *w = c->params[l->pidx].value, *b = c->params[l->pidx + 1].value;
  const size_t in_img = (size_t)d.c * d.h * d.w, ohw = (size_t)d.oh * d.ow, out_img = (size_t)d.oc * ohw;
  const int direct = d.k == 1 && l->stride == 1 && l->padding == 0; /* a 1x1 conv is a plain gemm */
  for (int n = 0; n < d.n; n++) {
    const float *xi = x->data + n * in_img;
    float *yi = y->data + n * out_img;
    const float *col = xi;
    if (!direct) {
      im2col(xi, d.c, d.h, d.w, d.k, l->stride, l->padding, d.oh, d.ow, l->aux);
      col = l->aux;
    }
    for (int o = 0; o < d.oc; o++)
      cohort__vfill(yi + o * ohw, b[o], ohw);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d.oc, (int)ohw, d.kk, 1.0f, w, d.kk, col, (int)ohw, 1.0f, yi,
                (int)ohw);
    if (l->fuse_relu) cohort__relu_inplace(yi, out_img);
  }
}

static void conv_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y, float *dy,
                          float *dx) {
  dims d = conv_dims(l, x, y);
  cohort_param *w = &c->params[l->pidx], *b = &c->params[l->pidx + 1];
  const size_t in_img = (size_t)d.c * d.h * d.w, ohw = (size_t)d.oh * d.ow, out_img = (size_t)d.oc * ohw;
  const int direct = d.k == 1 && l->stride == 1 && l->padding == 0;
  for (int n = 0; n < d.n; n++) {
    const float *xi = x->data + n * in_img;
    float *dyi = dy + n * out_img;
    if (l->fuse_relu) cohort__relu_mask(dyi, dyi, y->data + n * out_img, out_img);
    const float *col = xi;
    if (!direct) {
      im2col(xi, d.c, d.h, d.w, d.k, l->stride, l->padding, d.oh, d.ow, l->aux);
      col = l->aux;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d.oc, d.kk, (int)ohw, 1.0f, dyi, (int)ohw, col, (int)ohw, 1.0f,
                w->grad, d.kk);
    for (int o = 0; o < d.oc; o++)
      b->grad[o] += cohort__vsum(dyi + o * ohw, ohw);
  }
  c->ready(c->ready_arg, l->pidx + 1);
  c->ready(c->ready_arg, l->pidx);
  if (!dx) return;
  for (int n = 0; n < d.n; n++) {
    const float *dyi = dy + n * out_img;
    float *dxi = dx + n * in_img;
    if (direct) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d.kk, (int)ohw, d.oc, 1.0f, w->value, d.kk, dyi, (int)ohw,
                  0.0f, dxi, (int)ohw);
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d.kk, (int)ohw, d.oc, 1.0f, w->value, d.kk, dyi, (int)ohw,
                0.0f, l->aux, (int)ohw);
    memset(dxi, 0, in_img * sizeof(float));
    col2im(l->aux, d.c, d.h, d.w, d.k, l->stride, l->padding, d.oh, d.ow, dxi);
  }
}

const cohort__layer_ops cohort__conv2d_ops = {"conv2d", conv_shape, conv_aux, conv_forward, conv_backward, 0};
