/* train.c: the job itself: data, model, the data-parallel step, evaluation, and the end-of-run report. */
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A failed cohort call: one line naming the rank, what was being done and the library's detail. */
static int fail(const train_job *job, const char *what, cohort_status st) {
  fprintf(stderr, "fmnist-train: rank %d: %s: %s: %s\n", job->rank, what, cohort_strerror(st), cohort_last_error());
  return -1;
}

#define TRY(what, expr)                                                                                                \
  do {                                                                                                                 \
    cohort_status try_status__ = (expr);                                                                               \
    if (try_status__ != COHORT_OK) return fail(job, what, try_status__);                                               \
  } while (0)

/*
 * The rate for optimizer step `step`: the peak is --lr scaled linearly with the global batch (Goyal et al.), reached
 * by a linear warmup and followed by a cosine decay to 0 over the planned run. Only the global batch enters, not
 * the world size, so 1 rank with batch 2B and 2 ranks with batch B take identical steps.
 */
static float lr_at(const train_job *job, int64_t step) {
  const train_config *cfg = job->cfg;
  const double global_batch = (double)cfg->batch * job->world * cfg->accumulate;
  cohort_lr_schedule s = {0};
  s.base_lr = (float)(cfg->lr * global_batch / TRAIN_LR_REFERENCE_BATCH);
  s.world_size = 1;
  s.decay = COHORT_LR_COSINE;
  s.total_steps = job->total_steps;
  s.min_lr = 0.0f;
  double rate = cohort_lr_schedule_at(&s, step);
  int64_t warmup = cfg->warmup_steps >= 0 ? cfg->warmup_steps : job->steps_per_epoch / 5;
  if (cfg->warmup_steps < 0 && warmup > 200) warmup = 200;
  if (step < warmup) rate *= (double)(step + 1) / (double)(warmup + 1);
  return (float)rate;
}

float train_lr_at(const train_job *job, int64_t step) { return lr_at(job, step); }

cohort_status train_load_fmnist(const train_config *cfg, const char *split, cohort_dataset **out) {
  /* Normalized like torchvision's Normalize(mean, std): it lets one learning rate suit both models. */
  return cohort_dataset_load_fmnist(cfg->data_dir, split, COHORT_FMNIST_MEAN, COHORT_FMNIST_STD, out);
}

