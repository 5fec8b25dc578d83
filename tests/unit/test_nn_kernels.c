/*
 * test_nn_kernels.c: every kernel set (src/nn/backend.h) against the reference, the oracle.
 *
 * Per layer: the layer's forward and backward run on the reference kernels and on the set under test, from the
 * same weights, input and output gradient, and every element of y, dx and the parameter gradients must agree
 * within what float32 arithmetic allows, whatever order each set sums in. A float32 sum of k products is off the
 * exact sum by at most gamma(k) = k u / (1 - k u) (u = 2^-24) times the sum of the products' magnitudes, so two
 * sets differ by at most 2 gamma(k) times it. That magnitude is computed by the reference itself, run on the
 * absolute values (|w| * |x| summed is the same convolution or product), element by element; k is the longest sum
 * of the element (conv2d forward: cin x kernel^2 + 1 with the bias, weight gradient: batch x output positions, input
 * gradient: cout x kernel^2). Max pooling computes no sums: its output, and its gradient where windows do not
 * overlap, must be equal bit for bit.
 *
 * Whole models (the reference CNN, which runs oneDNN's blocked layouts between conv1, conv2 and the pooling, and
 * a model with channel counts that do not fill a block): forward, gradients and 10 training steps against the
 * reference, compared at the scale of each tensor (as tests/golden compares with torch) and by the distance the
 * parameters travelled (as tests/mp/params.sh does for fmnist-train).
 *
 * Every set this build has is tested; a set it lacks (COHORT_DNNL=OFF) is skipped with a line saying so.
 */
#include <math.h>

#include "cohort/nn.h"
#include "nn/backend.h"
#include "test.h"

static double gamma_of(double k) {
  const double u = 1.0 / (1 << 24);
  return k * u / (1 - k * u);
}

static void fill(float *v, size_t n, uint64_t seed, float lo, float hi) {
  cohort_rng r;
  cohort_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++)
    v[i] = lo + (hi - lo) * cohort_rng_uniform(&r);
}

static void absolute(float *d, const float *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    d[i] = fabsf(s[i]);
}

static void no_ready(void *arg, int index) {}

/* The sets under test: each one this build and machine can run, other than the reference. */
static int backend_available(cohort_kernels k) {
  cohort_kernels got;
  return cohort_kernels_resolve(k, &got) == COHORT_OK;
}

/* ---- one layer, outside a model ---- */

typedef struct bench {
  cohort__layer l;
  cohort_param params[2];
  float *w, *b, *gw, *gb;
  cohort_tensor x, y;
  float *dy, *dx, *aux;
} bench;

/* A layer of `ops` with its configuration copied from `cfg`, its parameters from seed, on the given kernels. */
static int bench_make(bench *t, const cohort__layer *cfg, int nparams, const size_t *pnumel, const cohort_tensor *x,
                      const cohort__backend *be) {
  memset(t, 0, sizeof *t);
  t->l = *cfg;
  t->l.pidx = 0;
  t->l.nparams = nparams;
  t->l.kern = be->kernels(&t->l);
  for (int i = 0; i < nparams; i++) {
    t->params[i].value = calloc(pnumel[i], sizeof(float));
    t->params[i].grad = calloc(pnumel[i], sizeof(float));
    t->params[i].numel = pnumel[i];
    fill(t->params[i].value, pnumel[i], 10 + (uint64_t)i, -0.5f, 0.5f);
  }
  t->x = *x;
  if (t->l.ops->out_shape(&t->l, x, &t->y) != COHORT_OK) return 0;
  t->y.data = calloc(t->y.numel, sizeof(float));
  t->dy = calloc(t->y.numel, sizeof(float));
  t->dx = calloc(x->numel, sizeof(float));
  size_t aux = t->l.ops->aux_floats(&t->l, x);
  t->l.aux = calloc(aux ? aux : 1, sizeof(float));
  return t->y.data && t->dy && t->dx && t->l.aux;
}

static void bench_free(bench *t, const cohort__backend *be) {
  if (be->release) be->release(&t->l);
  for (int i = 0; i < t->l.nparams; i++) {
    free(t->params[i].value);
    free(t->params[i].grad);
  }
  free(t->y.data);
  free(t->dy);
  free(t->dx);
  free(t->l.aux);
}

