/*
 * ddp.c: making and unmaking an engine: options and knobs, the parameter table, the cross-rank check, the bucket
 * layout, rank 0's values for everyone, the timeline and the stall inspector; and the glue for a cohort_model.
 */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/nn.h"
#include "comm/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "ddp/counters.h"
#include "ddp/ddp_internal.h"
#include "ddp/metrics.h"

#define MIB ((size_t)1 << 20)

void cohort_ddp_options_init(cohort_ddp_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->broadcast_buffers = 1;
}

/* The knobs come from the communicator's config (cohort_init parsed them, range checks included). */
static const cohort__config *knobs(const cohort_ddp *ddp) { return &ddp->comm->config; }

static cohort_status resolve_options(const cohort_ddp *ddp, const cohort_ddp_options *given, cohort_ddp_options *o) {
  if (given)
    *o = *given;
  else
    cohort_ddp_options_init(o);
  if (o->bucket_bytes == 0) {
    double mb = knobs(ddp)->bucket_mb;
    o->bucket_bytes = (size_t)(mb * (double)MIB);
    if (o->bucket_bytes < sizeof(float))
      return cohort__error(COHORT_ERR_INVALID, "COHORT_BUCKET_MB=%g is smaller than one gradient", mb);
  }
  if (o->first_bucket_bytes == 0) o->first_bucket_bytes = o->bucket_bytes < MIB ? o->bucket_bytes : MIB;
  if ((unsigned)o->overlap > COHORT_DDP_OVERLAP_OFF)
    return cohort__error(COHORT_ERR_INVALID, "unknown overlap mode %d", (int)o->overlap);
  if ((unsigned)o->compression > COHORT_DDP_COMPRESS_BF16)
    return cohort__error(COHORT_ERR_INVALID, "unknown compression %d", (int)o->compression);
  /* A joined rank shadows steps with the buckets as they are: a rebuild (a collective of its own, after the first
   * step) would need its ready order too. */
  if (o->uneven_inputs) o->static_bucket_order = 1;
  if (o->zero_stage != 0 && o->zero_stage != 1)
    return cohort__error(COHORT_ERR_INVALID, "zero_stage %d: only 0 (off) and 1 (optimizer state sharded) exist",
                         o->zero_stage);
  if (o->zero_stage) {
    /* ZeRO-1 reduce-scatters the whole arena once after backward: there are no per-bucket reductions for overlap,
     * a hook or compression to act on, and a rebuilt bucket order would move every shard's state. */
    if (o->compression != COHORT_DDP_COMPRESS_NONE || o->uneven_inputs)
      return cohort__error(COHORT_ERR_INVALID, "zero_stage 1 does not combine with %s",
                           o->uneven_inputs ? "uneven_inputs" : "gradient compression");
    if (o->overlap == COHORT_DDP_OVERLAP_ON)
      return cohort__error(COHORT_ERR_INVALID, "zero_stage 1 reduces after backward: overlap must be auto or off");
    o->overlap = COHORT_DDP_OVERLAP_OFF;
    o->static_bucket_order = 1;
  }
  return COHORT_OK;
}

static cohort_status copy_tables(cohort_ddp *ddp, const cohort_ddp_tensor *params, int num_params,
                                 const cohort_ddp_tensor *buffers, int num_buffers) {
  ddp->params = calloc((size_t)(num_params ? num_params : 1), sizeof *ddp->params);
  ddp->buffers = calloc((size_t)(num_buffers ? num_buffers : 1), sizeof *ddp->buffers);
  ddp->ready = calloc((size_t)(num_params ? num_params : 1), 1);
  ddp->ready_order = calloc((size_t)(num_params ? num_params : 1), sizeof *ddp->ready_order);
  if (!ddp->params || !ddp->buffers || !ddp->ready || !ddp->ready_order)
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory for %d parameters", num_params);
  for (int i = 0; i < num_params; i++) {
    const cohort_ddp_tensor *t = &params[i];
    if (!t->name || !t->name[0] || !t->value || t->dtype != COHORT_F32 || t->ndim < 0 || t->ndim > 4)
      return cohort__error(COHORT_ERR_INVALID, "parameter %d%s%s%s: %s", i, t->name ? " '" : "", t->name ? t->name : "",
                           t->name ? "'" : "",
                           !t->name || !t->name[0]  ? "has no name"
                           : !t->value              ? "has no value"
                           : t->dtype != COHORT_F32 ? "must be f32 (gradients are float32)"
                                                    : "ndim must be 0..4");
    size_t numel = 1;
    for (int d = 0; d < t->ndim; d++)
      numel *= (size_t)t->shape[d];
    if (t->ndim > 0 && numel != t->count)
      return cohort__error(COHORT_ERR_INVALID, "parameter '%s': its shape has %zu elements but count is %zu", t->name,
                           numel, t->count);
    for (int j = 0; j < i; j++)
      if (!strcmp(params[j].name, t->name))
        return cohort__error(COHORT_ERR_INVALID, "parameters %d and %d are both named '%s'", j, i, t->name);
    ddp_param *p = &ddp->params[i];
    if (!(p->name = strdup(t->name))) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    p->value = t->value;
    p->count = t->count;
    p->ndim = t->ndim;
    memcpy(p->shape, t->shape, sizeof p->shape);
    ddp->num_params = i + 1;
  }
  for (int i = 0; i < num_buffers; i++) {
    const cohort_ddp_tensor *t = &buffers[i];
    size_t esize = cohort_dtype_size(t->dtype);
    if (!t->name || !t->value || !esize)
      return cohort__error(COHORT_ERR_INVALID, "buffer %d: %s", i,
                           !t->name    ? "has no name"
                           : !t->value ? "has no value"
                                       : "has an unknown dtype");
    ddp_buffer *b = &ddp->buffers[i];
    if (!(b->name = strdup(t->name))) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    b->value = t->value;
    b->bytes = t->count * esize;
    ddp->num_buffers = i + 1;
  }
  return COHORT_OK;
}