static int setup(train_job *job) {
  const train_config *cfg = job->cfg;
  TRY("setting BLAS threads", cohort_nn_set_threads(cfg->threads));
  if (cfg->shared_train_set) { /* --replicas: one read-only copy for every replica of the process */
    job->train_set = cfg->shared_train_set;
    job->test_set = cfg->shared_test_set;
  } else {
    TRY("loading the training set", train_load_fmnist(cfg, "train", &job->train_set));
    TRY("loading the test set", train_load_fmnist(cfg, "t10k", &job->test_set));
  }

  if (cfg->model == TRAIN_MODEL_CNN)
    TRY("building the CNN", cohort_model_create_cnn(cfg->seed, &job->model));
  else
    TRY("building the MLP", cohort_model_create_mlp(cfg->seed, 784, 256, 10, &job->model));

  if (cfg->device == TRAIN_DEVICE_CPU) TRY("choosing the kernels", cohort_model_set_kernels(job->model, cfg->kernels));

  char sig[COHORT_HASH_HEX_LEN];
  TRY("hashing the model's layout", cohort_model_signature(job->model, sig));
  snprintf(job->signature, sizeof job->signature, "fmnist-train/%s/%s", train_model_name(cfg->model), sig);

  job->nparams = cohort_model_param_count(job->model);
  /* On the GPU the gradients are averaged by one allreduce after backward (train_cuda.c): the fused path's setup. */
  if (cfg->sync == TRAIN_SYNC_DDP && cfg->device == TRAIN_DEVICE_CPU) {
    /* The engine broadcasts rank 0's weights, checks that every rank built the same model, and from then on averages
     * the gradients bucket by bucket while backward runs. */
    cohort_ddp_options opt;
    cohort_ddp_options_init(&opt);
    opt.bucket_bytes = (size_t)(cfg->bucket_mb * 1048576.0);
    opt.compression = (cohort_ddp_compression)cfg->compress;
    opt.uneven_inputs = cfg->uneven;
    opt.zero_stage = cfg->zero;
    TRY("starting the DDP engine", cohort_ddp_create_model(job->comm, job->model, &opt, &job->ddp));
    /* --metrics writes them; --profile gathers them for the slowest rank's line (every rank alike). */
    if (cfg->metrics || cfg->profile) TRY("opening --metrics", cohort_ddp_metrics_open(job->ddp, cfg->metrics));
  } else {
    /* Every gradient lives in one contiguous buffer, in parameter order, followed by one float for the step's loss:
     * a single allreduce then averages the gradients and the loss together. */
    job->grads = calloc(job->nparams + 1, sizeof(float));
    if (!job->grads) {
      fprintf(stderr, "fmnist-train: rank %d: out of memory for %zu gradients\n", job->rank, job->nparams);
      return -1;
    }
    size_t off = 0;
    for (int i = 0; i < cohort_model_num_params(job->model); i++) {
      const cohort_param *p = cohort_model_param(job->model, i);
      TRY("placing the gradients", cohort_model_set_grad_buffer(job->model, i, job->grads + off));
      off += p->numel;
    }
    /* Every replica starts from rank 0's weights, whatever each one computed from the seed. */
    TRY("broadcasting the initial parameters",
        cohort_broadcast(job->comm, cohort_model_param_data(job->model), job->nparams, COHORT_F32, 0));
    for (int i = 0; i < cohort_model_num_buffers(job->model); i++) {
      const cohort_param *b = cohort_model_buffer(job->model, i);
      TRY("broadcasting the buffers", cohort_broadcast(job->comm, b->value, b->numel, COHORT_F32, 0));
    }
  }

  cohort_sgd_config sgd = {0};
  sgd.lr = lr_at(job, 0);
  sgd.momentum = (float)cfg->momentum;
  sgd.weight_decay = (float)cfg->weight_decay;
  sgd.trust_coefficient = (float)cfg->lars;
  sgd.trust_clip = cfg->lars_clip;
  TRY("creating the optimizer", cohort_optim_sgd_create(job->model, &sgd, &job->optim));

  TRY("creating the sampler", cohort_sampler_create(cohort_dataset_size(job->train_set), job->world, job->rank, 1,
                                                    cfg->seed, 0, &job->sampler));
  size_t per_rank = cohort_sampler_num_samples(job->sampler);
  const int64_t batches = (int64_t)((per_rank + (size_t)cfg->batch - 1) / (size_t)cfg->batch);
  job->steps_per_epoch = (batches + cfg->accumulate - 1) / cfg->accumulate;
  job->total_steps = job->steps_per_epoch * cfg->epochs;
  job->stop_step = cfg->max_steps >= 0 && cfg->max_steps < job->total_steps ? cfg->max_steps : job->total_steps;
  /* The GPU gathers its batches itself from the sampler's order: no loader (whose thread would share the sampler). */
  if (cfg->device == TRAIN_DEVICE_CPU)
    TRY("creating the loader", cohort_loader_create(job->train_set, job->sampler, (size_t)cfg->batch, 0, &job->loader));
  job->test_acc = -1.0;
  job->last_loss = NAN;
  return 0;
}

size_t train_eval_images(const train_job *job) {
  const size_t all = cohort_dataset_size(job->test_set);
  return job->cfg->eval_images >= 0 && (size_t)job->cfg->eval_images < all ? (size_t)job->cfg->eval_images : all;
}

/* Test accuracy: each rank classifies its contiguous shard of the (first --eval-images) test images, then the counts
 * are summed. Every rank has the same flags, so all skip together when there is nothing to score. */
static int evaluate(train_job *job) {
  if (job->gpu) return train_cuda_evaluate(job);
  const train_config *cfg = job->cfg;
  const size_t n = train_eval_images(job);
  if (n == 0) {
    job->test_acc = NAN;
    return 0;
  }
  const size_t lo = n * (size_t)job->rank / (size_t)job->world, hi = n * (size_t)(job->rank + 1) / (size_t)job->world;
  const size_t sample = cohort_dataset_sample_floats(job->test_set);
  int ch, h, w;
  cohort_dataset_shape(job->test_set, &ch, &h, &w);
  int64_t counts[2] = {0, (int64_t)(hi - lo)}; /* correct, seen */
  cohort_model_set_training(job->model, 0);
  for (size_t at = lo; at < hi; at += (size_t)cfg->eval_batch) {
    size_t m = hi - at < (size_t)cfg->eval_batch ? hi - at : (size_t)cfg->eval_batch;
    cohort_tensor x;
    int64_t shape[4] = {(int64_t)m, ch, h, w};
    const cohort_tensor *logits;
    float loss;
    int correct = 0;
    TRY("wrapping a test batch",
        cohort_tensor_wrap(&x, (float *)cohort_dataset_images(job->test_set) + at * sample, 4, shape));
    TRY("evaluating", cohort_model_forward(job->model, &x, &logits));
    TRY("scoring", cohort_softmax_xent(logits, cohort_dataset_labels(job->test_set) + at, &loss, NULL, &correct));
    counts[0] += correct;
  }
  cohort_model_set_training(job->model, 1);
  TRY("summing the test counts", cohort_allreduce(job->comm, counts, counts, 2, COHORT_I64, COHORT_SUM));
  job->test_acc = counts[1] > 0 ? (double)counts[0] / (double)counts[1] : 0.0;
  return 0;
}

