/*
 * test_nn_cuda.c: the CUDA training stack (libcohort_nn_cuda.so) against the CPU reference (src/nn) and against
 * PyTorch's numbers (tests/golden/nn_golden.py's file). Exits 77 with "SKIP: <reason>" where no GPU can be used.
 *
 * Tolerances come from the arithmetic, as in tests/golden: both sides compute in float32 with different summation
 * orders, so a dot product of k terms may differ by gamma(k) = k u / (1 - k u) (u = 2^-24) relative to the sum of its
 * terms' magnitudes; differences are measured against the largest magnitude of the reference tensor (which bounds
 * that sum's scale for these well-conditioned layers), with k the longest dot product behind the tensor. A training
 * trajectory of s steps may grow that by the steps' amplification; the 20-step checks allow 4 gamma, which the CPU
 * reference itself needs against torch (tests/golden/test_nn_golden.c).
 */
#include <stdint.h>

#include "cohort/nn.h"
#include "nn_cuda/host.h"
#include "test.h"

static const cohort__nnc_api *api;

static double gamma_of(double k) {
  const double u = 1.0 / (1 << 24);
  return k * u / (1 - k * u);
}

/* max |got - want| over the largest |want| (at least floor), against tol; prints the worst element either way. */
static int close_to(const char *what, const float *got, const float *want, size_t n, double tol) {
  double scale = 1e-6, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++)
    scale = fmax(scale, fabs(want[i]));
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]);
    if (!(e <= worst)) worst = e, at = i;
  }
  const double rel = worst / scale;
  printf("  %-34s %8zu values: max error %.3g of max |ref| %.3g (%.3g relative; tol %.3g)%s\n", what, n, worst, scale,
         rel, tol, rel <= tol ? "" : "  <-- FAIL");
  if (!(rel <= tol))
    fprintf(stderr, "%s: element %zu: gpu %.9g, reference %.9g (relative %.3g > %.3g)\n", what, at, got[at], want[at],
            rel, tol);
  return rel <= tol;
}

static float *random_floats(size_t n, uint64_t seed, float lo, float hi) {
  cohort_rng rng;
  cohort_rng_seed(&rng, seed);
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++)
    p[i] = lo + (hi - lo) * cohort_rng_uniform(&rng);
  return p;
}

typedef struct gpu_net {
  cohort__nnc_net *net;
  cohort_layer_info layers[COHORT__NNC_MAX_LAYERS];
  cohort__nnc_net_desc desc;
} gpu_net;

/* The GPU twin of an initialised CPU model, with its parameters. */
static int twin(cohort_model *m, int c, int h, int w, int classes, int max_batch, cohort__nnc_optim_kind optim,
                gpu_net *g) {
  char why[512];
  if (cohort__nnc_describe_model(m, c, h, w, classes, max_batch, &g->desc, g->layers, why, sizeof why) != 0) {
    fprintf(stderr, "describing the model: %s\n", why);
    return 0;
  }
  g->desc.input_grad = 1;
  g->desc.optim = optim;
  if (api->net_create(&g->desc, &g->net) != 0) {
    fprintf(stderr, "net_create: %s\n", api->last_error());
    return 0;
  }
  if (api->set_params(g->net, cohort_model_param_data(m), cohort_model_param_count(m)) != 0) {
    fprintf(stderr, "set_params: %s\n", api->last_error());
    return 0;
  }
  return 1;
}

/*
 * One forward and backward of model m (input [n, c, h, w]) on both devices with the same random input and output
 * gradient; compares the output, every parameter gradient and the input gradient. k: the longest dot product.
 */