/* Rank 0's parameter and buffer values, for everyone. */
static cohort_status broadcast_values(cohort_ddp *ddp) {
  if (ddp->size == 1) return COHORT_OK;
  for (int i = 0; i < ddp->num_params; i++) {
    cohort_status st = cohort_broadcast(ddp->comm, ddp->params[i].value, ddp->params[i].count, COHORT_F32, 0);
    if (st != COHORT_OK) return cohort__error_prefix(st, "broadcasting parameter '%s'", ddp->params[i].name);
  }
  for (int i = 0; i < ddp->num_buffers; i++) {
    cohort_status st = cohort_broadcast(ddp->comm, ddp->buffers[i].value, ddp->buffers[i].bytes, COHORT_U8, 0);
    if (st != COHORT_OK) return cohort__error_prefix(st, "broadcasting buffer '%s'", ddp->buffers[i].name);
  }
  return COHORT_OK;
}

/* Overlap pays only when the progress thread has a CPU of its own while backward computes. Every rank must take
 * the same path (the fused allreduce and the per-bucket ones are different collectives), so the ranks agree: off
 * if any rank says off. */
static cohort_status resolve_overlap(cohort_ddp *ddp) {
  int32_t on;
  if (ddp->opt.overlap == COHORT_DDP_OVERLAP_ON)
    on = 1;
  else if (ddp->opt.overlap == COHORT_DDP_OVERLAP_OFF)
    on = 0;
  else {
    const char *knob = knobs(ddp)->ddp_overlap;
    if (!strcmp(knob, "on"))
      on = 1;
    else if (!strcmp(knob, "off"))
      on = 0;
    else if (!strcmp(knob, "auto")) {
      cpu_set_t set;
      int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
      int local = cohort_local_size(ddp->comm) > 0 ? cohort_local_size(ddp->comm) : 1;
      /* A rank bound to its own CPUs (cohortrun --bind core) sees only those; an unbound rank sees the whole host,
       * and one bound to a socket (--bind socket) the whole socket, both shared with its local peers: it can count
       * on no more than its share of the host. */
      long online = sysconf(_SC_NPROCESSORS_ONLN);
      long share = online / local > 0 ? online / local : 1;
      int per_rank = cpus < share ? cpus : (int)share;
      on = per_rank >= 2;
    } else
      return cohort__error(COHORT_ERR_INVALID, "COHORT_DDP_OVERLAP='%s' must be auto, on or off", knob);
  }
  if (ddp->size > 1) COHORT_CHECK(cohort_allreduce(ddp->comm, &on, &on, 1, COHORT_I32, COHORT_MIN));
  ddp->overlap = on;
  return COHORT_OK;
}

static cohort_status start_observers(cohort_ddp *ddp) {
  const char *path = knobs(ddp)->timeline;
  if (path[0]) COHORT_CHECK(cohort__timeline_create(ddp->comm, path, &ddp->timeline));
  if (knobs(ddp)->metrics[0]) COHORT_CHECK(cohort__metrics_create(ddp->comm, knobs(ddp)->metrics, &ddp->metrics));
  if (knobs(ddp)->metrics_dir[0])
    COHORT_CHECK(cohort__counters_create(knobs(ddp)->metrics_dir, cohort_rank(ddp->comm), &ddp->counters));
  double stall_s = knobs(ddp)->stall_s;
  if (ddp->size > 1) COHORT_CHECK(cohort__stall_create(ddp->comm, stall_s, &ddp->stall));
  return COHORT_OK;
}

