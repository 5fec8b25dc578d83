/*
 * test_syncbn.c: SyncBatchNorm. Replicas as threads of an in-process group, each with its share of one batch and
 * its batchnorm statistics summed over the replicas, must compute what one model computes on the whole batch: the
 * same logits, parameter gradients that add up to the whole batch's, the same running statistics, and so the same
 * eval-mode outputs. The same replicas without sync must not (so the comparison can fail). A failing sync stops
 * forward or backward with its status, and a sync that does not sum the counts is refused.
 *
 * The model is conv -> batchnorm2d -> relu -> flatten -> linear, so that the conv's gradients go through the
 * batchnorm input gradient (the part that needs the backward sums) and the logits through its statistics.
 */
#include <pthread.h>

#include "cohort/ddp.h"
#include "cohort/nn.h"
#include "core/error.h"
#include "test.h"

enum { CIN = 3, CH = 4, HW = 5, CLASSES = 3, TOTAL = 12, MAX_REPLICAS = 3 };
static const uint64_t SEED = 1234;

static cohort_status make_model(cohort_model **out) {
  cohort_model *m = NULL;
  cohort_status st = cohort_model_create(&m);
  if (st == COHORT_OK) st = cohort_model_add_conv2d(m, "conv", CIN, CH, 3, 1, 1);
  if (st == COHORT_OK) st = cohort_model_add_batchnorm2d(m, "bn", CH, 1e-5f, 0.1f);
  if (st == COHORT_OK) st = cohort_model_add_relu(m);
  if (st == COHORT_OK) st = cohort_model_add_flatten(m);
  if (st == COHORT_OK) st = cohort_model_add_linear(m, "fc", CH * HW * HW, CLASSES);
  if (st == COHORT_OK) st = cohort_model_init(m, COHORT_INIT_TORCH_DEFAULT, SEED);
  if (st != COHORT_OK) {
    cohort_model_destroy(m);
    return st;
  }
  *out = m;
  return COHORT_OK;
}

/* The whole batch: inputs with a non-zero mean per channel (so that the replicas' halves differ in mean too), and
 * a fixed gradient of the loss with respect to the logits, split by rows like the inputs. */
static float batch_x[TOTAL * CIN * HW * HW], batch_g[TOTAL * CLASSES];

static void make_batch(void) {
  cohort_rng r;
  cohort_rng_seed(&r, 77);
  for (size_t i = 0; i < sizeof batch_x / sizeof batch_x[0]; i++) {
    size_t sample = i / (CIN * HW * HW);
    /* later samples drift upwards, so any one replica's statistics are far from the whole batch's */
    batch_x[i] = 2.0f * cohort_rng_uniform(&r) - 1.0f + 0.15f * (float)sample;
  }
  for (size_t i = 0; i < sizeof batch_g / sizeof batch_g[0]; i++)
    batch_g[i] = 2.0f * cohort_rng_uniform(&r) - 1.0f;
}

/* What one model computed: logits (train and eval mode), parameter gradients, buffers. */
typedef struct result {
  float logits[TOTAL * CLASSES]; /* rows of this model's samples, at their place in the whole batch */
  float eval_logits[TOTAL * CLASSES];
  float *grads;   /* param_count floats in parameter order */
  float *buffers; /* running mean and var */
  size_t nbuffers;
} result;

static void result_free(result *r) {
  free(r->grads);
  free(r->buffers);
}

/* One training step (forward, backward) on samples [first, first + n), then an eval forward on the same samples.
 * With an engine the step is the engine's (prepare, forward, backward, finish) and the gradients are its average,
 * so that adding them over the replicas still gives the sum. */
