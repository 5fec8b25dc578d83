/*
 * test_nn_golden.c: cohort's nn layer against PyTorch. nn_golden.py (run by ctest as the fixture golden.nn_data)
 * writes torch's weights, inputs, outputs, gradients, losses and updated weights to the file named by
 * NN_GOLDEN_FILE; this test loads the same weights into cohort's models, repeats the computation, and requires
 * agreement within float32 rounding (relative to the largest magnitude of each tensor; losses each on their own).
 */
#include <stdint.h>

#include "cohort/nn.h"
#include "test.h"

typedef struct record {
  char name[96];
  int ndim;
  int64_t shape[8];
  size_t numel;
  float *data;
} record;

static record *records;
static int nrecords;
static char load_error[256];

static int load(void) {
  const char *path = getenv("NN_GOLDEN_FILE");
  if (nrecords) return 1;
  if (!path) {
    snprintf(load_error, sizeof load_error, "NN_GOLDEN_FILE is not set (ctest sets it; run nn_golden.py first)");
    return 0;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(load_error, sizeof load_error, "cannot open %s: did nn_golden.py (python3 + torch) run?", path);
    return 0;
  }
  char magic[4];
  uint32_t n = 0;
  if (fread(magic, 1, 4, f) != 4 || memcmp(magic, "CNNG", 4) != 0 || fread(&n, 4, 1, f) != 1 || n > 10000) {
    snprintf(load_error, sizeof load_error, "%s: not a golden file (bad magic or count)", path);
    fclose(f);
    return 0;
  }
  records = calloc(n, sizeof *records);
  for (uint32_t i = 0; i < n; i++) {
    record *r = &records[i];
    uint32_t len, nd;
    if (fread(&len, 4, 1, f) != 1 || len >= sizeof r->name || fread(r->name, 1, len, f) != len ||
        fread(&nd, 4, 1, f) != 1 || nd < 1 || nd > 8 || fread(r->shape, 8, nd, f) != nd) {
      snprintf(load_error, sizeof load_error, "%s: record %u is truncated or malformed", path, i);
      fclose(f);
      return 0;
    }
    r->ndim = (int)nd;
    r->numel = 1;
    for (uint32_t d = 0; d < nd; d++)
      r->numel *= (size_t)r->shape[d];
    r->data = malloc(r->numel * sizeof(float));
    if (fread(r->data, sizeof(float), r->numel, f) != r->numel) {
      snprintf(load_error, sizeof load_error, "%s: data of record %s is truncated", path, r->name);
      fclose(f);
      return 0;
    }
  }
  fclose(f);
  nrecords = (int)n;
  return 1;
}

static const record *find(const char *name) {
  for (int i = 0; i < nrecords; i++)
    if (strcmp(records[i].name, name) == 0) return &records[i];
  fprintf(stderr, "golden file has no record '%s'\n", name);
  return NULL;
}

/*
 * Tolerances from the arithmetic, not from the machine where the test was written. cohort and torch compute the
 * same float32 sums in other orders (each with its own GEMM kernels, which OpenBLAS picks by CPU), and a float32
 * sum of K terms may be off the exact sum by gamma(K) = K u / (1 - K u) of the sum of its terms' magnitudes
 * (u = 2^-24). Each model is compared at gamma of its longest sum:
 *   cnn    fc1's 9216 inputs                                        gamma = 5.5e-4
 *   small  the conv weight gradient over 6 images x 8 x 8 positions      2.3e-5
 *   mlp    fc1's 784 inputs                                              4.7e-5
 * Measured on Zen 3 under OpenBLAS's Prescott, Nehalem, Sandybridge, Haswell and Zen kernels against torch 1.13:
 * at most 2.4e-6. A wrong formula is off by far more than any of these.
 */
static double gamma_of(double k) {
  const double u = 1.0 / (1 << 24);
  return k * u / (1 - k * u);
}
#define CNN_TOL gamma_of(9216)
#define SMALL_TOL gamma_of(6 * 8 * 8)
#define MLP_TOL gamma_of(784)

/*
 * max |got - want| / max(max |want|, floor) over the tensor; prints the worst element when above tol. The floor
 * matters for tensors that are 0 in exact arithmetic (a conv bias feeding batchnorm has gradient 0; torch's is
 * rounding noise of 1e-8): they are compared at the scale of the model's largest gradient, which bounds the terms
 * whose rounding they are.
 */