static cohort_status bench_forward(bench *t, const cohort__backend *be) {
  cohort__nnctx c = {t->params, NULL, 1, NULL, no_ready, NULL, NULL, NULL, COHORT_OK, NULL};
  if (be->enter) be->enter();
  cohort__layer_forward(&t->l, &c, &t->x, &t->y);
  return c.status;
}

static cohort_status bench_backward(bench *t, const cohort__backend *be) {
  cohort__nnctx c = {t->params, NULL, 1, NULL, no_ready, NULL, NULL, NULL, COHORT_OK, NULL};
  if (be->enter) be->enter();
  cohort__layer_backward(&t->l, &c, &t->x, &t->y, t->dy, t->dx);
  return c.status;
}

/* |got - want| <= 2 gamma(k) mag + tiny, element by element; prints the worst offender. */
static int within(const char *what, const float *got, const float *want, const float *mag, size_t n, double k) {
  double g = 2 * gamma_of(k), worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double bound = g * mag[i] + 1e-30, e = fabs((double)got[i] - want[i]);
    if (!(e <= bound) && e / bound > worst) worst = e / bound, at = i;
  }
  if (worst > 0)
    fprintf(stderr, "  %s[%zu]: %.9g against the reference's %.9g: %.3g times the bound 2 gamma(%.0f) x %.3g\n", what,
            at, got[at], want[at], worst, k, mag[at]);
  return worst == 0;
}

static int equal(const char *what, const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      fprintf(stderr, "  %s[%zu]: %.9g, the reference has %.9g (must be equal)\n", what, i, got[i], want[i]);
      return 0;
    }
  return 1;
}

/*
 * Runs layer cfg on input shape xs through the reference (r), the set under test (o) and the reference on absolute
 * values (a), and compares. k: the longest sums of y, the weight gradient, the bias gradient, dx (0: exact).
 */
static int check_layer(cohort_kernels set, const char *name, const cohort__layer *cfg, int nparams,
                       const size_t *pnumel, int ndim, const int64_t *xs, const double k[4]) {
  const cohort__backend *ref = &cohort__backend_reference, *be = cohort__backend_of(set);
  cohort_tensor x = {0};
  if (cohort_tensor_alloc(&x, ndim, xs) != COHORT_OK) return 0;
  fill(x.data, x.numel, 7, -1.0f, 1.0f);
  cohort_tensor xa = {0};
  cohort_tensor_alloc(&xa, ndim, xs);
  absolute(xa.data, x.data, x.numel);
  cohort__layer acfg = *cfg;
  acfg.fuse_relu = 0;
  bench r, o, a;
  int ok = bench_make(&r, cfg, nparams, pnumel, &x, ref) && bench_make(&o, cfg, nparams, pnumel, &x, be) &&
           bench_make(&a, &acfg, nparams, pnumel, &xa, ref);
  for (int i = 0; ok && i < nparams; i++)
    absolute(a.params[i].value, r.params[i].value, pnumel[i]);
  ok = ok && bench_forward(&r, ref) == COHORT_OK && bench_forward(&o, be) == COHORT_OK &&
       bench_forward(&a, ref) == COHORT_OK;
  if (!ok) {
    fprintf(stderr, "  %s: setup or forward failed: %s\n", name, cohort_last_error());
    goto done;
  }
  char what[96];
  snprintf(what, sizeof what, "%s y", name);
  ok &= k[0] > 0 ? within(what, o.y.data, r.y.data, a.y.data, r.y.numel, k[0])
                 : equal(what, o.y.data, r.y.data, r.y.numel);
  /* dy: random, but 0 where a fused ReLU's decision is within rounding of 0 (the two sets may decide it either
   * way, and either is right). */
  fill(r.dy, r.y.numel, 8, -1.0f, 1.0f);
  for (size_t i = 0; i < r.y.numel; i++)
    if (cfg->fuse_relu && fabs(r.y.data[i]) <= 2 * gamma_of(k[0]) * a.y.data[i] + 1e-30) r.dy[i] = 0;
  memcpy(o.dy, r.dy, r.y.numel * sizeof(float));
  absolute(a.dy, r.dy, r.y.numel);
  ok &= bench_backward(&r, ref) == COHORT_OK && bench_backward(&o, be) == COHORT_OK &&
        bench_backward(&a, ref) == COHORT_OK;
  for (int i = 0; i < nparams; i++) {
    snprintf(what, sizeof what, "%s %s gradient", name, i ? "bias" : "weight");
    ok &= within(what, o.params[i].grad, r.params[i].grad, a.params[i].grad, pnumel[i], k[1 + i]);
  }
  snprintf(what, sizeof what, "%s dx", name);
  ok &= k[3] > 0 ? within(what, o.dx, r.dx, a.dx, x.numel, k[3]) : equal(what, o.dx, r.dx, x.numel);
done:
  bench_free(&r, ref);
  bench_free(&o, be);
  bench_free(&a, ref);
  cohort_tensor_free(&x);
  cohort_tensor_free(&xa);
  return ok;
}

