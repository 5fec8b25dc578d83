/* ddp_check.c: see ddp_check.h. */
#include "ddp_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/ddp.h"
#include "cohort/nn.h"
#include "coll_check.h"

#define CHECK(cond)                                                                                                    \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", cohort_rank(comm), __FILE__, __LINE__, #cond);             \
      failures++;                                                                                                      \
      goto done;                                                                                                       \
    }                                                                                                                  \
  } while (0)

#define CHECK_OK(expr)                                                                                                 \
  do {                                                                                                                 \
    cohort_status s__ = (expr);                                                                                        \
    if (s__ != COHORT_OK) {                                                                                            \
      fprintf(stderr, "rank %d: %s:%d: %s: %s: %s\n", cohort_rank(comm), __FILE__, __LINE__, #expr,                    \
              cohort_strerror(s__), cohort_last_error());                                                              \
      failures++;                                                                                                      \
      goto done;                                                                                                       \
    }                                                                                                                  \
  } while (0)

/* The overlap mode every check runs under (ddp_check_run runs them all in both). */
static _Thread_local cohort_ddp_overlap overlap_mode = COHORT_DDP_OVERLAP_ON;

static void options(cohort_ddp_options *o) {
  cohort_ddp_options_init(o);
  o->overlap = overlap_mode;
}

/* A value that depends on the rank, the step and the position, and is exactly representable. */
static float value_at(int rank, int step, size_t i) {
  return (float)((int)((i * 7 + (size_t)step * 13) % 64) - 32 + rank * 5) / 64.0f;
}

/* ---- generic parameter lists (no model) ---- */

#define NP 6
static const size_t sizes[NP] = {300, 17, 1000, 5, 250, 64};

typedef struct plist {
  float *values[NP];
  cohort_ddp_tensor t[NP];
  char names[NP][16];
} plist;

static int plist_make(plist *p, int rank, const char *rename_last) {
  memset(p, 0, sizeof *p);
  for (int i = 0; i < NP; i++) {
    p->values[i] = malloc(sizes[i] * sizeof(float));
    if (!p->values[i]) return -1;
    for (size_t k = 0; k < sizes[i]; k++)
      p->values[i][k] = value_at(rank, 100 + i, k);
    snprintf(p->names[i], sizeof p->names[i], "p%d", i);
    if (i == NP - 1 && rename_last) snprintf(p->names[i], sizeof p->names[i], "%s", rename_last);
    p->t[i].name = p->names[i];
    p->t[i].value = p->values[i];
    p->t[i].count = sizes[i];
    p->t[i].dtype = COHORT_F32;
    p->t[i].ndim = 1;
    p->t[i].shape[0] = (int64_t)sizes[i];
  }
  return 0;
}

static void plist_free(plist *p) {
  for (int i = 0; i < NP; i++)
    free(p->values[i]);
}

/* Fills every gradient with this rank's step values. */
static void fill_grads(cohort_ddp *ddp, int rank, int step) {
  for (int i = 0; i < NP; i++) {
    float *g = cohort_ddp_grad(ddp, i);
    for (size_t k = 0; k < sizes[i]; k++)
      g[k] = value_at(rank, step * 10 + i, k);
  }
}

/* The exact average over ranks (every value is a multiple of 1/64 well inside float's range, so any summation
 * order gives the same float sum; the division by the world size rounds once). */
static float expected_avg(int size, int step, int i, size_t k) {
  float sum = 0;
  for (int r = 0; r < size; r++)
    sum += value_at(r, step * 10 + i, k);
  return sum / (float)size;
}

static int check_avg(cohort_comm *comm, cohort_ddp *ddp, int step, int skip_param, int skip_rank) {
  int failures = 0, size = cohort_size(comm);
  for (int i = 0; i < NP; i++) {
    const float *g = cohort_ddp_grad(ddp, i);
    for (size_t k = 0; k < sizes[i]; k++) {
      float want = expected_avg(size, step, i, k);
      if (i == skip_param) want = (want * (float)size - value_at(skip_rank, step * 10 + i, k)) / (float)size;
      if (fabsf(g[k] - want) > 1e-6f) {
        fprintf(stderr, "rank %d: step %d param %d [%zu]: %.9g, want %.9g\n", cohort_rank(comm), step, i, k, g[k],
                want);
        return failures + 1;
      }
    }
  }
  return failures;
}

/* Uneven inputs (Join): ranks with 10, 7 and 3 batches. Each step's gradients are the average over the ranks that
 * still had data; ranks that ran out shadow the others' steps in cohort_ddp_join() until the last one arrives, and
 * then every rank holds the parameters of the one that trained longest. They equal a reference computed here with
 * the same SGD steps and averages over the ranks that had data at each step, and the engine goes on afterwards. */
