/*
 * test_nn.c: unit tests of the nn layer: finite-difference gradient checks of every layer, hook order, init
 * distributions, loss, optimizers, schedules, clipping, hashes, and argument errors.
 *
 * Gradient checks build a small model [layer with parameters] + [layer under test] (+ more), take the loss
 * L = sum(r * output) for a fixed random r, and compare every analytic parameter gradient with the central
 * difference of L. The input gradient of the layer under test is checked through the gradients of the layer
 * before it, which depend on it.
 */
#include <float.h>
#include <math.h>

#include "cohort/nn.h"
#include "test.h"

/* ---- helpers ---- */

static void fill(cohort_tensor *t, uint64_t seed, float lo, float hi) {
  cohort_rng r;
  cohort_rng_seed(&r, seed);
  for (size_t i = 0; i < t->numel; i++)
    t->data[i] = lo + (hi - lo) * cohort_rng_uniform(&r);
}

static double proj_loss(cohort_model *m, const cohort_tensor *x, const float *r, const cohort_rng *drop) {
  const cohort_tensor *y;
  *cohort_model_rng(m) = *drop; /* the same dropout mask at every evaluation */
  if (cohort_model_forward(m, x, &y) != COHORT_OK) return NAN;
  double s = 0.0;
  for (size_t i = 0; i < y->numel; i++)
    s += (double)r[i] * y->data[i];
  return s;
}

/* Checks every parameter gradient of m at input x against central differences; returns the worst error. */
static double gradcheck(cohort_model *m, const cohort_tensor *x, double eps) {
  const cohort_tensor *y;
  cohort_rng drop = *cohort_model_rng(m);
  if (cohort_model_forward(m, x, &y) != COHORT_OK) return INFINITY;
  size_t n = y->numel;
  float *r = malloc(n * sizeof(float));
  cohort_rng rr;
  cohort_rng_seed(&rr, 99);
  for (size_t i = 0; i < n; i++)
    r[i] = 2.0f * cohort_rng_uniform(&rr) - 1.0f;
  cohort_model_zero_grad(m);
  *cohort_model_rng(m) = drop;
  if (cohort_model_forward(m, x, &y) != COHORT_OK || cohort_model_backward(m, r) != COHORT_OK) {
    free(r);
    return INFINITY;
  }
  /* Errors are relative to the largest gradient of the model: a gradient that is exactly 0 analytically (a bias
   * before batchnorm) has a numeric estimate of the order of float rounding, not of 0. */
  double worst = 0.0, gmax = 0.0;
  for (int i = 0; i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    for (size_t j = 0; j < p->numel; j++)
      gmax = fmax(gmax, fabs(p->grad[j]));
  }
  for (int i = 0; i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    /* At most 64 elements per parameter, spread over it, to keep the test fast. */
    size_t stride = p->numel > 64 ? p->numel / 64 : 1;
    for (size_t j = 0; j < p->numel; j += stride) {
      float orig = p->value[j];
      p->value[j] = orig + (float)eps;
      double lp = proj_loss(m, x, r, &drop);
      p->value[j] = orig - (float)eps;
      double lm = proj_loss(m, x, r, &drop);
      p->value[j] = orig;
      double num = (lp - lm) / (2.0 * eps);
      double err = fabs(num - p->grad[j]) / (1e-3 + gmax);
      if (err > worst) {
        worst = err;
        if (err > 1e-2)
          fprintf(stderr, "  %s[%zu]: analytic %.6g numeric %.6g (max |g| %.3g)\n", p->name, j, p->grad[j], num, gmax);
      }
    }
  }
  free(r);
  return worst;
}

static cohort_tensor input4(int n, int c, int h, int w, uint64_t seed) {
  cohort_tensor t;
  int64_t s[4] = {n, c, h, w};
  cohort_tensor_alloc(&t, 4, s);
  fill(&t, seed, -1.0f, 1.0f);
  return t;
}

/* ---- gradient checks ---- */

TEST(grad_linear) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_linear(m, "a", 5, 7));
  ASSERT_OK(cohort_model_add_linear(m, "b", 7, 3));
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 1));
  cohort_tensor x;
  int64_t s[2] = {4, 5};
  ASSERT_OK(cohort_tensor_alloc(&x, 2, s));
  fill(&x, 2, -1, 1);
  double e = gradcheck(m, &x, 1e-2);
  cohort_tensor_free(&x);
  cohort_model_destroy(m);
  ASSERT_TRUE(e < 1e-2);
}

TEST(grad_conv2d_stride_padding) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_conv2d(m, "c1", 2, 3, 3, 1, 0));
  ASSERT_OK(cohort_model_add_conv2d(m, "c2", 3, 4, 3, 2, 1)); /* under test: stride 2, padding 1 */
  ASSERT_OK(cohort_model_add_conv2d(m, "c3", 4, 2, 1, 1, 0)); /* and the 1x1 direct path */
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 3));
  cohort_tensor x = input4(2, 2, 9, 8, 4);
  double e = gradcheck(m, &x, 1e-2);
  cohort_tensor_free(&x);
  cohort_model_destroy(m);
  ASSERT_TRUE(e < 1e-2);
}

TEST(grad_relu_fused_and_unfused) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_conv2d(m, "c1", 1, 3, 3, 1, 0));
  ASSERT_OK(cohort_model_add_relu(m)); /* fused into c1 */
  ASSERT_OK(cohort_model_add_maxpool2d(m, 2, 0));
  ASSERT_OK(cohort_model_add_relu(m)); /* after a pool: a layer of its own */
  ASSERT_OK(cohort_model_add_flatten(m));
  ASSERT_OK(cohort_model_add_linear(m, "f1", 243, 6));
  ASSERT_OK(cohort_model_add_relu(m)); /* last layer: never fused (dy is the caller's) */
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 5));
  cohort_tensor x = input4(3, 1, 20, 21, 6); /* 18x19 into the 2x2 pool: vector and scalar paths */
  double e = gradcheck(m, &x, 1e-4);
  cohort_tensor_free(&x);
  cohort_model_destroy(m);
  ASSERT_TRUE(e < 1e-2);
}

