/*
 * state.c: fmnist-train's checkpoints (the file format is docs/checkpoint-format.md; this is what goes in it).
 *
 * Entries: every parameter ("param.<name>") and buffer ("buffer.<name>") with its shape; every optimizer state
 * array ("optim.<name>") and the optimizer's step count; the sampler's state (epoch and cursor of the next batch);
 * the model's RNG; the job's step, epoch, loss accumulators and last test accuracy; and the settings the schedule
 * and the data order depend on ("config.*"), so that resuming with other settings is refused by name instead of
 * silently becoming a different run.
 *
 * Rank 0 writes (all replicas are identical); every rank reads the same file, so no broadcast is needed and a bad
 * file is reported by each rank in the same words.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/ckpt.h"
#include "train.h"

static int fail(const train_job *job, const char *what, cohort_status st) {
  fprintf(stderr, "fmnist-train: rank %d: %s (checkpoint %s): %s: %s\n", job->rank, what, job->cfg->checkpoint,
          cohort_strerror(st), cohort_last_error());
  return -1;
}

#define TRY(what, expr)                                                                                                \
  do {                                                                                                                 \
    cohort_status try_status__ = (expr);                                                                               \
    if (try_status__ != COHORT_OK) {                                                                                   \
      rc = fail(job, what, try_status__);                                                                              \
      goto out;                                                                                                        \
    }                                                                                                                  \
  } while (0)

/* The settings a resumed run must share with the run that wrote the checkpoint. */
typedef struct config_entry {
  const char *name;
  const char *flag;
  double value;
  int optional;     /* absent from checkpoints written before the setting was stored: then if_absent */
  double if_absent; /* --lars: those trained with plain SGD (0); --accumulate: without accumulation (1) */
} config_entry;

enum { MAX_CONFIG_ENTRIES = 11 };

static int config_entries(const train_job *job, config_entry out[MAX_CONFIG_ENTRIES]) {
  const train_config *cfg = job->cfg;
  int n = 0;
  out[n++] = (config_entry){"config.batch", "--batch", cfg->batch, 0, 0};
  out[n++] = (config_entry){"config.world", "number of ranks", job->world, 0, 0};
  out[n++] = (config_entry){"config.epochs", "--epochs", cfg->epochs, 0, 0};
  out[n++] = (config_entry){"config.lr", "--lr", cfg->lr, 0, 0};
  out[n++] = (config_entry){"config.momentum", "--momentum", cfg->momentum, 0, 0};
  out[n++] = (config_entry){"config.weight_decay", "--weight-decay", cfg->weight_decay, 0, 0};
  out[n++] = (config_entry){"config.warmup", "--warmup", cfg->warmup_steps, 0, 0};
  out[n++] = (config_entry){"config.seed", "--seed", (double)cfg->seed, 0, 0};
  out[n++] = (config_entry){"config.lars", "--lars", cfg->lars, 1, 0};
  out[n++] = (config_entry){"config.lars_clip", "--lars-mode", cfg->lars_clip, 1, 0};
  /* The micro-batches per step: the step's global batch (so the rate, the steps per epoch and what a step's
   * number means in samples) depend on it, so another value would skip or repeat part of the epoch. */
  out[n++] = (config_entry){"config.accumulate", "--accumulate", cfg->accumulate, 1, 1};
  return n;
}

/* A setting's value as its flag takes it, for the refusal: the defaults that are stored as a sentinel say so. */
static const char *shown(const config_entry *e, double v, char *buf, size_t len) {
  if (!strcmp(e->name, "config.lars_clip"))
    snprintf(buf, len, "%s", v != 0 ? "larc" : "lars");
  else if (!strcmp(e->name, "config.warmup") && v < 0)
    snprintf(buf, len, "unset (a fifth of an epoch, at most 200 steps)");
  else
    snprintf(buf, len, "%.9g", v);
  return buf;
}