static int close_to_floor(const char *what, const float *got, const float *want, size_t n, double tol, double floor) {
  double scale = floor, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++)
    scale = fmax(scale, fabs(want[i]));
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]);
    if (e > worst) worst = e, at = i;
  }
  double rel = worst / (scale > 0 ? scale : 1.0);
  if (rel > tol)
    fprintf(stderr, "%s: element %zu is %.9g, torch has %.9g (relative error %.3g > %g)\n", what, at, got[at], want[at],
            rel, tol);
  return rel <= tol;
}

static int close_to(const char *what, const float *got, const float *want, size_t n, double tol) {
  return close_to_floor(what, got, want, n, tol, 0.0);
}

/* Copies "<prefix><param name>" into every parameter (and buffer) of m. */
static int load_params(cohort_model *m, const char *prefix) {
  char name[128];
  for (int pass = 0; pass < 2; pass++) {
    int count = pass ? cohort_model_num_buffers(m) : cohort_model_num_params(m);
    for (int i = 0; i < count; i++) {
      const cohort_param *p = pass ? cohort_model_buffer(m, i) : cohort_model_param(m, i);
      snprintf(name, sizeof name, "%s%s", prefix, p->name);
      const record *r = find(name);
      if (!r || r->numel != p->numel) return 0;
      memcpy(p->value, r->data, p->numel * sizeof(float));
    }
  }
  return 1;
}

static int params_close(cohort_model *m, const char *prefix, double tol) {
  char name[128];
  int ok = 1;
  for (int i = 0; i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    const record *r = find(name);
    ok &= r && r->numel == p->numel && close_to(name, p->value, r->data, p->numel, tol);
  }
  return ok;
}

/*
 * Parameters after AdamW steps. Adam divides each gradient element by its own running magnitude, so an element whose
 * gradient is a near-cancellation (a sum of terms that is ~0 in exact arithmetic) moves by up to lr per step in a
 * direction that float rounding picks, and rounding differs between BLAS kernels (OpenBLAS picks its sgemm by CPU;
 * torch has its own). Measured on an AMD EPYC: 6 of fc1's 200704 weights differed from torch by more than 1e-6
 * (worst 1.2e-5, a hundredth of one step), all others by at most 3.4e-8. So: at most one element in 10,000 of a
 * tensor may exceed tol, and none may be off by more than one step (lr); any real error in the update rule moves
 * far more elements than that.
 */
static int params_close_adam(cohort_model *m, const char *prefix, double tol, double lr) {
  char name[128];
  int ok = 1;
  for (int i = 0; i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    const record *r = find(name);
    if (!r || r->numel != p->numel) return 0;
    double scale = 0.0, worst = 0.0;
    size_t over = 0, at = 0;
    for (size_t j = 0; j < r->numel; j++)
      scale = fmax(scale, fabs(r->data[j]));
    for (size_t j = 0; j < r->numel; j++) {
      double e = fabs((double)p->value[j] - r->data[j]);
      over += e > tol * scale;
      if (e > worst) worst = e, at = j;
    }
    if (over * 10000 > r->numel || worst > lr) {
      fprintf(stderr,
              "%s: %zu of %zu elements differ from torch by more than %g of the largest (%g); worst: element %zu "
              "is %.9g, torch has %.9g\n",
              name, over, r->numel, tol, scale, at, p->value[at], r->data[at]);
      ok = 0;
    }
  }
  return ok;
}

static int grads_close(cohort_model *m, const char *prefix, double tol) {
  char name[128];
  int ok = 1;
  double global = 0.0;
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < cohort_model_num_params(m); i++) {
      const cohort_param *p = cohort_model_param(m, i);
      snprintf(name, sizeof name, "%s%s", prefix, p->name);
      const record *r = find(name);
      if (!r || r->numel != p->numel) return 0;
      if (pass == 0)
        for (size_t j = 0; j < r->numel; j++)
          global = fmax(global, fabs(r->data[j]));
      else
        ok &= close_to_floor(name, p->grad, r->data, p->numel, tol, global);
    }
  }
  return ok;
}

/* Batch s of a [S, N, ...] record, as a tensor with the given per-sample shape; labels as int32. */
static void batch(const record *xr, const record *yr, int s, cohort_tensor *x, int32_t *labels) {
  int64_t shape[4] = {xr->shape[1], xr->ndim > 2 ? xr->shape[2] : 1, xr->ndim > 3 ? xr->shape[3] : 1,
                      xr->ndim > 4 ? xr->shape[4] : 1};
  size_t per = xr->numel / (size_t)xr->shape[0];
  cohort_tensor_wrap(x, xr->data + (size_t)s * per, xr->ndim - 1, shape);
  for (int64_t i = 0; i < yr->shape[1]; i++)
    labels[i] = (int32_t)yr->data[s * yr->shape[1] + i];
}

