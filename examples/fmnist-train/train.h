/*
 * train.h: the pieces of fmnist-train, the main job: data-parallel training of the reference CNN (or an MLP) on
 * Fashion-MNIST, one process per rank under cohortrun.
 *
 * The files, one concern each:
 *   flags.c       the command line -> train_config (usage errors exit 2 with one line)
 *   train.c       the job: data, model, the step (forward, backward overlapped with the DDP engine's bucket
 *                 allreduces, or one fused allreduce with --sync fused; optimizer), evaluation
 *   state.c       checkpoints: what a resumed run needs to continue bit for bit, written by rank 0, read by all
 *   progress.c    rank 0's progress line (live \r updates on a terminal, plain periodic lines otherwise)
 *   metrics.c     the per-evaluation CSV file
 *   main.c        init, run, the final machine-readable line, exit codes
 *
 * Invariants that make runs reproducible and comparable:
 *  - Every rank starts from rank 0's parameters (broadcast) and applies the same averaged gradient, so all
 *    replicas hold bitwise the same parameters after every step.
 *  - The learning rate is a function of the step, the global batch and the planned length (--epochs) only, never
 *    of the world size by itself or of --steps: 2 ranks with batch B and 1 rank with batch 2B follow the same
 *    schedule, and a run stopped early with --steps follows the same one as a run that goes on.
 *  - A checkpoint holds everything the next step depends on (parameters, optimizer state and step count, sampler
 *    epoch and cursor, the model's RNG, the loss accumulators), so an interrupted and resumed run ends with the
 *    same parameters as one that never stopped.
 *
 * Thread-safety: single-threaded, apart from the loader's prefetch thread and the communicator's progress thread,
 * which belong to the library.
 */
#ifndef FMNIST_TRAIN_H
#define FMNIST_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cohort/cohort.h"
#include "cohort/data.h"
#include "cohort/ddp.h"
#include "cohort/nn.h"

/* Exit codes: 0 success, 1 a failure while running (message on stderr), 2 a bad command line. */
enum { TRAIN_EXIT_OK = 0, TRAIN_EXIT_FAIL = 1, TRAIN_EXIT_USAGE = 2 };

/* The global batch at which --lr applies as given: the rate is scaled linearly with the global batch from it. */
#define TRAIN_LR_REFERENCE_BATCH 64

typedef enum { TRAIN_MODEL_CNN = 0, TRAIN_MODEL_MLP = 1 } train_model_kind;

typedef struct train_config {
  train_model_kind model;
  int epochs;
  int64_t max_steps; /* --steps; -1: no limit (the epochs decide); 0: no step, the initial parameters are reported */
  int batch;         /* per rank */
  double lr;         /* per TRAIN_LR_REFERENCE_BATCH images of global batch */
  double momentum;
  double weight_decay;
  int warmup_steps; /* -1: automatic */
  double lars;      /* --lars ETA: LARS's trust coefficient (cohort_sgd_config.trust_coefficient); 0: plain SGD */
  int lars_clip;    /* --lars-mode larc (1, the default) or lars (0): cohort_sgd_config.trust_clip */
  uint64_t seed;
  const char *checkpoint; /* NULL: none */
  int64_t checkpoint_every;
  int resume;
  const char *data_dir;
  int threads;
  const char *csv;         /* NULL: none */
  const char *metrics;     /* --metrics: the engine's per-step JSON lines (rank 0 writes); NULL: none */
  const char *dump_params; /* NULL: none */
  int64_t log_every;       /* plain progress lines every N steps */
  int eval_batch;
  int64_t eval_images; /* --eval-images: the first N test images are scored (-1: all 10000; 0: none, test_acc nan) */
  int quiet;           /* no progress lines at all, only the final line */
  int profile;         /* rank 0 prints where a step's time goes before the final line */
  int uneven; /* --uneven: rank r trains ceil(S x (W - r) / W) of an epoch's S steps, then joins (cohort_ddp_join) */
  /* How gradients are averaged: TRAIN_SYNC_DDP (the engine of ddp.h: buckets overlapped with backward) or
   * TRAIN_SYNC_FUSED (one allreduce of every gradient after backward: the non-overlapped baseline). */
  int sync;
  double bucket_mb;       /* --bucket-mb; 0: the engine's default (COHORT_BUCKET_MB, else 25) */
  int compress;           /* --compress none|f16|bf16: a cohort_ddp_compression */
  int accumulate;         /* --accumulate K: K micro-batches of --batch per optimizer step (>= 1) */
  int zero;               /* --zero 1: ZeRO-1, the optimizer state sharded over the ranks (cohort_ddp_zero_attach) */
  int replicas;           /* --replicas N: N replicas as threads of this process (0: one rank per process) */
  int device;             /* --device: TRAIN_DEVICE_CPU or TRAIN_DEVICE_CUDA (train_cuda.c) */
  cohort_kernels kernels; /* --kernels, resolved by train_flags_parse (never AUTO there on the CPU) */
  /* With --replicas, main loads the datasets once and every replica reads them (they are read-only once loaded);
   * NULL: train_run loads its own. */
  cohort_dataset *shared_train_set, *shared_test_set;
} train_config;

