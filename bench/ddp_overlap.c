/*
 * ddp_overlap: how much of the DDP engine's communication backward hides, on a synthetic model.
 *
 *   cohortrun -np 2 build/bin/ddp_overlap [--steps 20] [--warmup 3] [--batch 32] [--width 1250] [--layers 8]
 *                                         [--bucket-mb X] [--threads 1]
 *
 * The model is --layers linear layers of width x width with a relu between each two (8 x 1250 x 1250: about 50 MB
 * of float32 gradients). After --warmup untimed steps (the engine rebuilds its bucket order after the first), each
 * of --steps rounds measures three things, one after another, every rank starting each at a barrier:
 *
 *   (a) compute   forward + zero_grad + backward on a plain copy of the model (no engine, no communication)
 *   (b) allreduce the gradient bytes alone, the way the engine sends them: cohort_iallreduce (average) of every
 *                 bucket of cohort_ddp_bucket_at() in order, then a wait for all of them; no compute
 *   (c) ddp step  cohort_ddp_prepare, forward, zero_grad, backward (the grad hook starts buckets), cohort_ddp_finish
 *
 * A round's time for each is the slowest rank's; the table shows the median and the minimum over the rounds. The
 * ratios, with the targets of the DDP-engine issue:
 *   step / max(compute, allreduce)      median (c) / max(median (a), median (b)); target <= 1.15 (2+ ranks)
 *   hidden communication                1 - exposed / comm from cohort_ddp_get_stats() over the timed rounds, the
 *                                       worst rank's; target >= 0.80 (2+ ranks)
 *   ddp overhead                        median (c) / median (a) - 1; target <= 2% on 1 rank
 * and one machine-readable line for bench/ddp_overlap.sh:
 *   result: ranks=N compute_ms=A allreduce_ms=B step_ms=C step_over_max=R hidden=H overhead=O
 * No optimizer step is taken: the parameters stay put, so every round does the same work.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cohort/cohort.h"
#include "cohort/ddp.h"
#include "cohort/nn.h"

typedef struct options {
  int steps, warmup, batch, width, layers, threads;
  double bucket_mb; /* 0: the engine's default */
} options;

static void usage(FILE *f) {
  fprintf(f, "usage: cohortrun -np N ddp_overlap [options]\n"
             "  --steps N       timed rounds; medians are over them (default 20)\n"
             "  --warmup N      untimed rounds first, at least 2 so the bucket order is rebuilt (default 3)\n"
             "  --batch N       rows per rank per step; tune it so compute ~ allreduce (default 32)\n"
             "  --width N       features of every linear layer (default 1250)\n"
             "  --layers N      linear layers, relu between them (default 8)\n"
             "  --bucket-mb X   bucket cap in MiB (default: COHORT_BUCKET_MB, else 25)\n"
             "  --threads N     BLAS threads per rank (default 1)\n");
}

static int bad_usage(const char *what, const char *arg) {
  fprintf(stderr, "ddp_overlap: %s '%s'\n", what, arg);
  usage(stderr);
  return 2;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.steps = 20, .warmup = 3, .batch = 32, .width = 1250, .layers = 8, .threads = 1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help")) {
      usage(stdout);
      return 1;
    }
    if (i + 1 >= argc) return bad_usage("missing value or unknown flag", a);
    const char *v = argv[++i];
    int bad = 0;
    if (!strcmp(a, "--steps"))
      bad = parse_int(v, 1, 1000000, &o->steps);
    else if (!strcmp(a, "--warmup"))
      bad = parse_int(v, 2, 1000000, &o->warmup);
    else if (!strcmp(a, "--batch"))
      bad = parse_int(v, 1, 1 << 20, &o->batch);
    else if (!strcmp(a, "--width"))
      bad = parse_int(v, 1, 1 << 16, &o->width);
    else if (!strcmp(a, "--layers"))
      bad = parse_int(v, 1, 1000, &o->layers);
    else if (!strcmp(a, "--threads"))
      bad = parse_int(v, 1, 256, &o->threads);
    else if (!strcmp(a, "--bucket-mb")) {
      char *end;
      o->bucket_mb = strtod(v, &end);
      bad = end == v || *end || !(o->bucket_mb > 0 && o->bucket_mb <= 1e6);
    } else
      return bad_usage("unknown flag", a);
    if (bad) return bad_usage(a, v);
  }
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) { /* sorts v */
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Reports a failed call on this rank and says so to main. */
static int failed(int rank, const char *what, cohort_status st) {
  fprintf(stderr, "ddp_overlap: rank %d: %s: %s: %s\n", rank, what, cohort_strerror(st), cohort_last_error());
  return -1;
}

#define TRY(what, expr)                                                                                                \
  do {                                                                                                                 \
    cohort_status try_st__ = (expr);                                                                                   \
    if (try_st__ != COHORT_OK) {                                                                                       \
      rc = failed(rank, what, try_st__);                                                                               \
      goto out;                                                                                                        \
    }                                                                                                                  \
  } while (0)

static cohort_status build_model(const options *o, cohort_model **out) {
  cohort_model *m = NULL;
  cohort_status st = cohort_model_create(&m);
  char name[32];
  for (int l = 0; st == COHORT_OK && l < o->layers; l++) {
    if (l > 0) st = cohort_model_add_relu(m);
    snprintf(name, sizeof name, "fc%d", l + 1);
    if (st == COHORT_OK) st = cohort_model_add_linear(m, name, o->width, o->width);
  }
  if (st == COHORT_OK) st = cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, 1);
  if (st != COHORT_OK) {
    cohort_model_destroy(m);
    return st;
  }
  *out = m;
  return COHORT_OK;
}