TEST(grad_maxpool_general) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_conv2d(m, "c1", 2, 2, 1, 1, 0));
  ASSERT_OK(cohort_model_add_maxpool2d(m, 3, 2)); /* overlapping windows: the general loop */
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 7));
  cohort_tensor x = input4(2, 2, 7, 9, 8);
  double e = gradcheck(m, &x, 1e-3);
  cohort_tensor_free(&x);
  cohort_model_destroy(m);
  ASSERT_TRUE(e < 1e-2);
}

/* Gradient checks cannot see a forward that computes the wrong function consistently: check pooling's values. */
TEST(maxpool_values) {
  for (int k = 2; k <= 3; k++) {
    cohort_model *m;
    ASSERT_OK(cohort_model_create(&m));
    ASSERT_OK(cohort_model_add_maxpool2d(m, k, 2));
    ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 1));
    cohort_tensor x = input4(2, 3, 7, 8, 30 + k);
    const cohort_tensor *y;
    ASSERT_OK(cohort_model_forward(m, &x, &y));
    int oh = (7 - k) / 2 + 1, ow = (8 - k) / 2 + 1;
    ASSERT_EQ(y->shape[2], oh);
    ASSERT_EQ(y->shape[3], ow);
    for (int p = 0; p < 6; p++)
      for (int oy = 0; oy < oh; oy++)
        for (int ox = 0; ox < ow; ox++) {
          float want = -INFINITY;
          for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++)
              want = fmaxf(want, x.data[p * 56 + (2 * oy + ky) * 8 + 2 * ox + kx]);
          ASSERT_TRUE(y->data[(p * oh + oy) * ow + ox] == want);
        }
    cohort_tensor_free(&x);
    cohort_model_destroy(m);
  }
}

TEST(grad_dropout) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_linear(m, "a", 6, 40));
  ASSERT_OK(cohort_model_add_dropout(m, 0.3f));
  ASSERT_OK(cohort_model_add_linear(m, "b", 40, 3));
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 9));
  cohort_tensor x;
  int64_t s[2] = {5, 6};
  ASSERT_OK(cohort_tensor_alloc(&x, 2, s));
  fill(&x, 10, -1, 1);
  double e = gradcheck(m, &x, 1e-2);
  cohort_tensor_free(&x);
  cohort_model_destroy(m);
  ASSERT_TRUE(e < 1e-2);
}

static void bn_case(int training) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_conv2d(m, "c1", 2, 3, 3, 1, 1));
  ASSERT_OK(cohort_model_add_batchnorm2d(m, "bn", 3, 1e-5f, 0.1f));
  ASSERT_OK(cohort_model_add_conv2d(m, "c2", 3, 2, 1, 1, 0));
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 11));
  /* Non-trivial gamma, beta and running stats, so that every term of the gradient matters. */
  const cohort_param *g = cohort_model_param(m, 2), *b = cohort_model_param(m, 3);
  for (int k = 0; k < 3; k++) {
    g->value[k] = 0.5f + 0.4f * (float)k;
    b->value[k] = 0.1f * (float)k - 0.1f;
    cohort_model_buffer(m, 0)->value[k] = 0.2f * (float)k;
    cohort_model_buffer(m, 1)->value[k] = 0.5f + (float)k;
  }
  cohort_model_set_training(m, training);
  cohort_tensor x = input4(3, 2, 5, 4, 12);
  double e = gradcheck(m, &x, 1e-3);
  cohort_tensor_free(&x);
  cohort_model_destroy(m);
  ASSERT_TRUE(e < 1e-2);
}

TEST(grad_batchnorm_train) { bn_case(1); }
TEST(grad_batchnorm_eval) { bn_case(0); }

TEST(grad_softmax_xent) {
  cohort_tensor z;
  int64_t s[2] = {3, 5};
  ASSERT_OK(cohort_tensor_alloc(&z, 2, s));
  fill(&z, 13, -3, 3);
  int32_t labels[3] = {4, 0, 2};
  float loss, grad[15], lp, lm;
  ASSERT_OK(cohort_softmax_xent(&z, labels, &loss, grad, NULL));
  for (int i = 0; i < 15; i++) {
    float o = z.data[i];
    z.data[i] = o + 1e-2f;
    ASSERT_OK(cohort_softmax_xent(&z, labels, &lp, NULL, NULL));
    z.data[i] = o - 1e-2f;
    ASSERT_OK(cohort_softmax_xent(&z, labels, &lm, NULL, NULL));
    z.data[i] = o;
    ASSERT_NEAR(grad[i], (lp - lm) / 2e-2, 2e-4);
  }
  /* The loss itself, from its definition. */
  double want = 0.0;
  for (int i = 0; i < 3; i++) {
    double se = 0.0;
    for (int j = 0; j < 5; j++)
      se += exp(z.data[i * 5 + j]);
    want += log(se) - z.data[i * 5 + labels[i]];
  }
  ASSERT_NEAR(loss, want / 3.0, 1e-6);
  cohort_tensor_free(&z);
}

TEST(softmax_xent_stable_and_checked) {
  float data[4] = {1000.0f, 0.0f, -1000.0f, 0.0f}, loss, grad[4];
  cohort_tensor z;
  int64_t s[2] = {2, 2};
  ASSERT_OK(cohort_tensor_wrap(&z, data, 2, s));
  int32_t labels[2] = {0, 0};
  int correct = -1;
  ASSERT_OK(cohort_softmax_xent(&z, labels, &loss, grad, &correct));
  ASSERT_NEAR(loss, 500.0, 1e-3); /* row 0 costs 0, row 1 costs 1000 */
  ASSERT_EQ(correct, 1);
  for (int i = 0; i < 4; i++)
    ASSERT_TRUE(isfinite(grad[i]));
  ASSERT_NEAR(grad[2], -0.5, 1e-6);
  labels[1] = 2;
  ASSERT_STATUS(cohort_softmax_xent(&z, labels, &loss, grad, NULL), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "label 2 of row 1");
}