static int check_uneven_inputs(cohort_comm *comm) {
  static const int batches[3] = {10, 7, 3};
  const float lr = 0.125f;
  int failures = 0, rank = cohort_rank(comm), size = cohort_size(comm);
  int mine = batches[rank % 3], longest = 0;
  for (int r = 0; r < size; r++)
    longest = batches[r % 3] > longest ? batches[r % 3] : longest;
  plist p, ref;
  cohort_ddp *ddp = NULL;
  cohort_ddp_options o;
  options(&o);
  o.uneven_inputs = 1;
  CHECK(plist_make(&p, rank, NULL) == 0);
  CHECK(plist_make(&ref, 0, NULL) == 0); /* creation gives every rank rank 0's values */
  CHECK_OK(cohort_ddp_create(comm, p.t, NP, NULL, 0, &o, &ddp));
  for (int step = 0; step < mine; step++) {
    CHECK_OK(cohort_ddp_prepare(ddp));
    int active = 0;
    for (int r = 0; r < size; r++)
      active += batches[r % 3] > step;
    CHECK(cohort_ddp_active_ranks(ddp) == active);
    fill_grads(ddp, rank, step);
    for (int i = NP - 1; i >= 0; i--)
      CHECK_OK(cohort_ddp_mark_ready(ddp, i));
    CHECK_OK(cohort_ddp_finish(ddp));
    for (int i = 0; i < NP; i++) {
      const float *g = cohort_ddp_grad(ddp, i);
      for (size_t k = 0; k < sizes[i]; k++) {
        float sum = 0; /* exact: multiples of 1/64 */
        for (int r = 0; r < size; r++)
          if (batches[r % 3] > step) sum += value_at(r, step * 10 + i, k);
        float want = sum / (float)active;
        if (fabsf(g[k] - want) > 1e-6f) {
          fprintf(stderr, "rank %d: step %d param %d [%zu]: %.9g, want %.9g (%d of %d ranks training)\n", rank, step, i,
                  k, g[k], want, active, size);
          failures++;
          goto done;
        }
        p.values[i][k] -= lr * g[k];
      }
    }
  }
  int source = cohort_ddp_join(ddp);
  if (source < 0) fprintf(stderr, "rank %d: cohort_ddp_join: %s\n", rank, cohort_last_error());
  int want_source = 0; /* the highest rank of those with the most batches */
  for (int r = 0; r < size; r++)
    if (batches[r % 3] == longest) want_source = r;
  CHECK(source == want_source);
  /* The reference: the same steps, each averaging over the ranks that had data. */
  for (int step = 0; step < longest; step++)
    for (int i = 0; i < NP; i++)
      for (size_t k = 0; k < sizes[i]; k++) {
        float sum = 0;
        int active = 0;
        for (int r = 0; r < size; r++)
          if (batches[r % 3] > step) sum += value_at(r, step * 10 + i, k), active++;
        ref.values[i][k] -= lr * (sum / (float)active);
      }
  for (int i = 0; i < NP; i++)
    for (size_t k = 0; k < sizes[i]; k++)
      if (fabsf(p.values[i][k] - ref.values[i][k]) > 1e-6f) {
        fprintf(stderr, "rank %d: after join, param %d [%zu]: %.9g, the reference %.9g\n", rank, i, k, p.values[i][k],
                ref.values[i][k]);
        failures++;
        goto done;
      }
  /* Every rank holds the same values, bit for bit. */
  for (int i = 0; i < NP; i++) {
    float *hi = malloc(sizes[i] * sizeof(float)), *lo = malloc(sizes[i] * sizeof(float));
    int same = hi && lo && cohort_allreduce(comm, p.values[i], hi, sizes[i], COHORT_F32, COHORT_MAX) == COHORT_OK &&
               cohort_allreduce(comm, p.values[i], lo, sizes[i], COHORT_F32, COHORT_MIN) == COHORT_OK &&
               memcmp(hi, lo, sizes[i] * sizeof(float)) == 0;
    free(hi);
    free(lo);
    CHECK(same);
  }
  /* The engine goes on: the next step is every rank's again. */
  CHECK_OK(cohort_ddp_prepare(ddp));
  CHECK(cohort_ddp_active_ranks(ddp) == size);
  fill_grads(ddp, rank, 50);
  for (int i = NP - 1; i >= 0; i--)
    CHECK_OK(cohort_ddp_mark_ready(ddp, i));
  CHECK_OK(cohort_ddp_finish(ddp));
  failures += check_avg(comm, ddp, 50, -1, -1);
done:
  cohort_ddp_destroy(ddp);
  plist_free(&p);
  plist_free(&ref);
  return failures;
}

/* Rank 0's parameters and buffers reach everyone at creation; buckets follow the caps in reverse order. */
static int check_create_and_layout(cohort_comm *comm) {
  int failures = 0, rank = cohort_rank(comm);
  plist p;
  cohort_ddp *ddp = NULL;
  int32_t buf[3] = {rank, rank * 2, 7};
  cohort_ddp_tensor b = {.name = "steps_seen", .value = buf, .count = 3, .dtype = COHORT_I32};
  CHECK(plist_make(&p, rank, NULL) == 0);
  cohort_ddp_options o;
  options(&o);
  o.bucket_bytes = 1200 * sizeof(float);
  o.first_bucket_bytes = 300 * sizeof(float);
  CHECK_OK(cohort_ddp_create(comm, p.t, NP, &b, 1, &o, &ddp));
  for (int i = 0; i < NP; i++)
    for (size_t k = 0; k < sizes[i]; k++)
      CHECK(p.values[i][k] == value_at(0, 100 + i, k));
  CHECK(buf[0] == 0 && buf[1] == 0 && buf[2] == 7);
  /* Reverse order p5 p4 p3 p2 p1 p0 with caps 300 floats, then 1200: {p5 64, p4 250: 314 > 300} -> [p5], [p4 p3
   * p2 = 1255 > 1200] -> [p4, p3], [p2, p1, p0 = 1317] -> [p2, p1], [p0]. */
  CHECK(cohort_ddp_num_buckets(ddp) == 4);
  static const int want[4][3] = {{5, -1}, {4, 3, -1}, {2, 1, -1}, {0, -1}};
  for (int bi = 0; bi < 4; bi++) {
    const cohort_ddp_bucket *bk = cohort_ddp_bucket_at(ddp, bi);
    CHECK(bk && bk->index == bi);
    size_t count = 0;
    for (int j = 0; j < bk->num_params; j++) {
      CHECK(bk->params[j] == want[bi][j]);
      CHECK(cohort_ddp_grad(ddp, bk->params[j]) == bk->data + count); /* the gradient is a view into the bucket */
      count += sizes[bk->params[j]];
    }
    CHECK(want[bi][bk->num_params] == -1);
    CHECK(bk->count == count);
    CHECK(((uintptr_t)bk->data & 63) == 0);
    /* Where the transport has a shared arena (shm, and tcp+shm across nodes), the buckets live in it: their
     * allreduce is zero copy within the node. */
    CHECK(cohort_in_arena(comm, bk->data, count * sizeof(float)) == coll_check_has_arena(comm));
  }
  CHECK(cohort_ddp_bucket_at(ddp, 4) == NULL);
  /* broadcast_buffers (the default): every prepare() hands rank 0's buffers (e.g. batchnorm statistics) to all. */
  buf[0] = 100 + rank;
  CHECK_OK(cohort_ddp_prepare(ddp));
  CHECK(buf[0] == 100);
  CHECK(cohort_ddp_grad(ddp, NP) == NULL);
  for (int i = 0; i < NP; i++)
    for (size_t k = 0; k < sizes[i]; k++)
      CHECK(cohort_ddp_grad(ddp, i)[k] == 0.0f);
  cohort_ddp_destroy(ddp);
  ddp = NULL;
  /* Without it, each rank keeps its own buffers between steps (they are still made equal at creation). */
  o.broadcast_buffers = 0;
  CHECK_OK(cohort_ddp_create(comm, p.t, NP, &b, 1, &o, &ddp));
  buf[0] = 100 + rank;
  CHECK_OK(cohort_ddp_prepare(ddp));
  CHECK(buf[0] == 100 + rank);
done:
  cohort_ddp_destroy(ddp);
  plist_free(&p);
  return failures;
}