static int loss_close(const char *what, float got, float want, double tol) {
  double rel = fabs((double)got - want) / fmax(fabs(want), 1e-6);
  if (rel > tol) fprintf(stderr, "%s: %.9g, torch has %.9g (relative error %.3g > %.3g)\n", what, got, want, rel, tol);
  return rel <= tol;
}

/* One training step; returns the loss before the update (NAN on error). */
static float train_step(cohort_model *m, cohort_optim *o, const cohort_tensor *x, const int32_t *labels, float clip,
                        float *norm) {
  const cohort_tensor *y;
  float loss, grad[64 * 10];
  cohort_model_zero_grad(m);
  if (cohort_model_forward(m, x, &y) || y->numel > 640 || cohort_softmax_xent(y, labels, &loss, grad, NULL) ||
      cohort_model_backward(m, grad) || (clip > 0 && cohort_model_clip_grad_norm(m, clip, norm)) ||
      cohort_optim_step(o))
    return NAN;
  return loss;
}

#define NEED_GOLDEN()                                                                                                  \
  do {                                                                                                                 \
    if (!load()) TEST_FAIL_("%s", load_error);                                                                         \
  } while (0)

TEST(cnn_forward_backward) {
  NEED_GOLDEN();
  cohort_model *m;
  ASSERT_OK(cohort_model_create_cnn(0, &m));
  ASSERT_TRUE(load_params(m, "cnn.param."));
  const record *xr = find("cnn.x"), *yr = find("cnn.y"), *lr = find("cnn.logits"), *loss_r = find("cnn.loss");
  ASSERT_TRUE(xr && yr && lr && loss_r);
  cohort_tensor x;
  ASSERT_OK(cohort_tensor_wrap(&x, xr->data, 4, xr->shape));
  int32_t labels[8];
  for (int i = 0; i < 8; i++)
    labels[i] = (int32_t)yr->data[i];
  const cohort_tensor *y;
  float loss, grad[80];
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  ASSERT_EQ(y->numel, lr->numel);
  ASSERT_TRUE(close_to("cnn.logits", y->data, lr->data, y->numel, CNN_TOL));
  ASSERT_OK(cohort_softmax_xent(y, labels, &loss, grad, NULL));
  ASSERT_TRUE(loss_close("cnn.loss", loss, loss_r->data[0], CNN_TOL));
  ASSERT_OK(cohort_model_backward(m, grad));
  ASSERT_TRUE(grads_close(m, "cnn.grad.", CNN_TOL));
  cohort_model_destroy(m);
}

TEST(cnn_sgd_momentum_20_steps) {
  NEED_GOLDEN();
  cohort_model *m;
  cohort_optim *o;
  ASSERT_OK(cohort_model_create_cnn(0, &m));
  ASSERT_TRUE(load_params(m, "cnn.param."));
  cohort_sgd_config cfg = {.lr = 0.05f, .momentum = 0.9f};
  ASSERT_OK(cohort_optim_sgd_create(m, &cfg, &o));
  const record *xr = find("cnn.train.x"), *yr = find("cnn.train.y"), *losses = find("cnn.train.loss");
  ASSERT_TRUE(xr && yr && losses);
  int ok = 1;
  for (int s = 0; s < 20; s++) {
    cohort_tensor x;
    int32_t labels[8];
    char what[32];
    batch(xr, yr, s, &x, labels);
    float loss = train_step(m, o, &x, labels, 0, NULL);
    snprintf(what, sizeof what, "cnn step %d loss", s);
    ok &= loss_close(what, loss, losses->data[s], CNN_TOL);
  }
  ASSERT_TRUE(ok);
  ASSERT_TRUE(params_close(m, "cnn.final.", CNN_TOL));
  cohort_optim_destroy(o);
  cohort_model_destroy(m);
}

static cohort_model *small_model(void) {
  cohort_model *m = NULL;
  if (cohort_model_create(&m) || cohort_model_add_conv2d(m, "conv", 3, 4, 3, 2, 1) ||
      cohort_model_add_batchnorm2d(m, "bn", 4, 1e-5f, 0.1f) || cohort_model_add_relu(m) ||
      cohort_model_add_maxpool2d(m, 2, 0) || cohort_model_add_flatten(m) || cohort_model_add_linear(m, "fc", 64, 10) ||
      cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 0) || !load_params(m, "small.param.")) {
    cohort_model_destroy(m);
    return NULL;
  }
  return m;
}