static int layer_case(const char *name, cohort_model *m, int n, int c, int h, int w, double k) {
  printf("%s:\n", name);
  const size_t in = (size_t)n * c * h * w;
  float *x = random_floats(in, 11, -1.0f, 1.0f);
  cohort_tensor xt;
  int64_t shape[4] = {n, c, h, w};
  const cohort_tensor *y;
  if (cohort_tensor_wrap(&xt, x, 4, shape) != COHORT_OK || cohort_model_forward(m, &xt, &y) != COHORT_OK) {
    fprintf(stderr, "cpu forward: %s\n", cohort_last_error());
    return 0;
  }
  const size_t out = y->numel, classes = out / (size_t)n, count = cohort_model_param_count(m);
  float *dy = random_floats(out, 12, -1.0f, 1.0f);
  cohort_model_zero_grad(m);
  if (cohort_model_backward(m, dy) != COHORT_OK) {
    fprintf(stderr, "cpu backward: %s\n", cohort_last_error());
    return 0;
  }
  /* The CPU's gradients, back to back like the GPU's flat array; its input gradient is not public: a second model
   * is not needed, since d loss / d x is checked through the layer before it in the CNN case. */
  float *want_g = malloc((count ? count : 1) * sizeof(float));
  size_t off = 0;
  for (int i = 0; i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    memcpy(want_g + off, p->grad, p->numel * sizeof(float));
    off += p->numel;
  }
  gpu_net g;
  memset(&g, 0, sizeof g);
  int ok = twin(m, c, h, w, (int)classes, n, COHORT__NNC_SGD, &g);
  float *got_y = malloc(out * sizeof(float)), *got_g = malloc((count ? count : 1) * sizeof(float));
  float *got_dx = malloc(in * sizeof(float));
  if (ok && api->forward_host(g.net, x, n, got_y) != 0) {
    fprintf(stderr, "%s: gpu forward: %s\n", name, api->last_error());
    ok = 0;
  }
  if (ok && api->backward_host(g.net, dy, got_g, count, got_dx) != 0) {
    fprintf(stderr, "%s: gpu backward: %s\n", name, api->last_error());
    ok = 0;
  }
  const double tol = 2 * gamma_of(k);
  if (ok) ok &= close_to("output", got_y, y->data, out, tol);
  off = 0;
  for (int i = 0; ok && i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    char what[96];
    snprintf(what, sizeof what, "d %s", p->name);
    ok &= close_to(what, got_g + off, want_g + off, p->numel, tol);
    off += p->numel;
  }
  if (g.net) api->net_destroy(g.net);
  free(x);
  free(dy);
  free(want_g);
  free(got_y);
  free(got_g);
  free(got_dx);
  return ok;
}

TEST(conv2d_stride1_pad1) {
  cohort_model *m = NULL;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_conv2d(m, "conv", 3, 4, 3, 1, 1));
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 1));
  int ok = layer_case("conv2d 3->4 k3 s1 p1 on 5x3x9x9", m, 5, 3, 9, 9, 3 * 9 * 5 * 81);
  cohort_model_destroy(m);
  ASSERT_TRUE(ok);
}

TEST(conv2d_stride2_relu) {
  cohort_model *m = NULL;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_conv2d(m, "conv", 2, 6, 3, 2, 1));
  ASSERT_OK(cohort_model_add_relu(m));
  ASSERT_OK(cohort_model_add_conv2d(m, "conv2", 6, 3, 2, 1, 0));
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 2));
  int ok = layer_case("conv2d s2 p1 + relu (fused) + conv2d", m, 4, 2, 11, 11, 6 * 4 * 4 * 36);
  cohort_model_destroy(m);
  ASSERT_TRUE(ok);
}

TEST(linear_relu_linear) {
  cohort_model *m = NULL;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_flatten(m));
  ASSERT_OK(cohort_model_add_linear(m, "fc1", 48, 33));
  ASSERT_OK(cohort_model_add_relu(m));
  ASSERT_OK(cohort_model_add_linear(m, "fc2", 33, 7));
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 3));
  int ok = layer_case("flatten + linear + relu (fused) + linear", m, 9, 3, 4, 4, 48 * 9);
  cohort_model_destroy(m);
  ASSERT_TRUE(ok);
}

TEST(maxpool_overlapping_and_relu) {
  cohort_model *m = NULL;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_conv2d(m, "conv", 2, 3, 3, 1, 0));
  ASSERT_OK(cohort_model_add_maxpool2d(m, 3, 2)); /* windows overlap: a gradient may reach one input twice */
  ASSERT_OK(cohort_model_add_relu(m));            /* not after a conv2d or linear: a ReLU layer of its own */
  ASSERT_OK(cohort_model_add_conv2d(m, "conv2", 3, 2, 2, 1, 0));
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 4));
  int ok = layer_case("conv2d + maxpool k3 s2 + relu + conv2d", m, 3, 2, 13, 13, 2 * 9 * 3 * 121);
  cohort_model_destroy(m);
  ASSERT_TRUE(ok);
}