/* Forward and backward of one micro-batch, its loss gradient scaled by `scale` (1/K when K micro-batches make a
 * step); *loss gets the micro-batch's mean loss. */
static int forward_backward(train_job *job, const cohort_batch *b, float *dlogits, float scale, float *loss) {
  cohort_tensor x;
  int64_t shape[4] = {(int64_t)b->size, b->channels, b->height, b->width};
  const cohort_tensor *logits;
  if (job->ddp) TRY("preparing the step", cohort_ddp_prepare(job->ddp));
  TRY("wrapping a batch", cohort_tensor_wrap(&x, (float *)b->images, 4, shape));
  TRY("forward", cohort_model_forward(job->model, &x, &logits));
  TRY("loss", cohort_softmax_xent(logits, b->labels, loss, dlogits, NULL));
  if (scale != 1.0f)
    for (size_t k = 0; k < b->size * 10; k++)
      dlogits[k] *= scale;
  cohort_ddp_span_begin(job->ddp, COHORT_SPAN_BACKWARD);
  TRY("backward", cohort_model_backward(job->model, dlogits));
  return 0;
}

/*
 * One optimizer step starting with batch b: K = --accumulate micro-batches (fewer at the end of an epoch), each
 * adding its share of the gradient; only the last one synchronizes. With the engine the buckets' averages run
 * during that last backward and the loss's average rides along on the progress thread; with --sync fused one
 * allreduce after backward averages the gradients and the loss together.
 */
static atomic_int preempt_sig;
static sigset_t preempt_set;

static void *preempt_thread(void *arg) {
  (void)arg;
  for (;;) {
    int sig = 0;
    if (sigwait(&preempt_set, &sig) != 0) continue;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&preempt_sig, &expected, sig)) {
      /* Asked twice: no checkpoint then, as for any process that gets a second SIGTERM. */
      signal(sig, SIG_DFL);
      pthread_sigmask(SIG_UNBLOCK, &preempt_set, NULL);
      raise(sig);
    }
  }
  return NULL;
}

int train_preempt_watch(const train_config *cfg) {
  if (!cfg->checkpoint || cfg->sync != TRAIN_SYNC_DDP || cfg->uneven) return 0;
  sigemptyset(&preempt_set);
  sigaddset(&preempt_set, SIGTERM);
  sigaddset(&preempt_set, SIGUSR1);
  pthread_t t;
  if (pthread_sigmask(SIG_BLOCK, &preempt_set, NULL) != 0) return 0;
  if (pthread_create(&t, NULL, preempt_thread, NULL) != 0) {
    pthread_sigmask(SIG_UNBLOCK, &preempt_set, NULL);
    return 0;
  }
  pthread_detach(t);
  return 1;
}

int train_preempt_signal(void) { return atomic_load(&preempt_sig); }