/* ---- model mechanics ---- */

typedef struct hook_log {
  cohort_model *m;
  int order[16], n;
  float snapshot[16]; /* grad[0] of each parameter at the moment its hook fired */
} hook_log;

static void record_hook(void *user, int index) {
  hook_log *h = user;
  if (h->n < 16) {
    h->order[h->n++] = index;
    h->snapshot[index] = cohort_model_param(h->m, index)->grad[cohort_model_param(h->m, index)->numel - 1];
  }
}

TEST(hooks_fire_once_in_reverse_when_final) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_conv2d(m, "conv1", 1, 4, 3, 1, 0));
  ASSERT_OK(cohort_model_add_relu(m));
  ASSERT_OK(cohort_model_add_batchnorm2d(m, "bn1", 4, 1e-5f, 0.1f));
  ASSERT_OK(cohort_model_add_maxpool2d(m, 2, 2));
  ASSERT_OK(cohort_model_add_flatten(m));
  ASSERT_OK(cohort_model_add_linear(m, "fc1", 36, 10));
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 1));
  ASSERT_EQ(cohort_model_num_params(m), 6);
  ASSERT_STREQ(cohort_model_param(m, 2)->name, "bn1.weight");
  ASSERT_STREQ(cohort_model_buffer(m, 1)->name, "bn1.running_var");
  hook_log h = {.m = m};
  cohort_model_set_grad_hook(m, record_hook, &h);
  cohort_tensor x = input4(2, 1, 8, 8, 3);
  const cohort_tensor *y;
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  ASSERT_EQ(y->ndim, 2);
  ASSERT_EQ(y->shape[1], 10);
  float g[20];
  for (int i = 0; i < 20; i++)
    g[i] = 0.05f * (float)(i % 7) - 0.1f;
  ASSERT_OK(cohort_model_backward(m, g));
  ASSERT_EQ(h.n, 6);
  for (int i = 0; i < 6; i++) {
    ASSERT_EQ(h.order[i], 5 - i);
    const cohort_param *p = cohort_model_param(m, h.order[i]);
    ASSERT_TRUE(h.snapshot[h.order[i]] == p->grad[p->numel - 1]); /* nothing changed it after the hook */
  }
  cohort_tensor_free(&x);
  cohort_model_destroy(m);
}

TEST(grads_accumulate_and_batch_size_changes) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create_mlp(4, 12, 8, 3, &m));
  cohort_tensor x;
  int64_t s[2] = {4, 12};
  ASSERT_OK(cohort_tensor_alloc(&x, 2, s));
  fill(&x, 5, -1, 1);
  float g[12];
  for (int i = 0; i < 12; i++)
    g[i] = 0.1f * (float)(i % 5);
  const cohort_tensor *y;
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  ASSERT_OK(cohort_model_backward(m, g));
  const cohort_param *w = cohort_model_param(m, 0);
  float once = w->grad[7];
  ASSERT_TRUE(once != 0.0f);
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  ASSERT_OK(cohort_model_backward(m, g));
  ASSERT_NEAR(w->grad[7], 2.0f * once, 1e-6);
  /* A smaller batch (the first 2 rows) reuses the buffers. */
  cohort_tensor half;
  int64_t hs[2] = {2, 12};
  ASSERT_OK(cohort_tensor_wrap(&half, x.data, 2, hs));
  ASSERT_OK(cohort_model_forward(m, &half, &y));
  ASSERT_EQ(y->shape[0], 2);
  /* Rebinding a gradient makes backward write there. */
  float ext[8 * 12] = {0};
  ASSERT_OK(cohort_model_set_grad_buffer(m, 0, ext));
  ASSERT_TRUE(cohort_model_param(m, 0)->grad == ext);
  cohort_model_zero_grad(m);
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  ASSERT_OK(cohort_model_backward(m, g));
  ASSERT_NEAR(ext[7], once, 1e-6);
  ASSERT_OK(cohort_model_set_grad_buffer(m, 0, NULL));
  ASSERT_TRUE(cohort_model_param(m, 0)->grad != ext);
  ASSERT_STATUS(cohort_model_set_grad_buffer(m, 4, ext), COHORT_ERR_INVALID);
  cohort_tensor_free(&x);
  cohort_model_destroy(m);
}

TEST(argument_errors_name_the_layer) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create_cnn(0, &m));
  cohort_tensor x = input4(2, 1, 20, 20, 1);
  const cohort_tensor *y;
  ASSERT_STATUS(cohort_model_forward(m, &x, &y), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "fc1");
  ASSERT_CONTAINS(cohort_last_error(), "4096");
  ASSERT_STATUS(cohort_model_add_relu(m), COHORT_ERR_INVALID); /* after init */
  float g[1] = {0};
  ASSERT_STATUS(cohort_model_backward(m, g), COHORT_ERR_INVALID); /* no forward */
  cohort_tensor_free(&x);
  cohort_model_destroy(m);
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_linear(m, "fc", 2, 2));
  ASSERT_STATUS(cohort_model_add_linear(m, "fc", 2, 2), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "used twice");
  ASSERT_STATUS(cohort_model_add_dropout(m, 1.5f), COHORT_ERR_INVALID);
  ASSERT_STATUS(cohort_model_add_conv2d(m, "c", 1, 1, 0, 1, 0), COHORT_ERR_INVALID);
  ASSERT_EQ(cohort_model_num_params(m), 2);
  cohort_model_destroy(m);
}