static int check_conv(cohort_kernels set, int n, int cin, int h, int w, int cout, int kernel, int stride, int padding,
                      int relu) {
  cohort__layer cfg = {0};
  cfg.ops = &cohort__conv2d_ops;
  snprintf(cfg.name, sizeof cfg.name, "conv%d-%d-k%ds%dp%d%s", cin, cout, kernel, stride, padding, relu ? "+relu" : "");
  cfg.cin = cin, cfg.cout = cout, cfg.kernel = kernel, cfg.stride = stride, cfg.padding = padding;
  cfg.fuse_relu = relu;
  const size_t pn[2] = {(size_t)cout * cin * kernel * kernel, (size_t)cout};
  const int64_t xs[4] = {n, cin, h, w};
  const int64_t oh = (h + 2 * padding - kernel) / stride + 1, ow = (w + 2 * padding - kernel) / stride + 1;
  const double k[4] = {(double)cin * kernel * kernel + 1, (double)n * oh * ow, (double)n * oh * ow,
                       (double)cout * kernel * kernel};
  return check_layer(set, cfg.name, &cfg, 2, pn, 4, xs, k);
}

static int check_linear(cohort_kernels set, int n, int in, int out, int relu) {
  cohort__layer cfg = {0};
  cfg.ops = &cohort__linear_ops;
  snprintf(cfg.name, sizeof cfg.name, "linear%d-%d%s", in, out, relu ? "+relu" : "");
  cfg.in_features = in, cfg.out_features = out, cfg.fuse_relu = relu;
  const size_t pn[2] = {(size_t)out * in, (size_t)out};
  const int64_t xs[2] = {n, in};
  const double k[4] = {(double)in + 1, n, n, out};
  return check_layer(set, cfg.name, &cfg, 2, pn, 2, xs, k);
}

static int check_pool(cohort_kernels set, int n, int c, int h, int w, int kernel, int stride) {
  cohort__layer cfg = {0};
  cfg.ops = &cohort__maxpool2d_ops;
  snprintf(cfg.name, sizeof cfg.name, "maxpool%dx%d-k%ds%d", h, w, kernel, stride);
  cfg.kernel = kernel, cfg.stride = stride;
  const int64_t xs[4] = {n, c, h, w};
  /* Overlapping windows add several gradients into one input: a sum of up to ceil(k/s)^2 terms. */
  const int per = (kernel + stride - 1) / stride;
  const double k[4] = {0, 0, 0, stride >= kernel ? 0 : (double)per * per};
  return check_layer(set, cfg.name, &cfg, 0, NULL, 4, xs, k);
}

static const cohort_kernels sets[] = {COHORT_KERNELS_ONEDNN};