static cohort_status add_f64(cohort_ckpt_writer *w, const char *name, double v) {
  return cohort_ckpt_add(w, name, COHORT_F64, 0, NULL, &v);
}

int train_state_save(train_job *job) {
  /* On the GPU the CPU model and optimizer are brought up to date first: the file is the same on either device. */
  if (job->gpu && train_cuda_pull(job) != 0) return -1;
  /* --zero 1: rank 0 collects every rank's shard first, so the file holds the unsharded optimizer's arrays and
   * resumes with or without --zero, at any world size. */
  if (job->cfg->zero) {
    cohort_status st = cohort_ddp_zero_gather_state(job->ddp, 0);
    if (st != COHORT_OK) return fail(job, "gathering the optimizer state (--zero 1)", st);
  }
  if (job->rank != 0) return 0;
  const train_config *cfg = job->cfg;
  cohort_ckpt_writer *w = NULL;
  int rc = 0;
  char name[COHORT_CKPT_MAX_NAME + 1];
  TRY("starting a checkpoint", cohort_ckpt_writer_create(job->signature, &w));
  for (int i = 0; i < cohort_model_num_params(job->model); i++) {
    const cohort_param *p = cohort_model_param(job->model, i);
    snprintf(name, sizeof name, "param.%s", p->name);
    TRY("adding a parameter to the checkpoint", cohort_ckpt_add_f32(w, name, p->ndim, p->shape, p->value));
  }
  for (int i = 0; i < cohort_model_num_buffers(job->model); i++) {
    const cohort_param *p = cohort_model_buffer(job->model, i);
    snprintf(name, sizeof name, "buffer.%s", p->name);
    TRY("adding a buffer to the checkpoint", cohort_ckpt_add_f32(w, name, p->ndim, p->shape, p->value));
  }
  for (int i = 0; i < cohort_optim_num_states(job->optim); i++) {
    const cohort_named_array *a = cohort_optim_state(job->optim, i);
    int64_t dims[1] = {(int64_t)a->count};
    snprintf(name, sizeof name, "optim.%s", a->name);
    TRY("adding optimizer state to the checkpoint", cohort_ckpt_add_f32(w, name, 1, dims, a->data));
  }
  TRY("adding the optimizer's steps", cohort_ckpt_add_i64(w, "optim.steps", cohort_optim_steps(job->optim)));
  cohort_sampler_state ss;
  cohort_sampler_get_state(job->sampler, &ss);
  TRY("adding the sampler state", cohort_ckpt_add_bytes(w, "sampler", &ss, sizeof ss));
  TRY("adding the RNG state", cohort_ckpt_add_bytes(w, "rng.model", cohort_model_rng(job->model), sizeof(cohort_rng)));
  TRY("adding the step", cohort_ckpt_add_i64(w, "step", job->step));
  TRY("adding the epoch", cohort_ckpt_add_i64(w, "epoch", job->epoch));
  TRY("adding the loss", add_f64(w, "job.loss_sum", job->loss_sum));
  TRY("adding the loss", cohort_ckpt_add_i64(w, "job.loss_steps", job->loss_steps));
  TRY("adding the loss", add_f64(w, "job.last_loss", job->last_loss));
  TRY("adding the accuracy", add_f64(w, "job.test_acc", job->test_acc));
  config_entry ce[MAX_CONFIG_ENTRIES];
  int nce = config_entries(job, ce);
  for (int i = 0; i < nce; i++)
    TRY("adding the settings", add_f64(w, ce[i].name, ce[i].value));
  TRY("saving the checkpoint", cohort_ckpt_writer_save(w, cfg->checkpoint));
out:
  cohort_ckpt_writer_destroy(w);
  return rc;
}

static cohort_status get_f64(const cohort_ckpt *ck, const char *name, double *out) {
  cohort_ckpt_entry e;
  cohort_status st = cohort_ckpt_find(ck, name, &e);
  if (st != COHORT_OK) return st;
  if (e.dtype != COHORT_F64 || e.count != 1) return COHORT_ERR_INVALID;
  memcpy(out, e.data, sizeof *out);
  return COHORT_OK;
}

