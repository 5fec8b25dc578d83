/*
 * ddp_internal.h: the engine's insides, shared by the files of src/ddp/.
 *
 *   ddp.c       creation, options, the model glue, accessors, destroy
 *   verify.c    comparing the parameter lists across ranks (the mismatch report)
 *   layout.c    assigning parameters to buckets and placing them in bucket memory; the rebuild after step one
 *   reducer.c   one step: readiness, launching buckets in order, finish, statistics, timeline spans
 *   hooks.c     the built-in comm hooks: average, and average with f16/bf16 compression
 *   zero.c      ZeRO-1: the reduce-scatter of the gradients, the sharded optimizer step, the allgather of the
 *               parameters, and gathering the state for checkpoints
 *   join.c      uneven inputs: counting the ranks still training, and shadowing their steps once a rank's data ended
 *
 * State of a step: `ready[i]` says parameter i's gradient is final; a bucket's `pending` counts its parameters not
 * yet ready; `next_launch` is the first bucket not yet started. Buckets start strictly in index order, so every
 * rank issues the same collectives in the same order. finish() ends the step and clears all of it.
 *
 * A step, and where each mode acts, in this order (every rank issues the same collectives in the same order):
 *   prepare      1. uneven_inputs (join.c): one allreduce counts the ranks still training; first, so that a joined
 *                   rank learns there whether anyone still trains (0: its shadowing ends) before anything else.
 *                2. broadcast_buffers: rank 0's buffers.
 *   mark_ready   3. sync off (no_sync, accumulation): nothing is tracked and nothing moves, here or in finish.
 *                4. until the rebuild: the order in which gradients become ready is recorded.
 *                5. overlap: each bucket whose gradients are all ready is launched, in bucket order.
 *   finish       6. find_unused_params: gradients nobody produced are zeroed and marked ready (else: fail, naming
 * them).
 *                7. the reduction (reducer.c), one of two schedules fixed at creation: one collective over the whole
 *                   arena on this thread when overlap is off and the hook is the plain average (ZeRO-1: a
 *                   reduce-scatter, zero.c's cohort__ddp_zero_reduce, instead of the allreduce), else every bucket
 *                   through the comm hook (compression is a hook) and its completion, in bucket order.
 *                8. uneven_inputs: the world's average rescaled to the average over the ranks that trained.
 *                9. statistics; the live counters (COHORT_METRICS_DIR, counters.c: no collective); the metrics
 *                   (COHORT_METRICS, metrics.c): this step's gather is started (an allgather on the progress thread)
 *                   and the last step's is read; step + 1 (trained_steps too, unless joining), and after the first
 *                   synchronized step the rebuild of the buckets in rank 0's ready order (layout.c), unless the
 *                   order is static.
 *   after        ZeRO-1: the caller's cohort_ddp_zero_step steps this rank's shard and allgathers the parameters.
 * The options are made consistent once, at creation (ddp.c): ZeRO-1 means overlap off, a static bucket order, and no
 * hook, compression or uneven inputs; uneven inputs mean a static bucket order. cohort_ddp_join (join.c) runs whole
 * steps (prepare, mark_ready in bucket order, finish) with zero gradients until the count of step 1 is 0.
 */
#ifndef COHORT_DDP_INTERNAL_H
#define COHORT_DDP_INTERNAL_H

#include <stdint.h>

#include "cohort/ddp.h"
#include "core/failure.h"
#include "ddp/stall.h"
#include "ddp/timeline.h"

#define COHORT__DDP_MESSAGE_MAX 1024

typedef struct ddp_param {
  char *name;
  float *value;
  size_t count;
  int ndim;
  int64_t shape[4];
  int bucket;    /* index of its bucket */
  size_t offset; /* of its gradient in the bucket's data, in floats */
} ddp_param;

typedef struct ddp_buffer {
  char *name;
  void *value;
  size_t bytes;
} ddp_buffer;

typedef struct ddp_bucket {
  cohort_ddp_bucket view; /* what hooks see; view.params points at params */
  int *params;
  int pending;       /* parameters not yet ready in this step */
  cohort_work *work; /* the launched reduction, until finish */
  int64_t launch_ns;
  void *wire; /* compression: the bucket in f16/bf16 */
} ddp_bucket;

struct cohort_ddp {
  cohort_comm *comm;
  int rank, size;
  cohort_ddp_options opt;

  int num_params;
  ddp_param *params;
  int num_buffers;
  ddp_buffer *buffers;
  size_t buffer_bytes;

