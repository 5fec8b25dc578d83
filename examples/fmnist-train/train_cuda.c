/*
 * train_cuda.c: fmnist-train --device cuda. The model trains on the GPU through libcohort_nn_cuda.so (loaded with
 * dlopen: a CPU-only machine needs no CUDA library), while the CPU objects stay the job's record: the model and the
 * optimizer are what checkpoints hold and the final line hashes (copied back from the GPU before each), the sampler
 * decides the data order exactly as on the CPU (so both devices see the same batches), and the schedule is lr_at's.
 *
 * A step is one graph launch with one rank; with several, forward and backward, one allreduce of the gradients and
 * the loss (cohort_allreduce_stream on device memory, or staged through host memory where this libcohort has no
 * device collectives), then the update. The loss stays on the GPU until it is reported (every --log-every steps and
 * at the end of an epoch), so the host never waits for the GPU in between.
 *
 * Throughput (img/s) counts the time between those reports, leaving out the first step of each batch size (cuDNN's
 * algorithm search and the graph's capture for that size: the epoch's last, partial batch is another size, and its
 * setup took tens of milliseconds inside a timed run of under a second at batch 1024), evaluations and checkpoints.
 * The partial batches themselves, less efficient than full ones, stay in.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn_cuda/host.h"
#include "train.h"

/* The device collectives come with the CUDA part of libcohort (part 1 of the GPU work). Weak, so that a libcohort
 * built before them links too: the gradients then travel through host memory, and the start line says so. */
#pragma weak cohort_allreduce_stream