/* Gradients arriving in a different order on each rank still average correctly (buckets launch in the same order
 * everywhere), and after the first step the buckets follow the order rank 0 observed. */
static int check_ready_order_and_rebuild(cohort_comm *comm) {
  int failures = 0, rank = cohort_rank(comm), size = cohort_size(comm);
  plist p;
  cohort_ddp *ddp = NULL;
  CHECK(plist_make(&p, rank, NULL) == 0);
  cohort_ddp_options o;
  options(&o);
  o.bucket_bytes = 1200 * sizeof(float);
  o.first_bucket_bytes = 300 * sizeof(float);
  CHECK_OK(cohort_ddp_create(comm, p.t, NP, NULL, 0, &o, &ddp));
  static const int order0[NP] = {2, 0, 5, 1, 4, 3};
  for (int step = 0; step < 3; step++) {
    fill_grads(ddp, rank, step);
    CHECK_OK(cohort_ddp_prepare(ddp));
    for (int j = 0; j < NP; j++) {
      int i = rank == 0 ? order0[j] : rank % 2 ? j : NP - 1 - j;
      CHECK_OK(cohort_ddp_mark_ready(ddp, i));
    }
    CHECK_OK(cohort_ddp_finish(ddp));
    failures += check_avg(comm, ddp, step, -1, -1);
    if (failures) goto done;
    if (step == 0) {
      /* Rebuilt from rank 0's order {2, 0, 5, 1, 4, 3}: [2] (1000 floats alone in the 300-float first bucket),
       * then [0 5 1 4 3] (636 floats <= 1200). */
      static const int want1[NP - 1] = {0, 5, 1, 4, 3};
      CHECK(cohort_ddp_num_buckets(ddp) == 2);
      CHECK(cohort_ddp_bucket_at(ddp, 0)->num_params == 1 && cohort_ddp_bucket_at(ddp, 0)->params[0] == 2);
      CHECK(cohort_ddp_bucket_at(ddp, 1)->num_params == NP - 1);
      for (int j = 0; j < NP - 1; j++)
        CHECK(cohort_ddp_bucket_at(ddp, 1)->params[j] == want1[j]);
      const cohort_ddp_bucket *b1 = cohort_ddp_bucket_at(ddp, 1); /* the new layout is in the arena too */
      CHECK(cohort_in_arena(comm, b1->data, b1->count * sizeof(float)) == coll_check_has_arena(comm));
    }
  }
  cohort_ddp_stats s;
  cohort_ddp_get_stats(ddp, &s);
  CHECK(s.steps == 3);
  CHECK(s.bytes_per_step == (300 + 17 + 1000 + 5 + 250 + 64) * sizeof(float));
  CHECK(s.num_buckets == 2);
  CHECK(s.compute_s >= 0 && s.exposed_comm_s >= 0 && s.comm_s >= 0);
  CHECK(size == 1 || s.comm_s > 0);
  /* Marking a parameter twice in one step is an error naming it (a local bug: it aborts the step). */
done:
  cohort_ddp_destroy(ddp);
  plist_free(&p);
  return failures;
}

/* find_unused_params: a parameter that got no gradient on one rank counts as zero there. */
static int check_unused(cohort_comm *comm) {
  int failures = 0, rank = cohort_rank(comm), size = cohort_size(comm);
  plist p;
  cohort_ddp *ddp = NULL;
  CHECK(plist_make(&p, rank, NULL) == 0);
  cohort_ddp_options o;
  options(&o);
  o.find_unused_params = 1;
  o.bucket_bytes = 600 * sizeof(float);
  CHECK_OK(cohort_ddp_create(comm, p.t, NP, NULL, 0, &o, &ddp));
  const int skip_rank = size - 1, skip_param = 1;
  for (int step = 0; step < 2; step++) {
    fill_grads(ddp, rank, step);
    /* a stale value that must not survive: the unused gradient is zero-filled */
    if (rank == skip_rank) cohort_ddp_grad(ddp, skip_param)[0] = 1e6f;
    CHECK_OK(cohort_ddp_prepare(ddp));
    for (int i = NP - 1; i >= 0; i--)
      if (!(rank == skip_rank && i == skip_param)) CHECK_OK(cohort_ddp_mark_ready(ddp, i));
    CHECK_OK(cohort_ddp_finish(ddp));
    failures += check_avg(comm, ddp, step, skip_param, skip_rank);
    if (failures) goto done;
  }
done:
  cohort_ddp_destroy(ddp);
  plist_free(&p);
  return failures;
}

