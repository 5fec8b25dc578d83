/*
 * reducer.c: one synchronized step. Backward marks gradients ready; a bucket whose gradients are all ready is
 * launched on the progress thread, but only in bucket order, so that every rank issues the same collectives in the
 * same sequence even when gradients arrive in a different order on different ranks. finish() launches whatever
 * is left (zero-filling unused gradients when asked), waits for each bucket in order, and records the step's
 * statistics and timeline spans.
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h" /* cohort__work_times */
#include "core/clock.h"
#include "core/error.h"
#include "ddp/counters.h"
#include "ddp/ddp_internal.h"
#include "ddp/metrics.h"

static const char *const span_names[COHORT_SPAN_COUNT] = {"forward", "backward", "optimizer"};

cohort_status cohort__ddp_fail(cohort_ddp *ddp, cohort_status status) {
  cohort__failure_keep(&ddp->failure, status, "%s", cohort_last_error());
  return status;
}

static cohort_status failed(const cohort_ddp *ddp) { return cohort__failure_raise(&ddp->failure); }

/* A failure only this rank knows about (a missing gradient, a bad call): the others are, or soon will be, waiting
 * in a collective for this rank, so abort the communicator to turn their wait into an error naming this rank. */
static cohort_status fail_local(cohort_ddp *ddp, cohort_status status) {
  cohort__ddp_fail(ddp, status);
  if (ddp->size > 1) cohort_comm_abort(ddp->comm, ddp->failure.message);
  return cohort__error(status, "%s", ddp->failure.message);
}

static void reset_step(cohort_ddp *ddp) {
  memset(ddp->ready, 0, (size_t)ddp->num_params);
  for (int b = 0; b < ddp->num_buckets; b++) {
    ddp->buckets[b].pending = ddp->buckets[b].view.num_params;
    ddp->buckets[b].work = NULL;
  }
  ddp->next_launch = 0;
  ddp->prepare_ns = 0;
  ddp->first_ready_ns = 0;
}

static cohort_status launch(cohort_ddp *ddp, int b) {
  ddp_bucket *bk = &ddp->buckets[b];
  bk->view.step = ddp->step;
  bk->launch_ns = cohort__now_ns();
  bk->work = NULL;
  cohort__stall_progress(ddp->stall, ddp->step, b);
  if (ddp->size == 1 && !ddp->hook.complete) return COHORT_OK; /* the average of one rank is itself */
  cohort_status st = ddp->hook.launch(ddp->hook.user, ddp->comm, &bk->view, &bk->work);
  if (st != COHORT_OK) return cohort__error_prefix(st, "starting bucket %d of step %lld", b, (long long)ddp->step);
  return COHORT_OK;
}

/* Launches every bucket from next_launch on whose gradients are all ready. */
static cohort_status launch_ready(cohort_ddp *ddp) {
  while (ddp->next_launch < ddp->num_buckets && ddp->buckets[ddp->next_launch].pending == 0) {
    cohort_status st = launch(ddp, ddp->next_launch);
    ddp->next_launch++;
    if (st != COHORT_OK) return cohort__ddp_fail(ddp, st);
  }
  return COHORT_OK;
}

void cohort_ddp_set_sync(cohort_ddp *ddp, int sync) {
  if (ddp) ddp->sync = sync != 0;
}

