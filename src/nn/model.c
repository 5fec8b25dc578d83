/*
 * model.c: the sequential model: the layer list, the parameter and buffer tables, forward and backward over the
 * layers, the grad hook, gradient clipping, the binding of layers to the model's kernel set (backend.h), and thread
 * setup.
 *
 * Parameters are declared as layers are added (names and shapes only) and allocated by cohort_model_init() in one
 * block per kind (values, gradients, buffers), so that all values are contiguous in parameter order. Activation
 * buffers belong to the layers and grow to the largest batch seen; they are never shrunk.
 */
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/backend.h"

struct cohort_model {
  cohort__layer *layers;
  int nlayers, layers_cap;
  cohort_param *params;
  int nparams, params_cap;
  cohort_param *buffers;
  int nbuffers, buffers_cap;
  float *param_data, *grad_data, *buffer_data; /* allocated by init, in table order */
  size_t param_count, buffer_count;
  int initialized, training, forwarded;
  cohort_rng rng;
  cohort_grad_hook hook;
  void *hook_user;
  cohort_batchnorm_sync_fn bn_sync;
  void *bn_sync_user;
  cohort_tensor input; /* what the last forward ran on (caller memory) */
  const cohort_tensor *output;
  const cohort__backend *backend; /* the kernel set; its kernels are bound to the layers by init */
};

static atomic_int threads_chosen;
static atomic_int threads_count = 1;

int cohort__nn_default_threads(void) {
  const char *cpus = getenv("SLURM_CPUS_PER_TASK"), *step = getenv("SLURM_STEP_ID");
  long n = cpus && step && step[0] ? strtol(cpus, NULL, 10) : 1;
  return n >= 1 && n <= 256 ? (int)n : 1;
}

cohort_status cohort_nn_set_threads(int n) {
  if (n < 1) return cohort__error(COHORT_ERR_INVALID, "cohort_nn_set_threads: %d threads, must be >= 1", n);
  atomic_store(&threads_chosen, 1);
  atomic_store(&threads_count, n);
  openblas_set_num_threads(n);
  return COHORT_OK;
}

int cohort__nn_threads(void) { return atomic_load(&threads_count); }

cohort_status cohort_model_create(cohort_model **out) {
  if (!out) return cohort__error(COHORT_ERR_INVALID, "cohort_model_create: out is NULL");
  cohort_kernels kernels;
  COHORT_CHECK(cohort_kernels_resolve(COHORT_KERNELS_AUTO, &kernels));
  cohort_model *m = calloc(1, sizeof *m);
  if (!m) return cohort__error(COHORT_ERR_SYSTEM, "cohort_model_create: out of memory");
  m->training = 1;
  m->backend = cohort__backend_of(kernels);
  cohort__blas_warn_once(); /* generic kernels on a CPU that runs better ones: say so where the math begins */
  /* One BLAS thread per rank unless the user chose: ranks already fill the cores, and oversubscribing them with
   * BLAS threads makes every rank slower (the anchor uses torch.set_num_threads(1) for the same reason). A task of
   * a Slurm step started with --cpus-per-task=C was given C CPUs of its own: C threads then. */
  int expected = 0;
  if (atomic_compare_exchange_strong(&threads_chosen, &expected, 1))
    openblas_set_num_threads(cohort__nn_default_threads());
  *out = m;
  return COHORT_OK;
}

static void unbind(cohort_model *m) {
  for (int i = 0; i < m->nlayers; i++) {
    cohort__layer *l = &m->layers[i];
    if (m->backend->release) m->backend->release(l);
    l->state = NULL;
    l->kern = NULL;
    l->y_layout = NULL;
    l->layout_free = 0;
    l->relu_masked = l->mask_relu = 0;
  }
}

/* Binds every layer to the backend's kernels (or the reference's) and decides which outputs may take the backend's
 * layouts (backend.h, "Layouts"). After ReLU fusion, which decides which layers compute. */