static cohort_status run_step(cohort_model *m, cohort_ddp *ddp, int first, int n, result *out) {
  int64_t shape[4] = {n, CIN, HW, HW};
  cohort_tensor x;
  const cohort_tensor *y;
  COHORT_CHECK(cohort_tensor_wrap(&x, batch_x + (size_t)first * CIN * HW * HW, 4, shape));
  cohort_model_set_training(m, 1);
  if (ddp) COHORT_CHECK(cohort_ddp_prepare(ddp));
  COHORT_CHECK(cohort_model_forward(m, &x, &y));
  memcpy(out->logits + (size_t)first * CLASSES, y->data, (size_t)n * CLASSES * sizeof(float));
  COHORT_CHECK(cohort_model_backward(m, batch_g + (size_t)first * CLASSES));
  if (ddp) COHORT_CHECK(cohort_ddp_finish(ddp));
  size_t np = cohort_model_param_count(m), off = 0;
  out->grads = calloc(np, sizeof(float));
  out->nbuffers = 2 * CH;
  out->buffers = malloc(out->nbuffers * sizeof(float));
  if (!out->grads || !out->buffers) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  for (int i = 0; i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    memcpy(out->grads + off, p->grad, p->numel * sizeof(float));
    off += p->numel;
  }
  memcpy(out->buffers, cohort_model_buffer(m, 0)->value, CH * sizeof(float));
  memcpy(out->buffers + CH, cohort_model_buffer(m, 1)->value, CH * sizeof(float));
  cohort_model_set_training(m, 0);
  COHORT_CHECK(cohort_model_forward(m, &x, &y));
  memcpy(out->eval_logits + (size_t)first * CLASSES, y->data, (size_t)n * CLASSES * sizeof(float));
  return COHORT_OK;
}

/* ---- replicas as threads ---- */

static cohort_status allreduce_sync(void *user, double *sums, size_t count) {
  return cohort_allreduce((cohort_comm *)user, sums, sums, count, COHORT_F64, COHORT_SUM);
}

typedef struct replica {
  cohort_inproc_group *group;
  int rank, first, n, sync;
  int engine; /* train through a DDP engine, syncing with cohort_ddp_sync_batchnorm() */
  result res;
  cohort_status status;
  char error[1024];
} replica;

static void *replica_main(void *arg) {
  replica *r = arg;
  cohort_comm *comm = NULL;
  cohort_model *m = NULL;
  cohort_ddp *ddp = NULL;
  r->status = cohort_init_inproc(r->group, r->rank, &comm);
  if (r->status == COHORT_OK) r->status = make_model(&m);
  if (r->status == COHORT_OK && r->engine) {
    /* small buckets, so that fc's allreduces are in flight on the progress thread when batchnorm's backward
     * allreduce is issued behind them */
    cohort_ddp_options opt;
    cohort_ddp_options_init(&opt);
    opt.bucket_bytes = opt.first_bucket_bytes = 256;
    r->status = cohort_ddp_create_model(comm, m, &opt, &ddp);
    if (r->status == COHORT_OK && cohort_ddp_num_buckets(ddp) < 3)
      r->status =
          cohort__error(COHORT_ERR_INTERNAL, "%d buckets, the test wants at least 3", cohort_ddp_num_buckets(ddp));
  }
  if (r->status == COHORT_OK && r->engine)
    r->status = cohort_ddp_sync_batchnorm(ddp, m, r->sync);
  else if (r->status == COHORT_OK && r->sync)
    cohort_model_set_batchnorm_sync(m, allreduce_sync, comm);
  if (r->status == COHORT_OK) r->status = run_step(m, ddp, r->first, r->n, &r->res);
  if (r->status != COHORT_OK) snprintf(r->error, sizeof r->error, "%s", cohort_last_error());
  cohort_ddp_destroy(ddp);
  cohort_model_destroy(m);
  cohort_comm_destroy(comm);
  return NULL;
}

