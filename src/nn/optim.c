/*
 * optim.c: SGD (momentum, dampening, Nesterov, coupled weight decay, optionally LARS's layer-wise trust ratio) and
 * AdamW (decoupled weight decay), with the update rules of torch.optim 1.13 written out element by element, and their
 * state exposed as named arrays.
 *
 * Gradients are read through the model's parameter table at every step, so a rebound gradient buffer (the DDP
 * engine's bucket) is what gets used.
 *
 * A step runs with subnormal floats flushed to zero (core/fpu.h says why: state decayed into subnormals made a
 * step 70 times slower), and its loops are vector kernels (core/kernel.h; this file is built with -O3 and
 * -fno-math-errno, so that sqrtf becomes a vector instruction instead of a call that may set errno).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fpu.h"
#include "core/kernel.h"
#include "nn/layer.h"
#include "nn/optim_internal.h"

typedef enum { OPT_SGD, OPT_ADAMW } opt_kind;

struct cohort_optim {
  opt_kind kind;
  cohort_model *model;
  cohort_sgd_config sgd;
  cohort_adamw_config adamw;
  float lr;
  int64_t steps;
  int nstates;
  cohort_named_array *states; /* SGD: one momentum buffer per param; AdamW: exp_avg, exp_avg_sq per param */
  float *state_data;
};

void cohort_optim_destroy(cohort_optim *o) {
  if (!o) return;
  for (int i = 0; i < o->nstates; i++)
    free((char *)o->states[i].name);
  free(o->states);
  free(o->state_data);
  free(o);
}

/* Makes per_param zero-filled state arrays for every parameter, named "<param>.<suffix>". */
static cohort_status make_states(cohort_optim *o, int per_param, const char *const *suffixes) {
  cohort_model *m = o->model;
  const int np = cohort_model_num_params(m);
  const size_t total = cohort_model_param_count(m) * (size_t)per_param;
  o->states = calloc((size_t)np * per_param + 1, sizeof *o->states);
  o->state_data = calloc(total ? total : 1, sizeof(float));
  if (!o->states || !o->state_data)
    return cohort__error(COHORT_ERR_SYSTEM, "optimizer: out of memory for %zu state floats", total);
  size_t off = 0;
  for (int i = 0; i < np; i++) {
    const cohort_param *p = cohort_model_param(m, i);
    for (int k = 0; k < per_param; k++) {
      cohort_named_array *a = &o->states[o->nstates];
      size_t len = strlen(p->name) + strlen(suffixes[k]) + 2;
      char *name = malloc(len);
      if (!name) return cohort__error(COHORT_ERR_SYSTEM, "optimizer: out of memory naming state of %s", p->name);
      snprintf(name, len, "%s.%s", p->name, suffixes[k]);
      a->name = name;
      a->data = o->state_data + off;
      a->count = p->numel;
      off += p->numel;
      o->nstates++;
    }
  }
  return COHORT_OK;
}

static cohort_status new_optim(cohort_model *model, opt_kind kind, const char *who, cohort_optim **out) {
  if (!model || !out) return cohort__error(COHORT_ERR_INVALID, "%s: NULL argument", who);
  if (!cohort_model_param(model, 0))
    return cohort__error(COHORT_ERR_INVALID, "%s: the model has no parameters or is not initialised", who);
  cohort_optim *o = calloc(1, sizeof *o);
  if (!o) return cohort__error(COHORT_ERR_SYSTEM, "%s: out of memory", who);
  o->kind = kind;
  o->model = model;
  *out = o;
  return COHORT_OK;
}

cohort_status cohort_optim_sgd_create(cohort_model *model, const cohort_sgd_config *cfg, cohort_optim **out) {
  static const char *const suffix[] = {"momentum_buffer"};
  cohort_optim *o = NULL;
  cohort_status st;
  if (!cfg) return cohort__error(COHORT_ERR_INVALID, "cohort_optim_sgd_create: config is NULL");
  if (!(cfg->lr >= 0.0f) || !(cfg->momentum >= 0.0f) || !(cfg->weight_decay >= 0.0f) || !(cfg->dampening >= 0.0f) ||
      !(cfg->trust_coefficient >= 0.0f))
    return cohort__error(COHORT_ERR_INVALID,
                         "cohort_optim_sgd_create: lr %g, momentum %g, dampening %g, weight_decay "
                         "%g, trust_coefficient %g must be >= 0",
                         cfg->lr, cfg->momentum, cfg->dampening, cfg->weight_decay, cfg->trust_coefficient);
  if (cfg->nesterov && (cfg->momentum <= 0.0f || cfg->dampening != 0.0f))
    return cohort__error(COHORT_ERR_INVALID, "cohort_optim_sgd_create: Nesterov needs momentum > 0 and dampening 0");
  COHORT_CHECK(new_optim(model, OPT_SGD, "cohort_optim_sgd_create", &o));
  o->sgd = *cfg;
  o->lr = cfg->lr;
  if (cfg->momentum != 0.0f && (st = make_states(o, 1, suffix)) != COHORT_OK) goto fail;
  *out = o;
  return COHORT_OK;
fail:
  cohort_optim_destroy(o);
  return st;
}