/* f16 and bf16 compression: the average within the format's rounding, and the error it adds is printed. */
static int check_compression(cohort_comm *comm) {
  int failures = 0, rank = cohort_rank(comm), size = cohort_size(comm);
  plist p;
  cohort_ddp *ddp = NULL;
  CHECK(plist_make(&p, rank, NULL) == 0);
  for (int kind = COHORT_DDP_COMPRESS_F16; kind <= COHORT_DDP_COMPRESS_BF16; kind++) {
    cohort_ddp_options o;
    options(&o);
    o.compression = (cohort_ddp_compression)kind;
    CHECK_OK(cohort_ddp_create(comm, p.t, NP, NULL, 0, &o, &ddp));
    double max_rel = 0;
    for (int step = 0; step < 2; step++) {
      /* values with full f32 mantissas, so that rounding really happens */
      for (int i = 0; i < NP; i++)
        for (size_t k = 0; k < sizes[i]; k++)
          cohort_ddp_grad(ddp, i)[k] = sinf((float)(k + 1) * 0.37f + (float)(rank + 1) * 1.3f + (float)step);
      CHECK_OK(cohort_ddp_prepare(ddp));
      for (int i = NP - 1; i >= 0; i--)
        CHECK_OK(cohort_ddp_mark_ready(ddp, i));
      CHECK_OK(cohort_ddp_finish(ddp));
      for (int i = 0; i < NP; i++)
        for (size_t k = 0; k < sizes[i]; k++) {
          double want = 0;
          for (int r = 0; r < size; r++)
            want += sin((double)(k + 1) * 0.37 + (double)(r + 1) * 1.3 + step);
          want /= size;
          double err = fabs(cohort_ddp_grad(ddp, i)[k] - want);
          if (err / 1.0 > max_rel) max_rel = err; /* |values| <= 1: absolute error relative to the scale */
        }
    }
    /* Each hop rounds once: a handful of half-ulps of 1 (f16: 2^-11, bf16: 2^-8). */
    double bound = (kind == COHORT_DDP_COMPRESS_F16 ? 1.0 / 2048 : 1.0 / 256) * (size + 1);
    if (rank == 0)
      printf("ddp compression %s on %d ranks: max abs error %.3g for values in [-1, 1] (bound %.3g)\n",
             kind == COHORT_DDP_COMPRESS_F16 ? "f16" : "bf16", size, max_rel, bound);
    CHECK(max_rel <= bound);
    CHECK(size == 1 || max_rel > 0); /* it really went through the narrow format */
    cohort_ddp_destroy(ddp);
    ddp = NULL;
  }
done:
  cohort_ddp_destroy(ddp);
  plist_free(&p);
  return failures;
}

/* A user comm hook: sum, then scale in complete; called once per bucket per step. */
typedef struct hook_state {
  int launches, completes;
  int size;
} hook_state;

static cohort_status sum_launch(void *user, cohort_comm *c, const cohort_ddp_bucket *b, cohort_work **work) {
  ((hook_state *)user)->launches++;
  return cohort_iallreduce(c, b->data, b->data, b->count, COHORT_F32, COHORT_SUM, work);
}
static cohort_status scale_complete(void *user, cohort_comm *c, const cohort_ddp_bucket *b) {
  (void)c;
  hook_state *h = user;
  h->completes++;
  for (size_t k = 0; k < b->count; k++)
    b->data[k] /= (float)h->size;
  return COHORT_OK;
}

static int check_comm_hook(cohort_comm *comm) {
  int failures = 0, rank = cohort_rank(comm);
  plist p;
  cohort_ddp *ddp = NULL;
  hook_state h = {0, 0, cohort_size(comm)};
  CHECK(plist_make(&p, rank, NULL) == 0);
  cohort_ddp_options o;
  options(&o);
  o.bucket_bytes = 600 * sizeof(float);
  o.static_bucket_order = 1;
  CHECK_OK(cohort_ddp_create(comm, p.t, NP, NULL, 0, &o, &ddp));
  cohort_ddp_comm_hook hook = {sum_launch, scale_complete, &h};
  CHECK_OK(cohort_ddp_set_comm_hook(ddp, &hook));
  for (int step = 0; step < 2; step++) {
    fill_grads(ddp, rank, step);
    CHECK_OK(cohort_ddp_prepare(ddp));
    for (int i = NP - 1; i >= 0; i--)
      CHECK_OK(cohort_ddp_mark_ready(ddp, i));
    CHECK_OK(cohort_ddp_finish(ddp));
    failures += check_avg(comm, ddp, step, -1, -1);
    if (failures) goto done;
  }
  CHECK(h.launches == 2 * cohort_ddp_num_buckets(ddp));
  CHECK(h.completes == h.launches);
  CHECK(cohort_ddp_num_buckets(ddp) >= 3);
done:
  cohort_ddp_destroy(ddp);
  plist_free(&p);
  return failures;
}

