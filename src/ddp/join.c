/*
 * join.c: uneven inputs (cohort_ddp_options.uneven_inputs, cohort_ddp_join), as torch's Join and Horovod's join.
 *
 * Every synchronized step starts with one allreduce of a 32-bit count: each rank still training adds 1. The
 * gradients are then reduced as always (the built-in hooks average over the whole world) and finish() rescales them
 * by world / count, so that they are the average over the ranks that trained in the step. A rank whose data has
 * ended calls cohort_ddp_join(): it goes on taking part in every step's collectives, in the same order, with zero
 * gradients and adding 0 to the count, until a count of 0 says that every rank has joined. Then all ranks take the
 * parameters and buffers of the rank that trained the most steps, since the joined ranks took no optimizer step
 * while they shadowed.
 *
 * What a joined rank cannot shadow without running the model (SyncBatchNorm's collectives in forward and backward)
 * is refused.
 */
#include <string.h>

#include "core/error.h"
#include "ddp/ddp_internal.h"

cohort_status cohort__ddp_count_active(cohort_ddp *ddp) {
  int32_t mine = ddp->joining ? 0 : 1, total = 0;
  cohort_status st = cohort_allreduce(ddp->comm, &mine, &total, 1, COHORT_I32, COHORT_SUM);
  if (st != COHORT_OK)
    return cohort__error_prefix(st, "counting the ranks still training in step %lld", (long long)ddp->step);
  ddp->active = total;
  return COHORT_OK;
}

void cohort__ddp_rescale(cohort_ddp *ddp) {
  if (!ddp->opt.uneven_inputs || ddp->active <= 0 || ddp->active == ddp->size) return;
  const float k = (float)ddp->size / (float)ddp->active;
  for (size_t i = 0; i < ddp->arena_count; i++)
    ddp->arena[i] *= k;
}

int cohort_ddp_active_ranks(const cohort_ddp *ddp) { return ddp ? ddp->active : -1; }

/* One shadow step: the same collectives as a training step, with zero gradients. 0 when no rank trains any more. */
static cohort_status shadow_step(cohort_ddp *ddp, int *anyone_training) {
  COHORT_CHECK(cohort_ddp_prepare(ddp));
  *anyone_training = ddp->active > 0;
  if (!*anyone_training) {
    ddp->prepare_ns = 0;
    ddp->span_begin_ns[COHORT_SPAN_FORWARD] = 0;
    return COHORT_OK;
  }
  memset(ddp->arena, 0, ddp->arena_count * sizeof(float));
  /* In bucket order, as a backward pass would make them ready. */
  for (int b = 0; b < ddp->num_buckets; b++)
    for (int k = 0; k < ddp->buckets[b].view.num_params; k++)
      COHORT_CHECK(cohort_ddp_mark_ready(ddp, ddp->buckets[b].view.params[k]));
  return cohort_ddp_finish(ddp);
}

/* Every rank takes the values of the rank that trained the most steps (ties: the highest rank). */
static cohort_status sync_from_longest(cohort_ddp *ddp, int *source) {
  int64_t mine = ddp->trained_steps * 65536 + ddp->rank, best = 0;
  COHORT_CHECK(cohort_allreduce(ddp->comm, &mine, &best, 1, COHORT_I64, COHORT_MAX));
  *source = (int)(best % 65536);
  for (int i = 0; i < ddp->num_params; i++) {
    cohort_status st = cohort_broadcast(ddp->comm, ddp->params[i].value, ddp->params[i].count, COHORT_F32, *source);
    if (st != COHORT_OK) return cohort__error_prefix(st, "joining: taking parameter '%s'", ddp->params[i].name);
  }
  for (int i = 0; i < ddp->num_buffers; i++) {
    cohort_status st = cohort_broadcast(ddp->comm, ddp->buffers[i].value, ddp->buffers[i].bytes, COHORT_U8, *source);
    if (st != COHORT_OK) return cohort__error_prefix(st, "joining: taking buffer '%s'", ddp->buffers[i].name);
  }
  return COHORT_OK;
}

int cohort_ddp_join(cohort_ddp *ddp) {
  if (!ddp) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_join: ddp is NULL"), -1;
  if (ddp->failure.status != COHORT_OK) return cohort__failure_raise(&ddp->failure), -1;
  if (!ddp->opt.uneven_inputs)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_join: the engine was made without uneven_inputs (set it in "
                                             "cohort_ddp_options on every rank)"),
           -1;
  if (ddp->syncbn)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_join: SyncBatchNorm is on: a joined rank cannot take part "
                                             "in its collectives without data; turn it off first"),
           -1;
  if (ddp->next_launch > 0 || ddp->first_ready_ns != 0)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_join: called inside a step (finish it first)"), -1;
  if (ddp->size == 1) return 0;
  const int sync = ddp->sync;
  ddp->sync = 1;
  ddp->joining = 1;
  cohort_status st = COHORT_OK;
  for (int anyone = 1; st == COHORT_OK && anyone;)
    st = shadow_step(ddp, &anyone);
  ddp->joining = 0;
  ddp->sync = sync;
  int source = -1;
  if (st == COHORT_OK) st = sync_from_longest(ddp, &source);
  if (st != COHORT_OK) {
    cohort__ddp_fail(ddp, st);
    return -1;
  }
  memset(ddp->arena, 0, ddp->arena_count * sizeof(float));
  ddp->active = ddp->size;
  return source;
}