TEST(conv2d_against_reference) {
  for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
    if (!backend_available(sets[s])) {
      printf("  skipped %s: %s\n", cohort_kernels_name(sets[s]), cohort_last_error());
      continue;
    }
    ASSERT_TRUE(check_conv(sets[s], 8, 1, 28, 28, 32, 3, 1, 0, 1));  /* the CNN's conv1 */
    ASSERT_TRUE(check_conv(sets[s], 4, 32, 26, 26, 64, 3, 1, 0, 1)); /* its conv2 */
    ASSERT_TRUE(check_conv(sets[s], 4, 32, 26, 26, 64, 3, 1, 0, 0));
    ASSERT_TRUE(check_conv(sets[s], 3, 2, 9, 8, 3, 3, 1, 0, 0));   /* channels that fill no block */
    ASSERT_TRUE(check_conv(sets[s], 3, 3, 9, 8, 4, 3, 2, 1, 1));   /* stride and padding */
    ASSERT_TRUE(check_conv(sets[s], 2, 16, 7, 7, 24, 1, 1, 0, 0)); /* 1x1 */
    ASSERT_TRUE(check_conv(sets[s], 2, 8, 11, 11, 16, 5, 2, 2, 1));
  }
}

TEST(linear_against_reference) {
  for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
    if (!backend_available(sets[s])) continue;
    ASSERT_TRUE(check_linear(sets[s], 16, 9216, 128, 1)); /* the CNN's fc1 */
    ASSERT_TRUE(check_linear(sets[s], 16, 128, 10, 0));   /* fc2 */
    ASSERT_TRUE(check_linear(sets[s], 3, 5, 7, 0));
    ASSERT_TRUE(check_linear(sets[s], 1, 33, 17, 1));
  }
}

TEST(maxpool_against_reference) {
  for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
    if (!backend_available(sets[s])) continue;
    ASSERT_TRUE(check_pool(sets[s], 4, 64, 24, 24, 2, 2)); /* the CNN's */
    ASSERT_TRUE(check_pool(sets[s], 2, 3, 9, 7, 2, 2));    /* odd sizes: the last row and column left out */
    ASSERT_TRUE(check_pool(sets[s], 2, 5, 9, 9, 3, 2));    /* overlapping windows */
    ASSERT_TRUE(check_pool(sets[s], 2, 4, 8, 8, 3, 3));    /* floor mode: a partial window dropped */
  }
}

/* ---- whole models ---- */

static cohort_model *cnn(cohort_kernels set, int small) {
  cohort_model *m = NULL;
  if (!small) {
    if (cohort_model_create_cnn(5, &m) != COHORT_OK) return NULL;
  } else {
    /* 3 and 5 channels: the blocked layouts would be padded, so the layers hand plain tensors on. */
    if (cohort_model_create(&m) || cohort_model_add_conv2d(m, "c1", 1, 3, 3, 1, 0) || cohort_model_add_relu(m) ||
        cohort_model_add_conv2d(m, "c2", 3, 5, 3, 1, 1) || cohort_model_add_relu(m) ||
        cohort_model_add_maxpool2d(m, 2, 2) || cohort_model_add_conv2d(m, "c3", 5, 16, 3, 1, 0) ||
        cohort_model_add_relu(m) || cohort_model_add_flatten(m) || cohort_model_add_linear(m, "f", 16 * 11 * 11, 10) ||
        cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 5)) {
      cohort_model_destroy(m);
      return NULL;
    }
  }
  if (cohort_model_set_kernels(m, set) != COHORT_OK) {
    cohort_model_destroy(m);
    return NULL;
  }
  return m;
}

/* max |a - b| / max |b| <= tol; prints when not. */
static int close_scaled(const char *what, const float *a, const float *b, size_t n, double tol) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; i++) {
    scale = fmax(scale, fabs(b[i]));
    worst = fmax(worst, fabs((double)a[i] - b[i]));
  }
  double rel = worst / (scale > 0 ? scale : 1);
  if (rel > tol) fprintf(stderr, "  %s: relative difference %.3g > %.3g\n", what, rel, tol);
  return rel <= tol;
}