/* Runs len(sizes) replicas on consecutive shares of the batch; 0 when every one succeeded. */
static int run_replicas(const int *sizes, int nrep, int sync, int engine, replica *reps) {
  cohort_inproc_group *g;
  if (cohort_inproc_group_create(nrep, &g) != COHORT_OK) return -1;
  pthread_t th[MAX_REPLICAS];
  int first = 0, failed = 0;
  for (int i = 0; i < nrep; i++) {
    reps[i] = (replica){.group = g, .rank = i, .first = first, .n = sizes[i], .sync = sync, .engine = engine};
    first += sizes[i];
    pthread_create(&th[i], NULL, replica_main, &reps[i]);
  }
  for (int i = 0; i < nrep; i++) {
    pthread_join(th[i], NULL);
    if (reps[i].status != COHORT_OK) {
      fprintf(stderr, "replica %d: %s: %s\n", i, cohort_strerror(reps[i].status), reps[i].error);
      failed = 1;
    }
  }
  cohort_inproc_group_destroy(g);
  return failed;
}

static cohort_status whole_batch(result *out) {
  cohort_model *m;
  COHORT_CHECK(make_model(&m));
  cohort_status st = run_step(m, NULL, 0, TOTAL, out);
  cohort_model_destroy(m);
  return st;
}

/* Largest |a - b| / (1 + |b|) over n values. */
static double worst_diff(const float *a, const float *b, size_t n) {
  double w = 0.0;
  for (size_t i = 0; i < n; i++)
    w = fmax(w, fabs((double)a[i] - b[i]) / (1.0 + fabs(b[i])));
  return w;
}

/* Compares replicas (with sync) against the whole batch; the worst differences go to *logits, *grads, *stats. */
static void compare(const result *whole, replica *reps, int nrep, size_t np, double *logits, double *grads,
                    double *stats) {
  float merged[TOTAL * CLASSES], merged_eval[TOTAL * CLASSES];
  float *gsum = calloc(np, sizeof(float));
  *stats = 0.0;
  for (int i = 0; i < nrep; i++) {
    size_t off = (size_t)reps[i].first * CLASSES, len = (size_t)reps[i].n * CLASSES;
    memcpy(merged + off, reps[i].res.logits + off, len * sizeof(float));
    memcpy(merged_eval + off, reps[i].res.eval_logits + off, len * sizeof(float));
    for (size_t j = 0; j < np; j++)
      gsum[j] += reps[i].res.grads[j];
    /* every replica's running statistics must be the whole batch's */
    *stats = fmax(*stats, worst_diff(reps[i].res.buffers, whole->buffers, whole->nbuffers));
  }
  *logits = fmax(worst_diff(merged, whole->logits, TOTAL * CLASSES),
                 worst_diff(merged_eval, whole->eval_logits, TOTAL * CLASSES));
  *grads = worst_diff(gsum, whole->grads, np);
  free(gsum);
}

static size_t param_count(void) {
  cohort_model *m;
  if (make_model(&m) != COHORT_OK) return 0;
  size_t n = cohort_model_param_count(m);
  cohort_model_destroy(m);
  return n;
}

static void check_equivalence(const int *sizes, int nrep, int engine) {
  make_batch();
  size_t np = param_count();
  ASSERT_TRUE(np > 0);
  result whole = {0};
  ASSERT_OK(whole_batch(&whole));
  replica reps[MAX_REPLICAS];
  int failed = run_replicas(sizes, nrep, 1, engine, reps);
  double dl = INFINITY, dg = INFINITY, ds = INFINITY, spread = 0.0;
  if (!failed) compare(&whole, reps, nrep, np, &dl, &dg, &ds);
  /* the engine leaves the same average on every replica */
  for (int i = 1; i < nrep && engine && !failed; i++)
    spread = fmax(spread, worst_diff(reps[i].res.grads, reps[0].res.grads, np));
  for (int i = 0; i < nrep; i++)
    result_free(&reps[i].res);
  result_free(&whole);
  ASSERT_EQ(failed, 0);
  printf("  %s%d replicas of %d..%d samples: logits %.2e, summed grads %.2e, running stats %.2e\n",
         engine ? "engine: " : "", nrep, sizes[0], sizes[nrep - 1], dl, dg, ds);
  /* Replicas and the whole batch make the same float32 sums in other orders (other BLAS blockings, which OpenBLAS
   * picks by CPU; partial sums added across replicas). The longest, the conv weight gradient and the batch
   * statistics, run over TOTAL x HW x HW = 300 terms: each may be off the exact sum by gamma(300) = 1.8e-5 of
   * its terms' magnitudes (u = 2^-24), which these values, of order 1, bound. Measured: at most 3e-7. */
  const double n = TOTAL * HW * HW, u = 1.0 / (1 << 24), gamma = n * u / (1 - n * u);
  ASSERT_TRUE(dl <= gamma);
  ASSERT_TRUE(dg <= gamma);
  ASSERT_TRUE(ds <= gamma);
  ASSERT_TRUE(spread == 0.0);
}