static void bind(cohort_model *m) {
  for (int i = 0; i < m->nlayers; i++)
    m->layers[i].kern = m->backend->kernels(&m->layers[i]);
  for (int i = 0; i < m->nlayers; i++) {
    cohort__layer *l = &m->layers[i];
    int j = i + 1;
    while (j < m->nlayers && m->layers[j].passthrough)
      j++;
    l->layout_free = !l->ops->alias && !l->passthrough && l->kern && j < m->nlayers && !m->layers[j].ops->alias &&
                     m->layers[j].kern && m->layers[j].kern->takes_layouts;
    /* The ReLU fused here undone by the pooling after it (backend.h, masks_relu), on the same backend. */
    l->relu_masked = l->fuse_relu && l->kern && j < m->nlayers && m->layers[j].kern && m->layers[j].kern->masks_relu;
    if (l->relu_masked) m->layers[j].mask_relu = 1;
  }
}

cohort_status cohort_model_set_kernels(cohort_model *m, cohort_kernels kernels) {
  if (!m) return cohort__error(COHORT_ERR_INVALID, "cohort_model_set_kernels: model is NULL");
  COHORT_CHECK(cohort_kernels_resolve(kernels, &kernels));
  unbind(m);
  m->backend = cohort__backend_of(kernels);
  m->forwarded = 0;
  if (m->initialized) bind(m);
  return COHORT_OK;
}

cohort_kernels cohort_model_kernels(const cohort_model *m) { return m ? m->backend->id : COHORT_KERNELS_REFERENCE; }

void cohort_model_destroy(cohort_model *m) {
  if (!m) return;
  unbind(m);
  for (int i = 0; i < m->nlayers; i++) {
    cohort__layer *l = &m->layers[i];
    if (!l->ops->alias && !l->passthrough) free(l->y.data);
    free(l->dx);
    free(l->aux);
  }
  for (int i = 0; i < m->nparams; i++)
    free((char *)m->params[i].name);
  for (int i = 0; i < m->nbuffers; i++)
    free((char *)m->buffers[i].name);
  free(m->layers);
  free(m->params);
  free(m->buffers);
  free(m->param_data);
  free(m->grad_data);
  free(m->buffer_data);
  free(m);
}

/* ---- building ---- */

static cohort_status declare(cohort_param **table, int *count, int *cap, const char *layer, const char *what, int ndim,
                             const int64_t *shape) {
  if (*count == *cap) {
    int ncap = *cap ? *cap * 2 : 8;
    cohort_param *t = realloc(*table, (size_t)ncap * sizeof *t);
    if (!t) return cohort__error(COHORT_ERR_SYSTEM, "model: out of memory declaring %s.%s", layer, what);
    *table = t;
    *cap = ncap;
  }
  cohort_param *p = &(*table)[*count];
  memset(p, 0, sizeof *p);
  size_t len = strlen(layer) + strlen(what) + 2;
  char *name = malloc(len);
  if (!name) return cohort__error(COHORT_ERR_SYSTEM, "model: out of memory declaring %s.%s", layer, what);
  snprintf(name, len, "%s.%s", layer, what);
  p->name = name;
  p->ndim = ndim;
  p->numel = 1;
  for (int i = 0; i < COHORT_TENSOR_MAX_DIMS; i++) {
    p->shape[i] = i < ndim ? shape[i] : 1;
    if (i < ndim) p->numel *= (size_t)shape[i];
  }
  (*count)++;
  return COHORT_OK;
}

/* Appends a layer; named layers must have a unique, short, dot-free name. */
static cohort_status add_layer(cohort_model *m, const cohort__layer_ops *ops, const char *name, cohort__layer **out) {
  if (!m) return cohort__error(COHORT_ERR_INVALID, "model: add %s to a NULL model", ops->kind);
  if (m->initialized)
    return cohort__error(COHORT_ERR_INVALID, "model: cannot add %s layer after cohort_model_init()", ops->kind);
  if (name) {
    if (!name[0] || strlen(name) >= sizeof m->layers[0].name || strchr(name, '.'))
      return cohort__error(COHORT_ERR_INVALID, "model: layer name '%s' must be 1..%zu characters without '.'", name,
                           sizeof m->layers[0].name - 1);
    for (int i = 0; i < m->nlayers; i++)
      if (strcmp(m->layers[i].name, name) == 0)
        return cohort__error(COHORT_ERR_INVALID, "model: layer name '%s' is used twice", name);
  }
  if (m->nlayers == m->layers_cap) {
    int ncap = m->layers_cap ? m->layers_cap * 2 : 8;
    cohort__layer *t = realloc(m->layers, (size_t)ncap * sizeof *t);
    if (!t) return cohort__error(COHORT_ERR_SYSTEM, "model: out of memory adding %s", ops->kind);
    m->layers = t;
    m->layers_cap = ncap;
  }
  cohort__layer *l = &m->layers[m->nlayers];
  memset(l, 0, sizeof *l);
  l->ops = ops;
  if (name)
    snprintf(l->name, sizeof l->name, "%s", name);
  else
    snprintf(l->name, sizeof l->name, "%s%d", ops->kind, m->nlayers);
  l->pidx = m->nparams;
  l->bidx = m->nbuffers;
  *out = l;
  return COHORT_OK;
}