TEST(small_batchnorm_train_and_eval) {
  NEED_GOLDEN();
  cohort_model *m = small_model();
  ASSERT_TRUE(m != NULL);
  const record *xr = find("small.x"), *yr = find("small.y"), *lr = find("small.logits"), *loss_r = find("small.loss");
  const record *rm = find("small.after.bn.running_mean"), *rv = find("small.after.bn.running_var");
  const record *ev = find("small.eval_logits");
  ASSERT_TRUE(xr && yr && lr && loss_r && rm && rv && ev);
  cohort_tensor x;
  ASSERT_OK(cohort_tensor_wrap(&x, xr->data, 4, xr->shape));
  int32_t labels[6];
  for (int i = 0; i < 6; i++)
    labels[i] = (int32_t)yr->data[i];
  const cohort_tensor *y;
  float loss, grad[60];
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  ASSERT_TRUE(close_to("small.logits", y->data, lr->data, lr->numel, SMALL_TOL));
  ASSERT_OK(cohort_softmax_xent(y, labels, &loss, grad, NULL));
  ASSERT_TRUE(loss_close("small.loss", loss, loss_r->data[0], SMALL_TOL));
  ASSERT_OK(cohort_model_backward(m, grad));
  ASSERT_TRUE(grads_close(m, "small.grad.", SMALL_TOL));
  ASSERT_TRUE(close_to("bn.running_mean", cohort_model_buffer(m, 0)->value, rm->data, 4, SMALL_TOL));
  ASSERT_TRUE(close_to("bn.running_var", cohort_model_buffer(m, 1)->value, rv->data, 4, SMALL_TOL));
  cohort_model_set_training(m, 0);
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  ASSERT_TRUE(close_to("small.eval_logits", y->data, ev->data, ev->numel, SMALL_TOL));
  cohort_model_destroy(m);
}

TEST(small_sgd_nesterov_weight_decay_clip) {
  NEED_GOLDEN();
  cohort_model *m = small_model();
  ASSERT_TRUE(m != NULL);
  cohort_optim *o;
  cohort_sgd_config cfg = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = 1};
  ASSERT_OK(cohort_optim_sgd_create(m, &cfg, &o));
  const record *xr = find("small.x"), *yr = find("small.y"), *norms = find("small.clip.norms");
  ASSERT_TRUE(xr && yr && norms);
  cohort_tensor x;
  ASSERT_OK(cohort_tensor_wrap(&x, xr->data, 4, xr->shape));
  int32_t labels[6];
  for (int i = 0; i < 6; i++)
    labels[i] = (int32_t)yr->data[i];
  for (int s = 0; s < 3; s++) {
    float norm = 0;
    ASSERT_TRUE(!isnan(train_step(m, o, &x, labels, 0.5f, &norm)));
    ASSERT_TRUE(loss_close("grad norm before clipping", norm, norms->data[s], SMALL_TOL));
  }
  ASSERT_TRUE(norms->data[0] > 0.5f); /* the clipping did happen */
  ASSERT_TRUE(params_close(m, "small.final.", SMALL_TOL));
  cohort_optim_destroy(o);
  cohort_model_destroy(m);
}

TEST(mlp_adamw_5_steps) {
  NEED_GOLDEN();
  cohort_model *m;
  cohort_optim *o;
  ASSERT_OK(cohort_model_create_mlp(0, 784, 256, 10, &m));
  ASSERT_TRUE(load_params(m, "mlp.param."));
  cohort_adamw_config cfg = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.5f};
  ASSERT_OK(cohort_optim_adamw_create(m, &cfg, &o));
  const record *xr = find("mlp.train.x"), *yr = find("mlp.train.y"), *losses = find("mlp.train.loss");
  ASSERT_TRUE(xr && yr && losses);
  int ok = 1;
  for (int s = 0; s < 5; s++) {
    cohort_tensor x;
    int32_t labels[16];
    char what[32];
    batch(xr, yr, s, &x, labels);
    snprintf(what, sizeof what, "mlp step %d loss", s);
    ok &= loss_close(what, train_step(m, o, &x, labels, 0, NULL), losses->data[s], MLP_TOL);
  }
  ASSERT_TRUE(ok);
  ASSERT_TRUE(params_close_adam(m, "mlp.final.", MLP_TOL, cfg.lr));
  cohort_optim_destroy(o);
  cohort_model_destroy(m);
}

COHORT_TEST_MAIN(TEST_CASE(cnn_forward_backward), TEST_CASE(cnn_sgd_momentum_20_steps),
                 TEST_CASE(small_batchnorm_train_and_eval), TEST_CASE(small_sgd_nesterov_weight_decay_clip),
                 TEST_CASE(mlp_adamw_5_steps))