static void model_case(int small) {
  const int batch = 16;
  /* The longest sum of a step, in both models conv1's weight gradient: 16 images x 26 x 26 positions (the CNN's fc1
   * sums 9216 inputs, the other model's linear layer 1936). */
  const double tol = gamma_of(16 * 26 * 26);
  for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
    if (!backend_available(sets[s])) continue;
    cohort_model *r = cnn(COHORT_KERNELS_REFERENCE, small), *o = cnn(sets[s], small);
    ASSERT_TRUE(r && o);
    ASSERT_EQ(cohort_model_kernels(o), sets[s]);
    cohort_tensor x;
    int64_t xs[4] = {batch, 1, 28, 28};
    ASSERT_OK(cohort_tensor_alloc(&x, 4, xs));
    int32_t labels[16];
    float gr[16 * 10], go[16 * 10], loss_r, loss_o;
    const cohort_tensor *yr, *yo;
    size_t np = cohort_model_param_count(r);
    float *start = malloc(np * sizeof(float));
    memcpy(start, cohort_model_param_data(r), np * sizeof(float));
    cohort_sgd_config sgd = {.lr = 0.02f, .momentum = 0.9f};
    cohort_optim *opr, *opo;
    ASSERT_OK(cohort_optim_sgd_create(r, &sgd, &opr));
    ASSERT_OK(cohort_optim_sgd_create(o, &sgd, &opo));
    for (int step = 0; step < 10; step++) {
      fill(x.data, x.numel, 100 + (uint64_t)step, -1.0f, 2.0f);
      for (int i = 0; i < batch; i++)
        labels[i] = (step * 7 + i * 3) % 10;
      cohort_model_zero_grad(r);
      cohort_model_zero_grad(o);
      ASSERT_OK(cohort_model_forward(r, &x, &yr));
      ASSERT_OK(cohort_model_forward(o, &x, &yo));
      if (step == 0) ASSERT_TRUE(close_scaled("logits", yo->data, yr->data, yr->numel, tol));
      ASSERT_OK(cohort_softmax_xent(yr, labels, &loss_r, gr, NULL));
      ASSERT_OK(cohort_softmax_xent(yo, labels, &loss_o, go, NULL));
      ASSERT_OK(cohort_model_backward(r, gr));
      ASSERT_OK(cohort_model_backward(o, go));
      for (int i = 0; step == 0 && i < cohort_model_num_params(r); i++) {
        const cohort_param *pr = cohort_model_param(r, i), *po = cohort_model_param(o, i);
        ASSERT_TRUE(close_scaled(pr->name, po->grad, pr->grad, pr->numel, tol));
      }
      ASSERT_OK(cohort_optim_step(opr));
      ASSERT_OK(cohort_optim_step(opo));
    }
    /* After 10 steps: at most K u of the distance the parameters travelled apart (tests/mp/params.sh). */
    const float *pr = cohort_model_param_data(r), *po = cohort_model_param_data(o);
    double dd = 0, mm = 0;
    for (size_t i = 0; i < np; i++) {
      dd += ((double)pr[i] - po[i]) * ((double)pr[i] - po[i]);
      mm += ((double)pr[i] - start[i]) * ((double)pr[i] - start[i]);
    }
    double ratio = sqrt(dd / mm), limit = 16.0 * 26 * 26 / (1 << 24);
    printf("  %s, %s: %zu parameters: 10 steps end %.3g of the distance travelled apart (limit %.3g)\n",
           cohort_kernels_name(sets[s]), small ? "small model" : "reference CNN", np, ratio, limit);
    ASSERT_TRUE(ratio <= limit);
    /* The batch size changes (the evaluation's): a second plan per layer, and the first still right after it. */
    int64_t xs2[4] = {5, 1, 28, 28};
    cohort_tensor x2;
    ASSERT_OK(cohort_tensor_alloc(&x2, 4, xs2));
    fill(x2.data, x2.numel, 3, -1.0f, 2.0f);
    ASSERT_OK(cohort_model_forward(r, &x2, &yr));
    ASSERT_OK(cohort_model_forward(o, &x2, &yo));
    ASSERT_TRUE(close_scaled("logits at batch 5", yo->data, yr->data, yr->numel, tol));
    ASSERT_OK(cohort_model_forward(r, &x, &yr));
    ASSERT_OK(cohort_model_forward(o, &x, &yo));
    ASSERT_TRUE(close_scaled("logits at batch 16 again", yo->data, yr->data, yr->numel, tol));
    cohort_tensor_free(&x2);
    cohort_tensor_free(&x);
    free(start);
    cohort_optim_destroy(opr);
    cohort_optim_destroy(opo);
    cohort_model_destroy(r);
    cohort_model_destroy(o);
  }
}

TEST(cnn_against_reference) { model_case(0); }
TEST(unblocked_channels_against_reference) { model_case(1); }