cohort_status cohort_ddp_prepare(cohort_ddp *ddp) {
  if (!ddp) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_prepare: ddp is NULL");
  if (ddp->failure.status != COHORT_OK) return failed(ddp);
  if (ddp->next_launch > 0 || ddp->first_ready_ns != 0)
    return fail_local(ddp, cohort__error(COHORT_ERR_INVALID, "cohort_ddp_prepare: the previous step has gradients "
                                                             "marked ready but was never finished (call "
                                                             "cohort_ddp_finish after backward)"));
  ddp->active = ddp->size;
  if (ddp->opt.uneven_inputs && ddp->sync && ddp->size > 1) {
    /* First, so that a joined rank learns here whether anyone still trains before it shadows anything else. */
    cohort_status st = cohort__ddp_count_active(ddp);
    if (st != COHORT_OK) return cohort__ddp_fail(ddp, st);
    if (ddp->active == 0) return COHORT_OK; /* only joined ranks see it: the shadowing ends (join.c) */
  }
  if (ddp->opt.broadcast_buffers && ddp->size > 1) {
    for (int i = 0; i < ddp->num_buffers; i++) {
      cohort_status st = cohort_broadcast(ddp->comm, ddp->buffers[i].value, ddp->buffers[i].bytes, COHORT_U8, 0);
      if (st != COHORT_OK)
        return cohort__ddp_fail(ddp, cohort__error_prefix(st, "broadcasting buffer '%s'", ddp->buffers[i].name));
    }
  }
  ddp->prepare_ns = cohort__now_ns();
  cohort_ddp_span_begin(ddp, COHORT_SPAN_FORWARD);
  return COHORT_OK;
}

cohort_status cohort_ddp_mark_ready(cohort_ddp *ddp, int i) {
  if (!ddp) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_mark_ready: ddp is NULL");
  if (ddp->failure.status != COHORT_OK) return failed(ddp);
  if (i < 0 || i >= ddp->num_params)
    return fail_local(ddp, cohort__error(COHORT_ERR_INVALID,
                                         "cohort_ddp_mark_ready: parameter %d is out of range "
                                         "(the engine has %d)",
                                         i, ddp->num_params));
  if (!ddp->sync) return COHORT_OK; /* accumulating (no_sync): nothing moves and nothing is tracked */
  if (ddp->ready[i])
    return fail_local(ddp, cohort__error(COHORT_ERR_INVALID,
                                         "parameter '%s' was marked ready twice in step %lld "
                                         "(is it used twice in the graph, or was "
                                         "cohort_ddp_finish skipped?)",
                                         ddp->params[i].name, (long long)ddp->step));
  ddp->ready[i] = 1;
  if (!ddp->first_ready_ns) ddp->first_ready_ns = cohort__now_ns();
  if (!ddp->rebuilt && ddp->ready_seen < ddp->num_params) ddp->ready_order[ddp->ready_seen++] = i;
  ddp_bucket *bk = &ddp->buckets[ddp->params[i].bucket];
  if (--bk->pending == 0 && ddp->overlap) return launch_ready(ddp);
  return COHORT_OK;
}

/* Parameters that got no gradient: zero them and count them ready (find_unused_params), or fail naming them. */
static cohort_status settle_unused(cohort_ddp *ddp) {
  int missing = 0;
  char names[512] = "";
  size_t used = 0;
  for (int i = 0; i < ddp->num_params; i++) {
    if (ddp->ready[i]) continue;
    if (ddp->opt.find_unused_params) {
      memset(cohort_ddp_grad(ddp, i), 0, ddp->params[i].count * sizeof(float));
      COHORT_CHECK(cohort_ddp_mark_ready(ddp, i));
      continue;
    }
    if (missing++ < 4 && used < sizeof names)
      used +=
          (size_t)snprintf(names + used, sizeof names - used, "%s'%s'", missing > 1 ? ", " : "", ddp->params[i].name);
  }
  if (!missing) return COHORT_OK;
  return fail_local(ddp, cohort__error(COHORT_ERR_INVALID,
                                       "rank %d: %d parameter%s got no gradient in step %lld (%s%s); if parts of "
                                       "the model are unused in some steps, set find_unused_params",
                                       ddp->rank, missing, missing == 1 ? "" : "s", (long long)ddp->step, names,
                                       missing > 4 ? ", ..." : ""));
}

