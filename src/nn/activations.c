/* activations.c: the layers without parameters that act element by element or reshape: relu, dropout, flatten. */
#include <string.h>

#include "nn/kernels.h"
#include "nn/layer.h"

static cohort_status same_shape(const cohort__layer *l, const cohort_tensor *x, cohort_tensor *y) {
  cohort__tensor_set_shape(y, x->ndim, x->shape);
  return COHORT_OK;
}

static size_t no_aux(const cohort__layer *l, const cohort_tensor *x) { return 0; }

/* ---- relu ---- */

static void relu_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  memcpy(y->data, x->data, x->numel * sizeof(float));
  cohort__relu_inplace(y->data, y->numel);
}

/* The gradient at 0 is 0, as in PyTorch (threshold_backward uses y > 0). */
static void relu_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y, float *dy,
                          float *dx) {
  if (!dx) return;
  cohort__relu_mask(dx, dy, y->data, x->numel);
}

const cohort__layer_ops cohort__relu_ops = {"relu", same_shape, no_aux, relu_forward, relu_backward, 0};

/* ---- dropout ---- */

/* The mask, already scaled by 1/(1-p), one float per element. */
static size_t dropout_aux(const cohort__layer *l, const cohort_tensor *x) { return x->numel; }

static void dropout_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  if (!c->training || l->p == 0.0f) {
    memcpy(y->data, x->data, x->numel * sizeof(float));
    return;
  }
  const float keep = l->p >= 1.0f ? 0.0f : 1.0f / (1.0f - l->p);
  for (size_t i = 0; i < x->numel; i++) {
    l->aux[i] = cohort_rng_uniform(c->rng) >= l->p ? keep : 0.0f;
    y->data[i] = x->data[i] * l->aux[i];
  }
}

static void dropout_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y,
                             float *dy, float *dx) {
  if (!dx) return;
  if (!c->training || l->p == 0.0f) {
    memcpy(dx, dy, x->numel * sizeof(float));
    return;
  }
  for (size_t i = 0; i < x->numel; i++)
    dx[i] = dy[i] * l->aux[i];
}

const cohort__layer_ops cohort__dropout_ops = {"dropout",       same_shape,       dropout_aux,
                                               dropout_forward, dropout_backward, 0};

/* ---- flatten ---- */

static cohort_status flatten_shape(const cohort__layer *l, const cohort_tensor *x, cohort_tensor *y) {
  int64_t shape[2] = {x->shape[0], (int64_t)(x->numel / (size_t)x->shape[0])};
  cohort__tensor_set_shape(y, 2, shape);
  return COHORT_OK;
}

static void flatten_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {}
static void flatten_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y,
                             float *dy, float *dx) {}

const cohort__layer_ops cohort__flatten_ops = {"flatten", flatten_shape, no_aux, flatten_forward, flatten_backward, 1};