TEST(dropout_masks_and_eval) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_dropout(m, 0.25f));
  ASSERT_OK(cohort_model_add_linear(m, "fc", 1000, 1)); /* a model needs parameters to be initialised */
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 2));
  cohort_model *solo;
  ASSERT_OK(cohort_model_create(&solo));
  ASSERT_OK(cohort_model_add_dropout(solo, 0.25f));
  ASSERT_OK(cohort_model_init(solo, COHORT_INIT_TORCH_DEFAULT, 2));
  cohort_tensor x;
  int64_t s[2] = {4, 1000};
  ASSERT_OK(cohort_tensor_alloc(&x, 2, s));
  for (size_t i = 0; i < x.numel; i++)
    x.data[i] = 1.0f;
  const cohort_tensor *y;
  cohort_rng saved = *cohort_model_rng(solo);
  ASSERT_OK(cohort_model_forward(solo, &x, &y));
  size_t zeros = 0;
  float first[64];
  for (size_t i = 0; i < x.numel; i++) {
    zeros += y->data[i] == 0.0f;
    ASSERT_TRUE(y->data[i] == 0.0f || fabsf(y->data[i] - 4.0f / 3.0f) < 1e-6f);
  }
  memcpy(first, y->data, sizeof first);
  ASSERT_TRUE(zeros > 900 && zeros < 1100); /* 4000 draws at p = 0.25 */
  ASSERT_OK(cohort_model_forward(solo, &x, &y));
  ASSERT_TRUE(memcmp(first, y->data, sizeof first) != 0); /* a new mask each step */
  *cohort_model_rng(solo) = saved;
  ASSERT_OK(cohort_model_forward(solo, &x, &y));
  ASSERT_TRUE(memcmp(first, y->data, sizeof first) == 0); /* the RNG state is the whole story */
  cohort_model_set_training(solo, 0);
  ASSERT_OK(cohort_model_forward(solo, &x, &y));
  for (size_t i = 0; i < x.numel; i++)
    ASSERT_TRUE(y->data[i] == 1.0f);
  cohort_tensor_free(&x);
  cohort_model_destroy(solo);
  cohort_model_destroy(m);
}

TEST(batchnorm_running_stats) {
  cohort_model *m;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_batchnorm2d(m, "bn", 2, 1e-5f, 0.1f));
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 0));
  cohort_tensor x = input4(3, 2, 2, 3, 21);
  for (size_t i = 0; i < x.numel; i++)
    x.data[i] = 2.0f * x.data[i] + 1.0f;
  const cohort_tensor *y;
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  for (int k = 0; k < 2; k++) {
    double s = 0, s2 = 0, ys = 0, ys2 = 0;
    for (int n = 0; n < 3; n++)
      for (int j = 0; j < 6; j++) {
        double v = x.data[(n * 2 + k) * 6 + j], o = y->data[(n * 2 + k) * 6 + j];
        s += v, s2 += v * v, ys += o, ys2 += o * o;
      }
    double mean = s / 18, var_unbiased = (s2 - 18 * mean * mean) / 17;
    ASSERT_NEAR(cohort_model_buffer(m, 0)->value[k], 0.1 * mean, 1e-5);
    ASSERT_NEAR(cohort_model_buffer(m, 1)->value[k], 0.9 + 0.1 * var_unbiased, 1e-5);
    ASSERT_NEAR(ys / 18, 0.0, 1e-5); /* normalised output: mean 0, biased variance 1 */
    ASSERT_NEAR(ys2 / 18, 1.0, 1e-3);
  }
  /* Eval mode normalises with the running statistics. */
  cohort_model_set_training(m, 0);
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  float rm = cohort_model_buffer(m, 0)->value[1], rv = cohort_model_buffer(m, 1)->value[1];
  ASSERT_NEAR(y->data[6], (x.data[6] - rm) / sqrt(rv + 1e-5), 1e-5);
  cohort_tensor_free(&x);
  cohort_model_destroy(m);
}

/* ---- init, hashes ---- */