/* The step's statistics, then the next step (and the rebuild after the first). */
static cohort_status end_step(cohort_ddp *ddp, int64_t enter_ns, int64_t comm_busy) {
  const int64_t exit_ns = cohort__now_ns();
  cohort_ddp_stats *s = &ddp->stats;
  const int64_t began = ddp->prepare_ns ? ddp->prepare_ns : (ddp->first_ready_ns ? ddp->first_ready_ns : enter_ns);
  s->last_compute_s = (double)(enter_ns - began) * 1e-9;
  s->last_comm_s = (double)comm_busy * 1e-9;
  s->last_exposed_comm_s = (double)(exit_ns - enter_ns) * 1e-9;
  s->compute_s += s->last_compute_s;
  s->comm_s += s->last_comm_s;
  s->exposed_comm_s += s->last_exposed_comm_s;
  s->steps++;
  double bytes = 0; /* the gradients reduced (before compression), as cohort_ddp_get_stats counts them */
  for (int i = 0; i < ddp->num_params; i++)
    bytes += (double)ddp->params[i].count * sizeof(float);
  cohort__counters_step(ddp->counters, s, bytes, cohort__stall_warnings(ddp->stall));
  if (ddp->metrics) {
    cohort_status st = cohort__metrics_step(ddp->metrics, ddp->step, s, bytes);
    if (st != COHORT_OK)
      return cohort__ddp_fail(ddp,
                              cohort__error_prefix(st, "gathering the metrics of step %lld", (long long)ddp->step));
  }

  ddp->step++;
  if (!ddp->joining) ddp->trained_steps++;
  reset_step(ddp);
  if (!ddp->rebuilt && !ddp->opt.static_bucket_order) {
    cohort_status st = cohort__ddp_rebuild(ddp);
    if (st != COHORT_OK) return cohort__ddp_fail(ddp, st);
    reset_step(ddp);
  }
  return COHORT_OK;
}

/* The reduction of a step, one of two schedules (chosen by the options, fixed for the engine's life):
 *
 * reduce_arena: without overlap and with the plain average, the buckets are one arena, so one blocking collective on
 * this thread averages them all (the alignment gaps between buckets are zero on every rank and stay zero): an
 * allreduce, or under ZeRO-1 a reduce-scatter that leaves each rank the average of its shard (zero.c). This is the
 * fastest schedule when no CPU is free to run the progress thread during backward.
 *
 * reduce_buckets: every bucket's reduction through the comm hook (started during backward with overlap, else here),
 * waited for in bucket order, then completed by the hook (compression widens the bucket back there).
 *
 * Each returns the time the reductions ran in *comm_busy. */
static cohort_status reduce_arena(cohort_ddp *ddp, int64_t *comm_busy) {
  int64_t start_ns = cohort__now_ns();
  for (int b = 0; b < ddp->num_buckets; b++)
    cohort__stall_progress(ddp->stall, ddp->step, b);
  if (ddp->size > 1 && ddp->arena_count > 0) {
    cohort__stall_wait_begin(ddp->stall, ddp->step, 0);
    cohort_status st = ddp->opt.zero_stage ? cohort__ddp_zero_reduce(ddp)
                                           : cohort_allreduce(ddp->comm, ddp->arena, ddp->arena, ddp->arena_count,
                                                              COHORT_F32, COHORT_AVG);
    cohort__stall_wait_end(ddp->stall);
    if (st != COHORT_OK)
      return cohort__ddp_fail(
          ddp, cohort__error_prefix(st,
                                    "reducing the gradients of step %lld (%zu bytes, one "
                                    "%s)",
                                    (long long)ddp->step, ddp->arena_count * sizeof(float),
                                    ddp->opt.zero_stage ? "reduce-scatter: ZeRO-1" : "allreduce: overlap is off"));
  }
  int64_t end_ns = cohort__now_ns();
  if (ddp->timeline && ddp->size > 1)
    cohort__timeline_span(ddp->timeline, COHORT__LANE_COMM, ddp->opt.zero_stage ? "reduce_scatter" : "allreduce",
                          start_ns, end_ns, -1, 0);
  ddp->next_launch = ddp->num_buckets;
  *comm_busy = end_ns - start_ns;
  return COHORT_OK;
}