TEST(reference_cnn_layers) {
  cohort_model *m = NULL;
  ASSERT_OK(cohort_model_create_cnn(7, &m));
  int ok = layer_case("the reference CNN (batch 6)", m, 6, 1, 28, 28, 9216 * 6);
  cohort_model_destroy(m);
  ASSERT_TRUE(ok);
}

TEST(unsupported_layer_is_named) {
  cohort_model *m = NULL;
  ASSERT_OK(cohort_model_create(&m));
  ASSERT_OK(cohort_model_add_flatten(m));
  ASSERT_OK(cohort_model_add_linear(m, "fc", 16, 4));
  ASSERT_OK(cohort_model_add_dropout(m, 0.5f));
  ASSERT_OK(cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 5));
  gpu_net g;
  memset(&g, 0, sizeof g);
  char why[512];
  ASSERT_EQ(cohort__nnc_describe_model(m, 1, 4, 4, 4, 8, &g.desc, g.layers, why, sizeof why), 0);
  ASSERT_EQ(api->net_create(&g.desc, &g.net), -1);
  printf("  refused as expected: %s\n", api->last_error());
  ASSERT_TRUE(strstr(api->last_error(), "dropout") != NULL);
  cohort_model_destroy(m);
}

/*
 * Training through the captured step: `steps` steps of batch n over a data set of steps * n images taken in order,
 * at rate lr; the GPU's losses and final parameters against the CPU model and optimizer doing the same.
 */