TEST(two_equal_replicas_match_the_whole_batch) {
  const int sizes[] = {6, 6};
  check_equivalence(sizes, 2, 0);
}

TEST(unequal_replicas_weigh_samples_by_the_global_count) {
  const int sizes[] = {5, 7};
  check_equivalence(sizes, 2, 0);
  const int three[] = {2, 3, 7};
  check_equivalence(three, 3, 0);
}

/* The same through the engine: cohort_ddp_sync_batchnorm() installs the allreduce, the engine averages the
 * gradients (its buckets' allreduces interleave with the batchnorm ones on one communicator). */
TEST(through_the_ddp_engine) {
  const int sizes[] = {5, 7};
  check_equivalence(sizes, 2, 1);
  const int three[] = {4, 4, 4};
  check_equivalence(three, 3, 1);
}

TEST(through_the_ddp_engine_turned_off_replicas_differ) {
  make_batch();
  result whole = {0};
  ASSERT_OK(whole_batch(&whole));
  const int sizes[] = {6, 6};
  replica reps[2];
  int failed = run_replicas(sizes, 2, 0, 1, reps);
  double dl = 0, dg = 0, ds = 0;
  if (!failed) compare(&whole, reps, 2, param_count(), &dl, &dg, &ds);
  for (int i = 0; i < 2; i++)
    result_free(&reps[i].res);
  result_free(&whole);
  ASSERT_EQ(failed, 0);
  ASSERT_TRUE(dl > 1e-2);
  ASSERT_TRUE(ds > 1e-2);
}

TEST(ddp_sync_batchnorm_arguments) {
  cohort_model *m;
  ASSERT_OK(make_model(&m));
  ASSERT_STATUS(cohort_ddp_sync_batchnorm(NULL, m, 1), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "engine is NULL");
  cohort_model_destroy(m);
}

TEST(without_sync_replicas_differ_from_the_whole_batch) {
  make_batch();
  size_t np = param_count();
  ASSERT_TRUE(np > 0);
  result whole = {0};
  ASSERT_OK(whole_batch(&whole));
  const int sizes[] = {6, 6};
  replica reps[2];
  int failed = run_replicas(sizes, 2, 0, 0, reps);
  double dl = 0, dg = 0, ds = 0;
  if (!failed) compare(&whole, reps, 2, np, &dl, &dg, &ds);
  for (int i = 0; i < 2; i++)
    result_free(&reps[i].res);
  result_free(&whole);
  ASSERT_EQ(failed, 0);
  printf("  per-replica statistics: logits %.2e, summed grads %.2e, running stats %.2e\n", dl, dg, ds);
  ASSERT_TRUE(dl > 1e-2);
  ASSERT_TRUE(dg > 1e-2);
  ASSERT_TRUE(ds > 1e-2);
}

/* ---- failures ---- */

typedef struct failing {
  int calls, fail_at; /* the call (0-based) that fails */
  size_t counts[4];
} failing;

static cohort_status failing_sync(void *user, double *sums, size_t count) {
  failing *f = user;
  if (f->calls < 4) f->counts[f->calls] = count;
  if (f->calls++ == f->fail_at) return cohort__error(COHORT_ERR_REMOTE, "rank 1 went away");
  return COHORT_OK; /* one replica: its own sums are the total */
}