static cohort_status reduce_buckets(cohort_ddp *ddp, int64_t *comm_busy) {
  cohort_status st = launch_ready(ddp);
  if (st != COHORT_OK) return st;
  *comm_busy = 0;
  for (int b = 0; b < ddp->num_buckets; b++) {
    ddp_bucket *bk = &ddp->buckets[b];
    int64_t start_ns = bk->launch_ns, end_ns = bk->launch_ns;
    if (bk->work) {
      cohort__stall_wait_begin(ddp->stall, ddp->step, b);
      st = cohort_work_wait(bk->work);
      cohort__stall_wait_end(ddp->stall);
      cohort__work_times(bk->work, &start_ns, &end_ns);
      cohort_work_free(bk->work);
      bk->work = NULL;
      if (st != COHORT_OK) {
        /* The remaining handles are complete (the communicator has failed) or will fail at once. */
        for (int k = b + 1; k < ddp->num_buckets; k++) {
          cohort_work_free(ddp->buckets[k].work);
          ddp->buckets[k].work = NULL;
        }
        return cohort__ddp_fail(ddp, cohort__error_prefix(st, "reducing bucket %d of step %lld (%zu bytes)", b,
                                                          (long long)ddp->step, bk->view.count * sizeof(float)));
      }
    }
    if (ddp->hook.complete && (st = ddp->hook.complete(ddp->hook.user, ddp->comm, &bk->view)) != COHORT_OK)
      return cohort__ddp_fail(ddp,
                              cohort__error_prefix(st, "completing bucket %d of step %lld", b, (long long)ddp->step));
    if (ddp->timeline && end_ns > start_ns)
      cohort__timeline_span(ddp->timeline, COHORT__LANE_COMM, "allreduce", start_ns, end_ns, b,
                            (int64_t)(bk->view.count * sizeof(float)));
    *comm_busy += end_ns - start_ns;
  }
  return COHORT_OK;
}

/* The end of a step, in the order of ddp_internal.h's "A step": accumulation, the gradients nobody produced, the
 * reduction, uneven inputs' rescaling, then the statistics and the next step (with the rebuild after the first). */
cohort_status cohort_ddp_finish(cohort_ddp *ddp) {
  if (!ddp) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_finish: ddp is NULL");
  if (ddp->failure.status != COHORT_OK) return failed(ddp);
  const int64_t enter_ns = cohort__now_ns();
  cohort_ddp_span_end(ddp, COHORT_SPAN_BACKWARD);
  if (!ddp->sync) { /* accumulating (no_sync): nothing moves */
    reset_step(ddp);
    return COHORT_OK;
  }
  COHORT_CHECK(settle_unused(ddp));
  int64_t comm_busy = 0;
  const int one_collective = !ddp->overlap && ddp->hook_is_average;
  COHORT_CHECK(one_collective ? reduce_arena(ddp, &comm_busy) : reduce_buckets(ddp, &comm_busy));
  cohort__ddp_rescale(ddp);
  return end_step(ddp, enter_ns, comm_busy);
}

void cohort_ddp_span_begin(cohort_ddp *ddp, cohort_ddp_span span) {
  if (!ddp || span < 0 || span >= COHORT_SPAN_COUNT) return;
  ddp->span_begin_ns[span] = cohort__now_ns();
  /* Backward begins where forward ends, when the caller only marks the starts. */
  if (span == COHORT_SPAN_BACKWARD) cohort_ddp_span_end(ddp, COHORT_SPAN_FORWARD);
}

void cohort_ddp_span_end(cohort_ddp *ddp, cohort_ddp_span span) {
  if (!ddp || span < 0 || span >= COHORT_SPAN_COUNT || !ddp->span_begin_ns[span]) return;
  int64_t begin = ddp->span_begin_ns[span];
  ddp->span_begin_ns[span] = 0;
  if (ddp->timeline)
    cohort__timeline_span(ddp->timeline, COHORT__LANE_COMPUTE, span_names[span], begin, cohort__now_ns(), -1, 0);
}

void cohort_ddp_get_stats(const cohort_ddp *ddp, cohort_ddp_stats *stats) {
  if (!stats) return;
  memset(stats, 0, sizeof *stats);
  if (!ddp) return;
  *stats = ddp->stats;
  stats->bytes_per_step = 0;
  for (int i = 0; i < ddp->num_params; i++)
    stats->bytes_per_step += ddp->params[i].count * sizeof(float);
  stats->num_buckets = ddp->num_buckets;
}