  int num_buckets;
  ddp_bucket *buckets;
  float *arena; /* every bucket's data, back to back, on a cache line */
  size_t arena_count;
  void *arena_block; /* what cohort_alloc returned for it (the communicator's shared arena, or malloc) */

  /* the step */
  unsigned char *ready;
  int next_launch;
  int sync;
  int64_t step;          /* synchronized steps completed */
  int active;            /* ranks in this step's average: the world size, or fewer with uneven_inputs (join.c) */
  int64_t trained_steps; /* synchronized steps this rank took part in with its own data (join.c) */
  int joining;           /* inside cohort_ddp_join: this rank's steps are shadows */
  int syncbn;            /* SyncBatchNorm is on (cohort_ddp_sync_batchnorm): join cannot shadow it */
  int64_t prepare_ns;
  int64_t first_ready_ns;

  /* the rebuild after the first synchronized step */
  int *ready_order;
  int ready_seen;
  int rebuilt;

  cohort_ddp_comm_hook hook;
  int hook_is_average; /* the built-in plain average: without overlap, one allreduce can do every bucket */
  int overlap;         /* resolved: 1 launch buckets during backward, 0 everything in finish */

  struct cohort_model *model; /* set by cohort_ddp_create_model() */

  /* ZeRO-1 (zero.c): this rank owns arena floats [rank * zero_shard, (rank + 1) * zero_shard) */
  size_t zero_shard;
  struct cohort_optim *zero_optim; /* attached */
  int zero_arrays;                 /* state arrays per parameter */
  float *zero_state;               /* zero_arrays * zero_shard floats */
  float *zero_grad;                /* the reduce-scatter's result (zero_shard floats) */
  float *zero_send;                /* this rank's new parameters, for the allgather (zero_shard floats) */
  double *zero_sums;               /* LARS: sum(w^2), sum(g^2) of each parameter over all shards (2 per param) */
  float *zero_gathered;            /* every rank's (size * zero_shard floats, from cohort_alloc) */

  cohort__failure failure; /* the first failure: every later call returns it */

  cohort_ddp_stats stats;
  int64_t span_begin_ns[COHORT_SPAN_COUNT];
  cohort__timeline *timeline;
  struct cohort__metrics *metrics;   /* COHORT_METRICS, cohort_ddp_metrics_open: per-step metrics across ranks */
  struct cohort__counters *counters; /* COHORT_METRICS_DIR: this rank's live counters for cohortrun to serve */
  cohort__stall *stall;
};

/* verify.c: COHORT_ERR_MISMATCH on every rank when the ranks' parameter lists or options differ. Collective. */
cohort_status cohort__ddp_verify(cohort_ddp *ddp);

/* layout.c: assigns parameters to buckets in `order` (param indices, first to be reduced first) and allocates
 * zeroed bucket memory. Replaces any earlier layout; the caller moves gradients over if it needs them. */
cohort_status cohort__ddp_layout(cohort_ddp *ddp, const int *order);
void cohort__ddp_layout_free(cohort_ddp *ddp);
/* After the first synchronized step: adopts rank 0's ready order, if it differs from the current one. Collective. */
cohort_status cohort__ddp_rebuild(cohort_ddp *ddp);

/* ddp.c: points the model's gradients (cohort_ddp_create_model) at their places in the buckets. */
cohort_status cohort__ddp_bind_model(cohort_ddp *ddp);

/* hooks.c: the built-in hook for the options' compression. */
void cohort__ddp_default_hook(const cohort_ddp *ddp, cohort_ddp_comm_hook *hook);
int cohort__ddp_hook_is_average(const cohort_ddp_comm_hook *hook);

/* join.c: with uneven_inputs, the count of the ranks still training, taken at the start of a synchronized step
 * (this rank counts itself unless it is joining); sets ddp->active. */
cohort_status cohort__ddp_count_active(cohort_ddp *ddp);
/* join.c: rescales the averaged buckets from the world to the ranks that trained in this step. */
void cohort__ddp_rescale(cohort_ddp *ddp);

/* zero.c: the reduce-scatter of finish() under ZeRO-1 (the owned shard of the arena becomes the average). */
cohort_status cohort__ddp_zero_reduce(cohort_ddp *ddp);
void cohort__ddp_zero_free(cohort_ddp *ddp);

/* Records the first failure (keeping the message) and returns it; a later call returns the same. */
cohort_status cohort__ddp_fail(cohort_ddp *ddp, cohort_status status);

#endif