/* Commits the layer that add_layer() prepared, once its parameters are declared. */
static void commit_layer(cohort_model *m, cohort__layer *l) {
  l->nparams = m->nparams - l->pidx;
  l->nbuffers = m->nbuffers - l->bidx;
  m->nlayers++;
}

/* Undoes declarations made for a layer that failed to be added. */
static void rollback_layer(cohort_model *m, cohort__layer *l) {
  while (m->nparams > l->pidx)
    free((char *)m->params[--m->nparams].name);
  while (m->nbuffers > l->bidx)
    free((char *)m->buffers[--m->nbuffers].name);
}

static cohort_status add_weight_bias(cohort_model *m, cohort__layer *l, int ndim, const int64_t *wshape,
                                     int64_t nbias) {
  cohort_status st = declare(&m->params, &m->nparams, &m->params_cap, l->name, "weight", ndim, wshape);
  if (st == COHORT_OK) st = declare(&m->params, &m->nparams, &m->params_cap, l->name, "bias", 1, &nbias);
  if (st != COHORT_OK) {
    rollback_layer(m, l);
    return st;
  }
  commit_layer(m, l);
  return COHORT_OK;
}

cohort_status cohort_model_add_linear(cohort_model *m, const char *name, int in, int out) {
  cohort__layer *l;
  if (in < 1 || out < 1)
    return cohort__error(COHORT_ERR_INVALID, "linear '%s': features %d -> %d must be positive", name ? name : "?", in,
                         out);
  if (!name) return cohort__error(COHORT_ERR_INVALID, "linear: a layer with parameters needs a name");
  COHORT_CHECK(add_layer(m, &cohort__linear_ops, name, &l));
  l->in_features = in;
  l->out_features = out;
  int64_t w[2] = {out, in};
  return add_weight_bias(m, l, 2, w, out);
}

cohort_status cohort_model_add_conv2d(cohort_model *m, const char *name, int cin, int cout, int kernel, int stride,
                                      int padding) {
  cohort__layer *l;
  if (!name) return cohort__error(COHORT_ERR_INVALID, "conv2d: a layer with parameters needs a name");
  if (cin < 1 || cout < 1 || kernel < 1 || stride < 1 || padding < 0)
    return cohort__error(COHORT_ERR_INVALID,
                         "conv2d '%s': channels %d -> %d, kernel %d, stride %d, padding %d: need positive values "
                         "(padding >= 0)",
                         name, cin, cout, kernel, stride, padding);
  COHORT_CHECK(add_layer(m, &cohort__conv2d_ops, name, &l));
  l->cin = cin;
  l->cout = cout;
  l->kernel = kernel;
  l->stride = stride;
  l->padding = padding;
  int64_t w[4] = {cout, cin, kernel, kernel};
  return add_weight_bias(m, l, 4, w, cout);
}