enum { TRAIN_SYNC_DDP = 0, TRAIN_SYNC_FUSED = 1 };
enum { TRAIN_DEVICE_CPU = 0, TRAIN_DEVICE_CUDA = 1 };

/* ---- flags.c ---- */

/*
 * Parses argv into cfg (defaults first). Returns TRAIN_EXIT_OK to go on, TRAIN_EXIT_USAGE after printing one
 * line to stderr for a bad command line, or -1 after printing the help to stdout (--help: exit 0).
 */
int train_flags_parse(int argc, char **argv, train_config *cfg);
void train_flags_usage(FILE *f);
const char *train_model_name(train_model_kind kind);

/* ---- progress.c ---- */

typedef struct train_progress train_progress;

/* enabled 0 makes every call a no-op (ranks other than 0, --quiet). total_steps: where this run stops. */
train_progress *train_progress_create(int enabled, int64_t log_every, int64_t total_steps, int epochs,
                                      int64_t global_batch);
void train_progress_destroy(train_progress *p);
/* After a training step: global step (1-based), epoch (1-based), the mean loss so far this epoch, img/s. */
void train_progress_step(train_progress *p, int64_t step, int epoch, double loss, double img_per_s);
/* After an evaluation: ends a live line and prints the epoch's summary. */
void train_progress_eval(train_progress *p, int64_t step, int epoch, double loss, double test_acc, double img_per_s,
                         double seconds);