static int step(train_job *job, const cohort_batch *first, float *dlogits, double *global_loss) {
  const train_config *cfg = job->cfg;
  int64_t left = (int64_t)cohort_loader_batches_left(job->loader);
  const int micro = cfg->accumulate < 1 + left ? cfg->accumulate : (int)(1 + left);
  const float scale = 1.0f / (float)micro;
  double t0 = now_s(), t_fetch = 0;
  float loss_sum = 0;
  int64_t images = 0; /* this rank's */
  cohort_batch b = *first;
  cohort_model_zero_grad(job->model);
  for (int m = 0; m < micro; m++) {
    if (m > 0) {
      double tf = now_s();
      TRY("loading a batch", cohort_loader_next(job->loader, &b));
      t_fetch += now_s() - tf;
    }
    float loss;
    if (job->ddp) cohort_ddp_set_sync(job->ddp, m == micro - 1);
    if (forward_backward(job, &b, dlogits, scale, &loss) != 0) return -1;
    loss_sum += loss * scale;
    images += b.size;
  }
  double t1 = now_s();
  /* [loss, stop]: the loss to report, and whether any rank was asked to stop (preemption), agreed by all. */
  int own_signal = train_preempt_signal(); /* this rank's vote, kept: a SIGTERM from the launcher may follow */
  float avg_loss[2] = {loss_sum, own_signal ? 1.0f : 0.0f};
  cohort_work *loss_work = NULL;
  if (job->ddp) {
    /* This rank's values of the step for --metrics (rank 0's are written): they go with the step that finish ends. */
    double since = job->last_step_end > 0 ? t1 - job->last_step_end : t1 - t0;
    cohort_ddp_metric(job->ddp, "loss", loss_sum);
    cohort_ddp_metric(job->ddp, "lr", lr_at(job, job->step));
    cohort_ddp_metric(job->ddp, "img_per_s", since > 0 ? (double)images * job->world / since : 0);
    TRY("averaging the gradients", cohort_ddp_finish(job->ddp));
    job->train_images += images * cohort_ddp_active_ranks(job->ddp); /* --uneven: the ranks that trained */
    /* The loss is only reported: average it on the progress thread while the optimizer steps, behind the
     * gradients rather than ahead of them. Not with --uneven: a joined rank shadows the engine's collectives only,
     * so the loss reported is rank 0's own. */
    if (!job->cfg->uneven)
      TRY("averaging the loss",
          cohort_iallreduce(job->comm, avg_loss, avg_loss, 2, COHORT_F32, COHORT_AVG, &loss_work));
  } else {
    /* Every rank's batch has the same size (the sampler pads), so the mean of the ranks' means is the global mean. */
    job->grads[job->nparams] = avg_loss[0];
    TRY("averaging the gradients",
        cohort_allreduce(job->comm, job->grads, job->grads, job->nparams + 1, COHORT_F32, COHORT_AVG));
    avg_loss[0] = job->grads[job->nparams];
    job->train_images += images * job->world;
  }
  double t2 = now_s();
  cohort_ddp_span_begin(job->ddp, COHORT_SPAN_OPTIMIZER);
  cohort_optim_set_lr(job->optim, lr_at(job, job->step));
  cohort_status st = job->cfg->zero ? cohort_ddp_zero_step(job->ddp) : cohort_optim_step(job->optim);
  cohort_ddp_span_end(job->ddp, COHORT_SPAN_OPTIMIZER);
  cohort_status lst = loss_work ? cohort_work_wait(loss_work) : COHORT_OK;
  cohort_work_free(loss_work);
  if (st != COHORT_OK) return fail(job, "optimizer step", st);
  if (lst != COHORT_OK) return fail(job, "averaging the loss", lst);
  *global_loss = avg_loss[0];
  if (avg_loss[1] > 0) {
    job->preempted = 1;
    job->preempt_signal = own_signal;
  }
  /* A non-finite loss means non-finite gradients on every rank (they were averaged): every rank stops here. */
  if (!isfinite(*global_loss)) {
    fprintf(stderr, "fmnist-train: rank %d: the loss is %g at step %lld: lower --lr\n", job->rank, *global_loss,
            (long long)job->step + 1);
    return -1;
  }
  job->step++;
  job->t_data += t_fetch;
  job->t_compute += t1 - t0 - t_fetch;
  job->t_comm += t2 - t1;
  job->last_step_end = now_s();
  job->t_update += job->last_step_end - t2;
  job->steps_run++;
  return 0;
}

static int dump_params(train_job *job) {
  const char *path = job->cfg->dump_params;
  FILE *f = fopen(path, "wb");
  size_t n = job->nparams;
  if (!f) {
    fprintf(stderr, "fmnist-train: cannot write --dump-params %s: %s\n", path, strerror(errno));
    return -1;
  }
  int ok = fwrite(cohort_model_param_data(job->model), sizeof(float), n, f) == n;
  int saved_errno = errno;
  if (fclose(f) != 0 && ok) {
    ok = 0;
    saved_errno = errno;
  }
  if (!ok) {
    fprintf(stderr, "fmnist-train: cannot write --dump-params %s: %s\n", path, strerror(saved_errno));
    return -1;
  }
  return 0;
}

/* The replicas must agree bit for bit; a divergence is a bug worth failing loudly over. */
static int check_replicas(train_job *job, const char *hex) {
  unsigned char *all = calloc((size_t)job->world, 64);
  if (!all) return -1;
  cohort_status st = cohort_allgather(job->comm, hex, all, 64, COHORT_U8);
  if (st != COHORT_OK) {
    free(all);
    return fail(job, "comparing the replicas' parameters", st);
  }
  for (int r = 1; r < job->world; r++) {
    if (memcmp(all, all + (size_t)r * 64, 64) != 0) {
      fprintf(stderr, "fmnist-train: rank %d: rank %d's parameters differ from rank 0's (sha256 %.64s vs %.64s)\n",
              job->rank, r, (const char *)all + (size_t)r * 64, (const char *)all);
      free(all);
      return -1;
    }
  }
  free(all);
  return 0;
}

/* Every rank learns whether any failed `what`, and the first that did. A rank that did not fail names it and lets it
 * exit first (a launcher takes the first rank to exit non-zero for the root cause, and its report should show the
 * failing rank's own words, not this rank's "rank 0 failed ..."). */
static int agree(train_job *job, int ok, const char *what) {
  int32_t first = ok ? INT32_MAX : job->rank;
  cohort_status st = cohort_allreduce(job->comm, &first, &first, 1, COHORT_I32, COHORT_MIN);
  if (st != COHORT_OK) return fail(job, what, st);
  if (first == INT32_MAX) return 0;
  if (ok) {
    fprintf(stderr, "fmnist-train: rank %d: rank %d failed %s (its own output says why)\n", job->rank, (int)first,
            what);
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
  }
  return -1;
}