TEST(init_distributions_and_determinism) {
  cohort_model *a, *b;
  ASSERT_OK(cohort_model_create_cnn(42, &a));
  ASSERT_OK(cohort_model_create_cnn(42, &b));
  ASSERT_EQ(cohort_model_param_count(a), 32 * 9 + 32 + 64 * 32 * 9 + 64 + 9216 * 128 + 128 + 1280 + 10);
  ASSERT_TRUE(
      memcmp(cohort_model_param_data(a), cohort_model_param_data(b), cohort_model_param_count(a) * sizeof(float)) == 0);
  char ha[COHORT_HASH_HEX_LEN], hb[COHORT_HASH_HEX_LEN], sa[COHORT_HASH_HEX_LEN], sb[COHORT_HASH_HEX_LEN];
  ASSERT_OK(cohort_model_hash(a, ha));
  ASSERT_OK(cohort_model_hash(b, hb));
  ASSERT_STREQ(ha, hb);
  ASSERT_EQ(strlen(ha), 64);
  /* PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases alike. */
  const cohort_param *fc1 = cohort_model_param(a, 4);
  ASSERT_STREQ(fc1->name, "fc1.weight");
  double bound = 1.0 / sqrt(9216.0), s2 = 0.0, mx = 0.0;
  for (size_t i = 0; i < fc1->numel; i++) {
    s2 += (double)fc1->value[i] * fc1->value[i];
    mx = fmax(mx, fabs(fc1->value[i]));
  }
  ASSERT_TRUE(mx <= bound);
  ASSERT_TRUE(mx > 0.999 * bound);
  ASSERT_NEAR(s2 / fc1->numel, bound * bound / 3.0, 0.01 * bound * bound / 3.0);
  const cohort_param *c1b = cohort_model_param(a, 1);
  for (size_t i = 0; i < c1b->numel; i++)
    ASSERT_TRUE(fabs(c1b->value[i]) <= 1.0 / 3.0);
  /* One flipped bit changes the hash; the signature only depends on names and shapes. */
  cohort_model_param(b, 6)->value[3] = nextafterf(cohort_model_param(b, 6)->value[3], 1.0f);
  ASSERT_OK(cohort_model_hash(b, hb));
  ASSERT_TRUE(strcmp(ha, hb) != 0);
  ASSERT_OK(cohort_model_signature(a, sa));
  ASSERT_OK(cohort_model_signature(b, sb));
  ASSERT_STREQ(sa, sb);
  cohort_model_destroy(b);
  ASSERT_OK(cohort_model_create_cnn(43, &b));
  ASSERT_OK(cohort_model_hash(b, hb));
  ASSERT_TRUE(strcmp(ha, hb) != 0);
  cohort_model_destroy(b);
  ASSERT_OK(cohort_model_create_mlp(42, 784, 256, 10, &b));
  ASSERT_OK(cohort_model_signature(b, sb));
  ASSERT_TRUE(strcmp(sa, sb) != 0);
  /* He normal: standard deviation sqrt(2 / fan_in). */
  ASSERT_OK(cohort_model_init(b, COHORT_INIT_KAIMING_NORMAL, 7));
  const cohort_param *w = cohort_model_param(b, 0);
  double m1 = 0.0, m2 = 0.0;
  for (size_t i = 0; i < w->numel; i++)
    m1 += w->value[i], m2 += (double)w->value[i] * w->value[i];
  m1 /= w->numel;
  ASSERT_NEAR(m1, 0.0, 0.002);
  ASSERT_NEAR(sqrt(m2 / w->numel - m1 * m1), sqrt(2.0 / 784.0), 0.01 * sqrt(2.0 / 784.0));
  ASSERT_TRUE(cohort_model_param(b, 1)->value[0] == 0.0f);
  ASSERT_OK(cohort_model_init(b, COHORT_INIT_XAVIER_UNIFORM, 7));
  double xb = sqrt(6.0 / (784.0 + 256.0));
  mx = 0.0;
  for (size_t i = 0; i < w->numel; i++)
    mx = fmax(mx, fabs(w->value[i]));
  ASSERT_TRUE(mx <= xb && mx > 0.999 * xb);
  cohort_model_destroy(b);
  cohort_model_destroy(a);
}

TEST(rng_is_xoshiro256starstar) {
  /* Reference: xoshiro256** from state {1, 2, 3, 4} gives 11520, 0, 1509978240, 1215971899390074240. */
  cohort_rng r = {{1, 2, 3, 4}};
  ASSERT_TRUE(cohort_rng_next(&r) == 11520ULL);
  ASSERT_TRUE(cohort_rng_next(&r) == 0ULL);
  ASSERT_TRUE(cohort_rng_next(&r) == 1509978240ULL);
  ASSERT_TRUE(cohort_rng_next(&r) == 1215971899390074240ULL);
  cohort_rng a, b;
  cohort_rng_seed(&a, 5);
  cohort_rng_seed(&b, 5);
  double mean = 0;
  for (int i = 0; i < 10000; i++) {
    float u = cohort_rng_uniform(&a);
    ASSERT_TRUE(u >= 0.0f && u < 1.0f);
    mean += u;
    ASSERT_TRUE(cohort_rng_uniform(&b) == u);
  }
  ASSERT_NEAR(mean / 10000, 0.5, 0.01);
}

/* ---- optimizers, schedules, clipping ---- */

/* A one-layer model whose gradient we set by hand. */
static cohort_model *tiny(void) {
  cohort_model *m = NULL;
  if (cohort_model_create(&m) || cohort_model_add_linear(m, "w", 2, 1) ||
      cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 3))
    return NULL;
  float *v = cohort_model_param_data(m);
  v[0] = 1.0f, v[1] = -2.0f, v[2] = 0.5f;
  return m;
}

static void set_grads(cohort_model *m, float a, float b, float c) {
  cohort_model_param(m, 0)->grad[0] = a;
  cohort_model_param(m, 0)->grad[1] = b;
  cohort_model_param(m, 1)->grad[0] = c;
}

TEST(sgd_momentum_nesterov_weight_decay) {
  cohort_model *m = tiny();
  ASSERT_TRUE(m != NULL);
  cohort_sgd_config cfg = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = 1};
  cohort_optim *o;
  ASSERT_OK(cohort_optim_sgd_create(m, &cfg, &o));
  ASSERT_EQ(cohort_optim_num_states(o), 2);
  ASSERT_STREQ(cohort_optim_state(o, 0)->name, "w.weight.momentum_buffer");
  double p = 1.0, buf = 0.0;
  const float grads[3] = {0.5f, -0.25f, 1.0f};
  for (int s = 0; s < 3; s++) {
    set_grads(m, grads[s], 0.0f, 0.0f);
    ASSERT_OK(cohort_optim_step(o));
    double d = grads[s] + 0.01 * p;
    buf = s == 0 ? d : 0.9 * buf + d;
    p -= 0.1 * (d + 0.9 * buf);
    ASSERT_NEAR(cohort_model_param_data(m)[0], p, 1e-6);
    ASSERT_NEAR(cohort_optim_state(o, 0)->data[0], buf, 1e-6);
  }
  ASSERT_EQ(cohort_optim_steps(o), 3);
  cohort_optim_destroy(o);
  cfg.dampening = 0.5f;
  ASSERT_STATUS(cohort_optim_sgd_create(m, &cfg, &o), COHORT_ERR_INVALID);
  cohort_model_destroy(m);
}

/* LARS: the weight tensor's step is scaled by eta * |w| / (|g| + wd * |w|) before the momentum, computed here in
 * double from the rule; the bias (one dimension) keeps the plain rule; a zero gradient leaves the ratio at 1; and
 * the ratio really changes the step (a plain-SGD twin ends elsewhere). */