/* Different models on different ranks: every rank gets the mismatch, naming the last rank and the parameter. */
static int check_mismatch(cohort_comm *comm) {
  int failures = 0, rank = cohort_rank(comm), size = cohort_size(comm);
  plist p;
  cohort_ddp *ddp = NULL;
  if (size == 1) return 0;
  CHECK(plist_make(&p, rank, rank == size - 1 ? "p5_renamed" : NULL) == 0);
  cohort_status st = cohort_ddp_create(comm, p.t, NP, NULL, 0, NULL, &ddp);
  CHECK(st == COHORT_ERR_MISMATCH);
  CHECK(ddp == NULL);
  char want[64];
  snprintf(want, sizeof want, "rank %d", size - 1);
  CHECK(strstr(cohort_last_error(), want) != NULL);
  CHECK(strstr(cohort_last_error(), "p5_renamed") != NULL);
  CHECK(strstr(cohort_last_error(), "'p5'") != NULL);
  /* A shape difference is named the same way, and the communicator is still usable afterwards. */
  p.t[2].shape[0] = rank == size - 1 ? 10 : 1000;
  p.t[2].ndim = 1;
  p.t[2].count = rank == size - 1 ? 10 : 1000;
  snprintf(p.names[NP - 1], sizeof p.names[NP - 1], "p5");
  st = cohort_ddp_create(comm, p.t, NP, NULL, 0, NULL, &ddp);
  CHECK(st == COHORT_ERR_MISMATCH);
  CHECK(strstr(cohort_last_error(), "'p2' f32 shape [10]") != NULL);
  CHECK_OK(cohort_barrier(comm));
done:
  cohort_ddp_destroy(ddp);
  plist_free(&p);
  return failures;
}

/* ---- with a model ---- */

#define IN 12
#define CLASSES 4
#define BATCH 6

static void make_batch(int rank, int step, int n, int offset, float *x, int32_t *labels) {
  for (int s = 0; s < n; s++) {
    int id = rank * 1000 + step * 100 + offset + s;
    for (int f = 0; f < IN; f++)
      x[s * IN + f] = sinf((float)(id * IN + f) * 0.731f);
    labels[s] = (id * 7 + 3) % CLASSES;
  }
}

/* forward + loss gradient (scaled) + backward on n samples. */
static cohort_status fwd_bwd(cohort_model *m, const float *x, const int32_t *labels, int n, float scale) {
  cohort_tensor t;
  int64_t shape[4] = {n, 1, 3, 4};
  const cohort_tensor *logits;
  float loss, dl[64 * CLASSES];
  cohort_status st = cohort_tensor_wrap(&t, (float *)x, 4, shape);
  if (st == COHORT_OK) st = cohort_model_forward(m, &t, &logits);
  if (st == COHORT_OK) st = cohort_softmax_xent(logits, labels, &loss, dl, NULL);
  for (int k = 0; k < n * CLASSES; k++)
    dl[k] *= scale;
  if (st == COHORT_OK) st = cohort_model_backward(m, dl);
  return st;
}

/*
 * The engine (buckets of at most bucket_bytes, the first of first_bucket_bytes, at least min_buckets of them)
 * against a plain allreduce of the whole gradient after backward, on an MLP of hidden units, over 5 optimizer
 * steps: within 1e-6. Both models run the same products on the same shapes, so whatever kernels the CPU has, their
 * gradients are bitwise equal and only the allreduce may sum the ranks in another order: on 2 ranks a + b either
 * way (bitwise), on 3 by at most 2 u (u = 2^-24) of the sum of the ranks' gradient magnitudes (below 1 here) per
 * element. Through lr 0.2 and momentum 0.9 (a step's error stays in the buffer: 1 + 0.9 + ... + 0.9^4 = 4.1 times)
 * over 5 steps that is at most 5 x 0.2 x 4.1 x 2u = 4.9e-7, under the 1e-6 allowed.
 */