/* The fault tests' hook (tests/fault/test_cluster_restart.sh): COHORT_TEST_KILL_AT_STEP=N makes rank
 * COHORT_TEST_KILL_RANK (default: the last) SIGKILL itself after step N, in generation 0 only
 * (COHORT_RESTART_COUNT unset or 0), so that a restarted job gets past it. -1: no kill. */
static int64_t test_kill_step(const train_job *job) {
  const char *at = getenv("COHORT_TEST_KILL_AT_STEP");
  const char *gen = getenv("COHORT_RESTART_COUNT");
  const char *who = getenv("COHORT_TEST_KILL_RANK");
  if (!at || (gen && strcmp(gen, "0") != 0)) return -1;
  int rank = who ? atoi(who) : job->world - 1;
  return rank == job->rank ? atoll(at) : -1;
}

/* --uneven: the steps of an epoch this rank trains: all of them on rank 0, fewer on each higher rank. */
static int64_t uneven_quota(const train_job *job) {
  return (job->steps_per_epoch * (job->world - job->rank) + job->world - 1) / job->world;
}

/* --uneven: the rest of this rank's epoch is not its to train; the loader moves to the epoch's end. */
static int skip_rest_of_epoch(train_job *job) {
  while (cohort_loader_batches_left(job->loader) > 0) {
    cohort_batch b;
    cohort_status st = cohort_loader_next(job->loader, &b);
    if (st != COHORT_OK) return fail(job, "skipping the rest of the epoch", st);
  }
  return 0;
}

/* --uneven: this rank is out of data for the epoch. It shadows the other ranks' steps until all are out, then every
 * rank holds the parameters and the step count of the one that trained longest, and the epoch ends together. */
static int join_others(train_job *job, train_progress *progress) {
  const int64_t mine = job->step;
  int source = cohort_ddp_join(job->ddp);
  if (source < 0) return fail(job, "joining the ranks still training", COHORT_ERR_REMOTE);
  TRY("taking the step count of the longest rank", cohort_broadcast(job->comm, &job->step, 1, COHORT_I64, source));
  int64_t shortest = 0;
  TRY("comparing the ranks' steps", cohort_allreduce(job->comm, &mine, &shortest, 1, COHORT_I64, COHORT_MIN));
  train_progress_note(progress,
                      "epoch %d: uneven shards: the shortest rank trained to step %lld, rank %d to step %lld; every "
                      "rank now holds rank %d's parameters",
                      job->epoch + 1, (long long)shortest, source, (long long)job->step, source);
  return 0;
}

/* Whether a file can be written at `path` the way it will be at the end of the run: into its directory, through a
 * temporary file (the checkpoint is saved that way, atomically), and not over a directory. Tried for real with a
 * scratch file rather than with access(), which says yes to root on anything and cannot see a read-only mount. A
 * path that fails here would otherwise fail after the training, losing it. */
static int check_output_path(const char *flag, const char *path) {
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fprintf(stderr, "fmnist-train: %s %s is a directory: give a file name\n", flag, path);
    return -1;
  }
  char copy[4096], scratch[4200];
  if (strlen(path) >= sizeof copy) {
    fprintf(stderr, "fmnist-train: %s: the path is longer than %zu characters\n", flag, sizeof copy - 1);
    return -1;
  }
  strcpy(copy, path);
  const char *dir = dirname(copy);
  snprintf(scratch, sizeof scratch, "%s/.fmnist-train-check-XXXXXX", dir);
  int fd = mkstemp(scratch);
  if (fd < 0) {
    fprintf(stderr, "fmnist-train: %s %s cannot be written: no file can be made in %s: %s (checked before training)\n",
            flag, path, dir, strerror(errno));
    return -1;
  }
  close(fd);
  unlink(scratch);
  return 0;
}

/* The files this run will write at its end, checked on rank 0 (the one that writes them) before any training. */
static int outputs_writable(const train_job *job) {
  const train_config *cfg = job->cfg;
  if (job->rank != 0) return 1;
  if (cfg->checkpoint && check_output_path("--checkpoint", cfg->checkpoint) != 0) return 0;
  if (cfg->dump_params && check_output_path("--dump-params", cfg->dump_params) != 0) return 0;
  return 1;
}

static int finish(train_job *job, train_progress *progress, train_metrics *metrics, double t_start, int64_t last_eval,
                  int64_t last_ckpt);

