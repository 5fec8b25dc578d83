/*
 * ddp.h: the data-parallel engine. Gradients are averaged over the ranks in buckets whose allreduce runs on the
 * communicator's progress thread while backward is still computing earlier layers (PyTorch's DDP reducer,
 * Horovod's DistributedOptimizer).
 *
 * One training step with the engine:
 *
 *   cohort_ddp_prepare(ddp);                   start of the step: resets readiness, broadcasts buffers if asked
 *   forward ... backward                       the grad hook calls cohort_ddp_mark_ready(ddp, i) for each param
 *   cohort_ddp_finish(ddp);                    waits for every bucket; gradients now hold the average
 *   optimizer step
 *
 * cohort_ddp_create_model() does the wiring for a cohort_model: it points every gradient into bucket memory and
 * installs the grad hook, so the loop above is all a training program writes.
 *
 * Invariants:
 *  - Buckets hold parameters in reverse registration order (the order backward produces gradients), each at most
 *    bucket_bytes (the first at most first_bucket_bytes); a parameter larger than the cap gets a bucket of its own.
 *  - Every gradient is a view into its bucket's memory: backward writes it there and the allreduce reduces it there.
 *  - Buckets are reduced in the same order on every rank: a bucket whose gradients are all ready starts only after
 *    every earlier bucket has started, whatever order the gradients arrived in.
 *  - After the first synchronized step the bucket order is rebuilt once from the order gradients became ready on
 *    rank 0 (every rank adopts it), so that buckets fill in the order backward really produces them.
 *  - At creation rank 0's parameter and buffer values are broadcast to every rank, after the ranks have compared
 *    the parameter list (count, names, shapes, dtypes): any difference is COHORT_ERR_MISMATCH naming the ranks and
 *    the first parameter that differs.
 *
 * Errors: a failed collective, a missing gradient (a parameter that got none, without find_unused_params) or a
 * mismatch is returned by the call that sees it, with cohort_last_error() naming the bucket, parameter or rank.
 * A failed communicator leaves the engine failed: every later call returns the first error.
 *
 * Thread-safety: an engine belongs to the thread that runs the training loop (mark_ready is called from backward on
 * that thread). Comm hooks' launch runs on that thread; the allreduces run on the communicator's progress thread.
 *
 * Environment: COHORT_BUCKET_MB (bucket cap), COHORT_TIMELINE (Chrome trace file), COHORT_STALL_S (stall warning),
 * all in docs/env.md.
 */
#ifndef COHORT_DDP_H
#define COHORT_DDP_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cohort_ddp cohort_ddp;
struct cohort_model;
struct cohort_optim;

/* One tensor the engine knows about: a parameter (with a gradient) or a buffer (values only, e.g. running stats). */
typedef struct cohort_ddp_tensor {
  const char *name; /* unique; compared across ranks */
  void *value;      /* count elements of dtype */
  size_t count;
  cohort_dtype dtype; /* parameters: COHORT_F32 (gradients are float32); buffers: any */
  int ndim;           /* 0..4; compared across ranks together with shape */
  int64_t shape[4];
} cohort_ddp_tensor;

/* Gradient compression for the allreduce; the error it adds is measured in docs/training.md. */
typedef enum cohort_ddp_compression {
  COHORT_DDP_COMPRESS_NONE = 0,
  COHORT_DDP_COMPRESS_F16, /* gradients travel as IEEE half; sums are computed in float32 */
  COHORT_DDP_COMPRESS_BF16,
} cohort_ddp_compression;

/* A bucket as a comm hook sees it. data holds count float32 gradients, back to back. */
typedef struct cohort_ddp_bucket {
  int index; /* position in the reduction order, 0 first */
  float *data;
  size_t count;
  int num_params;
  const int *params; /* the parameter indices it holds, in memory order */
  int64_t step;      /* synchronized steps completed before this one */
} cohort_ddp_bucket;

/*
 * A communication hook replaces the engine's "average this bucket" with a user's function (PyTorch's
 * register_comm_hook). launch runs as soon as the bucket is ready, on the training thread, and must start the
 * bucket's communication with the cohort_i* calls and return the work handle in *work (or NULL when it finished
 * synchronously). complete (optional) runs in cohort_ddp_finish() after that work is done. When they return, the
 * bucket must hold the value the optimizer should use. The built-in compression is itself such a hook.
 */