TEST(sgd_lars_trust_ratio) {
  cohort_model *m = tiny(), *plain = tiny();
  ASSERT_TRUE(m != NULL && plain != NULL);
  const float eta = 0.02f, wd = 0.01f, lr = 0.5f, mu = 0.9f;
  cohort_sgd_config cfg = {.lr = lr, .momentum = mu, .weight_decay = wd, .trust_coefficient = eta};
  cohort_optim *o, *op;
  ASSERT_OK(cohort_optim_sgd_create(m, &cfg, &o));
  cfg.trust_coefficient = 0.0f;
  ASSERT_OK(cohort_optim_sgd_create(plain, &cfg, &op));
  double w[2] = {1.0, -2.0}, bias = 0.5, buf[2] = {0, 0}, bbuf = 0;
  const float g[3][3] = {{0.5f, -0.25f, 1.0f}, {0.0f, 0.0f, 0.25f}, {-3.0f, 4.0f, -1.0f}};
  for (int s = 0; s < 3; s++) {
    set_grads(m, g[s][0], g[s][1], g[s][2]);
    set_grads(plain, g[s][0], g[s][1], g[s][2]);
    ASSERT_OK(cohort_optim_step(o));
    ASSERT_OK(cohort_optim_step(op));
    const double wn = sqrt(w[0] * w[0] + w[1] * w[1]), gn = sqrt((double)g[s][0] * g[s][0] + (double)g[s][1] * g[s][1]);
    const double trust = gn > 0 ? eta * wn / (gn + wd * wn) : 1.0;
    for (int j = 0; j < 2; j++) {
      const double d = (g[s][j] + wd * w[j]) * trust;
      buf[j] = s == 0 ? d : mu * buf[j] + d;
      w[j] -= lr * buf[j];
      ASSERT_NEAR(cohort_model_param_data(m)[j], w[j], 1e-6);
    }
    const double db = g[s][2] + wd * bias;
    bbuf = s == 0 ? db : mu * bbuf + db;
    bias -= lr * bbuf;
    ASSERT_NEAR(cohort_model_param_data(m)[2], bias, 1e-6);
    ASSERT_NEAR(cohort_model_param_data(plain)[2], bias, 1e-6);
  }
  ASSERT_TRUE(fabs(cohort_model_param_data(plain)[0] - w[0]) > 0.1);
  cohort_optim_destroy(o);
  cohort_optim_destroy(op);
  cfg.trust_coefficient = -1.0f;
  ASSERT_STATUS(cohort_optim_sgd_create(m, &cfg, &o), COHORT_ERR_INVALID);
  cohort_model_destroy(m);
  cohort_model_destroy(plain);
}

/* LARC's clipping: where eta * |w| / |g| is below lr the weight moves by that instead of lr (the ratio over lr);
 * where lr is the smaller, the step is plain SGD's to the bit. */
TEST(sgd_larc_clip) {
  const float eta = 0.02f;
  for (int big = 0; big < 2; big++) {
    cohort_model *m = tiny();
    ASSERT_TRUE(m != NULL);
    const float lr = big ? 10.0f : 1e-4f;
    cohort_sgd_config cfg = {.lr = lr, .trust_coefficient = eta, .trust_clip = 1};
    cohort_optim *o;
    ASSERT_OK(cohort_optim_sgd_create(m, &cfg, &o));
    set_grads(m, 3.0f, 4.0f, 1.0f);
    ASSERT_OK(cohort_optim_step(o));
    const double trust = eta * sqrt(5.0) / 5.0; /* |w| = |(1, -2)|, |g| = |(3, 4)| */
    const float *v = cohort_model_param_data(m);
    if (big) {
      ASSERT_NEAR(v[0], 1.0 - trust * 3.0, 1e-6);
      ASSERT_NEAR(v[1], -2.0 - trust * 4.0, 1e-6);
    } else {
      ASSERT_TRUE(v[0] == 1.0f - lr * 3.0f && v[1] == -2.0f - lr * 4.0f);
    }
    ASSERT_TRUE(v[2] == 0.5f - lr * 1.0f); /* the bias: plain SGD either way */
    cohort_optim_destroy(o);
    cohort_model_destroy(m);
  }
}

TEST(adamw_update) {
  cohort_model *m = tiny();
  ASSERT_TRUE(m != NULL);
  cohort_adamw_config cfg = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
  cohort_optim *o;
  ASSERT_OK(cohort_optim_adamw_create(m, &cfg, &o));
  ASSERT_EQ(cohort_optim_num_states(o), 4);
  ASSERT_STREQ(cohort_optim_state(o, 3)->name, "w.bias.exp_avg_sq");
  double p = -2.0, mm = 0.0, vv = 0.0;
  const float grads[4] = {0.3f, -1.0f, 0.2f, 0.05f};
  for (int s = 0; s < 4; s++) {
    set_grads(m, 0.0f, grads[s], 0.0f);
    ASSERT_OK(cohort_optim_step(o));
    p *= 1.0 - 0.01 * 0.1;
    mm = 0.9 * mm + 0.1 * grads[s];
    vv = 0.999 * vv + 0.001 * grads[s] * grads[s];
    double mhat = mm / (1 - pow(0.9, s + 1)), vhat = vv / (1 - pow(0.999, s + 1));
    p -= 0.01 * mhat / (sqrt(vhat) + 1e-8);
    ASSERT_NEAR(cohort_model_param_data(m)[1], p, 1e-6);
  }
  cohort_optim_destroy(o);
  cohort_model_destroy(m);
}

/* A linear layer of 37 x 29 (1102 values, not a multiple of any vector width), so that the update kernels run their
 * vector loops and their tails; its gradients set by hand. */
static cohort_model *wide(cohort_rng *rng) {
  cohort_model *m = NULL;
  if (cohort_model_create(&m) || cohort_model_add_linear(m, "w", 37, 29) ||
      cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 5))
    return NULL;
  for (int i = 0; i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    for (size_t j = 0; j < p->numel; j++)
      p->grad[j] = cohort_rng_uniform(rng) - 0.5f;
  }
  return m;
}

