/* linear.c: y = x W^T + b for x [N, in], W [out, in], b [out]; three sgemm calls per step. */
#include <cblas.h>
#include <string.h>

#include "nn/kernels.h"
#include "nn/layer.h"

static cohort_status linear_shape(const cohort__layer *l, const cohort_tensor *x, cohort_tensor *y) {
  if (x->ndim != 2 || x->shape[1] != l->in_features)
    return cohort__error(COHORT_ERR_INVALID, "linear '%s': expects input [N, %d], got %d dims with %lld features",
                         l->name, l->in_features, x->ndim, (long long)(x->ndim >= 2 ? x->shape[1] : x->shape[0]));
  int64_t shape[2] = {x->shape[0], l->out_features};
  cohort__tensor_set_shape(y, 2, shape);
  return COHORT_OK;
}

static size_t linear_aux(const cohort__layer *l, const cohort_tensor *x) { return 0; }

static void linear_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  const int n = (int)x->shape[0], in = l->in_features, out = l->out_features;
  const float *w = c->params[l->pidx].value, *b = c->params[l->pidx + 1].value;
  /* Seed y with the bias so that the product accumulates onto it (beta = 1) instead of a second pass. */
  for (int i = 0; i < n; i++)
    memcpy(y->data + (size_t)i * out, b, (size_t)out * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x->data, in, w, in, 1.0f, y->data, out);
  if (l->fuse_relu) cohort__relu_inplace(y->data, y->numel);
}

static void linear_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y,
                            float *dy, float *dx) {
  const int n = (int)x->shape[0], in = l->in_features, out = l->out_features;
  cohort_param *w = &c->params[l->pidx], *b = &c->params[l->pidx + 1];
  if (l->fuse_relu) cohort__relu_mask(dy, dy, y->data, y->numel);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x->data, in, 1.0f, w->grad, in);
  for (int i = 0; i < n; i++)
    cohort__vadd(b->grad, dy + (size_t)i * out, (size_t)out);
  c->ready(c->ready_arg, l->pidx + 1);
  c->ready(c->ready_arg, l->pidx);
  if (dx) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w->value, in, 0.0f, dx, in);
}

const cohort__layer_ops cohort__linear_ops = {"linear", linear_shape, linear_aux, linear_forward, linear_backward, 0};