cohort_status cohort_optim_adamw_create(cohort_model *model, const cohort_adamw_config *cfg, cohort_optim **out) {
  static const char *const suffix[] = {"exp_avg", "exp_avg_sq"};
  cohort_optim *o = NULL;
  cohort_status st;
  if (!cfg) return cohort__error(COHORT_ERR_INVALID, "cohort_optim_adamw_create: config is NULL");
  if (!(cfg->lr >= 0.0f) || !(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f) || !(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f) ||
      !(cfg->eps >= 0.0f) || !(cfg->weight_decay >= 0.0f))
    return cohort__error(COHORT_ERR_INVALID,
                         "cohort_optim_adamw_create: lr %g, betas (%g, %g), eps %g, weight_decay "
                         "%g out of range",
                         cfg->lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay);
  COHORT_CHECK(new_optim(model, OPT_ADAMW, "cohort_optim_adamw_create", &o));
  o->adamw = *cfg;
  o->lr = cfg->lr;
  if ((st = make_states(o, 2, suffix)) != COHORT_OK) goto fail;
  *out = o;
  return COHORT_OK;
fail:
  cohort_optim_destroy(o);
  return st;
}

/* w -= lr * (g + wd * w) * trust, with the weight decay term only where wd is set (as torch does: g + 0 * w is not
 * g when w is infinite). trust is LARS's ratio, 1 otherwise (a product with 1 is exact: plain SGD is unchanged). */
COHORT_KERNEL static void sgd_plain(float *restrict w, const float *restrict g, size_t n, float lr, float wd,
                                    float trust) {
  for (size_t j = 0; j < n; j++) {
    const float d = (wd != 0.0f ? g[j] + wd * w[j] : g[j]) * trust;
    w[j] -= lr * d;
  }
}

/* The same with a momentum buffer, which PyTorch starts at the first gradient itself, undamped. */
COHORT_KERNEL static void sgd_momentum(float *restrict w, float *restrict buf, const float *restrict g, size_t n,
                                       float lr, float wd, float trust, float mu, float damp, int first, int nesterov) {
  for (size_t j = 0; j < n; j++) {
    const float d = (wd != 0.0f ? g[j] + wd * w[j] : g[j]) * trust;
    const float b = first ? d : buf[j] * mu + damp * d;
    buf[j] = b;
    w[j] -= lr * (nesterov ? d + mu * b : b);
  }
}

COHORT_KERNEL static void adamw_update(float *restrict w, float *restrict m, float *restrict v, const float *restrict g,
                                       size_t n, float decay, float b1, float b2, float step_size, float bc2_sqrt,
                                       float eps) {
  for (size_t j = 0; j < n; j++) {
    w[j] *= decay;
    m[j] = m[j] * b1 + (1.0f - b1) * g[j];
    v[j] = v[j] * b2 + (1.0f - b2) * g[j] * g[j];
    const float denom = sqrtf(v[j]) / bc2_sqrt + eps;
    w[j] -= step_size * (m[j] / denom);
  }
}

int cohort__optim_arrays_per_param(const cohort_optim *o) {
  if (o->kind == OPT_ADAMW) return 2;
  return o->sgd.momentum != 0.0f ? 1 : 0;
}

void cohort__optim_square_sums(const float *w, const float *g, size_t n, double *ww, double *gg) {
  double a = 0.0, b = 0.0;
  for (size_t j = 0; j < n; j++) {
    a += (double)w[j] * w[j];
    b += (double)g[j] * g[j];
  }
  *ww += a;
  *gg += b;
}

float cohort__optim_trust(const cohort_optim *o, int ndim, double ww, double gg) {
  const cohort_sgd_config *c = &o->sgd;
  if (!cohort__optim_is_layerwise(o) || ndim < 2) return 1.0f;
  const double wn = sqrt(ww), gn = sqrt(gg);
  if (!(wn > 0.0) || !(gn > 0.0)) return 1.0f;
  const double trust = c->trust_coefficient * wn / (gn + c->weight_decay * wn);
  if (c->trust_clip) return o->lr > 0.0f && trust < o->lr ? (float)(trust / o->lr) : 1.0f;
  return (float)trust;
}