cohort_status cohort_ddp_create(cohort_comm *comm, const cohort_ddp_tensor *params, int num_params,
                                const cohort_ddp_tensor *buffers, int num_buffers, const cohort_ddp_options *options,
                                cohort_ddp **out) {
  if (!out) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_create: out is NULL");
  *out = NULL;
  if (!comm) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_create: comm is NULL");
  if (num_params < 0 || num_buffers < 0 || (num_params && !params) || (num_buffers && !buffers))
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_create: %d parameters at %p, %d buffers at %p", num_params,
                         (const void *)params, num_buffers, (const void *)buffers);
  cohort_ddp *ddp = calloc(1, sizeof *ddp);
  if (!ddp) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  ddp->comm = comm;
  ddp->rank = cohort_rank(comm);
  ddp->size = cohort_size(comm);
  ddp->sync = 1;
  ddp->active = ddp->size;
  cohort_status st = resolve_options(ddp, options, &ddp->opt);
  if (st == COHORT_OK) st = copy_tables(ddp, params, num_params, buffers, num_buffers);
  /* Everything above is local and may fail on one rank only; tell the others before they wait in a collective. */
  if (st != COHORT_OK && ddp->size > 1) {
    cohort_comm_abort(comm, cohort_last_error());
    goto fail;
  }
  if (st == COHORT_OK) st = cohort__ddp_verify(ddp);
  if (st == COHORT_OK) {
    for (int i = 0; i < ddp->num_params; i++)
      ddp->ready_order[i] = ddp->num_params - 1 - i;
    st = cohort__ddp_layout(ddp, ddp->ready_order);
  }
  if (st == COHORT_OK) st = broadcast_values(ddp);
  if (st == COHORT_OK) st = resolve_overlap(ddp);
  if (st == COHORT_OK) st = start_observers(ddp);
  if (st != COHORT_OK) goto fail;
  cohort__ddp_default_hook(ddp, &ddp->hook);
  ddp->hook_is_average = cohort__ddp_hook_is_average(&ddp->hook);
  COHORT_LOG_INFO("ddp: %d parameters (%zu bytes of gradients) in %d buckets of at most %zu bytes, in %s, overlap "
                  "%s%s",
                  ddp->num_params, ddp->arena_count * sizeof(float), ddp->num_buckets, ddp->opt.bucket_bytes,
                  cohort_in_arena(ddp->comm, ddp->arena, ddp->arena_count * sizeof(float))
                      ? "the shared arena (zero copy)"
                      : "private memory",
                  ddp->overlap ? "on" : "off", ddp->opt.zero_stage ? ", ZeRO-1" : "");
  *out = ddp;
  return COHORT_OK;

fail:
  cohort_ddp_destroy(ddp);
  return st;
}

float *cohort_ddp_grad(cohort_ddp *ddp, int i) {
  if (!ddp || i < 0 || i >= ddp->num_params || !ddp->buckets) return NULL;
  const ddp_param *p = &ddp->params[i];
  return ddp->buckets[p->bucket].view.data + p->offset;
}

int cohort_ddp_num_buckets(const cohort_ddp *ddp) { return ddp ? ddp->num_buckets : 0; }

const cohort_ddp_bucket *cohort_ddp_bucket_at(const cohort_ddp *ddp, int b) {
  if (!ddp || b < 0 || b >= ddp->num_buckets) return NULL;
  return &ddp->buckets[b].view;
}

cohort_comm *cohort_ddp_comm(const cohort_ddp *ddp) { return ddp ? ddp->comm : NULL; }

cohort_status cohort_ddp_set_comm_hook(cohort_ddp *ddp, const cohort_ddp_comm_hook *hook) {
  if (!ddp) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_set_comm_hook: ddp is NULL");
  if (ddp->next_launch > 0 || ddp->first_ready_ns)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_set_comm_hook: a step is in progress; set hooks between "
                                             "cohort_ddp_finish and the next backward");
  if (ddp->opt.zero_stage && hook)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_set_comm_hook: not with zero_stage 1 (its reduce-scatter "
                                             "replaces the per-bucket reductions a hook would change)");
  if (hook && !hook->launch) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_set_comm_hook: launch is NULL");
  if (hook)
    ddp->hook = *hook;
  else
    cohort__ddp_default_hook(ddp, &ddp->hook);
  ddp->hook_is_average = cohort__ddp_hook_is_average(&ddp->hook);
  return COHORT_OK;
}

int cohort_ddp_overlapping(const cohort_ddp *ddp) { return ddp ? ddp->overlap : 0; }