/* forward, zero_grad, backward: the compute of one step (the engine, when attached, sees the grad hooks fire). */
static cohort_status compute(cohort_model *m, const cohort_tensor *x, const float *grad_out) {
  const cohort_tensor *y;
  cohort_status st = cohort_model_forward(m, x, &y);
  if (st != COHORT_OK) return st;
  cohort_model_zero_grad(m);
  return cohort_model_backward(m, grad_out);
}

int main(int argc, char **argv) {
  options o;
  int prc = parse_args(argc, argv, &o);
  if (prc) return prc == 1 ? 0 : prc;

  cohort_comm *comm = NULL;
  cohort_status st0 = cohort_init(&comm);
  if (st0 != COHORT_OK) {
    fprintf(stderr, "ddp_overlap: joining the job: %s: %s\n", cohort_strerror(st0), cohort_last_error());
    return 1;
  }
  const int rank = cohort_rank(comm), world = cohort_size(comm);
  int rc = 0;
  cohort_model *plain = NULL, *model = NULL;
  cohort_ddp *ddp = NULL;
  cohort_work **works = NULL;
  float *input = NULL, *grad_out = NULL;
  int nb = 0;
  cohort_ddp_options dopt;
  cohort_ddp_stats before, after;
  cohort_rng rng;
  cohort_tensor x;
  int64_t shape[2] = {o.batch, o.width};
  double *t_compute = calloc((size_t)o.steps, sizeof(double));
  double *t_allreduce = calloc((size_t)o.steps, sizeof(double));
  double *t_step = calloc((size_t)o.steps, sizeof(double));
  const size_t rows = (size_t)o.batch * (size_t)o.width;
  input = malloc(rows * sizeof(float));
  grad_out = malloc(rows * sizeof(float));
  if (!t_compute || !t_allreduce || !t_step || !input || !grad_out) {
    fprintf(stderr, "ddp_overlap: rank %d: out of memory\n", rank);
    rc = -1;
    goto out;
  }

  TRY("setting BLAS threads", cohort_nn_set_threads(o.threads));
  TRY("building the plain model", build_model(&o, &plain));
  TRY("building the DDP model", build_model(&o, &model));
  cohort_ddp_options_init(&dopt);
  /* This bench measures overlap itself, so it asks for it whatever the host's CPU count would choose. */
  dopt.overlap = COHORT_DDP_OVERLAP_ON;
  if (o.bucket_mb > 0) dopt.bucket_bytes = (size_t)(o.bucket_mb * 1024 * 1024);
  TRY("creating the engine", cohort_ddp_create_model(comm, model, &dopt, &ddp));

  /* Rank-dependent data, as data parallelism has; the gradient of a made-up loss (small, so values stay tame). */
  cohort_rng_seed(&rng, 1000 + (uint64_t)rank);
  for (size_t i = 0; i < rows; i++) {
    input[i] = cohort_rng_uniform(&rng) * 2.0f - 1.0f;
    grad_out[i] = (cohort_rng_uniform(&rng) - 0.5f) / (float)rows;
  }
  TRY("wrapping the input", cohort_tensor_wrap(&x, input, 2, shape));

  for (int i = 0; i < o.warmup; i++) {
    TRY("warm-up compute", compute(plain, &x, grad_out));
    TRY("warm-up prepare", cohort_ddp_prepare(ddp));
    TRY("warm-up ddp compute", compute(model, &x, grad_out));
    TRY("warm-up finish", cohort_ddp_finish(ddp));
  }
  /* The buckets as they are from now on (the rebuild happened after the first synchronized step). */
  nb = cohort_ddp_num_buckets(ddp);
  works = calloc((size_t)(nb > 0 ? nb : 1), sizeof *works);
  if (!works) {
    fprintf(stderr, "ddp_overlap: rank %d: out of memory\n", rank);
    rc = -1;
    goto out;
  }
  cohort_ddp_get_stats(ddp, &before);

  for (int s = 0; s < o.steps; s++) {
    double t[3];
    TRY("barrier", cohort_barrier(comm));
    double t0 = now_s();
    TRY("compute", compute(plain, &x, grad_out));
    t[0] = now_s() - t0;

    TRY("barrier", cohort_barrier(comm));
    t0 = now_s();
    for (int b = 0; b < nb; b++) {
      const cohort_ddp_bucket *bk = cohort_ddp_bucket_at(ddp, b);
      TRY("allreduce of a bucket",
          cohort_iallreduce(comm, bk->data, bk->data, bk->count, COHORT_F32, COHORT_AVG, &works[b]));
    }
    cohort_status wst = COHORT_OK;
    for (int b = 0; b < nb; b++) {
      cohort_status one = cohort_work_wait(works[b]);
      if (wst == COHORT_OK) wst = one;
      cohort_work_free(works[b]);
      works[b] = NULL;
    }
    TRY("waiting for the buckets", wst);
    t[1] = now_s() - t0;

    TRY("barrier", cohort_barrier(comm));
    t0 = now_s();
    TRY("prepare", cohort_ddp_prepare(ddp));
    TRY("ddp compute", compute(model, &x, grad_out));
    TRY("finish", cohort_ddp_finish(ddp));
    t[2] = now_s() - t0;

    /* A round lasts as long as its slowest rank. */
    TRY("collecting the times", cohort_allreduce(comm, t, t, 3, COHORT_F64, COHORT_MAX));
    t_compute[s] = t[0];
    t_allreduce[s] = t[1];
    t_step[s] = t[2];
  }
  cohort_ddp_get_stats(ddp, &after);

  const double comm_s = after.comm_s - before.comm_s, exposed_s = after.exposed_comm_s - before.exposed_comm_s;
  double hidden = comm_s > 0 ? 1.0 - exposed_s / comm_s : 0.0;
  TRY("collecting the hidden fractions", cohort_allreduce(comm, &hidden, &hidden, 1, COHORT_F64, COHORT_MIN));

  if (rank == 0) {
    double min_c = t_compute[0], min_a = t_allreduce[0], min_s = t_step[0];
    for (int s = 1; s < o.steps; s++) {
      if (t_compute[s] < min_c) min_c = t_compute[s];
      if (t_allreduce[s] < min_a) min_a = t_allreduce[s];
      if (t_step[s] < min_s) min_s = t_step[s];
    }
    const double mc = median(t_compute, o.steps), ma = median(t_allreduce, o.steps), ms = median(t_step, o.steps);
    const double base = mc > ma ? mc : ma;
    const double ratio = base > 0 ? ms / base : 0.0, overhead = mc > 0 ? ms / mc - 1.0 : 0.0;
    const double mb = (double)after.bytes_per_step / (1024.0 * 1024.0);
    printf("ddp_overlap: %d rank%s, %d linear layers of %dx%d (%.1f MiB of gradients in %d bucket%s), batch %d, "
           "%d BLAS thread%s, median of %d rounds after %d warm-up\n",
           world, world == 1 ? "" : "s", o.layers, o.width, o.width, mb, nb, nb == 1 ? "" : "s", o.batch, o.threads,
           o.threads == 1 ? "" : "s", o.steps, o.warmup);
    printf("| phase | median ms | min ms |\n| --- | --- | --- |\n");
    printf("| (a) compute only: forward + backward | %.3f | %.3f |\n", mc * 1e3, min_c * 1e3);
    printf("| (b) allreduce only: the buckets | %.3f | %.3f |\n", ma * 1e3, min_a * 1e3);
    printf("| (c) ddp step: prepare, forward, backward, finish | %.3f | %.3f |\n", ms * 1e3, min_s * 1e3);
    const int64_t rounds = after.steps - before.steps;
    printf("engine statistics over the %lld timed steps (rank 0): comm %.3f ms, exposed %.3f ms per step\n",
           (long long)rounds, rounds > 0 ? comm_s * 1e3 / (double)rounds : 0.0,
           rounds > 0 ? exposed_s * 1e3 / (double)rounds : 0.0);
    if (world > 1) {
      printf("step / max(compute, allreduce): %.3f (target <= 1.15)\n", ratio);
      printf("hidden communication, 1 - exposed/comm (worst rank): %.3f (target >= 0.80)\n", hidden);
      printf("ddp step over compute: %+.1f%%\n", overhead * 100.0);
    } else {
      printf("ddp overhead on 1 rank, step / compute - 1: %+.2f%% (target <= 2%%)\n", overhead * 100.0);
    }
    printf("result: ranks=%d compute_ms=%.3f allreduce_ms=%.3f step_ms=%.3f step_over_max=%.4f hidden=%.4f "
           "overhead=%.4f\n",
           world, mc * 1e3, ma * 1e3, ms * 1e3, ratio, hidden, overhead);
    fflush(stdout);
  }

out:
  if (works) {
    for (int b = 0; b < nb; b++)
      cohort_work_free(works[b]);
    free(works);
  }
  if (rc != 0) cohort_comm_abort(comm, "ddp_overlap failed");
  cohort_ddp_destroy(ddp);
  cohort_model_destroy(model);
  cohort_model_destroy(plain);
  cohort_comm_destroy(comm);
  free(input);
  free(grad_out);
  free(t_compute);
  free(t_allreduce);
  free(t_step);
  return rc == 0 ? 0 : 1;
}