TEST(kernel_sets_named_and_chosen) {
  cohort_kernels k;
  ASSERT_OK(cohort_kernels_parse("reference", &k));
  ASSERT_EQ(k, COHORT_KERNELS_REFERENCE);
  ASSERT_OK(cohort_kernels_parse("onednn", &k));
  ASSERT_EQ(k, COHORT_KERNELS_ONEDNN);
  ASSERT_EQ(cohort_kernels_parse("mkl", &k), COHORT_ERR_INVALID);
  ASSERT_TRUE(strstr(cohort_last_error(), "auto, reference, onednn") != NULL);
  char line[256];
  ASSERT_OK(cohort_kernels_describe(COHORT_KERNELS_REFERENCE, line, sizeof line));
  ASSERT_TRUE(strncmp(line, "reference", 9) == 0);
  /* AUTO follows COHORT_KERNELS, then the build. */
  setenv("COHORT_KERNELS", "reference", 1);
  ASSERT_OK(cohort_kernels_resolve(COHORT_KERNELS_AUTO, &k));
  ASSERT_EQ(k, COHORT_KERNELS_REFERENCE);
  cohort_model *m;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_EQ(cohort_model_kernels(m), COHORT_KERNELS_REFERENCE);
  cohort_model_destroy(m);
  setenv("COHORT_KERNELS", "fast", 1);
  ASSERT_EQ(cohort_model_create(&m), COHORT_ERR_INVALID);
  ASSERT_TRUE(strstr(cohort_last_error(), "COHORT_KERNELS") != NULL);
  unsetenv("COHORT_KERNELS");
  /* auto: oneDNN where its SIMD family is wider than OpenBLAS's, or both are AVX-512; the reference where both are
   * AVX2 or below, or OpenBLAS's is wider. A core name OpenBLAS's table lacks (0) counts as AVX-512. */
  static const struct {
    int onednn, blas;
    cohort_kernels want;
  } rule[] = {{4, 3, COHORT_KERNELS_ONEDNN},    {4, 4, COHORT_KERNELS_ONEDNN},    {4, 0, COHORT_KERNELS_ONEDNN},
              {3, 1, COHORT_KERNELS_ONEDNN},    {3, 3, COHORT_KERNELS_REFERENCE}, {2, 2, COHORT_KERNELS_REFERENCE},
              {3, 4, COHORT_KERNELS_REFERENCE}, {3, 0, COHORT_KERNELS_REFERENCE}, {0, 3, COHORT_KERNELS_REFERENCE},
              {0, 0, COHORT_KERNELS_REFERENCE}};
  for (size_t i = 0; i < sizeof rule / sizeof rule[0]; i++)
    ASSERT_EQ(cohort__kernels_auto_choice(rule[i].onednn, rule[i].blas), rule[i].want);
  ASSERT_OK(cohort_kernels_resolve(COHORT_KERNELS_AUTO, &k));
  ASSERT_EQ(k, cohort__kernels_auto_choice(cohort__onednn_isa_level(), cohort_blas_core_level(cohort_blas_corename())));
  if (!backend_available(COHORT_KERNELS_ONEDNN)) ASSERT_EQ(k, COHORT_KERNELS_REFERENCE);
  if (backend_available(COHORT_KERNELS_ONEDNN)) {
    ASSERT_OK(cohort_kernels_describe(COHORT_KERNELS_ONEDNN, line, sizeof line));
    ASSERT_TRUE(strncmp(line, "oneDNN ", 7) == 0 && strstr(line, "ISA ") != NULL);
  } else {
    ASSERT_EQ(cohort_kernels_resolve(COHORT_KERNELS_ONEDNN, &k), COHORT_ERR_INVALID);
    ASSERT_TRUE(strstr(cohort_last_error(), "without oneDNN") != NULL);
  }
}

COHORT_TEST_MAIN(TEST_CASE(kernel_sets_named_and_chosen), TEST_CASE(conv2d_against_reference),
                 TEST_CASE(linear_against_reference), TEST_CASE(maxpool_against_reference),
                 TEST_CASE(cnn_against_reference), TEST_CASE(unblocked_channels_against_reference))