typedef struct cohort_ddp_comm_hook {
  cohort_status (*launch)(void *user, cohort_comm *comm, const cohort_ddp_bucket *bucket, cohort_work **work);
  cohort_status (*complete)(void *user, cohort_comm *comm, const cohort_ddp_bucket *bucket);
  void *user;
} cohort_ddp_comm_hook;

/* When bucket reductions run. Overlap needs a CPU for the progress thread while backward computes: without one the
 * two threads take turns on the same core, and one fused allreduce after backward is cheaper. */
typedef enum cohort_ddp_overlap {
  COHORT_DDP_OVERLAP_AUTO = 0, /* COHORT_DDP_OVERLAP; its auto: on when every rank of the host has 2 CPUs */
  COHORT_DDP_OVERLAP_ON,       /* each bucket starts on the progress thread as soon as it is ready */
  COHORT_DDP_OVERLAP_OFF,      /* finish reduces everything: one allreduce over all buckets (or the hook per bucket) */
} cohort_ddp_overlap;

typedef struct cohort_ddp_options {
  size_t bucket_bytes;       /* 0: COHORT_BUCKET_MB, else 25 MiB */
  size_t first_bucket_bytes; /* 0: min(1 MiB, bucket_bytes) */
  int broadcast_buffers;     /* broadcast rank 0's buffers in every cohort_ddp_prepare() (PyTorch's default: 1) */
  int find_unused_params;    /* parameters that got no gradient are zero-filled at finish instead of an error */
  cohort_ddp_compression compression;
  int static_bucket_order;    /* 1: keep the creation order (no rebuild after the first step) */
  cohort_ddp_overlap overlap; /* resolved at creation; the ranks agree (off if any rank says off) */
  /* New fields go at the end: the Python binding mirrors this struct (python/cohort/_lib.py). */
  /* 1: ranks may run out of data at different steps (torch's Join, Horovod's join): every synchronized step counts
   * the ranks still training (one small allreduce in prepare) and the gradients are averaged over those alone;
   * a rank whose data ended calls cohort_ddp_join(). Implies static_bucket_order; every rank must set it. */
  int uneven_inputs;
  /* 1: ZeRO stage 1 (DeepSpeed's ZeRO-1, torch's ZeroRedundancyOptimizer), see cohort_ddp_zero_attach. Implies
   * overlap off and static_bucket_order; not with compression, uneven_inputs or a comm hook. Every rank must set it. */
  int zero_stage;
} cohort_ddp_options;

/* The defaults described above (broadcast_buffers = 1, everything else 0). */
COHORT_API void cohort_ddp_options_init(cohort_ddp_options *options);

/*
 * Makes an engine over comm for params[0..num_params) and buffers[0..num_buffers). Gradients live in the engine's
 * bucket memory: cohort_ddp_grad(ddp, i) gives parameter i's view (zeroed at creation). options may be NULL for
 * the defaults. Collective: every rank must call it; it compares the lists and broadcasts rank 0's values.
 */
COHORT_API cohort_status cohort_ddp_create(cohort_comm *comm, const cohort_ddp_tensor *params, int num_params,
                                           const cohort_ddp_tensor *buffers, int num_buffers,
                                           const cohort_ddp_options *options, cohort_ddp **out);
/*
 * The same for a cohort_model (nn.h): its parameters and buffers by name, its gradients rebound into the buckets
 * (cohort_model_set_grad_buffer) and its grad hook set to cohort_ddp_mark_ready. The model must outlive the engine;
 * destroying the engine gives the model its own gradient arrays back (zeroed) and clears its hooks (grad hook and
 * SyncBatchNorm).
 */
COHORT_API cohort_status cohort_ddp_create_model(cohort_comm *comm, struct cohort_model *model,
                                                 const cohort_ddp_options *options, cohort_ddp **out);
/* Waits for anything in flight, writes the timeline if COHORT_TIMELINE is set, and frees the engine. Safe on NULL. */
COHORT_API void cohort_ddp_destroy(cohort_ddp *ddp);

/* The communicator the engine reduces over. */
COHORT_API cohort_comm *cohort_ddp_comm(const cohort_ddp *ddp);

/*
 * SyncBatchNorm: with on = 1 the model's batchnorm layers compute their batch statistics over every rank's batch
 * (PyTorch's SyncBatchNorm): a blocking allreduce of per-channel sums in forward and another in backward. Running
 * statistics then agree across ranks too. on = 0 goes back to per-rank statistics. Every rank must do the same.
 */