TEST(a_failing_sync_stops_forward_and_backward_with_its_status) {
  make_batch();
  cohort_model *m;
  ASSERT_OK(make_model(&m));
  int64_t shape[4] = {4, CIN, HW, HW};
  cohort_tensor x;
  const cohort_tensor *y;
  ASSERT_OK(cohort_tensor_wrap(&x, batch_x, 4, shape));

  failing f = {.fail_at = 0};
  cohort_model_set_batchnorm_sync(m, failing_sync, &f);
  cohort_status st = cohort_model_forward(m, &x, &y);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", cohort_last_error());
  ASSERT_STATUS(st, COHORT_ERR_REMOTE);
  ASSERT_CONTAINS(msg, "batchnorm2d 'bn'");
  ASSERT_CONTAINS(msg, "rank 1 went away");
  ASSERT_EQ(f.counts[0], 2 * CH + 1);
  /* the failed forward left nothing to go back through */
  ASSERT_STATUS(cohort_model_backward(m, batch_g), COHORT_ERR_INVALID);

  /* forward syncs once, backward once more (2 * CH gradient sums); fail the backward one */
  f = (failing){.fail_at = 1};
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  st = cohort_model_backward(m, batch_g);
  snprintf(msg, sizeof msg, "%s", cohort_last_error());
  ASSERT_STATUS(st, COHORT_ERR_REMOTE);
  ASSERT_CONTAINS(msg, "gradient sums");
  ASSERT_EQ(f.calls, 2);
  ASSERT_EQ(f.counts[1], 2 * CH);

  /* eval mode uses the running statistics: no sync at all */
  f = (failing){.fail_at = 0};
  cohort_model_set_training(m, 0);
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  ASSERT_EQ(f.calls, 0);

  /* cleared: training forward and backward run locally again */
  cohort_model_set_training(m, 1);
  cohort_model_set_batchnorm_sync(m, NULL, NULL);
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  ASSERT_OK(cohort_model_backward(m, batch_g));
  ASSERT_EQ(f.calls, 0);

  /* cleared between a synced forward and its backward: refused rather than mixing statistics */
  cohort_model_set_batchnorm_sync(m, failing_sync, &f);
  f = (failing){.fail_at = -1};
  ASSERT_OK(cohort_model_forward(m, &x, &y));
  cohort_model_set_batchnorm_sync(m, NULL, NULL);
  ASSERT_STATUS(cohort_model_backward(m, batch_g), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "cleared before backward");
  cohort_model_destroy(m);
}

static cohort_status halving_sync(void *user, double *sums, size_t count) {
  sums[count - 1] /= 2.0; /* a "sum" that lost samples, e.g. a mean instead of a sum */
  return COHORT_OK;
}

TEST(a_sync_that_does_not_sum_the_counts_is_refused) {
  make_batch();
  cohort_model *m;
  ASSERT_OK(make_model(&m));
  int64_t shape[4] = {4, CIN, HW, HW};
  cohort_tensor x;
  const cohort_tensor *y;
  ASSERT_OK(cohort_tensor_wrap(&x, batch_x, 4, shape));
  cohort_model_set_batchnorm_sync(m, halving_sync, NULL);
  ASSERT_STATUS(cohort_model_forward(m, &x, &y), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "sample count of 50");
  ASSERT_CONTAINS(cohort_last_error(), "this one has 100");
  cohort_model_destroy(m);
}

COHORT_TEST_MAIN(TEST_CASE(two_equal_replicas_match_the_whole_batch),
                 TEST_CASE(unequal_replicas_weigh_samples_by_the_global_count),
                 TEST_CASE(without_sync_replicas_differ_from_the_whole_batch), TEST_CASE(through_the_ddp_engine),
                 TEST_CASE(through_the_ddp_engine_turned_off_replicas_differ), TEST_CASE(ddp_sync_batchnorm_arguments),
                 TEST_CASE(a_failing_sync_stops_forward_and_backward_with_its_status),
                 TEST_CASE(a_sync_that_does_not_sum_the_counts_is_refused))