static int matches_fused(cohort_comm *comm, int hidden, size_t bucket_bytes, size_t first_bucket_bytes,
                         int min_buckets) {
  int failures = 0, rank = cohort_rank(comm);
  cohort_model *a = NULL, *b = NULL;
  cohort_optim *oa = NULL, *ob = NULL;
  cohort_ddp *ddp = NULL;
  float x[BATCH * IN];
  int32_t y[BATCH];
  /* Different seeds per rank: the engine's creation must broadcast rank 0's weights. */
  CHECK_OK(cohort_model_create_mlp(11 + (uint64_t)rank, IN, hidden, CLASSES, &a));
  CHECK_OK(cohort_model_create_mlp(11, IN, hidden, CLASSES, &b));
  cohort_ddp_options o;
  options(&o);
  o.bucket_bytes = bucket_bytes;
  o.first_bucket_bytes = first_bucket_bytes;
  CHECK_OK(cohort_ddp_create_model(comm, a, &o, &ddp));
  CHECK(cohort_ddp_num_buckets(ddp) >= min_buckets);
  CHECK(cohort_ddp_overlapping(ddp) == (overlap_mode == COHORT_DDP_OVERLAP_ON));
  cohort_sgd_config sgd = {.lr = 0.2f, .momentum = 0.9f, .weight_decay = 1e-4f};
  CHECK_OK(cohort_optim_sgd_create(a, &sgd, &oa));
  CHECK_OK(cohort_optim_sgd_create(b, &sgd, &ob));
  const size_t total = cohort_model_param_count(b);
  for (int step = 0; step < 5; step++) {
    make_batch(rank, step, BATCH, 0, x, y);
    cohort_model_zero_grad(a);
    CHECK_OK(cohort_ddp_prepare(ddp));
    cohort_ddp_span_begin(ddp, COHORT_SPAN_BACKWARD);
    CHECK_OK(fwd_bwd(a, x, y, BATCH, 1.0f));
    CHECK_OK(cohort_ddp_finish(ddp));
    cohort_ddp_span_begin(ddp, COHORT_SPAN_OPTIMIZER);
    CHECK_OK(cohort_optim_step(oa));
    cohort_ddp_span_end(ddp, COHORT_SPAN_OPTIMIZER);

    cohort_model_zero_grad(b);
    CHECK_OK(fwd_bwd(b, x, y, BATCH, 1.0f));
    CHECK_OK(cohort_allreduce(comm, cohort_model_param(b, 0)->grad, cohort_model_param(b, 0)->grad, total, COHORT_F32,
                              COHORT_AVG));
    CHECK_OK(cohort_optim_step(ob));
    const float *va = cohort_model_param_data(a), *vb = cohort_model_param_data(b);
    double worst = 0;
    for (size_t k = 0; k < total; k++)
      worst = fmax(worst, fabs((double)va[k] - (double)vb[k]));
    if (worst > 1e-6) fprintf(stderr, "rank %d: step %d: engine and fused differ by %.3g\n", rank, step, worst);
    CHECK(worst <= 1e-6);
  }
  /* The replicas agree bit for bit. */
  char hex[COHORT_HASH_HEX_LEN], all[8][64];
  CHECK(cohort_size(comm) <= 8);
  CHECK_OK(cohort_model_hash(a, hex));
  CHECK_OK(cohort_allgather(comm, hex, all, 64, COHORT_U8));
  for (int r = 0; r < cohort_size(comm); r++)
    CHECK(memcmp(all[r], all[0], 64) == 0);
done:
  cohort_optim_destroy(oa);
  cohort_optim_destroy(ob);
  cohort_ddp_destroy(ddp);
  cohort_model_destroy(a);
  cohort_model_destroy(b);
  return failures;
}

/* Small buckets: fc2.bias+fc2.weight | fc1.bias | fc1.weight ... (all within the node allreduce's small path). */
static int check_matches_fused(cohort_comm *comm) {
  return matches_fused(comm, 40, 256 * sizeof(float), 64 * sizeof(float), 3);
}

/* Buckets far above the small path (64 KiB): fc1.weight alone is 1.4 MB, several chunks of the node allreduce, so
 * where the buckets lie in the shared arena their allreduce is the zero-copy one (the push on one host; reading
 * node peers in place around the exchange across nodes on tcp+shm), against fused's staged one. */
static int check_matches_fused_large(cohort_comm *comm) {
  return matches_fused(comm, 30000, (size_t)1 << 20, (size_t)64 << 10, 3);
}

/*
 * Gradient accumulation: K micro-steps of batch B without sync, then one with, equal one step of batch K*B up to
 * float32 rounding. The two compute every gradient element as a different float32 sum of the same per-sample
 * terms (BLAS kernels block a 6-row and an 18-row product differently, and which kernels run depends on the CPU),
 * so each may be off the exact sum by gamma(n) = n * u / (1 - n * u) of the sum of the terms' magnitudes, n the
 * longest sum involved (u = 2^-24); the two by twice that. The magnitudes come from the per-sample gradients.
 */
static int check_accumulation(cohort_comm *comm) {
  enum { K = 3, HIDDEN = 24 };
  int failures = 0, rank = cohort_rank(comm);
  cohort_model *a = NULL, *b = NULL, *c = NULL;
  cohort_ddp *ddp = NULL;
  double *magnitude = NULL;
  float x[K * BATCH * IN];
  int32_t y[K * BATCH];
  CHECK_OK(cohort_model_create_mlp(5, IN, HIDDEN, CLASSES, &a));
  CHECK_OK(cohort_model_create_mlp(5, IN, HIDDEN, CLASSES, &b));
  CHECK_OK(cohort_model_create_mlp(5, IN, HIDDEN, CLASSES, &c));
  cohort_ddp_options o;
  options(&o);
  o.bucket_bytes = 128 * sizeof(float);
  CHECK_OK(cohort_ddp_create_model(comm, a, &o, &ddp));
  make_batch(rank, 0, K * BATCH, 0, x, y);
  cohort_model_zero_grad(a);
  for (int micro = 0; micro < K; micro++) {
    cohort_ddp_set_sync(ddp, micro == K - 1);
    CHECK_OK(cohort_ddp_prepare(ddp));
    CHECK_OK(fwd_bwd(a, x + micro * BATCH * IN, y + micro * BATCH, BATCH, 1.0f / K));
    CHECK_OK(cohort_ddp_finish(ddp));
  }
  cohort_model_zero_grad(b);
  CHECK_OK(fwd_bwd(b, x, y, K * BATCH, 1.0f));
  const size_t total = cohort_model_param_count(b);
  CHECK_OK(cohort_allreduce(comm, cohort_model_param(b, 0)->grad, cohort_model_param(b, 0)->grad, total, COHORT_F32,
                            COHORT_AVG));
  /* magnitude[k]: the mean over the job's samples of |d loss_s / d param_k|, the terms of gradient element k. */
  CHECK((magnitude = calloc(total, sizeof *magnitude)) != NULL);
  for (int s = 0; s < K * BATCH; s++) {
    cohort_model_zero_grad(c);
    CHECK_OK(fwd_bwd(c, x + s * IN, y + s, 1, 1.0f / (K * BATCH * cohort_size(comm))));
    const float *g = cohort_model_param(c, 0)->grad;
    for (size_t k = 0; k < total; k++)
      magnitude[k] += fabs((double)g[k]);
  }
  CHECK_OK(cohort_allreduce(comm, magnitude, magnitude, total, COHORT_F64, COHORT_SUM));
  const double n = K * BATCH * cohort_size(comm) + (IN > HIDDEN ? IN : HIDDEN), u = 1.0 / (1 << 24);
  const double gamma = n * u / (1 - n * u);
  double worst = 0, scale = 0; /* worst: the largest difference over its bound */
  const char *worst_name = "";
  size_t at = 0, offset = 0; /* a's gradients lie in the engine's buckets, one parameter at a time */
  float worst_a = 0, worst_b = 0;
  for (int i = 0; i < cohort_model_num_params(b); i++) {
    const cohort_param *pa = cohort_model_param(a, i), *pb = cohort_model_param(b, i);
    for (size_t k = 0; k < pb->numel; k++) {
      double e = fabs((double)pa->grad[k] - (double)pb->grad[k]) / (2 * gamma * magnitude[offset + k] + 1e-30);
      if (e > worst) worst = e, at = k, worst_name = pb->name, worst_a = pa->grad[k], worst_b = pb->grad[k];
      scale = fmax(scale, fabs((double)pb->grad[k]));
    }
    offset += pb->numel;
  }
  if (worst > 1)
    fprintf(stderr,
            "rank %d: accumulated and big-batch gradients of %s[%zu]: %.9g and %.9g, %.3g of 2 gamma(%g) times "
            "the terms' magnitude apart\n",
            rank, worst_name, at, worst_a, worst_b, worst, n);
  if (rank == 0) printf("ddp accumulation: the largest difference is %.3g of its rounding bound\n", worst);
  CHECK(scale > 1e-3); /* the gradients are not trivially zero */
  CHECK(worst <= 1);
  cohort_ddp_stats s;
  cohort_ddp_get_stats(ddp, &s);
  CHECK(s.steps == 1); /* only the last micro-step synchronized */
done:
  free(magnitude);
  cohort_ddp_destroy(ddp);
  cohort_model_destroy(a);
  cohort_model_destroy(b);
  cohort_model_destroy(c);
  return failures;
}

