/* zoo.c: builders for the models the main job trains. */
#include "nn/layer.h"

cohort_status cohort_model_create_cnn(uint64_t seed, cohort_model **out) {
  cohort_model *m = NULL;
  cohort_status st;
  if (!out) return cohort__error(COHORT_ERR_INVALID, "cohort_model_create_cnn: out is NULL");
  /* Layer for layer the anchor's Net: relu(c1) -> relu(c2) -> max_pool2d(2) -> flatten -> relu(f1) -> f2. */
  if ((st = cohort_model_create(&m)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_conv2d(m, "conv1", 1, 32, 3, 1, 0)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_relu(m)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_conv2d(m, "conv2", 32, 64, 3, 1, 0)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_relu(m)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_maxpool2d(m, 2, 2)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_flatten(m)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_linear(m, "fc1", 9216, 128)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_relu(m)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_linear(m, "fc2", 128, 10)) != COHORT_OK) goto fail;
  if ((st = cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, seed)) != COHORT_OK) goto fail;
  *out = m;
  return COHORT_OK;
fail:
  cohort_model_destroy(m);
  return st;
}

cohort_status cohort_model_create_mlp(uint64_t seed, int in, int hidden, int classes, cohort_model **out) {
  cohort_model *m = NULL;
  cohort_status st;
  if (!out) return cohort__error(COHORT_ERR_INVALID, "cohort_model_create_mlp: out is NULL");
  if ((st = cohort_model_create(&m)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_flatten(m)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_linear(m, "fc1", in, hidden)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_relu(m)) != COHORT_OK) goto fail;
  if ((st = cohort_model_add_linear(m, "fc2", hidden, classes)) != COHORT_OK) goto fail;
  if ((st = cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, seed)) != COHORT_OK) goto fail;
  *out = m;
  return COHORT_OK;
fail:
  cohort_model_destroy(m);
  return st;
}