struct train_gpu {
  const cohort__nnc_api *api;
  cohort__nnc_net *net;
  cohort__nnc_comm comm;
  float *state; /* the optimizer's arrays back to back (cohort_optim_state's order) */
  size_t state_count;
  int64_t *scratch; /* a batch of indices: cohort_sampler_next moves the cursor by copying them out */
  char line[768];
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int gpu_fail(const train_job *job, const char *what) {
  fprintf(stderr, "fmnist-train: rank %d: --device cuda: %s: %s\n", job->rank, what, job->gpu->api->last_error());
  return -1;
}

static int comm_allreduce(void *ctx, float *device_buf, size_t count, void *stream) {
  train_job *job = ctx;
  return cohort_allreduce_stream(job->comm, device_buf, device_buf, count, COHORT_F32, COHORT_AVG, stream) == COHORT_OK
             ? 0
             : -1;
}

static int comm_allreduce_host(void *ctx, float *host_buf, size_t count) {
  train_job *job = ctx;
  return cohort_allreduce(job->comm, host_buf, host_buf, count, COHORT_F32, COHORT_AVG) == COHORT_OK ? 0 : -1;
}

static const char *comm_last_error(void *ctx) {
  (void)ctx;
  return cohort_last_error();
}

/* The sampler's order for the current epoch, from its cursor, to the GPU. */
static int send_order(train_job *job) {
  if (job->gpu->api->set_order(job->gpu->net, cohort_sampler_indices(job->sampler),
                               cohort_sampler_num_samples(job->sampler), cohort_sampler_cursor(job->sampler)) != 0)
    return gpu_fail(job, "sending the epoch's order");
  return 0;
}

/* The DDP engine's bucket size where --bucket-mb does not say: COHORT_BUCKET_MB (docs/env.md), else 25 MiB. */
static double default_bucket_mb(void) {
  const char *v = getenv("COHORT_BUCKET_MB");
  const double mb = v && *v ? strtod(v, NULL) : 0;
  return mb > 0 ? mb : 25;
}

static int start(train_job *job, struct train_gpu *gpu) {
  const train_config *cfg = job->cfg;
  const cohort__nnc_api *api = gpu->api;
  char why[1024];
  cohort_layer_info layers[COHORT__NNC_MAX_LAYERS];
  cohort__nnc_net_desc desc;
  int ch, h, w;
  cohort_dataset_shape(job->train_set, &ch, &h, &w);
  const int max_batch = cfg->batch > cfg->eval_batch ? cfg->batch : cfg->eval_batch;
  if (cohort__nnc_describe_model(job->model, ch, h, w, 10, max_batch, &desc, layers, why, sizeof why) != 0) {
    fprintf(stderr, "fmnist-train: rank %d: --device cuda: %s\n", job->rank, why);
    return -1;
  }
  const char *local = getenv("LOCAL_RANK");
  desc.device_hint = local ? atoi(local) : 0;
  desc.optim = COHORT__NNC_SGD;
  desc.momentum = (float)cfg->momentum;
  desc.weight_decay = (float)cfg->weight_decay;
  desc.trust_coefficient = (float)cfg->lars;
  desc.trust_clip = cfg->lars_clip;
  if (api->net_create(&desc, &gpu->net) != 0) return gpu_fail(job, "building the model on the GPU");

  if (api->set_params(gpu->net, cohort_model_param_data(job->model), job->nparams) != 0)
    return gpu_fail(job, "copying the parameters to the GPU");
  for (int i = 0; i < cohort_optim_num_states(job->optim); i++)
    gpu->state_count += cohort_optim_state(job->optim, i)->count;
  gpu->state = malloc((gpu->state_count ? gpu->state_count : 1) * sizeof(float));
  gpu->scratch = malloc((size_t)cfg->batch * sizeof(int64_t));
  float *lr = malloc((size_t)job->total_steps * sizeof(float));
  if (!gpu->state || !gpu->scratch || !lr) {
    free(lr);
    fprintf(stderr, "fmnist-train: rank %d: out of memory for the GPU's state\n", job->rank);
    return -1;
  }
  size_t off = 0;
  for (int i = 0; i < cohort_optim_num_states(job->optim); i++) {
    const cohort_named_array *a = cohort_optim_state(job->optim, i);
    memcpy(gpu->state + off, a->data, a->count * sizeof(float));
    off += a->count;
  }
  if (api->set_state(gpu->net, gpu->state, gpu->state_count, cohort_optim_steps(job->optim)) != 0) {
    free(lr);
    return gpu_fail(job, "copying the optimizer state to the GPU");
  }
  if (api->set_data(gpu->net, cohort_dataset_images(job->train_set), cohort_dataset_labels(job->train_set),
                    cohort_dataset_size(job->train_set), cohort_dataset_images(job->test_set),
                    cohort_dataset_labels(job->test_set), cohort_dataset_size(job->test_set)) != 0) {
    free(lr);
    return gpu_fail(job, "copying the data sets to the GPU");
  }
  for (int64_t s = 0; s < job->total_steps; s++)
    lr[s] = train_lr_at(job, s);
  int rc = api->set_schedule(gpu->net, lr, job->total_steps, job->step);
  free(lr);
  if (rc != 0) return gpu_fail(job, "copying the learning-rate schedule to the GPU");
  if (send_order(job) != 0) return -1;
  /* --profile: where a step's time goes on the GPU, before training (rank 0; the others wait for it in the ranks'
   * agreement that the GPU started). Training is unchanged by it; a profile that cannot run says why and training
   * goes on. */
  if (cfg->profile && job->rank == 0) {
    enum { PASSES = 20 };
    char line[4096];
    if (api->profile(gpu->net, cfg->batch, PASSES, line, sizeof line) == 0)
      printf("profile: cuda, batch %d, %d passes of forward and backward as plain launches (no graph): %s\n",
             cfg->batch, PASSES, line);
    else
      fprintf(stderr, "fmnist-train: --profile on the GPU: %s\n", api->last_error());
    fflush(stdout);
  }

  gpu->comm.ctx = job;
  gpu->comm.world = job->world;
  gpu->comm.allreduce_avg = cohort_allreduce_stream ? comm_allreduce : NULL;
  gpu->comm.allreduce_avg_host = comm_allreduce_host;
  gpu->comm.last_error = comm_last_error;
  const double bucket_mb = cfg->bucket_mb > 0 ? cfg->bucket_mb : default_bucket_mb();
  const size_t bucket_bytes = (size_t)(bucket_mb * 1048576.0);
  gpu->comm.bucket_bytes = cfg->sync != TRAIN_SYNC_DDP    ? 0
                           : bucket_bytes < sizeof(float) ? sizeof(float)
                                                          : bucket_bytes;
  char how[160];
  snprintf(how, sizeof how,
           "buckets of at most %g MiB (the first at most 1 MiB), each averaged by cohort_allreduce_stream on a stream "
           "of its "
           "own while backward goes on",
           bucket_mb);
  snprintf(gpu->line, sizeof gpu->line, "device: cuda, %s; gradients: %s", api->describe(),
           job->world == 1              ? "one rank, the whole step in one CUDA graph"
           : !cohort_allreduce_stream   ? "staged through host memory (this libcohort has no device collectives)"
           : gpu->comm.bucket_bytes > 0 ? how
                                        : "one cohort_allreduce_stream on device memory between two CUDA graphs");
  return 0;
}

int train_cuda_start(train_job *job) {
  char why[1200];
  const cohort__nnc_api *api = cohort__nnc_open(why, sizeof why);
  if (!api) {
    fprintf(stderr, "fmnist-train: rank %d: --device cuda: %s\n", job->rank, why);
    return -1;
  }
  job->gpu = calloc(1, sizeof *job->gpu);
  if (!job->gpu) {
    fprintf(stderr, "fmnist-train: rank %d: out of memory\n", job->rank);
    return -1;
  }
  job->gpu->api = api;
  return start(job, job->gpu);
}

void train_cuda_describe(train_job *job, char *buf, size_t len) {
  snprintf(buf, len, "%s", job->gpu ? job->gpu->line : "device: cpu");
}

void train_cuda_stop(train_job *job) {
  struct train_gpu *gpu = job->gpu;
  if (!gpu) return;
  if (gpu->net) gpu->api->net_destroy(gpu->net);
  free(gpu->state);
  free(gpu->scratch);
  free(gpu);
  job->gpu = NULL;
}

int train_cuda_pull(train_job *job) {
  struct train_gpu *gpu = job->gpu;
  int64_t steps = 0;
  if (gpu->api->get_params(gpu->net, cohort_model_param_data(job->model), job->nparams) != 0)
    return gpu_fail(job, "copying the parameters from the GPU");
  if (gpu->api->get_state(gpu->net, gpu->state, gpu->state_count, &steps) != 0)
    return gpu_fail(job, "copying the optimizer state from the GPU");
  size_t off = 0;
  for (int i = 0; i < cohort_optim_num_states(job->optim); i++) {
    const cohort_named_array *a = cohort_optim_state(job->optim, i);
    memcpy(a->data, gpu->state + off, a->count * sizeof(float));
    off += a->count;
  }
  cohort_optim_set_steps(job->optim, steps);
  cohort_optim_set_lr(job->optim, train_lr_at(job, job->step));
  return 0;
}

int train_cuda_evaluate(train_job *job) {
  const size_t n = train_eval_images(job);
  if (n == 0) {
    job->test_acc = NAN;
    return 0;
  }
  const size_t lo = n * (size_t)job->rank / (size_t)job->world, hi = n * (size_t)(job->rank + 1) / (size_t)job->world;
  int64_t counts[2] = {0, (int64_t)(hi - lo)}; /* correct, seen */
  if (job->gpu->api->evaluate(job->gpu->net, lo, hi, &counts[0]) != 0) return gpu_fail(job, "evaluating");
  cohort_status st = cohort_allreduce(job->comm, counts, counts, 2, COHORT_I64, COHORT_SUM);
  if (st != COHORT_OK) {
    fprintf(stderr, "fmnist-train: rank %d: summing the test counts: %s: %s\n", job->rank, cohort_strerror(st),
            cohort_last_error());
    return -1;
  }
  job->test_acc = counts[1] > 0 ? (double)counts[0] / (double)counts[1] : 0.0;
  return 0;
}

/* The losses of the steps since the last report, into the job's epoch sums. */
static int take_loss(train_job *job) {
  double sum = 0;
  int64_t steps = 0;
  if (job->gpu->api->take_loss(job->gpu->net, &sum, &steps) != 0) return gpu_fail(job, "training");
  if (!isfinite(sum)) {
    fprintf(stderr, "fmnist-train: rank %d: the loss is %g in the steps up to %lld: lower --lr\n", job->rank, sum,
            (long long)job->step);
    return -1;
  }
  job->loss_sum += sum;
  job->loss_steps += steps;
  return 0;
}

int train_cuda_loop(train_job *job, train_progress *progress, train_metrics *metrics, double t_start,
                    int64_t *last_eval, int64_t *last_ckpt) {
  const train_config *cfg = job->cfg;
  struct train_gpu *gpu = job->gpu;
  const size_t per_rank = cohort_sampler_num_samples(job->sampler);
  double t_mark = now_s();
  int64_t images = 0; /* global images since t_mark */
  size_t sizes_seen[8];
  int n_sizes = 0; /* the batch sizes stepped so far: the first step of each is not timed */
  while (job->step < job->stop_step) {
    cohort_status st;
    if (cohort_sampler_cursor(job->sampler) >= per_rank) { /* after a resume right at the end of an epoch */
      job->epoch++;
      if ((st = cohort_sampler_set_epoch(job->sampler, (uint64_t)job->epoch)) != COHORT_OK) {
        fprintf(stderr, "fmnist-train: rank %d: starting an epoch: %s\n", job->rank, cohort_last_error());
        return -1;
      }
      if (send_order(job) != 0) return -1;
      continue;
    }
    const size_t left = per_rank - cohort_sampler_cursor(job->sampler);
    const size_t n = left < (size_t)cfg->batch ? left : (size_t)cfg->batch;
    int new_size = n_sizes < (int)(sizeof sizes_seen / sizeof sizes_seen[0]);
    for (int i = 0; i < n_sizes && new_size; i++)
      new_size = sizes_seen[i] != n;
    if (new_size) {
      sizes_seen[n_sizes++] = n;
      if (images > 0) { /* the steps queued before it are timed up to here */
        if (take_loss(job) != 0) return -1;
        const double t = now_s();
        job->train_seconds += t - t_mark;
        job->train_images += images;
        images = 0;
      }
    }
    cohort_sampler_next(job->sampler, gpu->scratch, n);
    if (gpu->api->train_step(gpu->net, (int)n, &gpu->comm) != 0) return gpu_fail(job, "queueing a step");
    job->step++;
    job->steps_run++;
    images += (int64_t)n * job->world;
    const int epoch_end = cohort_sampler_cursor(job->sampler) == per_rank;
    const int ckpt_now = cfg->checkpoint_every && job->step % cfg->checkpoint_every == 0;
    if (new_size || epoch_end || ckpt_now || job->step % cfg->log_every == 0 || job->step == job->stop_step) {
      if (take_loss(job) != 0) return -1;
      const double t = now_s();
      if (!new_size) {
        job->train_seconds += t - t_mark;
        job->train_images += images;
      }
      images = 0;
      t_mark = t;
      train_progress_step(progress, job->step, job->epoch + 1, job->loss_sum / (double)job->loss_steps,
                          job->train_seconds > 0 ? (double)job->train_images / job->train_seconds : 0);
    }
    const double img_per_s = job->train_seconds > 0 ? (double)job->train_images / job->train_seconds : 0;
    if (epoch_end) {
      if (train_cuda_evaluate(job) != 0) return -1;
      *last_eval = job->step;
      job->last_loss = job->loss_sum / (double)job->loss_steps;
      train_progress_eval(progress, job->step, job->epoch + 1, job->last_loss, job->test_acc, img_per_s,
                          now_s() - t_start);
      if (train_metrics_row(metrics, job->epoch + 1, job->step, job->last_loss, job->test_acc, img_per_s,
                            now_s() - t_start) != 0)
        return -1;
      job->loss_sum = 0;
      job->loss_steps = 0;
      job->epoch++;
      if ((st = cohort_sampler_set_epoch(job->sampler, (uint64_t)job->epoch)) != COHORT_OK) {
        fprintf(stderr, "fmnist-train: rank %d: starting an epoch: %s\n", job->rank, cohort_last_error());
        return -1;
      }
      if (send_order(job) != 0) return -1;
      if (cfg->checkpoint) {
        if (train_state_save(job) != 0) return -1;
        *last_ckpt = job->step;
      }
      t_mark = now_s();
    }
    if (ckpt_now && *last_ckpt != job->step) {
      if (train_state_save(job) != 0) return -1;
      *last_ckpt = job->step;
      t_mark = now_s();
    }
  }
  if (job->loss_steps == 0 && job->steps_run == 0 && take_loss(job) != 0) return -1;
  train_progress_note(progress, "cuda: %s", gpu->api->net_describe(gpu->net));
  return 0;
}
