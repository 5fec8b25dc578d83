/* tensor.c: allocation and description of float32 tensors. */
#include <stdlib.h>
#include <string.h>

#include "nn/layer.h"

static cohort_status check_shape(int ndim, const int64_t *shape, size_t *numel) {
  if (ndim < 1 || ndim > COHORT_TENSOR_MAX_DIMS)
    return cohort__error(COHORT_ERR_INVALID, "tensor: ndim %d outside [1, %d]", ndim, COHORT_TENSOR_MAX_DIMS);
  if (!shape) return cohort__error(COHORT_ERR_INVALID, "tensor: shape is NULL");
  size_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] <= 0)
      return cohort__error(COHORT_ERR_INVALID, "tensor: dim %d is %lld, must be positive", i, (long long)shape[i]);
    if ((uint64_t)shape[i] > SIZE_MAX / 4 / n)
      return cohort__error(COHORT_ERR_INVALID, "tensor: shape overflows at dim %d", i);
    n *= (size_t)shape[i];
  }
  *numel = n;
  return COHORT_OK;
}

void cohort__tensor_set_shape(cohort_tensor *t, int ndim, const int64_t *shape) {
  size_t n = 1;
  t->ndim = ndim;
  for (int i = 0; i < COHORT_TENSOR_MAX_DIMS; i++) {
    t->shape[i] = i < ndim ? shape[i] : 1;
    if (i < ndim) n *= (size_t)shape[i];
  }
  t->numel = n;
}

cohort_status cohort_tensor_alloc(cohort_tensor *t, int ndim, const int64_t *shape) {
  size_t n;
  if (!t) return cohort__error(COHORT_ERR_INVALID, "cohort_tensor_alloc: tensor is NULL");
  memset(t, 0, sizeof *t);
  COHORT_CHECK(check_shape(ndim, shape, &n));
  float *data = calloc(n, sizeof(float));
  if (!data) return cohort__error(COHORT_ERR_SYSTEM, "cohort_tensor_alloc: out of memory for %zu floats", n);
  cohort__tensor_set_shape(t, ndim, shape);
  t->data = data;
  return COHORT_OK;
}

void cohort_tensor_free(cohort_tensor *t) {
  if (!t) return;
  free(t->data);
  memset(t, 0, sizeof *t);
}

cohort_status cohort_tensor_wrap(cohort_tensor *t, float *data, int ndim, const int64_t *shape) {
  size_t n;
  if (!t) return cohort__error(COHORT_ERR_INVALID, "cohort_tensor_wrap: tensor is NULL");
  if (!data) return cohort__error(COHORT_ERR_INVALID, "cohort_tensor_wrap: data is NULL");
  COHORT_CHECK(check_shape(ndim, shape, &n));
  cohort__tensor_set_shape(t, ndim, shape);
  t->data = data;
  return COHORT_OK;
}