/*
 * ZeRO-1 against the unsharded engine: 50 steps of the same batches through an engine with zero_stage 1 (state
 * sharded, the optimizer's own rule on each rank's shard, parameters allgathered) and through a plain one, with SGD
 * (momentum, dampening 0, weight decay), AdamW, or SGD with LARS or LARC (whose per-tensor norms the shards add up).
 * The only difference is the order in which the reduce-scatter and the allreduce sum the ranks' gradients (bitwise the
 * same on 2 ranks), so parameters and the gathered state agree within 1e-6. Each rank's state is its shard alone: at
 * most 1/N of the unsharded state plus the padding.
 */
enum { ZERO_SGD, ZERO_ADAMW, ZERO_LARS, ZERO_LARC };

static int zero_matches(cohort_comm *comm, int rule) {
  const int adamw = rule == ZERO_ADAMW;
  enum { HIDDEN = 40, STEPS = 50 };
  int failures = 0, rank = cohort_rank(comm), size = cohort_size(comm);
  cohort_model *a = NULL, *b = NULL;
  cohort_optim *oa = NULL, *ob = NULL;
  cohort_ddp *za = NULL, *db = NULL;
  float x[BATCH * IN];
  int32_t y[BATCH];
  CHECK_OK(cohort_model_create_mlp(21 + (uint64_t)rank, IN, HIDDEN, CLASSES, &a));
  CHECK_OK(cohort_model_create_mlp(21 + (uint64_t)rank, IN, HIDDEN, CLASSES, &b));
  cohort_ddp_options o;
  cohort_ddp_options_init(&o);
  o.bucket_bytes = 256 * sizeof(float); /* several buckets, so shards cut across buckets and parameters */
  o.first_bucket_bytes = 64 * sizeof(float);
  o.zero_stage = 1;
  CHECK_OK(cohort_ddp_create_model(comm, a, &o, &za));
  CHECK(!cohort_ddp_overlapping(za));
  options(&o);
  CHECK_OK(cohort_ddp_create_model(comm, b, &o, &db));
  cohort_sgd_config sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f};
  if (rule == ZERO_LARS || rule == ZERO_LARC) { /* each tensor's norms summed over the shards that hold its pieces */
    sgd.trust_coefficient = rule == ZERO_LARS ? 0.01f : 0.05f;
    sgd.trust_clip = rule == ZERO_LARC;
    sgd.lr = rule == ZERO_LARS ? 2.0f : 0.5f;
  }
  cohort_adamw_config aw = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
  if (adamw) {
    CHECK_OK(cohort_optim_adamw_create(a, &aw, &oa));
    CHECK_OK(cohort_optim_adamw_create(b, &aw, &ob));
  } else {
    CHECK_OK(cohort_optim_sgd_create(a, &sgd, &oa));
    CHECK_OK(cohort_optim_sgd_create(b, &sgd, &ob));
  }
  CHECK(cohort_ddp_zero_state_bytes(za) == 0);
  CHECK_OK(cohort_ddp_zero_attach(za, oa));
  CHECK(cohort_optim_step(oa) != COHORT_OK); /* sharded: only the engine may step it */
  const size_t total = cohort_model_param_count(b);
  const size_t arrays = adamw ? 2 : 1, full = arrays * total * sizeof(float);
  const size_t bytes = cohort_ddp_zero_state_bytes(za);
  if (rank == 0) printf("zero: optimizer state %zu bytes per rank, %zu unsharded, %d ranks\n", bytes, full, size);
  /* The shard is a 1/N of the padded arena (padding: at most 16 floats per bucket and 16 per rank). */
  CHECK(bytes > 0 && bytes <= full / (size_t)size + arrays * 16 * sizeof(float) * (size_t)(8 + size));
  for (int step = 0; step < STEPS; step++) {
    make_batch(rank, step, BATCH, 0, x, y);
    cohort_optim_set_lr(oa, (adamw ? aw.lr : sgd.lr) * (1.0f - (float)step / STEPS)); /* a schedule too */
    cohort_optim_set_lr(ob, cohort_optim_lr(oa));
    cohort_model_zero_grad(a);
    CHECK_OK(cohort_ddp_prepare(za));
    CHECK_OK(fwd_bwd(a, x, y, BATCH, 1.0f));
    CHECK_OK(cohort_ddp_finish(za));
    CHECK_OK(cohort_ddp_zero_step(za));
    cohort_model_zero_grad(b);
    CHECK_OK(cohort_ddp_prepare(db));
    CHECK_OK(fwd_bwd(b, x, y, BATCH, 1.0f));
    CHECK_OK(cohort_ddp_finish(db));
    CHECK_OK(cohort_optim_step(ob));
  }
  CHECK(cohort_optim_steps(oa) == STEPS);
  const float *va = cohort_model_param_data(a), *vb = cohort_model_param_data(b);
  double worst = 0, moved = 0;
  for (size_t k = 0; k < total; k++) {
    worst = fmax(worst, fabs((double)va[k] - (double)vb[k]));
    moved = fmax(moved, fabs((double)vb[k]));
  }
  if (worst > 1e-6 || rank == 0)
    printf("rank %d: zero (%s): after %d steps the parameters differ from the unsharded engine's by %.3g\n", rank,
           (const char *[]){"sgd", "adamw", "lars", "larc"}[rule], STEPS, worst);
  CHECK(worst <= 1e-6);
  /* The replicas agree bit for bit (the allgather gave every rank every shard). */
  char hex[COHORT_HASH_HEX_LEN], all[8][64];
  CHECK(size <= 8);
  CHECK_OK(cohort_model_hash(a, hex));
  CHECK_OK(cohort_allgather(comm, hex, all, 64, COHORT_U8));
  for (int r = 0; r < size; r++)
    CHECK(memcmp(all[r], all[0], 64) == 0);
  /* Gathered on the last rank, the state is the unsharded optimizer's, array by array. */
  CHECK_OK(cohort_ddp_zero_gather_state(za, size - 1));
  CHECK(cohort_optim_num_states(oa) == cohort_optim_num_states(ob));
  for (int i = 0; i < cohort_optim_num_states(ob); i++) {
    const cohort_named_array *sa = cohort_optim_state(oa, i), *sb = cohort_optim_state(ob, i);
    CHECK(!strcmp(sa->name, sb->name) && sa->count == sb->count);
    CHECK((sa->data != NULL) == (rank == size - 1));
    if (!sa->data) continue;
    double d = 0;
    for (size_t k = 0; k < sb->count; k++)
      d = fmax(d, fabs((double)sa->data[k] - (double)sb->data[k]));
    if (d > 1e-6) printf("rank %d: zero: gathered state %s differs by %.3g\n", rank, sa->name, d);
    CHECK(d <= 1e-6);
  }