/* The vector kernels give bitwise what the update rule gives one float at a time, in the same order of operations. */
TEST(sgd_and_adamw_kernels_match_scalar_rule) {
  cohort_rng rng;
  cohort_rng_seed(&rng, 11);
  for (int kind = 0; kind < 2; kind++) {
    cohort_model *m = wide(&rng);
    ASSERT_TRUE(m != NULL);
    const cohort_param *p = cohort_model_param(m, 0);
    const size_t n = p->numel;
    float *w = malloc(n * sizeof(float)), *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
    ASSERT_TRUE(w && a && b);
    memcpy(w, p->value, n * sizeof(float));
    cohort_optim *o;
    const cohort_sgd_config sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = 1};
    const cohort_adamw_config adamw = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
    ASSERT_OK(kind == 0 ? cohort_optim_sgd_create(m, &sgd, &o) : cohort_optim_adamw_create(m, &adamw, &o));
    for (int s = 0; s < 3; s++) {
      for (size_t j = 0; j < n; j++)
        p->grad[j] = cohort_rng_uniform(&rng) - 0.5f;
      ASSERT_OK(cohort_optim_step(o));
      const float *g = p->grad;
      if (kind == 0) {
        for (size_t j = 0; j < n; j++) {
          float d = g[j] + sgd.weight_decay * w[j];
          a[j] = s == 0 ? d : a[j] * sgd.momentum + 1.0f * d;
          w[j] -= sgd.lr * (d + sgd.momentum * a[j]);
        }
      } else {
        const float decay = 1.0f - adamw.lr * adamw.weight_decay;
        const float step_size = (float)((double)adamw.lr / (1.0 - pow((double)adamw.beta1, s + 1.0)));
        const float bc2_sqrt = (float)sqrt(1.0 - pow((double)adamw.beta2, s + 1.0));
        for (size_t j = 0; j < n; j++) {
          w[j] *= decay;
          a[j] = a[j] * adamw.beta1 + (1.0f - adamw.beta1) * g[j];
          b[j] = b[j] * adamw.beta2 + (1.0f - adamw.beta2) * g[j] * g[j];
          w[j] -= step_size * (a[j] / (sqrtf(b[j]) / bc2_sqrt + adamw.eps));
        }
      }
      ASSERT_EQ(memcmp(p->value, w, n * sizeof(float)), 0);
      ASSERT_EQ(memcmp(cohort_optim_state(o, 0)->data, a, n * sizeof(float)), 0);
      if (kind == 1) ASSERT_EQ(memcmp(cohort_optim_state(o, 1)->data, b, n * sizeof(float)), 0);
    }
    cohort_optim_destroy(o);
    cohort_model_destroy(m);
    free(w), free(a), free(b);
  }
}

static int is_subnormal(float x) { return fpclassify(x) == FP_SUBNORMAL; }

/* After a step, this thread's own float math still yields subnormals: the flush was the step's alone. */
static int caller_keeps_subnormals(void) {
  volatile float tiny_normal = FLT_MIN;
  volatile float below = tiny_normal / 4.0f;
  return is_subnormal(below);
}

/* A momentum buffer whose gradient has gone to zero decays by 0.9 a step; once below FLT_MIN it becomes 0 rather
 * than a subnormal (which costs a microcode assist per operation on x86: bench/optim.sh), and the caller's own
 * float math keeps its subnormals. */
TEST(sgd_momentum_flushes_subnormals) {
  cohort_model *m = tiny();
  ASSERT_TRUE(m != NULL);
  cohort_sgd_config cfg = {.lr = 0.1f, .momentum = 0.9f};
  cohort_optim *o;
  ASSERT_OK(cohort_optim_sgd_create(m, &cfg, &o));
  set_grads(m, 1e-37f, 0.0f, 0.0f);
  int zero_at = -1;
  for (int s = 0; s < 30; s++) {
    ASSERT_OK(cohort_optim_step(o));
    const float buf = cohort_optim_state(o, 0)->data[0];
    ASSERT_TRUE(!is_subnormal(buf));
    if (buf == 0.0f && zero_at < 0) zero_at = s;
    if (s == 0) set_grads(m, 0.0f, 0.0f, 0.0f);
  }
  /* 1e-37 * 0.9^21 = 1.09e-38 is the first value below FLT_MIN. */
  ASSERT_EQ(zero_at, 21);
  ASSERT_TRUE(caller_keeps_subnormals());
  cohort_optim_destroy(o);
  cohort_model_destroy(m);
}

/* AdamW squares the gradient: 1e-3 * (1e-20)^2 is subnormal and becomes 0, while exp_avg (1e-21) stays as it is. */
TEST(adamw_flushes_subnormals) {
  cohort_model *m = tiny();
  ASSERT_TRUE(m != NULL);
  cohort_adamw_config cfg = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
  cohort_optim *o;
  ASSERT_OK(cohort_optim_adamw_create(m, &cfg, &o));
  set_grads(m, 1e-20f, 0.0f, 0.0f);
  ASSERT_OK(cohort_optim_step(o));
  ASSERT_STREQ(cohort_optim_state(o, 1)->name, "w.weight.exp_avg_sq");
  ASSERT_TRUE(cohort_optim_state(o, 1)->data[0] == 0.0f);
  ASSERT_NEAR(cohort_optim_state(o, 0)->data[0], 1e-21, 1e-27);
  ASSERT_TRUE(caller_keeps_subnormals());
  cohort_optim_destroy(o);
  cohort_model_destroy(m);
}