COHORT_API cohort_status cohort_ddp_sync_batchnorm(cohort_ddp *ddp, struct cohort_model *model, int on);

/* Whether this engine overlaps (the resolved cohort_ddp_options.overlap). */
COHORT_API int cohort_ddp_overlapping(const cohort_ddp *ddp);

/* Parameter i's gradient inside its bucket (count floats), or NULL when i is out of range. */
COHORT_API float *cohort_ddp_grad(cohort_ddp *ddp, int i);
COHORT_API int cohort_ddp_num_buckets(const cohort_ddp *ddp);
/* The reduction order's bucket b (its params and size); NULL when out of range. data stays valid until the next
 * rebuild (after the first synchronized step) or destroy. */
COHORT_API const cohort_ddp_bucket *cohort_ddp_bucket_at(const cohort_ddp *ddp, int b);

/* Replaces the reduction (NULL: back to the built-in average, with the compression of the options). */
COHORT_API cohort_status cohort_ddp_set_comm_hook(cohort_ddp *ddp, const cohort_ddp_comm_hook *hook);

/*
 * Gradient accumulation: with sync off, steps only accumulate into the gradients (mark_ready launches nothing and
 * finish waits for nothing); turn it back on for the step that should average. PyTorch's no_sync().
 */
COHORT_API void cohort_ddp_set_sync(cohort_ddp *ddp, int sync);

/* Starts a step: forgets the last step's readiness; broadcasts buffers when asked; opens the "forward" span. */
COHORT_API cohort_status cohort_ddp_prepare(cohort_ddp *ddp);
/* Parameter i's gradient is final (the grad hook). Starts its bucket (and any held-back later ones) when full. */
COHORT_API cohort_status cohort_ddp_mark_ready(cohort_ddp *ddp, int i);
/* Starts what has not started, waits for every bucket, and leaves the average in every gradient. */
COHORT_API cohort_status cohort_ddp_finish(cohort_ddp *ddp);

/*
 * Uneven inputs (options.uneven_inputs): a rank whose data has run out calls this instead of its next step. Until
 * every rank has called it, it shadows the others' synchronized steps: it takes part in their collectives with zero
 * gradients and is not counted in their average, so the ranks still training neither hang nor have their gradients
 * diluted. When the last rank arrives, every rank gets the parameters and buffers of the rank that trained longest
 * (the highest-numbered of those), so that all replicas leave the call equal; optimizer state is not touched.
 * Collective over the ranks that are done; the others keep training. Returns that rank, or -1 with an error.
 * Not with SyncBatchNorm on (its forward collectives cannot be shadowed without a forward pass).
 */
COHORT_API int cohort_ddp_join(cohort_ddp *ddp);
/* Ranks that took part in the last synchronized step's average (the world size without uneven_inputs). */
COHORT_API int cohort_ddp_active_ranks(const cohort_ddp *ddp);

/*
 * ZeRO stage 1 (options.zero_stage = 1): the optimizer's state is sharded over the ranks. The gradient arena (every
 * gradient, back to back in bucket order, padded to a multiple of the world size) is cut into equal shards, rank r
 * owning floats [r*S, (r+1)*S). A synchronized step then runs:
 *
 *   cohort_ddp_finish(ddp)      one reduce-scatter: only this rank's shard of the gradients holds the average; the
 *                               rest keep this rank's own gradients (do not read them, e.g. to clip a norm)
 *   cohort_ddp_zero_step(ddp)   instead of cohort_optim_step: the attached optimizer's rule (optim.c's own kernels)
 *                               on the shard's parameters with the shard's state, then one allgather of the new
 *                               parameters, so that every replica leaves with the same values as without ZeRO
 *
 * Per-rank optimizer state is about 1/N of the unsharded optimizer's (cohort_ddp_zero_state_bytes); the engine adds
 * one staging copy of the parameters (N*S floats) for the allgather. Bucket order is static, so the shards never
 * move.
 *
 * cohort_ddp_zero_attach takes over optim (made for the model whose parameter values the engine holds, in the
 * engine's order): it keeps this rank's range of optim's state (whatever it holds: zeros, or an unsharded
 * checkpoint's arrays loaded into it) and frees the rest, so load a checkpoint before attaching. The optimizer keeps
 * its rate, step count and the names and counts of its arrays (cohort_optim_state with data NULL); set_lr and
 * set_steps still apply. It may be destroyed before or after the engine; once the engine is gone it holds no
 * state and cannot step. Local: no collective, but every rank must attach an optimizer of the same kind and
 * settings, before the first synchronized step.
 *
 * cohort_ddp_zero_gather_state makes root's optimizer whole again for a checkpoint: collective; on root
 * cohort_optim_state then reads exactly what the unsharded optimizer would hold (so the checkpoint resumes with or
 * without ZeRO, at any world size); the full arrays stay on root until its next cohort_ddp_zero_step frees them.
 */