static int run(train_job *job, train_progress **progress_out, train_metrics **metrics_out) {
  const train_config *cfg = job->cfg;
  if (setup(job) != 0) return -1;
  if (cfg->resume) {
    int ok = train_state_load(job) == 0;
    if (agree(job, ok, "loading the checkpoint") != 0) return -1;
  }
  /* After the load: the engine keeps this rank's range of the state just read (a checkpoint is always unsharded)
   * and frees the rest. */
  if (cfg->zero) {
    cohort_status st = cohort_ddp_zero_attach(job->ddp, job->optim);
    if (st != COHORT_OK) fail(job, "sharding the optimizer state (--zero 1)", st);
    if (agree(job, st == COHORT_OK, "sharding the optimizer state (--zero 1)") != 0) return -1;
  }
  if (cfg->device == TRAIN_DEVICE_CUDA && agree(job, train_cuda_start(job) == 0, "starting on the GPU") != 0) return -1;
  const int64_t global_batch = (int64_t)cfg->batch * job->world * cfg->accumulate;
  train_progress *progress =
      train_progress_create(job->rank == 0 && !cfg->quiet, cfg->log_every, job->stop_step, cfg->epochs, global_batch);
  *progress_out = progress;
  if (!progress) return -1;
  int csv_ok = job->rank != 0 || !cfg->csv || train_metrics_open(cfg->csv, cfg->resume, metrics_out) == 0;
  if (agree(job, csv_ok, "opening --csv") != 0) return -1;
  if (agree(job, outputs_writable(job), "checking the output paths") != 0) return -1;
  if (cfg->resume)
    train_progress_note(progress, "resumed from %s at step %lld (epoch %d)", cfg->checkpoint, (long long)job->step,
                        job->epoch + 1);
  char rule[48] = "SGD";
  if (cfg->lars > 0) snprintf(rule, sizeof rule, "SGD with %s %.3g", cfg->lars_clip ? "LARC" : "LARS", cfg->lars);
  train_progress_note(progress, "fmnist-train: %s, %d rank%s x batch %d, %lld steps (%lld per epoch), peak lr %.4g, %s",
                      train_model_name(cfg->model), job->world, job->world == 1 ? "" : "s", cfg->batch,
                      (long long)job->stop_step, (long long)job->steps_per_epoch,
                      cfg->lr * (double)global_batch / TRAIN_LR_REFERENCE_BATCH, rule);
  char kernels[1024];
  if (job->gpu)
    train_cuda_describe(job, kernels, sizeof kernels);
  else
    train_kernels_describe(cfg, kernels, sizeof kernels);
  train_progress_note(progress, "%s", kernels);

  /* --steps past the planned run is not a longer run: the schedule (warmup, cosine decay) is laid out over the
   * epochs, so the run ends with them. Say so now rather than stop early without a word. */
  if (job->rank == 0 && cfg->max_steps > job->total_steps)
    fprintf(stderr,
            "fmnist-train: --steps %lld is past the %lld steps of --epochs %d (%lld per epoch): the run stops at "
            "step %lld; raise --epochs to train longer\n",
            (long long)cfg->max_steps, (long long)job->total_steps, cfg->epochs, (long long)job->steps_per_epoch,
            (long long)job->total_steps);

  /* After a resume, possibly on another number of ranks (whose steps are counted in its own batches), the
   * checkpoint may already lie at or past where this run stops: say so rather than end silently at 0 img/s. */
  if (job->rank == 0 && cfg->resume && job->step >= job->stop_step)
    fprintf(stderr,
            "fmnist-train: nothing to train: the checkpoint is at step %lld (of %d rank%s x batch %d) and this run "
            "stops at step %lld (%s); raise %s to train on\n",
            (long long)job->step, job->world, job->world == 1 ? "" : "s", cfg->batch, (long long)job->stop_step,
            job->stop_step < job->total_steps ? "--steps" : "the end of --epochs",
            job->stop_step < job->total_steps ? "--steps" : "--epochs");
  if (job->gpu) {
    const double t_gpu = now_s();
    int64_t last_eval = -1, last_ckpt = -1;
    if (train_cuda_loop(job, progress, *metrics_out, t_gpu, &last_eval, &last_ckpt) != 0) return -1;
    return finish(job, progress, *metrics_out, t_gpu, last_eval, last_ckpt);
  }
  float *dlogits = malloc((size_t)cfg->batch * 10 * sizeof(float));
  if (!dlogits) {
    fprintf(stderr, "fmnist-train: rank %d: out of memory for the loss gradient\n", job->rank);
    return -1;
  }
  const double t_start = now_s();
  int64_t last_eval = -1, last_ckpt = -1;
  const int64_t kill_at = test_kill_step(job);
  int rc = 0;
  int64_t epoch_start = job->step;
  int trained_since_join = 0;
  while (job->step < job->stop_step) {
    cohort_status st = COHORT_OK;
    if (cfg->uneven && job->step - epoch_start >= uneven_quota(job)) {
      /* This rank's share of the epoch is done: on to the epoch's end, where it joins the others. */
      if ((rc = skip_rest_of_epoch(job)) != 0) break;
    } else {
      double t0 = now_s();
      cohort_batch b;
      st = cohort_loader_next(job->loader, &b);
      job->t_data += now_s() - t0;
      if (st != COHORT_OK) {
        rc = fail(job, "loading a batch", st);
        break;
      }
      if (b.size == 0) { /* only after a resume from a checkpoint taken right at the end of an epoch */
        job->epoch++;
        if ((st = cohort_loader_set_epoch(job->loader, (uint64_t)job->epoch)) != COHORT_OK) {
          rc = fail(job, "starting an epoch", st);
          break;
        }
        continue;
      }
      double loss;
      if ((rc = step(job, &b, dlogits, &loss)) != 0) break;
      job->train_seconds += now_s() - t0;
      job->loss_sum += loss;
      job->loss_steps++;
      train_progress_step(progress, job->step, job->epoch + 1, job->loss_sum / (double)job->loss_steps,
                          job->train_seconds > 0 ? (double)job->train_images / job->train_seconds : 0);
      if (job->step == kill_at) kill(getpid(), SIGKILL);
      trained_since_join = 1;
    }
    const double img_per_s = job->train_seconds > 0 ? (double)job->train_images / job->train_seconds : 0;

    if (cohort_loader_batches_left(job->loader) == 0) { /* the epoch is complete */
      if (cfg->uneven) {
        if ((rc = join_others(job, progress)) != 0) break;
        trained_since_join = 0;
      }
      epoch_start = job->step;
      if ((rc = evaluate(job)) != 0) break;
      last_eval = job->step;
      job->last_loss = job->loss_sum / (double)job->loss_steps;
      train_progress_eval(progress, job->step, job->epoch + 1, job->last_loss, job->test_acc, img_per_s,
                          now_s() - t_start);
      if ((rc = train_metrics_row(*metrics_out, job->epoch + 1, job->step, job->last_loss, job->test_acc, img_per_s,
                                  now_s() - t_start)) != 0)
        break;
      job->loss_sum = 0;
      job->loss_steps = 0;
      /* Move on before saving, so the checkpoint says "next: epoch e+1 from its start". */
      job->epoch++;
      if ((st = cohort_loader_set_epoch(job->loader, (uint64_t)job->epoch)) != COHORT_OK) {
        rc = fail(job, "starting an epoch", st);
        break;
      }
      if (cfg->checkpoint) {
        if ((rc = train_state_save(job)) != 0) break;
        last_ckpt = job->step;
      }
    }
    if (cfg->checkpoint_every && job->step % cfg->checkpoint_every == 0 && last_ckpt != job->step) {
      if ((rc = train_state_save(job)) != 0) break;
      last_ckpt = job->step;
    }
    if (job->preempted) {
      /* Every rank knows after the same step: save it, and stop (Slurm kills after KillWait, 30 s by default). */
      if (last_ckpt != job->step && (rc = train_state_save(job)) != 0) break;
      last_ckpt = job->step;
      if (job->rank == 0)
        fprintf(stderr,
                "fmnist-train: asked to stop (%s on %s) after step %lld: checkpoint %s written; --resume auto goes on "
                "from there\n",
                job->preempt_signal == SIGUSR1 ? "SIGUSR1"
                : job->preempt_signal          ? "SIGTERM"
                                               : "a signal",
                job->preempt_signal ? "this rank" : "another rank", (long long)job->step, cfg->checkpoint);
      free(dlogits);
      return TRAIN_EXIT_PREEMPTED;
    }
  }
  /* --steps may stop the ranks still training mid-epoch while the others wait in their join: they join too. */
  if (rc == 0 && cfg->uneven && trained_since_join) rc = join_others(job, progress);
  free(dlogits);
  if (rc != 0) return -1;
  return finish(job, progress, *metrics_out, t_start, last_eval, last_ckpt);
}