TEST(lr_schedules) {
  cohort_lr_schedule s = {.base_lr = 0.1f,
                          .world_size = 4,
                          .warmup_steps = 10,
                          .decay = COHORT_LR_COSINE,
                          .total_steps = 110,
                          .min_lr = 0.0f};
  ASSERT_OK(cohort_lr_schedule_check(&s));
  ASSERT_NEAR(cohort_lr_schedule_at(&s, 0), 0.1, 1e-7);
  ASSERT_NEAR(cohort_lr_schedule_at(&s, 5), 0.25, 1e-6);
  ASSERT_NEAR(cohort_lr_schedule_at(&s, 10), 0.4, 1e-6);
  ASSERT_NEAR(cohort_lr_schedule_at(&s, 60), 0.2, 1e-6);
  ASSERT_NEAR(cohort_lr_schedule_at(&s, 110), 0.0, 1e-7);
  ASSERT_NEAR(cohort_lr_schedule_at(&s, 500), 0.0, 1e-7);
  s.decay = COHORT_LR_STEP;
  s.step_size = 30;
  s.gamma = 0.1f;
  ASSERT_NEAR(cohort_lr_schedule_at(&s, 39), 0.4, 1e-6);
  ASSERT_NEAR(cohort_lr_schedule_at(&s, 40), 0.04, 1e-7);
  ASSERT_NEAR(cohort_lr_schedule_at(&s, 75), 0.004, 1e-8);
  s.decay = COHORT_LR_CONSTANT;
  s.world_size = 1;
  ASSERT_NEAR(cohort_lr_schedule_at(&s, 3), 0.1, 1e-7);
  s.decay = COHORT_LR_COSINE;
  s.total_steps = 10;
  ASSERT_STATUS(cohort_lr_schedule_check(&s), COHORT_ERR_INVALID);
  s.world_size = 0;
  ASSERT_STATUS(cohort_lr_schedule_check(&s), COHORT_ERR_INVALID);
}

TEST(clip_grad_norm) {
  cohort_model *m = tiny();
  ASSERT_TRUE(m != NULL);
  set_grads(m, 3.0f, 0.0f, 4.0f);
  float norm;
  ASSERT_OK(cohort_model_clip_grad_norm(m, 10.0f, &norm));
  ASSERT_NEAR(norm, 5.0, 1e-6);
  ASSERT_NEAR(cohort_model_param(m, 1)->grad[0], 4.0, 1e-6); /* under the limit: untouched */
  ASSERT_OK(cohort_model_clip_grad_norm(m, 1.0f, &norm));
  ASSERT_NEAR(norm, 5.0, 1e-6);
  ASSERT_NEAR(cohort_model_param(m, 0)->grad[0], 3.0 / (5.0 + 1e-6), 1e-6);
  ASSERT_NEAR(cohort_model_param(m, 1)->grad[0], 4.0 / (5.0 + 1e-6), 1e-6);
  ASSERT_STATUS(cohort_model_clip_grad_norm(m, 0.0f, &norm), COHORT_ERR_INVALID);
  cohort_model_destroy(m);
}

/* OpenBLAS core names by SIMD family, and the advice to leave generic kernels for what the CPU runs. */
TEST(blas_core_families_and_advice) {
  ASSERT_EQ(cohort_blas_core_level("Prescott"), 1);
  ASSERT_EQ(cohort_blas_core_level("NEHALEM"), 1);
  ASSERT_EQ(cohort_blas_core_level("Sandybridge"), 2);
  ASSERT_EQ(cohort_blas_core_level("Zen"), 3);
  ASSERT_EQ(cohort_blas_core_level("haswell"), 3);
  ASSERT_EQ(cohort_blas_core_level("Cooperlake"), 4);
  ASSERT_EQ(cohort_blas_core_level("SkylakeX"), 4);
  ASSERT_EQ(cohort_blas_core_level("NoSuchCore"), 0);
  ASSERT_EQ(cohort_blas_core_level(NULL), 0);
  const char *best = cohort_blas_best_core();
  if (!best) return; /* no AVX (or not x86-64): nothing better than generic */
  ASSERT_TRUE(cohort_blas_core_level(best) >= 2);
  ASSERT_STREQ(cohort_blas_better_core("Prescott"), best);
  ASSERT_TRUE(cohort_blas_better_core(best) == NULL);
  ASSERT_TRUE(cohort_blas_better_core("Cooperlake") == NULL);  /* above what we would ask for: kept */
  ASSERT_TRUE(cohort_blas_better_core("FutureCore9") == NULL); /* a newer OpenBLAS's name: trusted */
  /* The kernels running here (OpenBLAS's own choice, the environment's pin, or .ci/run's per-core passes) are named. */
  ASSERT_TRUE(cohort_blas_core_level(cohort_blas_corename()) > 0);
}

COHORT_TEST_MAIN(TEST_CASE(blas_core_families_and_advice), TEST_CASE(grad_linear),
                 TEST_CASE(grad_conv2d_stride_padding), TEST_CASE(grad_relu_fused_and_unfused),
                 TEST_CASE(grad_maxpool_general), TEST_CASE(maxpool_values), TEST_CASE(grad_dropout),
                 TEST_CASE(grad_batchnorm_train), TEST_CASE(grad_batchnorm_eval), TEST_CASE(grad_softmax_xent),
                 TEST_CASE(softmax_xent_stable_and_checked), TEST_CASE(hooks_fire_once_in_reverse_when_final),
                 TEST_CASE(grads_accumulate_and_batch_size_changes), TEST_CASE(argument_errors_name_the_layer),
                 TEST_CASE(dropout_masks_and_eval), TEST_CASE(batchnorm_running_stats),
                 TEST_CASE(init_distributions_and_determinism), TEST_CASE(rng_is_xoshiro256starstar),
                 TEST_CASE(sgd_momentum_nesterov_weight_decay), TEST_CASE(sgd_lars_trust_ratio),
                 TEST_CASE(sgd_larc_clip), TEST_CASE(adamw_update), TEST_CASE(sgd_and_adamw_kernels_match_scalar_rule),
                 TEST_CASE(sgd_momentum_flushes_subnormals), TEST_CASE(adamw_flushes_subnormals),
                 TEST_CASE(lr_schedules), TEST_CASE(clip_grad_norm))