static int train_case(const char *name, cohort_model *cpu, cohort_optim *opt, cohort__nnc_net_desc *d_extra,
                      const float *xs, const int32_t *ys, int n, int steps, float lr, int c, int h, int w, double tol) {
  printf("%s:\n", name);
  gpu_net g;
  memset(&g, 0, sizeof g);
  char why[512];
  if (cohort__nnc_describe_model(cpu, c, h, w, 10, n, &g.desc, g.layers, why, sizeof why) != 0) {
    fprintf(stderr, "%s\n", why);
    return 0;
  }
  g.desc.optim = d_extra->optim;
  g.desc.momentum = d_extra->momentum;
  g.desc.weight_decay = d_extra->weight_decay;
  g.desc.trust_coefficient = d_extra->trust_coefficient;
  g.desc.trust_clip = d_extra->trust_clip;
  g.desc.beta1 = d_extra->beta1;
  g.desc.beta2 = d_extra->beta2;
  g.desc.eps = d_extra->eps;
  const size_t count = cohort_model_param_count(cpu), per = (size_t)c * h * w, total = (size_t)n * steps;
  int ok = api->net_create(&g.desc, &g.net) == 0 && api->set_params(g.net, cohort_model_param_data(cpu), count) == 0;
  float *lrs = malloc((size_t)steps * sizeof(float));
  int64_t *order = malloc(total * sizeof(int64_t));
  for (int s = 0; s < steps; s++)
    lrs[s] = lr;
  for (size_t i = 0; i < total; i++)
    order[i] = (int64_t)i;
  ok = ok && api->set_data(g.net, xs, ys, total, NULL, NULL, 0) == 0 && api->set_schedule(g.net, lrs, steps, 0) == 0 &&
       api->set_order(g.net, order, total, 0) == 0;
  if (!ok) fprintf(stderr, "%s: setting up: %s\n", name, api->last_error());
  float *gpu_loss = malloc((size_t)steps * sizeof(float)), *cpu_loss = malloc((size_t)steps * sizeof(float));
  float *dlogits = malloc((size_t)n * 10 * sizeof(float));
  for (int s = 0; ok && s < steps; s++) {
    double sum;
    int64_t k;
    if (api->train_step(g.net, n, NULL) != 0 || api->take_loss(g.net, &sum, &k) != 0 || k != 1) {
      fprintf(stderr, "%s: step %d: %s\n", name, s, api->last_error());
      ok = 0;
      break;
    }
    gpu_loss[s] = (float)sum;
    cohort_tensor xt;
    int64_t shape[4] = {n, c, h, w};
    const cohort_tensor *logits;
    cohort_tensor_wrap(&xt, (float *)xs + (size_t)s * n * per, 4, shape);
    cohort_model_zero_grad(cpu);
    ok = cohort_model_forward(cpu, &xt, &logits) == COHORT_OK &&
         cohort_softmax_xent(logits, ys + (size_t)s * n, &cpu_loss[s], dlogits, NULL) == COHORT_OK &&
         cohort_model_backward(cpu, dlogits) == COHORT_OK && (cohort_optim_set_lr(opt, lr), 1) &&
         cohort_optim_step(opt) == COHORT_OK;
    if (!ok) fprintf(stderr, "%s: cpu step %d: %s\n", name, s, cohort_last_error());
  }
  if (ok) ok &= close_to("losses, step by step", gpu_loss, cpu_loss, (size_t)steps, tol);
  float *got = malloc(count * sizeof(float));
  if (ok && api->get_params(g.net, got, count) != 0) {
    fprintf(stderr, "%s: get_params: %s\n", name, api->last_error());
    ok = 0;
  }
  if (ok) ok &= close_to("parameters after the steps", got, cohort_model_param_data(cpu), count, tol);
  if (ok) {
    /* The optimizer state and its step count come back as the CPU optimizer holds them. */
    size_t scount = 0;
    for (int i = 0; i < cohort_optim_num_states(opt); i++)
      scount += cohort_optim_state(opt, i)->count;
    float *st = malloc((scount ? scount : 1) * sizeof(float)), *want = malloc((scount ? scount : 1) * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < cohort_optim_num_states(opt); i++) {
      memcpy(want + off, cohort_optim_state(opt, i)->data, cohort_optim_state(opt, i)->count * sizeof(float));
      off += cohort_optim_state(opt, i)->count;
    }
    int64_t gsteps = -1;
    if (api->get_state(g.net, st, scount, &gsteps) != 0) {
      fprintf(stderr, "%s: get_state: %s\n", name, api->last_error());
      ok = 0;
    } else {
      ok &= close_to("optimizer state", st, want, scount, tol);
      if (gsteps != cohort_optim_steps(opt)) {
        fprintf(stderr, "%s: the GPU counts %lld optimizer steps, the CPU %lld\n", name, (long long)gsteps,
                (long long)cohort_optim_steps(opt));
        ok = 0;
      }
    }
    free(st);
    free(want);
  }
  if (g.net) api->net_destroy(g.net);
  free(lrs);
  free(order);
  free(gpu_loss);
  free(cpu_loss);
  free(dlogits);
  free(got);
  return ok;
}

static void fmnist_like(int n, int steps, uint64_t seed, float **xs, int32_t **ys) {
  *xs = random_floats((size_t)n * steps * 784, seed, -0.5f, 2.0f);
  *ys = malloc((size_t)n * steps * sizeof(int32_t));
  cohort_rng rng;
  cohort_rng_seed(&rng, seed + 1);
  for (int i = 0; i < n * steps; i++)
    (*ys)[i] = (int32_t)(cohort_rng_next(&rng) % 10);
}

TEST(cnn_sgd_momentum_larc_steps) {
  cohort_model *m = NULL;
  cohort_optim *o = NULL;
  ASSERT_OK(cohort_model_create_cnn(3, &m));
  cohort_sgd_config sgd = {0};
  sgd.lr = 0.05f;
  sgd.momentum = 0.9f;
  sgd.weight_decay = 1e-4f;
  sgd.trust_coefficient = 0.02f;
  sgd.trust_clip = 1;
  ASSERT_OK(cohort_optim_sgd_create(m, &sgd, &o));
  cohort__nnc_net_desc d = {0};
  d.optim = COHORT__NNC_SGD;
  d.momentum = sgd.momentum;
  d.weight_decay = sgd.weight_decay;
  d.trust_coefficient = sgd.trust_coefficient;
  d.trust_clip = 1;
  float *xs;
  int32_t *ys;
  fmnist_like(32, 12, 21, &xs, &ys);
  int ok = train_case("the CNN, 12 steps of SGD + momentum + LARC (batch 32, weight decay)", m, o, &d, xs, ys, 32, 12,
                      0.05f, 1, 28, 28, 4 * gamma_of(9216 * 32));
  free(xs);
  free(ys);
  cohort_optim_destroy(o);
  cohort_model_destroy(m);
  ASSERT_TRUE(ok);
}