/* A line of its own (e.g. "resumed from ..."), not mixed into a live line. */
void train_progress_note(train_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- metrics.c ---- */

typedef struct train_metrics train_metrics;

/* Opens path for the CSV (appending when append != 0 and the file has rows, so a resumed run extends it). */
int train_metrics_open(const char *path, int append, train_metrics **out);
/* One row; flushed at once so that a run killed later keeps it. Returns 0 or -1 (message on stderr). */
int train_metrics_row(train_metrics *m, int epoch, int64_t step, double train_loss, double test_acc, double img_per_s,
                      double seconds);
void train_metrics_close(train_metrics *m);

/* ---- the job's running state, shared by train.c and state.c ---- */

typedef struct train_job {
  const train_config *cfg;
  cohort_comm *comm;
  int rank, world;
  cohort_model *model;
  cohort_optim *optim;
  cohort_dataset *train_set, *test_set;
  cohort_sampler *sampler;
  cohort_loader *loader;
  cohort_ddp *ddp; /* --sync ddp: the engine, which owns the gradients */
  float *grads;    /* --sync fused: param_count + 1 floats: every gradient, then the step's loss (one allreduce) */
  size_t nparams;  /* param_count */
  int64_t steps_per_epoch;
  int64_t total_steps;  /* the planned length (epochs), for the schedule; --steps may stop earlier */
  int64_t stop_step;    /* min(total_steps, --steps) */
  int64_t step;         /* optimizer steps taken */
  int preempted;        /* a rank was asked to stop (SIGTERM/SIGUSR1): every rank saves after this step and ends */
  int preempt_signal;   /* the signal this rank had when the ranks agreed to stop, 0 if another rank's; what the
                         * report names, not a SIGTERM the launcher sends once the first rank has gone */
  int epoch;            /* 0-based epoch the next step belongs to */
  double loss_sum;      /* the global mean loss summed over this epoch's steps so far */
  int64_t loss_steps;   /* how many steps loss_sum holds */
  double last_loss;     /* mean loss of the last completed epoch window (what the final line shows) */
  double test_acc;      /* last evaluation, -1 before the first */
  double train_seconds; /* time spent in steps (not evaluation or checkpoints), this process's run */
  int64_t train_images; /* global images processed in train_seconds */
  double t_data, t_compute, t_comm, t_update; /* --profile: seconds in each part of the steps */
  double last_step_end;                       /* now_s() at the end of the last step (img/s in --metrics) */
  int64_t steps_run;                          /* steps taken by this process (after a --resume, fewer than step) */
  char signature[128 + COHORT_HASH_HEX_LEN];
  struct train_gpu *gpu; /* --device cuda: the net on the GPU (train_cuda.c); NULL on the CPU */
} train_job;

/* ---- train.c ---- */

/* The learning rate of optimizer step `step` (warmup, then cosine over the planned run; linear in the global batch). */
float train_lr_at(const train_job *job, int64_t step);
/* Loads a Fashion-MNIST split ("train", "t10k") from cfg->data_dir, normalized as the job trains on it. */
cohort_status train_load_fmnist(const train_config *cfg, const char *split, cohort_dataset **out);
/* Preemption (Slurm's SIGTERM before a time limit or a preemption, scancel, cohortrun's stop): with --checkpoint,
 * under the DDP engine (the default --sync ddp, without --uneven), SIGTERM and SIGUSR1 are taken by a thread of
 * their own (train_preempt_watch, before cohort_init, so that no thread of the library is interrupted); the ranks
 * agree at the end of a step (the flag rides with the loss's allreduce), write the checkpoint and stop with
 * TRAIN_EXIT_PREEMPTED. A second SIGTERM kills at once. Returns 1 when it watches. */
int train_preempt_watch(const train_config *cfg);
/* The signal that asked this rank to stop (0: none). */
int train_preempt_signal(void);
enum { TRAIN_EXIT_PREEMPTED = 128 + 15 };

/* Runs the whole job on comm. Returns TRAIN_EXIT_OK, TRAIN_EXIT_FAIL (message printed on stderr) or
 * TRAIN_EXIT_PREEMPTED (a checkpoint was written after a SIGTERM or SIGUSR1). */
int train_run(const train_config *cfg, cohort_comm *comm);

/* ---- train_cuda.c: --device cuda ----
 * The CPU model, optimizer and sampler stay the job's record (checkpoints, hashes, the schedule); the GPU holds the
 * working copy. Each function returns 0, or -1 after printing one line naming the rank and what failed. */

/* Loads the plugin, builds the net from the job's model and optimizer and moves parameters, optimizer state, data,
 * the schedule and the epoch's order to the GPU. After setup and after a resume. */
int train_cuda_start(train_job *job);
/* Trains from job->step to job->stop_step: the same events as the CPU loop (progress, evaluation and checkpoint at
 * each epoch's end, --checkpoint-every), with the loss read from the GPU only where it is reported. */
int train_cuda_loop(train_job *job, train_progress *progress, train_metrics *metrics, double t_start,
                    int64_t *last_eval, int64_t *last_ckpt);
/* Test accuracy on the GPU (the same shards and sum as the CPU evaluation). */
int train_cuda_evaluate(train_job *job);
/* How many test images an evaluation scores: --eval-images capped at the test set (0: evaluation is skipped). */
size_t train_eval_images(const train_job *job);
/* Copies the GPU's parameters and optimizer state into the CPU model and optimizer (before a checkpoint or a hash). */
int train_cuda_pull(train_job *job);
void train_cuda_stop(train_job *job);
/* The line fmnist-train states at start on the GPU: the device, the libraries, the gradient path. */
void train_cuda_describe(train_job *job, char *buf, size_t len);

/* kernels.c: with the reference kernels, restarts the program (execv) with OPENBLAS_CORETYPE set when OpenBLAS chose
 * generic kernels on a CPU that runs better ones and nobody pinned a core type; returns when there is nothing to do. */
void train_kernels_choose(const train_config *cfg, char **argv);
/* The one line fmnist-train states at start: which kernels run, and who chose them. */
void train_kernels_describe(const train_config *cfg, char *buf, size_t len);

/* ---- state.c ---- */

/* Rank 0 writes the job's state to cfg->checkpoint atomically. Other ranks return 0 at once. */
int train_state_save(train_job *job);
/*
 * Every rank reads cfg->checkpoint and restores the job (parameters, optimizer, sampler through the loader, RNG,
 * step, epoch, loss accumulators). Returns 0, or -1 after printing what is wrong with the file (and where).
 */
int train_state_load(train_job *job);

#endif /* FMNIST_TRAIN_H */