void cohort__optim_step_range_trusted(const cohort_optim *o, float *w, const float *g, float *const *state, size_t n,
                                      float trust) {
  if (o->kind == OPT_SGD) {
    const cohort_sgd_config *c = &o->sgd;
    const float lr = o->lr, mu = c->momentum, wd = c->weight_decay, damp = 1.0f - c->dampening;
    if (mu != 0.0f)
      sgd_momentum(w, state[0], g, n, lr, wd, trust, mu, damp, o->steps == 0, c->nesterov);
    else
      sgd_plain(w, g, n, lr, wd, trust);
    return;
  }
  const cohort_adamw_config *c = &o->adamw;
  const double t = (double)o->steps + 1.0;
  const float decay = 1.0f - o->lr * c->weight_decay;
  const float step_size = (float)((double)o->lr / (1.0 - pow((double)c->beta1, t)));
  const float bc2_sqrt = (float)sqrt(1.0 - pow((double)c->beta2, t));
  adamw_update(w, state[0], state[1], g, n, decay, c->beta1, c->beta2, step_size, bc2_sqrt, c->eps);
}

int cohort__optim_is_layerwise(const cohort_optim *o) { return o->kind == OPT_SGD && o->sgd.trust_coefficient > 0.0f; }

cohort_model *cohort__optim_model(const cohort_optim *o) { return o->model; }

int cohort__optim_has_state(const cohort_optim *o) { return o->nstates == 0 || o->state_data != NULL; }

void cohort__optim_release_state(cohort_optim *o) {
  free(o->state_data);
  o->state_data = NULL;
  for (int i = 0; i < o->nstates; i++)
    o->states[i].data = NULL;
}

int cohort__optim_restore_state(cohort_optim *o) {
  if (cohort__optim_has_state(o)) return 0;
  size_t total = 0;
  for (int i = 0; i < o->nstates; i++)
    total += o->states[i].count;
  o->state_data = calloc(total ? total : 1, sizeof(float));
  if (!o->state_data) return cohort__error(COHORT_ERR_SYSTEM, "optimizer: out of memory for %zu state floats", total);
  size_t off = 0;
  for (int i = 0; i < o->nstates; i++) {
    o->states[i].data = o->state_data + off;
    off += o->states[i].count;
  }
  return 1;
}

cohort_status cohort_optim_step(cohort_optim *o) {
  if (!o) return cohort__error(COHORT_ERR_INVALID, "cohort_optim_step: optimizer is NULL");
  if (!cohort__optim_has_state(o))
    return cohort__error(COHORT_ERR_INVALID, "cohort_optim_step: the optimizer's state is sharded over the ranks "
                                             "(ZeRO-1): step it with cohort_ddp_zero_step");
  const int k = cohort__optim_arrays_per_param(o);
  const unsigned fpu = cohort__fpu_flush_begin();
  for (int i = 0; i < cohort_model_num_params(o->model); i++) {
    const cohort_param *p = cohort_model_param(o->model, i);
    float *state[2] = {k > 0 ? o->states[k * i].data : NULL, k > 1 ? o->states[k * i + 1].data : NULL};
    double ww = 0.0, gg = 0.0;
    if (cohort__optim_is_layerwise(o) && p->ndim >= 2) cohort__optim_square_sums(p->value, p->grad, p->numel, &ww, &gg);
    cohort__optim_step_range_trusted(o, p->value, p->grad, state, p->numel, cohort__optim_trust(o, p->ndim, ww, gg));
  }
  cohort__fpu_flush_end(fpu);
  o->steps++;
  return COHORT_OK;
}

void cohort_optim_set_lr(cohort_optim *o, float lr) { o->lr = lr; }
float cohort_optim_lr(const cohort_optim *o) { return o->lr; }
int64_t cohort_optim_steps(const cohort_optim *o) { return o->steps; }
void cohort_optim_set_steps(cohort_optim *o, int64_t steps) { o->steps = steps < 0 ? 0 : steps; }
int cohort_optim_num_states(const cohort_optim *o) { return o->nstates; }
const cohort_named_array *cohort_optim_state(const cohort_optim *o, int i) {
  return i >= 0 && i < o->nstates ? &o->states[i] : NULL;
}