/*
 * A checkpoint written at world size W1, resumed at W2 (an elastic job whose nodes changed). Within an epoch the
 * sampler hands rank r the positions r, r + W, r + 2W, ... of one padded permutation, so W1 ranks with cursor c have
 * consumed exactly its first c x W1 positions, whatever W1 was. The new ranks go on from there, rounded down to a
 * whole global batch of the new world (so that the step count stays whole; at most one global batch is seen twice,
 * none is skipped). The step becomes the new world's step at that point, so that the schedule (warmup, cosine over
 * the planned length, which is counted in the new world's steps) continues from the same fraction of the run, and
 * the peak rate follows the new global batch by the linear scaling rule lr_at already applies. The optimizer state
 * (momentum) and the model are taken over as they are.
 */
static int rescale_position(train_job *job, int saved_world, cohort_sampler_state *ss) {
  const train_config *cfg = job->cfg;
  const int64_t per_rank_step = (int64_t)cfg->batch * cfg->accumulate;
  const int64_t global_batch = per_rank_step * job->world;
  if (saved_world < 1 || ss->world_size != saved_world) {
    fprintf(stderr,
            "fmnist-train: rank %d: cannot resume from %s: its sampler was saved for %llu ranks, its settings "
            "say %d\n",
            job->rank, cfg->checkpoint, (unsigned long long)ss->world_size, saved_world);
    return -1;
  }
  int64_t consumed = (int64_t)ss->cursor * saved_world;
  int64_t steps_in = consumed / global_batch;
  int64_t cursor = steps_in * per_rank_step;
  int64_t per_rank = (int64_t)cohort_sampler_num_samples(job->sampler);
  if (cursor > per_rank) cursor = per_rank;
  double lr_from = cfg->lr * (double)(per_rank_step * saved_world) / TRAIN_LR_REFERENCE_BATCH;
  double lr_to = cfg->lr * (double)global_batch / TRAIN_LR_REFERENCE_BATCH;
  ss->world_size = job->world;
  ss->cursor = (uint64_t)cursor;
  job->step = (int64_t)ss->epoch * job->steps_per_epoch + steps_in;
  if (job->rank == 0) {
    printf("world size changed %d -> %d: lr rescaled %.6g -> %.6g, resuming epoch %llu at sample %lld\n", saved_world,
           job->world, lr_from, lr_to, (unsigned long long)ss->epoch + 1, (long long)(steps_in * global_batch));
    fflush(stdout);
  }
  return 0;
}