COHORT_API cohort_status cohort_ddp_zero_attach(cohort_ddp *ddp, struct cohort_optim *optim);
/* The optimizer step under ZeRO-1 (after cohort_ddp_finish). Collective. Advances optim's step count. */
COHORT_API cohort_status cohort_ddp_zero_step(cohort_ddp *ddp);
COHORT_API cohort_status cohort_ddp_zero_gather_state(cohort_ddp *ddp, int root);
/* Bytes of optimizer state this rank holds (its shard); 0 without ZeRO or before attach. */
COHORT_API size_t cohort_ddp_zero_state_bytes(const cohort_ddp *ddp);

/* ---- observability ---- */

/* The spans of the timeline (COHORT_TIMELINE). The engine records "allreduce" spans itself, one per bucket. */
typedef enum cohort_ddp_span {
  COHORT_SPAN_FORWARD = 0,
  COHORT_SPAN_BACKWARD,
  COHORT_SPAN_OPTIMIZER,
  COHORT_SPAN_COUNT
} cohort_ddp_span;
/* Opens and closes a span of the training loop in the timeline (cheap and a no-op when there is no timeline). */
COHORT_API void cohort_ddp_span_begin(cohort_ddp *ddp, cohort_ddp_span span);
COHORT_API void cohort_ddp_span_end(cohort_ddp *ddp, cohort_ddp_span span);

/*
 * Per-step statistics of the synchronized steps, in seconds. compute: prepare() to finish() (forward and
 * backward); comm: the time the progress thread spent reducing the buckets (the sum over buckets of start to end);
 * exposed: the time finish() waited, which is the communication that compute did not hide.
 */
typedef struct cohort_ddp_stats {
  int64_t steps;    /* synchronized steps measured */
  double compute_s; /* totals over those steps */
  double comm_s;
  double exposed_comm_s;
  double last_compute_s; /* the last step alone */
  double last_comm_s;
  double last_exposed_comm_s;
  size_t bytes_per_step; /* gradient bytes reduced per step (before compression) */
  int num_buckets;
} cohort_ddp_stats;
COHORT_API void cohort_ddp_get_stats(const cohort_ddp *ddp, cohort_ddp_stats *stats);

/*
 * Per-step metrics across ranks (docs/training.md, "Metrics"). Once opened, every synchronized step gathers every
 * rank's compute, communication, exposed-communication and whole-step times (one small allgather after the buckets,
 * a few microseconds), names the slowest rank and by how much it trailed the median, and rank 0 appends one JSON line
 * to path with them and the program's own values of that step (cohort_ddp_metric: loss, lr, img/s, ...). A NULL or
 * empty path gathers without writing (for the end summary, cohort_ddp_get_straggler). Collective: every rank opens it
 * (with the same or any path: only rank 0's is used), before its first step. COHORT_METRICS=path opens it for any
 * program at cohort_ddp_create. The file ends with a summary line when the engine is destroyed.
 */
COHORT_API cohort_status cohort_ddp_metrics_open(cohort_ddp *ddp, const char *path);
/* A value of this step for the metrics (rank 0's go in the file): "loss", "lr", "img_per_s", ... A no-op when the
 * metrics are not open. */
COHORT_API void cohort_ddp_metric(cohort_ddp *ddp, const char *name, double value);

/* Which rank held the others back: the rank that was slowest (the longest compute) in the most steps. */
typedef struct cohort_ddp_straggler {
  int64_t steps;      /* steps gathered */
  int rank;           /* -1 before any */
  int64_t slowest_in; /* steps in which it was the slowest */
  double mean_by_s;   /* its mean lead over the median rank's compute in those steps */
} cohort_ddp_straggler;
COHORT_API void cohort_ddp_get_straggler(const cohort_ddp *ddp, cohort_ddp_straggler *out);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_DDP_H */