TEST(mlp_adamw_steps) {
  cohort_model *m = NULL;
  cohort_optim *o = NULL;
  ASSERT_OK(cohort_model_create_mlp(4, 784, 256, 10, &m));
  cohort_adamw_config aw = {0.001f, 0.9f, 0.999f, 1e-8f, 0.01f};
  ASSERT_OK(cohort_optim_adamw_create(m, &aw, &o));
  cohort__nnc_net_desc d = {0};
  d.optim = COHORT__NNC_ADAMW;
  d.weight_decay = aw.weight_decay;
  d.beta1 = aw.beta1;
  d.beta2 = aw.beta2;
  d.eps = aw.eps;
  float *xs;
  int32_t *ys;
  fmnist_like(16, 8, 31, &xs, &ys);
  /* AdamW divides by sqrt(v): a gradient that differs by e moves the weight by up to lr where v is tiny, so the
   * parameters are compared at the rate's scale rather than the weights'. */
  int ok = train_case("the MLP, 8 steps of AdamW (batch 16)", m, o, &d, xs, ys, 16, 8, aw.lr, 1, 28, 28,
                      4 * gamma_of(784 * 16) + 1e-3);
  free(xs);
  free(ys);
  cohort_optim_destroy(o);
  cohort_model_destroy(m);
  ASSERT_TRUE(ok);
}

/* ---- against PyTorch: tests/golden/nn_golden.py's reference CNN, 20 steps of SGD with momentum ---- */

typedef struct record {
  char name[96];
  size_t numel;
  float *data;
} record;

static record *records;
static int nrecords;