/* The end of a run, after its last step: a run that stops mid-epoch still reports a test accuracy and a loss for
 * what it did, and the last checkpoint is written. */
static int finish(train_job *job, train_progress *progress, train_metrics *metrics, double t_start, int64_t last_eval,
                  int64_t last_ckpt) {
  const train_config *cfg = job->cfg;
  if (last_eval != job->step) {
    if (evaluate(job) != 0) return -1;
    if (job->loss_steps > 0) job->last_loss = job->loss_sum / (double)job->loss_steps;
    double img_per_s = job->train_seconds > 0 ? (double)job->train_images / job->train_seconds : 0;
    train_progress_eval(progress, job->step, job->epoch + 1, job->last_loss, job->test_acc, img_per_s,
                        now_s() - t_start);
    if (train_metrics_row(metrics, job->epoch + 1, job->step, job->last_loss, job->test_acc, img_per_s,
                          now_s() - t_start) != 0)
      return -1;
  }
  if (cfg->checkpoint && last_ckpt != job->step && train_state_save(job) != 0) return -1;
  /* The CPU model is what the final line hashes and --dump-params writes. */
  if (job->gpu && train_cuda_pull(job) != 0) return -1;
  return 0;
}

int train_run(const train_config *cfg, cohort_comm *comm) {
  train_job job;
  memset(&job, 0, sizeof job);
  job.cfg = cfg;
  job.comm = comm;
  job.rank = cohort_rank(comm);
  job.world = cohort_size(comm);
  train_progress *progress = NULL;
  train_metrics *metrics = NULL;
  int r = run(&job, &progress, &metrics);
  int rc = r == 0 ? TRAIN_EXIT_OK : r == TRAIN_EXIT_PREEMPTED ? TRAIN_EXIT_PREEMPTED : TRAIN_EXIT_FAIL;

  if (rc == TRAIN_EXIT_OK) {
    char hex[COHORT_HASH_HEX_LEN];
    cohort_status st = cohort_model_hash(job.model, hex);
    if (st != COHORT_OK) {
      fail(&job, "hashing the parameters", st);
      rc = TRAIN_EXIT_FAIL;
    } else if (check_replicas(&job, hex) != 0)
      rc = TRAIN_EXIT_FAIL;
    else if (job.rank == 0 && cfg->dump_params && dump_params(&job) != 0)
      rc = TRAIN_EXIT_FAIL;
    else if (job.rank == 0) {
      train_progress_destroy(progress);
      progress = NULL;
      if (cfg->profile && job.steps_run > 0 && !job.gpu) { /* on the GPU: per layer, at the start (train_cuda.c) */
        double k = 1e3 / (double)job.steps_run;
        printf("profile: per step: data wait %.2f ms, forward+backward %.2f ms, allreduce %.2f ms (%.1f MB), "
               "update %.2f ms\n",
               job.t_data * k, job.t_compute * k, job.t_comm * k, (double)(job.nparams + 1) * 4 / 1e6,
               job.t_update * k);
        /* What each rank holds of the optimizer's state: all of it, or its shard under --zero 1. */
        size_t state_bytes = cohort_ddp_zero_state_bytes(job.ddp);
        if (!cfg->zero)
          for (int i = 0; i < cohort_optim_num_states(job.optim); i++)
            state_bytes += cohort_optim_state(job.optim, i)->count * sizeof(float);
        printf("profile: optimizer state %zu bytes per rank (%s), update+gather %.2f ms per step\n", state_bytes,
               cfg->zero ? "ZeRO-1 shard" : "unsharded", job.t_update * k);
        cohort_ddp_straggler sg;
        cohort_ddp_get_straggler(job.ddp, &sg);
        if (sg.rank >= 0 && job.world > 1)
          printf("profile: slowest rank %d (the longest forward+backward in %lld of %lld steps, by %.2f ms on average "
                 "over the median rank's)\n",
                 sg.rank, (long long)sg.slowest_in, (long long)sg.steps, sg.mean_by_s * 1e3);
      }
      cohort_ddp_stats ds;
      cohort_ddp_get_stats(job.ddp, &ds);
      if (job.ddp && ds.steps > 0 && !cfg->quiet) {
        double k = 1e3 / (double)ds.steps;
        /* Exposed time is taken around the wait, comm time inside it, so without overlap exposed can exceed comm by
         * a clock read or two: that is nothing hidden, not "-0%". */
        double hidden = ds.comm_s > 0 ? 100.0 * (1.0 - ds.exposed_comm_s / ds.comm_s) : 0.0;
        printf("ddp: per step: compute %.2f ms, allreduce %.2f ms, exposed %.2f ms (%.0f%% hidden); %d bucket%s, "
               "%.2f MB\n",
               ds.compute_s * k, ds.comm_s * k, ds.exposed_comm_s * k, hidden > 0 ? hidden : 0.0, ds.num_buckets,
               ds.num_buckets == 1 ? "" : "s", (double)ds.bytes_per_step / 1e6);
      }
      double img_per_s = job.train_seconds > 0 ? (double)job.train_images / job.train_seconds : 0;
      printf("final: steps=%lld loss=%.6f test_acc=%.4f img_per_s=%.1f param_sha256=%s\n", (long long)job.step,
             job.last_loss, job.test_acc, img_per_s, hex);
      fflush(stdout);
    }
  }
  train_progress_destroy(progress);
  train_metrics_close(metrics);
  cohort_loader_destroy(job.loader);
  cohort_sampler_destroy(job.sampler);
  cohort_optim_destroy(job.optim);
  cohort_ddp_destroy(job.ddp); /* before the model it points into; writes COHORT_TIMELINE (collective) */
  cohort_model_destroy(job.model);
  if (!cfg->shared_train_set) {
    cohort_dataset_destroy(job.test_set);
    cohort_dataset_destroy(job.train_set);
  }
  free(job.grads);
  train_cuda_stop(&job);
  return rc;
}