done:
  cohort_optim_destroy(oa);
  cohort_optim_destroy(ob);
  cohort_ddp_destroy(za);
  cohort_ddp_destroy(db);
  cohort_model_destroy(a);
  cohort_model_destroy(b);
  return failures;
}

static int check_zero_sgd(cohort_comm *comm) { return zero_matches(comm, ZERO_SGD); }
static int check_zero_adamw(cohort_comm *comm) { return zero_matches(comm, ZERO_ADAMW); }
static int check_zero_lars(cohort_comm *comm) { return zero_matches(comm, ZERO_LARS) + zero_matches(comm, ZERO_LARC); }

const ddp_check ddp_checks[] = {
    {"create_and_layout", check_create_and_layout},
    {"ready_order_and_rebuild", check_ready_order_and_rebuild},
    {"unused", check_unused},
    {"compression", check_compression},
    {"comm_hook", check_comm_hook},
    {"mismatch", check_mismatch},
    {"matches_fused", check_matches_fused},
    {"matches_fused_large", check_matches_fused_large},
    {"accumulation", check_accumulation},
    {"uneven_inputs", check_uneven_inputs},
    {"zero_sgd", check_zero_sgd},
    {"zero_adamw", check_zero_adamw},
    {"zero_lars", check_zero_lars},
};
const int ddp_num_checks = (int)(sizeof ddp_checks / sizeof ddp_checks[0]);

int ddp_check_run(cohort_comm *comm, const char *name) {
  int failures = 0, ran = 0;
  for (int mode = COHORT_DDP_OVERLAP_ON; mode <= COHORT_DDP_OVERLAP_OFF; mode++) {
    overlap_mode = (cohort_ddp_overlap)mode;
    for (int i = 0; i < ddp_num_checks; i++) {
      if (name && strcmp(name, ddp_checks[i].name) != 0) continue;
      ran++;
      int f = ddp_checks[i].fn(comm);
      if (cohort_rank(comm) == 0 || f)
        printf("rank %d: ddp %s (overlap %s): %s\n", cohort_rank(comm), ddp_checks[i].name,
               mode == COHORT_DDP_OVERLAP_ON ? "on" : "off", f ? "FAILED" : "ok");
      failures += f;
    }
  }
  if (!ran) {
    fprintf(stderr, "no ddp check named '%s'\n", name ? name : "");
    return 1;
  }
  return failures;
}