static int load_golden(void) {
  const char *path = getenv("NN_GOLDEN_FILE");
  if (nrecords) return 1;
  FILE *f = path ? fopen(path, "rb") : NULL;
  if (!f) {
    fprintf(stderr, "cannot open the golden file '%s' (NN_GOLDEN_FILE; golden.nn_data writes it)\n", path ? path : "");
    return 0;
  }
  char magic[4];
  uint32_t n = 0;
  if (fread(magic, 1, 4, f) != 4 || memcmp(magic, "CNNG", 4) != 0 || fread(&n, 4, 1, f) != 1 || n > 10000) {
    fclose(f);
    return 0;
  }
  records = calloc(n, sizeof *records);
  for (uint32_t i = 0; i < n; i++) {
    record *r = &records[i];
    uint32_t len, nd;
    int64_t shape[8];
    if (fread(&len, 4, 1, f) != 1 || len >= sizeof r->name || fread(r->name, 1, len, f) != len ||
        fread(&nd, 4, 1, f) != 1 || nd < 1 || nd > 8 || fread(shape, 8, nd, f) != nd) {
      fclose(f);
      return 0;
    }
    r->numel = 1;
    for (uint32_t k = 0; k < nd; k++)
      r->numel *= (size_t)shape[k];
    r->data = malloc(r->numel * sizeof(float));
    if (fread(r->data, sizeof(float), r->numel, f) != r->numel) {
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
  fprintf(stderr, "the golden file has no record '%s'\n", name);
  return NULL;
}

TEST(cnn_against_torch_20_sgd_steps) {
  ASSERT_TRUE(load_golden());
  cohort_model *m = NULL;
  ASSERT_OK(cohort_model_create_cnn(0, &m));
  char name[128];
  for (int i = 0; i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    snprintf(name, sizeof name, "cnn.param.%s", p->name);
    const record *r = find(name);
    ASSERT_TRUE(r && r->numel == p->numel);
    memcpy(p->value, r->data, p->numel * sizeof(float));
  }
  const record *xs = find("cnn.train.x"), *ys = find("cnn.train.y"), *losses = find("cnn.train.loss");
  ASSERT_TRUE(xs && ys && losses && losses->numel == 20);
  int32_t labels[160];
  for (int i = 0; i < 160; i++)
    labels[i] = (int32_t)ys->data[i];
  gpu_net g;
  memset(&g, 0, sizeof g);
  char why[512];
  ASSERT_EQ(cohort__nnc_describe_model(m, 1, 28, 28, 10, 8, &g.desc, g.layers, why, sizeof why), 0);
  g.desc.optim = COHORT__NNC_SGD;
  g.desc.momentum = 0.9f;
  ASSERT_EQ(api->net_create(&g.desc, &g.net), 0);
  ASSERT_EQ(api->set_params(g.net, cohort_model_param_data(m), cohort_model_param_count(m)), 0);
  float lr[20];
  int64_t order[160];
  for (int s = 0; s < 20; s++)
    lr[s] = 0.05f;
  for (int i = 0; i < 160; i++)
    order[i] = i;
  ASSERT_EQ(api->set_data(g.net, xs->data, labels, 160, NULL, NULL, 0), 0);
  ASSERT_EQ(api->set_schedule(g.net, lr, 20, 0), 0);
  ASSERT_EQ(api->set_order(g.net, order, 160, 0), 0);
  /* --profile's passes first: the 20 steps below must come out as torch's all the same (profile() leaves the
   * parameters, the optimizer state, the position and the loss sum alone). */
  char line[4096];
  ASSERT_EQ(api->profile(g.net, 8, 3, line, sizeof line), 0);
  printf("profile: %s\n", line);
  ASSERT_TRUE(strstr(line, "gather ") && strstr(line, "(conv2d) forward ") && strstr(line, "(linear) forward ") &&
              strstr(line, "; in all "));
  float got[20];
  printf("the reference CNN against torch (nn_golden.py), 20 steps of SGD lr 0.05 momentum 0.9, batch 8:\n");
  for (int s = 0; s < 20; s++) {
    double sum;
    int64_t k;
    if (api->train_step(g.net, 8, NULL) != 0 || api->take_loss(g.net, &sum, &k) != 0) {
      fprintf(stderr, "step %d: %s\n", s, api->last_error());
      ASSERT_TRUE(0);
    }
    got[s] = (float)sum;
  }
  const double tol = 4 * gamma_of(9216);
  int ok = close_to("losses, step by step (torch)", got, losses->data, 20, tol);
  size_t count = cohort_model_param_count(m);
  float *params = malloc(count * sizeof(float));
  ASSERT_EQ(api->get_params(g.net, params, count), 0);
  size_t off = 0;
  for (int i = 0; i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    snprintf(name, sizeof name, "cnn.final.%s", p->name);
    const record *r = find(name);
    char what[96];
    snprintf(what, sizeof what, "%s after 20 steps (torch)", p->name);
    ok &= r && close_to(what, params + off, r->data, p->numel, tol);
    off += p->numel;
  }
  free(params);
  api->net_destroy(g.net);
  cohort_model_destroy(m);
  ASSERT_TRUE(ok);
}

int main(int argc, char **argv) {
  static const cohort_test_case cases[] = {
      TEST_CASE(conv2d_stride1_pad1),
      TEST_CASE(conv2d_stride2_relu),
      TEST_CASE(linear_relu_linear),
      TEST_CASE(maxpool_overlapping_and_relu),
      TEST_CASE(reference_cnn_layers),
      TEST_CASE(unsupported_layer_is_named),
      TEST_CASE(cnn_sgd_momentum_larc_steps),
      TEST_CASE(mlp_adamw_steps),
      TEST_CASE(cnn_against_torch_20_sgd_steps),
  };
  char why[1200];
  api = cohort__nnc_open(why, sizeof why);
  if (!api) {
    printf("SKIP: %s\n", why);
    return expect_gpu_skip();
  }
  printf("%s\n", api->describe());
  return cohort_test_run(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}