cohort_status cohort_ddp_metrics_open(cohort_ddp *ddp, const char *path) {
  if (!ddp) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_metrics_open: ddp is NULL");
  if (ddp->metrics) {
    if (path && path[0] && ddp->rank == 0)
      return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_metrics_open: the metrics are open already (%s)",
                           knobs(ddp)->metrics[0] ? "COHORT_METRICS" : "an earlier call");
    return COHORT_OK;
  }
  return cohort__metrics_create(ddp->comm, path, &ddp->metrics);
}

void cohort_ddp_metric(cohort_ddp *ddp, const char *name, double value) {
  if (!ddp) return;
  cohort__metrics_note(ddp->metrics, name, value);
  cohort__counters_note(ddp->counters, name, value);
}

void cohort_ddp_get_straggler(const cohort_ddp *ddp, cohort_ddp_straggler *out) {
  if (!out) return;
  cohort__metrics_summary(ddp ? ddp->metrics : NULL, out);
}

/* ---- the glue for a cohort_model ---- */

static void on_grad_ready(void *user, int index) {
  /* The hook cannot return a status: a failure stays in the engine and finish() returns it. */
  (void)cohort_ddp_mark_ready(user, index);
}

cohort_status cohort__ddp_bind_model(cohort_ddp *ddp) {
  if (!ddp->model) return COHORT_OK;
  for (int i = 0; i < ddp->num_params; i++)
    COHORT_CHECK(cohort_model_set_grad_buffer(ddp->model, i, cohort_ddp_grad(ddp, i)));
  return COHORT_OK;
}

static void tensor_of(const cohort_param *p, cohort_ddp_tensor *t) {
  memset(t, 0, sizeof *t);
  t->name = p->name;
  t->value = p->value;
  t->count = p->numel;
  t->dtype = COHORT_F32;
  t->ndim = p->ndim;
  for (int d = 0; d < p->ndim && d < 4; d++)
    t->shape[d] = p->shape[d];
}

cohort_status cohort_ddp_create_model(cohort_comm *comm, cohort_model *model, const cohort_ddp_options *options,
                                      cohort_ddp **out) {
  if (!out) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_create_model: out is NULL");
  *out = NULL;
  if (!model) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_create_model: model is NULL");
  const int np = cohort_model_num_params(model), nb = cohort_model_num_buffers(model);
  if (np > 0 && !cohort_model_param(model, 0))
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_create_model: the model is not initialised "
                                             "(call cohort_model_init first)");
  cohort_ddp_tensor *t = calloc((size_t)(np + nb + 1), sizeof *t);
  if (!t) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  for (int i = 0; i < np; i++)
    tensor_of(cohort_model_param(model, i), &t[i]);
  for (int i = 0; i < nb; i++)
    tensor_of(cohort_model_buffer(model, i), &t[np + i]);
  cohort_ddp *ddp;
  cohort_status st = cohort_ddp_create(comm, t, np, t + np, nb, options, &ddp);
  free(t);
  COHORT_CHECK(st);
  ddp->model = model;
  if ((st = cohort__ddp_bind_model(ddp)) != COHORT_OK) {
    cohort_ddp_destroy(ddp);
    return st;
  }
  cohort_model_set_grad_hook(model, on_grad_ready, ddp);
  *out = ddp;
  return COHORT_OK;
}

void cohort_ddp_destroy(cohort_ddp *ddp) {
  if (!ddp) return;
  for (int b = 0; b < ddp->num_buckets; b++) {
    if (ddp->buckets[b].work) {
      (void)cohort_work_wait(ddp->buckets[b].work);
      cohort_work_free(ddp->buckets[b].work);
    }
  }
  if (ddp->timeline) {
    cohort_status st = cohort__timeline_write(ddp->timeline);
    if (st != COHORT_OK) COHORT_LOG_WARN("ddp: the timeline was not written: %s", cohort_last_error());
    cohort__timeline_destroy(ddp->timeline);
  }
  cohort__stall_destroy(ddp->stall);
  cohort__metrics_destroy(ddp->metrics);
  cohort__counters_destroy(ddp->counters);
  if (ddp->model) { /* give the model its own gradient arrays back before the buckets go */
    cohort_model_set_grad_hook(ddp->model, NULL, NULL);
    cohort_model_set_batchnorm_sync(ddp->model, NULL, NULL); /* SyncBatchNorm's hook points at the communicator */
    for (int i = 0; i < ddp->num_params; i++)
      (void)cohort_model_set_grad_buffer(ddp->model, i, NULL);
    cohort_model_zero_grad(ddp->model);
  }
  cohort__ddp_zero_free(ddp);
  cohort__ddp_layout_free(ddp);
  for (int i = 0; i < ddp->num_params; i++)
    free(ddp->params[i].name);
  for (int i = 0; i < ddp->num_buffers; i++)
    free(ddp->buffers[i].name);
  free(ddp->params);
  free(ddp->buffers);
  free(ddp->ready);
  free(ddp->ready_order);
  free(ddp);
}