int train_state_load(train_job *job) {
  const train_config *cfg = job->cfg;
  const char *path = cfg->checkpoint;
  cohort_ckpt *ck = NULL;
  int rc = 0;
  char name[COHORT_CKPT_MAX_NAME + 1];
  cohort_status st = cohort_ckpt_load(path, job->signature, &ck);
  if (st != COHORT_OK) {
    fprintf(stderr, "fmnist-train: rank %d: cannot resume: %s\n", job->rank, cohort_last_error());
    return -1;
  }

  /* Settings first: a checkpoint of another configuration is refused before anything is overwritten. */
  config_entry ce[MAX_CONFIG_ENTRIES];
  int nce = config_entries(job, ce);
  double saved_world = job->world;
  for (int i = 0; i < nce; i++) {
    double v;
    cohort_ckpt_entry absent;
    if (ce[i].optional && cohort_ckpt_find(ck, ce[i].name, &absent) != COHORT_OK)
      v = ce[i].if_absent;
    else if (get_f64(ck, ce[i].name, &v) != COHORT_OK) {
      fprintf(stderr, "fmnist-train: rank %d: cannot resume from %s: it has no valid f64 entry '%s'\n", job->rank, path,
              ce[i].name);
      rc = -1;
      goto out;
    }
    /* Another world size is an elastic job that lost or gained nodes: resumed below, with the rate rescaled. */
    if (!strcmp(ce[i].name, "config.world") && v >= 1 && v == floor(v)) {
      saved_world = v;
      continue;
    }
    if (v != ce[i].value) {
      char then[80], now[80];
      fprintf(stderr,
              "fmnist-train: rank %d: cannot resume from %s: it was written with %s %s, this run has %s "
              "(resume with the same settings)\n",
              job->rank, path, ce[i].flag, shown(&ce[i], v, then, sizeof then),
              shown(&ce[i], ce[i].value, now, sizeof now));
      rc = -1;
      goto out;
    }
  }

  for (int i = 0; i < cohort_model_num_params(job->model); i++) {
    const cohort_param *p = cohort_model_param(job->model, i);
    snprintf(name, sizeof name, "param.%s", p->name);
    TRY("reading a parameter", cohort_ckpt_get_f32(ck, name, p->ndim, p->shape, p->value));
  }
  for (int i = 0; i < cohort_model_num_buffers(job->model); i++) {
    const cohort_param *p = cohort_model_buffer(job->model, i);
    snprintf(name, sizeof name, "buffer.%s", p->name);
    TRY("reading a buffer", cohort_ckpt_get_f32(ck, name, p->ndim, p->shape, p->value));
  }
  for (int i = 0; i < cohort_optim_num_states(job->optim); i++) {
    const cohort_named_array *a = cohort_optim_state(job->optim, i);
    int64_t dims[1] = {(int64_t)a->count};
    snprintf(name, sizeof name, "optim.%s", a->name);
    TRY("reading optimizer state", cohort_ckpt_get_f32(ck, name, 1, dims, a->data));
  }
  int64_t v64;
  TRY("reading the optimizer's steps", cohort_ckpt_get_i64(ck, "optim.steps", &v64));
  cohort_optim_set_steps(job->optim, v64);
  TRY("reading the RNG state",
      cohort_ckpt_get_bytes(ck, "rng.model", cohort_model_rng(job->model), sizeof(cohort_rng)));
  TRY("reading the step", cohort_ckpt_get_i64(ck, "step", &job->step));
  TRY("reading the epoch", cohort_ckpt_get_i64(ck, "epoch", &v64));
  job->epoch = (int)v64;
  TRY("reading the loss", cohort_ckpt_get_i64(ck, "job.loss_steps", &job->loss_steps));
  if (get_f64(ck, "job.loss_sum", &job->loss_sum) != COHORT_OK ||
      get_f64(ck, "job.last_loss", &job->last_loss) != COHORT_OK ||
      get_f64(ck, "job.test_acc", &job->test_acc) != COHORT_OK) {
    fprintf(stderr, "fmnist-train: rank %d: cannot resume from %s: the job.* entries are missing or malformed\n",
            job->rank, path);
    rc = -1;
    goto out;
  }
  cohort_sampler_state ss;
  TRY("reading the sampler state", cohort_ckpt_get_bytes(ck, "sampler", &ss, sizeof ss));
  if ((int)saved_world != job->world && rescale_position(job, (int)saved_world, &ss) != 0) {
    rc = -1;
    goto out;
  }
  /* The sampler lives with this rank: the state rank 0 saved applies to every rank once the rank is its own. */
  TRY("restoring the sampler",
      job->loader ? cohort_loader_restore(job->loader, &ss) : cohort_sampler_restore(job->sampler, &ss));
  if (job->step < 0 || job->epoch < 0 || (uint64_t)job->epoch != ss.epoch) {
    fprintf(stderr,
            "fmnist-train: rank %d: cannot resume from %s: step %lld / epoch %d disagree with the sampler's "
            "epoch %llu\n",
            job->rank, path, (long long)job->step, job->epoch, (unsigned long long)ss.epoch);
    rc = -1;
    goto out;
  }
out:
  cohort_ckpt_destroy(ck);
  return rc;
}