cohort_status cohort_model_add_batchnorm2d(cohort_model *m, const char *name, int channels, float eps, float momentum) {
  cohort__layer *l;
  if (!name) return cohort__error(COHORT_ERR_INVALID, "batchnorm2d: a layer with parameters needs a name");
  if (channels < 1 || !(eps > 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
    return cohort__error(COHORT_ERR_INVALID, "batchnorm2d '%s': channels %d, eps %g, momentum %g out of range", name,
                         channels, eps, momentum);
  COHORT_CHECK(add_layer(m, &cohort__batchnorm2d_ops, name, &l));
  l->cin = channels;
  l->eps = eps;
  l->momentum = momentum;
  int64_t c = channels;
  cohort_status st = declare(&m->params, &m->nparams, &m->params_cap, l->name, "weight", 1, &c);
  if (st == COHORT_OK) st = declare(&m->params, &m->nparams, &m->params_cap, l->name, "bias", 1, &c);
  if (st == COHORT_OK) st = declare(&m->buffers, &m->nbuffers, &m->buffers_cap, l->name, "running_mean", 1, &c);
  if (st == COHORT_OK) st = declare(&m->buffers, &m->nbuffers, &m->buffers_cap, l->name, "running_var", 1, &c);
  if (st != COHORT_OK) {
    rollback_layer(m, l);
    return st;
  }
  commit_layer(m, l);
  return COHORT_OK;
}

cohort_status cohort_model_add_maxpool2d(cohort_model *m, int kernel, int stride) {
  cohort__layer *l;
  if (kernel < 1 || stride < 0)
    return cohort__error(COHORT_ERR_INVALID, "maxpool2d: kernel %d, stride %d out of range", kernel, stride);
  COHORT_CHECK(add_layer(m, &cohort__maxpool2d_ops, NULL, &l));
  l->kernel = kernel;
  l->stride = stride ? stride : kernel;
  commit_layer(m, l);
  return COHORT_OK;
}

cohort_status cohort_model_add_relu(cohort_model *m) {
  cohort__layer *l;
  COHORT_CHECK(add_layer(m, &cohort__relu_ops, NULL, &l));
  commit_layer(m, l);
  return COHORT_OK;
}

cohort_status cohort_model_add_dropout(cohort_model *m, float p) {
  cohort__layer *l;
  if (!(p >= 0.0f && p <= 1.0f)) return cohort__error(COHORT_ERR_INVALID, "dropout: p %g outside [0, 1]", p);
  COHORT_CHECK(add_layer(m, &cohort__dropout_ops, NULL, &l));
  l->p = p;
  commit_layer(m, l);
  return COHORT_OK;
}

cohort_status cohort_model_add_flatten(cohort_model *m) {
  cohort__layer *l;
  COHORT_CHECK(add_layer(m, &cohort__flatten_ops, NULL, &l));
  commit_layer(m, l);
  return COHORT_OK;
}

int cohort_model_num_layers(const cohort_model *m) { return m ? m->nlayers : 0; }

cohort_status cohort_model_layer(const cohort_model *m, int i, cohort_layer_info *out) {
  if (!m || !out || i < 0 || i >= m->nlayers)
    return cohort__error(COHORT_ERR_INVALID, "cohort_model_layer: layer %d of %d (or a NULL argument)", i,
                         m ? m->nlayers : 0);
  const cohort__layer *l = &m->layers[i];
  static const struct {
    const cohort__layer_ops *ops;
    cohort_layer_kind kind;
  } kinds[] = {{&cohort__linear_ops, COHORT_LAYER_LINEAR},       {&cohort__conv2d_ops, COHORT_LAYER_CONV2D},
               {&cohort__maxpool2d_ops, COHORT_LAYER_MAXPOOL2D}, {&cohort__relu_ops, COHORT_LAYER_RELU},
               {&cohort__dropout_ops, COHORT_LAYER_DROPOUT},     {&cohort__batchnorm2d_ops, COHORT_LAYER_BATCHNORM2D},
               {&cohort__flatten_ops, COHORT_LAYER_FLATTEN}};
  memset(out, 0, sizeof *out);
  size_t k = 0;
  while (k < sizeof kinds / sizeof kinds[0] && kinds[k].ops != l->ops)
    k++;
  if (k == sizeof kinds / sizeof kinds[0])
    return cohort__error(COHORT_ERR_INVALID, "cohort_model_layer: layer %d (%s) has an unknown kind", i, l->name);
  out->kind = kinds[k].kind;
  out->name = l->name;
  out->in_features = l->in_features;
  out->out_features = l->out_features;
  out->in_channels = l->cin;
  out->out_channels = out->kind == COHORT_LAYER_BATCHNORM2D ? l->cin : l->cout;
  out->kernel = l->kernel;
  out->stride = l->stride;
  out->padding = l->padding;
  out->p = l->p;
  out->eps = l->eps;
  out->momentum = l->momentum;
  out->first_param = l->pidx;
  out->num_params = l->nparams;
  out->first_buffer = l->bidx;
  out->num_buffers = l->nbuffers;
  return COHORT_OK;
}

/* ---- init ---- */

void cohort__fans(const cohort_param *p, double *fan_in, double *fan_out) {
  double receptive = 1.0;
  for (int i = 2; i < p->ndim; i++)
    receptive *= (double)p->shape[i];
  *fan_in = (p->ndim > 1 ? (double)p->shape[1] : 1.0) * receptive;
  *fan_out = (double)p->shape[0] * receptive;
}

static void fill_uniform(float *v, size_t n, double bound, cohort_rng *rng) {
  for (size_t i = 0; i < n; i++)
    v[i] = (float)((2.0 * (double)cohort_rng_uniform(rng) - 1.0) * bound);
}

static void fill_normal(float *v, size_t n, double std, cohort_rng *rng) {
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(cohort_rng_normal(rng) * std);
}

static void init_weight_bias(cohort_param *w, cohort_param *b, cohort_init_kind kind, cohort_rng *rng) {
  double fan_in, fan_out;
  cohort__fans(w, &fan_in, &fan_out);
  switch (kind) {
  case COHORT_INIT_TORCH_DEFAULT:
    /* kaiming_uniform(a=sqrt(5)): gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in) = 1/sqrt(fan_in). */
    fill_uniform(w->value, w->numel, 1.0 / sqrt(fan_in), rng);
    fill_uniform(b->value, b->numel, 1.0 / sqrt(fan_in), rng);
    return;
  case COHORT_INIT_KAIMING_UNIFORM:
    fill_uniform(w->value, w->numel, sqrt(6.0 / fan_in), rng);
    break;
  case COHORT_INIT_KAIMING_NORMAL:
    fill_normal(w->value, w->numel, sqrt(2.0 / fan_in), rng);
    break;
  case COHORT_INIT_XAVIER_UNIFORM:
    fill_uniform(w->value, w->numel, sqrt(6.0 / (fan_in + fan_out)), rng);
    break;
  case COHORT_INIT_XAVIER_NORMAL:
    fill_normal(w->value, w->numel, sqrt(2.0 / (fan_in + fan_out)), rng);
    break;
  }
  memset(b->value, 0, b->numel * sizeof(float));
}

static cohort_status allocate(cohort_model *m) {
  size_t np = 0, nb = 0;
  for (int i = 0; i < m->nparams; i++)
    np += m->params[i].numel;
  for (int i = 0; i < m->nbuffers; i++)
    nb += m->buffers[i].numel;
  m->param_data = malloc((np ? np : 1) * sizeof(float));
  m->grad_data = calloc(np ? np : 1, sizeof(float));
  m->buffer_data = malloc((nb ? nb : 1) * sizeof(float));
  if (!m->param_data || !m->grad_data || !m->buffer_data)
    return cohort__error(COHORT_ERR_SYSTEM, "cohort_model_init: out of memory for %zu parameters", np);
  size_t off = 0;
  for (int i = 0; i < m->nparams; i++) {
    m->params[i].value = m->param_data + off;
    m->params[i].grad = m->grad_data + off;
    off += m->params[i].numel;
  }
  off = 0;
  for (int i = 0; i < m->nbuffers; i++) {
    m->buffers[i].value = m->buffer_data + off;
    off += m->buffers[i].numel;
  }
  m->param_count = np;
  m->buffer_count = nb;
  return COHORT_OK;
}

cohort_status cohort_model_init(cohort_model *m, cohort_init_kind kind, uint64_t seed) {
  if (!m) return cohort__error(COHORT_ERR_INVALID, "cohort_model_init: model is NULL");
  if (kind < COHORT_INIT_TORCH_DEFAULT || kind > COHORT_INIT_XAVIER_NORMAL)
    return cohort__error(COHORT_ERR_INVALID, "cohort_model_init: unknown init kind %d", (int)kind);
  if (m->nlayers == 0) return cohort__error(COHORT_ERR_INVALID, "cohort_model_init: the model has no layers");
  if (!m->initialized) {
    COHORT_CHECK(allocate(m));
    m->initialized = 1;
  }
  cohort_rng rng;
  cohort_rng_seed(&rng, seed);
  for (int i = 0; i < m->nlayers; i++) {
    cohort__layer *l = &m->layers[i];
    if (l->ops == &cohort__linear_ops || l->ops == &cohort__conv2d_ops) {
      init_weight_bias(&m->params[l->pidx], &m->params[l->pidx + 1], kind, &rng);
    } else if (l->ops == &cohort__batchnorm2d_ops) {
      for (int k = 0; k < l->cin; k++) {
        m->params[l->pidx].value[k] = 1.0f;
        m->params[l->pidx + 1].value[k] = 0.0f;
        m->buffers[l->bidx].value[k] = 0.0f;
        m->buffers[l->bidx + 1].value[k] = 1.0f;
      }
    }
  }
  /* Fuse each ReLU into the conv2d or linear before it (see layer.h) when a layer with its own gradient buffer
   * comes after it. */
  for (int i = 1; i < m->nlayers; i++) {
    cohort__layer *l = &m->layers[i], *prev = &m->layers[i - 1];
    int owned_after = 0;
    for (int j = i + 1; j < m->nlayers; j++)
      owned_after |= !m->layers[j].ops->alias;
    if (l->ops == &cohort__relu_ops && owned_after &&
        (prev->ops == &cohort__conv2d_ops || prev->ops == &cohort__linear_ops))
      prev->fuse_relu = l->passthrough = 1;
  }
  unbind(m);
  bind(m);
  /* Dropout draws from a stream of its own, so that adding dropout does not change the initial weights. */
  cohort_rng_seed(&m->rng, seed ^ 0x64726f706f7574ULL);
  cohort_model_zero_grad(m);
  return COHORT_OK;
}

cohort_rng *cohort_model_rng(cohort_model *m) { return &m->rng; }

void cohort_model_set_training(cohort_model *m, int training) { m->training = training != 0; }
int cohort_model_training(const cohort_model *m) { return m->training; }

/* ---- forward and backward ---- */

static cohort_status grow(float **buf, size_t *cap, size_t need, const char *layer, const char *what) {
  if (need <= *cap) return COHORT_OK;
  free(*buf);
  *cap = 0;
  *buf = malloc(need * sizeof(float));
  if (!*buf) return cohort__error(COHORT_ERR_SYSTEM, "layer '%s': out of memory for %zu %s floats", layer, need, what);
  *cap = need;
  return COHORT_OK;
}

cohort_status cohort_model_forward(cohort_model *m, const cohort_tensor *input, const cohort_tensor **output) {
  if (!m || !input || !output) return cohort__error(COHORT_ERR_INVALID, "cohort_model_forward: NULL argument");
  if (!m->initialized) return cohort__error(COHORT_ERR_INVALID, "cohort_model_forward: call cohort_model_init() first");
  if (!input->data || input->ndim < 1 || input->ndim > COHORT_TENSOR_MAX_DIMS)
    return cohort__error(COHORT_ERR_INVALID, "cohort_model_forward: input has no data or %d dims", input->ndim);
  m->forwarded = 0;
  m->input = *input;
  if (m->backend->enter) m->backend->enter();
  cohort__nnctx c = {m->params, m->buffers, m->training,     &m->rng,   NULL,
                     NULL,      m->bn_sync, m->bn_sync_user, COHORT_OK, NULL};
  const cohort_tensor *x = &m->input;
  for (int i = 0; i < m->nlayers; i++) {
    cohort__layer *l = &m->layers[i];
    cohort_tensor shape = {0};
    COHORT_CHECK(l->ops->out_shape(l, x, &shape));
    if (l->ops->alias || l->passthrough) {
      shape.data = x->data;
      l->y = shape;
      l->y_layout = c.x_layout; /* NULL before flatten: see bind() */
    } else {
      COHORT_CHECK(grow(&l->y.data, &l->y_cap, shape.numel, l->name, "output"));
      shape.data = l->y.data;
      l->y = shape;
      COHORT_CHECK(grow(&l->aux, &l->aux_cap, l->ops->aux_floats(l, x), l->name, "scratch"));
      /* The gradient of the input is only needed above the first layer. */
      if (i > 0) COHORT_CHECK(grow(&l->dx, &l->dx_cap, x->numel, l->name, "gradient"));
      l->y_layout = NULL; /* the kernels set it when they choose a layout (only where layout_free) */
      cohort__layer_forward(l, &c, x, &l->y);
      if (c.status != COHORT_OK) return c.status;
    }
    c.x_layout = l->y_layout;
    x = &l->y;
  }
  m->output = x;
  m->forwarded = 1;
  *output = x;
  return COHORT_OK;
}

static void no_hook(void *arg, int index) {}

static void fire_hook(void *arg, int index) {
  cohort_model *m = arg;
  m->hook(m->hook_user, index);
}

cohort_status cohort_model_backward(cohort_model *m, const float *grad_output) {
  if (!m || !grad_output) return cohort__error(COHORT_ERR_INVALID, "cohort_model_backward: NULL argument");
  if (!m->forwarded) return cohort__error(COHORT_ERR_INVALID, "cohort_model_backward: no forward to go back through");
  if (m->backend->enter) m->backend->enter();
  cohort__nnctx c = {m->params, m->buffers, m->training,     &m->rng,   m->hook ? fire_hook : no_hook,
                     m,         m->bn_sync, m->bn_sync_user, COHORT_OK, NULL};
  /* Only a layer that fuses a ReLU writes into its dy, and fusion guarantees that dy is then a layer's dx buffer,
   * so the caller's grad_output is never written (see layer.h). */
  float *dy = (float *)grad_output;
  for (int i = m->nlayers - 1; i >= 0; i--) {
    cohort__layer *l = &m->layers[i];
    const cohort_tensor *x = i > 0 ? &m->layers[i - 1].y : &m->input;
    if (l->ops->alias || l->passthrough) continue; /* the gradient passes through unchanged */
    float *dx = i > 0 ? l->dx : NULL;
    c.x_layout = i > 0 ? m->layers[i - 1].y_layout : NULL;
    cohort__layer_backward(l, &c, x, &l->y, dy, dx);
    if (c.status != COHORT_OK) return c.status;
    dy = dx;
  }
  return COHORT_OK;
}

void cohort_model_zero_grad(cohort_model *m) {
  if (!m->initialized) return;
  for (int i = 0; i < m->nparams; i++)
    memset(m->params[i].grad, 0, m->params[i].numel * sizeof(float));
}

void cohort_model_set_grad_hook(cohort_model *m, cohort_grad_hook fn, void *user) {
  m->hook = fn;
  m->hook_user = user;
}

void cohort_model_set_batchnorm_sync(cohort_model *m, cohort_batchnorm_sync_fn fn, void *user) {
  m->bn_sync = fn;
  m->bn_sync_user = fn ? user : NULL;
}

/* ---- tables ---- */

int cohort_model_num_params(const cohort_model *m) { return m->nparams; }
int cohort_model_num_buffers(const cohort_model *m) { return m->nbuffers; }

const cohort_param *cohort_model_param(const cohort_model *m, int i) {
  return m->initialized && i >= 0 && i < m->nparams ? &m->params[i] : NULL;
}

const cohort_param *cohort_model_buffer(const cohort_model *m, int i) {
  return m->initialized && i >= 0 && i < m->nbuffers ? &m->buffers[i] : NULL;
}

float *cohort_model_param_data(cohort_model *m) { return m->initialized ? m->param_data : NULL; }
size_t cohort_model_param_count(const cohort_model *m) { return m->param_count; }

cohort_status cohort_model_set_grad_buffer(cohort_model *m, int i, float *grad) {
  if (!m || !m->initialized)
    return cohort__error(COHORT_ERR_INVALID, "cohort_model_set_grad_buffer: model missing or not initialised");
  if (i < 0 || i >= m->nparams)
    return cohort__error(COHORT_ERR_INVALID, "cohort_model_set_grad_buffer: parameter %d outside [0, %d)", i,
                         m->nparams);
  if (grad) {
    m->params[i].grad = grad;
    return COHORT_OK;
  }
  size_t off = (size_t)(m->params[i].value - m->param_data);
  m->params[i].grad = m->grad_data + off;
  return COHORT_OK;
}

cohort_status cohort_model_clip_grad_norm(cohort_model *m, float max_norm, float *total_norm) {
  if (!m || !m->initialized) return cohort__error(COHORT_ERR_INVALID, "cohort_model_clip_grad_norm: no model");
  if (!(max_norm > 0.0f))
    return cohort__error(COHORT_ERR_INVALID, "cohort_model_clip_grad_norm: max_norm %g must be positive", max_norm);
  double ss = 0.0;
  for (int i = 0; i < m->nparams; i++) {
    const float *g = m->params[i].grad;
    for (size_t j = 0; j < m->params[i].numel; j++)
      ss += (double)g[j] * g[j];
  }
  float norm = (float)sqrt(ss);
  if (total_norm) *total_norm = norm;
  float coef = max_norm / (norm + 1e-6f);
  if (coef < 1.0f) {
    for (int i = 0; i < m->nparams; i++) {
      float *g = m->params[i].grad;
      for (size_t j = 0; j < m->params[i].numel; j++)
        g[j] *= coef;
    }
  }
  return COHORT_OK;
}
