/* coll_check.c: see coll_check.h. */
#include "coll_check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll/coll.h"
#include "core/reduce.h"

/* Inputs are small integers so that every sum and product is exact in every dtype; only AVG rounds. A product
 * takes at most 15 factors of 2 per element in any world (every rank below 8 doubles the elements i % 3 == 0, one
 * in eight of ranks 8 to 63 doubles any element, ranks from 64 on only flip signs): 2^15 fits f16 (largest value
 * 65504) and i32, where one factor of 2 per rank would overflow f16 from 16 ranks on and wrap i32 to 0 from 32. */
static double input(int rank, size_t i, cohort_dtype d, cohort_op op) {
  if (d == COHORT_BOOL) { /* mostly true for the ands, mostly false for the ors; true is 1 or 2 (any non-zero) */
    int ands = op == COHORT_PROD || op == COHORT_MIN || op == COHORT_BAND;
    /* periods 8 and 11 in i, which divide REF_PERIOD; the ands are true on odd ranks, so true at odd i anywhere */
    int truth = ands ? rank % 2 == 1 || (i * 7 + (size_t)rank * 3) % 8 != 0 : (i * 7 + (size_t)rank * 13) % 11 == 0;
    return truth ? (rank % 2 ? 2 : 1) : 0;
  }
  int is_unsigned = d == COHORT_U8;
  if (op == COHORT_PROD) {
    int two = rank < 8 ? (i * 7 + (size_t)rank * 3) % 3 == 0 : rank < 64 && (i + (size_t)rank) % 8 == 0;
    double v = two ? 2 : 1;
    if (!is_unsigned && (i + (size_t)rank) % 5 == 0) v = -v;
    return v;
  }
  double v = (double)((i * 7 + (size_t)rank * 13) % 11);
  return is_unsigned ? v : v - 5;
}

static void store_value(void *buf, size_t i, cohort_dtype d, double v) {
  switch (d) {
  case COHORT_F32:
    ((float *)buf)[i] = (float)v;
    break;
  case COHORT_F64:
    ((double *)buf)[i] = v;
    break;
  case COHORT_F16:
    ((uint16_t *)buf)[i] = cohort__f32_to_f16((float)v);
    break;
  case COHORT_BF16:
    ((uint16_t *)buf)[i] = cohort__f32_to_bf16((float)v);
    break;
  case COHORT_I32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case COHORT_I64:
    ((int64_t *)buf)[i] = (int64_t)v;
    break;
  case COHORT_U8:
  case COHORT_BOOL:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case COHORT_I8:
    ((int8_t *)buf)[i] = (int8_t)v;
    break;
  case COHORT_I16:
    ((int16_t *)buf)[i] = (int16_t)v;
    break;
  default:
    break;
  }
}

static double load_value(const void *buf, size_t i, cohort_dtype d) {
  switch (d) {
  case COHORT_F32:
    return ((const float *)buf)[i];
  case COHORT_F64:
    return ((const double *)buf)[i];
  case COHORT_F16:
    return cohort__f16_to_f32(((const uint16_t *)buf)[i]);
  case COHORT_BF16:
    return cohort__bf16_to_f32(((const uint16_t *)buf)[i]);
  case COHORT_I32:
    return ((const int32_t *)buf)[i];
  case COHORT_I64:
    return (double)((const int64_t *)buf)[i];
  case COHORT_U8:
  case COHORT_BOOL:
    return ((const uint8_t *)buf)[i];
  case COHORT_I8:
    return ((const int8_t *)buf)[i];
  case COHORT_I16:
    return ((const int16_t *)buf)[i];
  default:
    return NAN;
  }
}

/* Wraps an exact integer to the range of a signed type of `bits` bits (two's complement, as the kernels do). */
static double wrap_signed(double v, int bits) {
  double m = ldexp(1, bits), h = m / 2;
  v = fmod(v, m);
  if (v >= h) v -= m;
  if (v < -h) v += m;
  return v;
}

static int is_float(cohort_dtype d) {
  return d == COHORT_F32 || d == COHORT_F64 || d == COHORT_F16 || d == COHORT_BF16;
}

/* Whether the library takes op on d: bitwise ops are for integers (and bool), avg is not for bool. */
static int op_applies(cohort_dtype d, cohort_op op) {
  if (op >= COHORT_BAND && is_float(d)) return 0;
  return !(op == COHORT_AVG && d == COHORT_BOOL);
}

static double reference(int n, size_t i, cohort_dtype d, cohort_op op) {
  if (d == COHORT_BOOL) { /* or, and, xor of the truths */
    int acc = input(0, i, d, op) != 0;
    for (int r = 1; r < n; r++) {
      int v = input(r, i, d, op) != 0;
      if (op == COHORT_PROD || op == COHORT_MIN || op == COHORT_BAND)
        acc = acc && v;
      else if (op == COHORT_BXOR)
        acc = acc ^ v;
      else
        acc = acc || v;
    }
    return acc;
  }
  double acc = input(0, i, d, op);
  for (int r = 1; r < n; r++) {
    double v = input(r, i, d, op);
    switch (op) {
    case COHORT_BAND:
      acc = (double)((int64_t)acc & (int64_t)v);
      break;
    case COHORT_BOR:
      acc = (double)((int64_t)acc | (int64_t)v);
      break;
    case COHORT_BXOR:
      acc = (double)((int64_t)acc ^ (int64_t)v);
      break;
    case COHORT_PROD:
      acc *= v;
      break;
    case COHORT_MIN:
      acc = v < acc ? v : acc;
      break;
    case COHORT_MAX:
      acc = v > acc ? v : acc;
      break;
    default:
      acc += v;
      break;
    }
  }
  /* u8 wraps, as documented: the product at 8 ranks (2^8), the sum (and so the average) from 51 ranks on */
  if (d == COHORT_U8 && op != COHORT_MIN && op != COHORT_MAX) acc = fmod(acc, 256);
  /* i8 and i16 wrap too: sums of the large worlds, products of 2^15 in i16 and 2^7 in i8 */
  if (d == COHORT_I8) acc = wrap_signed(acc, 8);
  if (d == COHORT_I16) acc = wrap_signed(acc, 16);
  if (op == COHORT_AVG) {
    int integer = !is_float(d);
    acc = integer ? trunc(acc / n) : acc / n;
  }
  return acc;
}

/* The inputs repeat in i with period 11 (sums: i * 7 mod 11) and 120 (products: i mod 3, 8 and 5), so the reference
 * does too. A check of more elements than that takes the reference from a table of one period, so that checking a
 * count of a million at 64 ranks costs a million lookups, not 64 million additions, on every rank. */
enum { REF_PERIOD = 1320 };
typedef struct ref_table {
  int n, tabled;
  cohort_dtype d;
  cohort_op op;
  double v[REF_PERIOD];
} ref_table;

static void ref_init(ref_table *t, int n, cohort_dtype d, cohort_op op, size_t count) {
  *t = (ref_table){.n = n, .d = d, .op = op, .tabled = count > REF_PERIOD};
  for (size_t i = 0; t->tabled && i < REF_PERIOD; i++)
    t->v[i] = reference(n, i, d, op);
}

static double ref_at(const ref_table *t, size_t i) {
  return t->tabled ? t->v[i % REF_PERIOD] : reference(t->n, i, t->d, t->op);
}

/* Where the checks' buffers come from: malloc, or cohort_alloc (coll_check_use_arena); per thread, because the
 * in-process tests run one rank's checks on each thread. */
static _Thread_local int use_arena;
static _Thread_local int arena_misses;

void coll_check_use_arena(int on) { use_arena = on; }

static _Thread_local unsigned dtype_mask = ~0u;

void coll_check_use_dtypes(unsigned mask) { dtype_mask = mask; }

static int skipped(int d) { return !(dtype_mask >> d & 1u); }

/* On a transport with a shared arena (shm, and tcp+shm across nodes) every buffer must land in it, or the checks
 * would run on the staged path while claiming zero copy; elsewhere cohort_alloc is malloc. */
static void *buffer(cohort_comm *c, size_t bytes) {
  if (!use_arena) return malloc(bytes);
  void *p = cohort_alloc(c, bytes);
  if (p && coll_check_has_arena(c) && !cohort_in_arena(c, p, bytes)) {
    fprintf(stderr, "rank %d: cohort_alloc(%zu) on %s gave memory outside the shared arena\n", cohort_rank(c), bytes,
            cohort_transport_name(c));
    arena_misses++;
  }
  return p;
}

/* The misses since the last call, counted as failed checks. */
static int take_arena_misses(void) {
  int m = arena_misses;
  arena_misses = 0;
  return m;
}

static void release(cohort_comm *c, void *p) {
  if (use_arena)
    cohort_free(c, p);
  else
    free(p);
}

static double tolerance(cohort_dtype d, double expect) {
  double mag = fabs(expect);
  switch (d) {
  case COHORT_F32:
    return mag * 1e-6;
  case COHORT_F64:
    return mag * 1e-12;
  case COHORT_F16:
    return mag * (1.0 / 1024);
  case COHORT_BF16:
    return mag * (1.0 / 128);
  default:
    return 0;
  }
}

static int report(const char *what, cohort_dtype d, cohort_op op, size_t count, size_t i, double got, double want,
                  int rank) {
  fprintf(stderr, "rank %d: %s %s %s count=%zu: element %zu is %.9g, expected %.9g\n", rank, what, cohort_dtype_name(d),
          cohort_op_name(op), count, i, got, want);
  return 1;
}

static int call_failed(const char *what, cohort_status st, int rank) {
  fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, what, cohort_strerror(st), cohort_last_error());
  return 1;
}

static int check_allreduce(cohort_comm *c, size_t count, cohort_dtype d, cohort_op op, int in_place) {
  int r = cohort_rank(c), n = cohort_size(c);
  size_t es = cohort_dtype_size(d);
  char *send = buffer(c, count * es + 1), *recv = buffer(c, count * es + 1);
  for (size_t i = 0; i < count; i++)
    store_value(send, i, d, input(r, i, d, op));
  memset(recv, 0x5a, count * es + 1);
  if (in_place) memcpy(recv, send, count * es);
  cohort_status st = cohort_allreduce(c, in_place ? recv : send, recv, count, d, op);
  int bad = 0;
  if (st != COHORT_OK) bad = call_failed("allreduce", st, r);
  ref_table ref;
  ref_init(&ref, n, d, op, count);
  for (size_t i = 0; i < count && !bad; i++) {
    double want = ref_at(&ref, i), got = load_value(recv, i, d);
    if (fabs(got - want) > tolerance(d, want))
      bad = report(in_place ? "allreduce(in place)" : "allreduce", d, op, count, i, got, want, r);
  }
  release(c, send);
  release(c, recv);
  return bad;
}

static int check_reduce_scatter(cohort_comm *c, size_t count, cohort_dtype d, cohort_op op) {
  int r = cohort_rank(c), n = cohort_size(c);
  size_t es = cohort_dtype_size(d), total = count * (size_t)n;
  char *send = buffer(c, total * es + 1), *recv = buffer(c, count * es + 1);
  for (size_t i = 0; i < total; i++)
    store_value(send, i, d, input(r, i, d, op));
  memset(recv, 0x5a, count * es + 1);
  cohort_status st = cohort_reduce_scatter(c, send, recv, count, d, op);
  int bad = 0;
  if (st != COHORT_OK) bad = call_failed("reduce_scatter", st, r);
  ref_table ref;
  ref_init(&ref, n, d, op, count);
  for (size_t j = 0; j < count && !bad; j++) {
    double want = ref_at(&ref, (size_t)r * count + j), got = load_value(recv, j, d);
    if (fabs(got - want) > tolerance(d, want)) bad = report("reduce_scatter", d, op, count, j, got, want, r);
  }
  release(c, send);
  release(c, recv);
  return bad;
}

static int check_allgather(cohort_comm *c, size_t count, cohort_dtype d) {
  int r = cohort_rank(c), n = cohort_size(c);
  size_t es = cohort_dtype_size(d), total = count * (size_t)n;
  char *send = buffer(c, count * es + 1), *recv = buffer(c, total * es + 1);
  for (size_t i = 0; i < count; i++)
    store_value(send, i, d, input(r, i, d, COHORT_SUM));
  memset(recv, 0x5a, total * es + 1);
  cohort_status st = cohort_allgather(c, send, recv, count, d);
  int bad = 0;
  if (st != COHORT_OK) bad = call_failed("allgather", st, r);
  for (size_t i = 0; i < total && !bad; i++) {
    double want = input((int)(i / (count ? count : 1)), i % (count ? count : 1), d, COHORT_SUM),
           got = load_value(recv, i, d);
    if (got != want) bad = report("allgather", d, COHORT_SUM, count, i, got, want, r);
  }
  release(c, send);
  release(c, recv);
  return bad;
}

static int check_broadcast(cohort_comm *c, size_t count, cohort_dtype d, int root) {
  int r = cohort_rank(c);
  size_t es = cohort_dtype_size(d);
  char *buf = buffer(c, count * es + 1);
  if (r == root)
    for (size_t i = 0; i < count; i++)
      store_value(buf, i, d, input(root, i, d, COHORT_SUM));
  else
    memset(buf, 0x5a, count * es + 1);
  cohort_status st = cohort_broadcast(c, buf, count, d, root);
  int bad = 0;
  if (st != COHORT_OK) bad = call_failed("broadcast", st, r);
  for (size_t i = 0; i < count && !bad; i++) {
    double want = input(root, i, d, COHORT_SUM), got = load_value(buf, i, d);
    if (got != want) bad = report("broadcast", d, COHORT_SUM, count, i, got, want, r);
  }
  release(c, buf);
  return bad;
}

#include "coll_check_more.inc"

int coll_check_all(cohort_comm *c, const size_t *counts, int ncounts) {
  int bad = check_refusals(c), n = cohort_size(c);
  for (int k = 0; k < ncounts && !bad; k++) {
    size_t count = counts[k];
    for (int d = 0; d < COHORT_DTYPE_COUNT; d++) {
      if (skipped(d)) continue;
      int root = (int)((count + (size_t)d) % (size_t)n), async = (k + d) % 2;
      for (int op = 0; op < COHORT_OP_COUNT; op++) {
        if (!op_applies((cohort_dtype)d, (cohort_op)op)) continue;
        bad += check_allreduce(c, count, (cohort_dtype)d, (cohort_op)op, (k + op) % 2);
        bad += check_reduce_scatter(c, count, (cohort_dtype)d, (cohort_op)op);
        bad += check_reduce(c, count, (cohort_dtype)d, (cohort_op)op, (root + op) % n, (k + op) % 2, async);
      }
      bad += check_allgather(c, count, (cohort_dtype)d);
      bad += check_broadcast(c, count, (cohort_dtype)d, root);
      bad += check_rooted(c, count, (cohort_dtype)d, root, async);
      bad += check_allgatherv(c, count, (cohort_dtype)d, k % 2, async);
      bad += check_alltoall(c, count, (cohort_dtype)d, async);
      bad += take_arena_misses();
      if (bad) return bad; /* after a failure the communicator is dead; the first message says it all */
    }
  }
  return bad;
}

int coll_check_allreduce_broadcast(cohort_comm *c, const size_t *counts, int ncounts) {
  int bad = 0, n = cohort_size(c);
  for (int k = 0; k < ncounts; k++) {
    size_t count = counts[k];
    for (int d = 0; d < COHORT_DTYPE_COUNT; d++) {
      if (skipped(d)) continue;
      for (int op = 0; op < COHORT_OP_COUNT; op++)
        if (op_applies((cohort_dtype)d, (cohort_op)op))
          bad += check_allreduce(c, count, (cohort_dtype)d, (cohort_op)op, (k + op) % 2);
      bad += check_broadcast(c, count, (cohort_dtype)d, (int)((count + (size_t)d) % (size_t)n));
      bad += take_arena_misses();
      if (bad) return bad;
    }
  }
  return bad;
}

int coll_check_async(cohort_comm *c) {
  enum { INFLIGHT = 6, COUNT = 50000 };
  int r = cohort_rank(c), n = cohort_size(c), bad = 0;
  float *bufs[INFLIGHT];
  cohort_work *work[INFLIGHT];
  for (int k = 0; k < INFLIGHT; k++) {
    bufs[k] = buffer(c, COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++)
      bufs[k][i] = (float)(r + k + i % 7);
    cohort_status st = cohort_iallreduce(c, bufs[k], bufs[k], COUNT, COHORT_F32, COHORT_SUM, &work[k]);
    if (st != COHORT_OK) return call_failed("iallreduce", st, r);
  }
  /* A blocking call issued now runs after the queued work, in issue order, on every rank. */
  float one = (float)r;
  cohort_status st = cohort_allreduce(c, &one, &one, 1, COHORT_F32, COHORT_MAX);
  if (st != COHORT_OK)
    bad += call_failed("allreduce after iallreduce", st, r);
  else if (one != (float)(n - 1))
    bad += report("allreduce after async", COHORT_F32, COHORT_MAX, 1, 0, one, n - 1, r);
  for (int k = 0; k < INFLIGHT; k++) {
    int done = 0;
    st = cohort_work_test(work[k], &done);
    if (st != COHORT_OK) bad += call_failed("cohort_work_test", st, r);
    /* Work completes in issue order, and the blocking call above came after all of it. */
    if (!done) bad += report("work_test after a later blocking call", COHORT_F32, COHORT_SUM, COUNT, 0, done, 1, r);
    st = cohort_work_wait(work[k]);
    if (st != COHORT_OK) bad += call_failed("cohort_work_wait", st, r);
    for (int i = 0; i < COUNT && !bad; i++) {
      double want = (double)n * (k + i % 7) + (double)n * (n - 1) / 2;
      if (bufs[k][i] != (float)want)
        bad += report("iallreduce", COHORT_F32, COHORT_SUM, COUNT, (size_t)i, bufs[k][i], want, r);
    }
    cohort_work_free(work[k]);
    release(c, bufs[k]);
  }
  return bad + take_arena_misses();
}

int coll_check_run_ahead(cohort_comm *c) {
  enum { CALLS = 6, COUNT = 300007 }; /* 1.2 MB a call: frames far above what a rank reads aside */
  int r = cohort_rank(c), bad = 0;
  float *bufs[CALLS];
  cohort_work *work[CALLS];
  if (r != 0) usleep(300000); /* rank 0 sends while the others have not started: it runs calls ahead of them */
  for (int k = 0; k < CALLS; k++) {
    bufs[k] = buffer(c, COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++)
      bufs[k][i] = r == 0 ? (float)(k * 100003 + i % 65521) : -1.0f;
    cohort_status st = cohort_ibroadcast(c, bufs[k], COUNT, COHORT_F32, 0, &work[k]);
    if (st != COHORT_OK) return call_failed("ibroadcast", st, r);
  }
  for (int k = 0; k < CALLS; k++) {
    cohort_status st = cohort_work_wait(work[k]);
    if (st != COHORT_OK) bad += call_failed("cohort_work_wait", st, r);
    for (int i = 0; i < COUNT && !bad; i++) {
      double want = (double)(k * 100003 + i % 65521);
      if (bufs[k][i] != (float)want)
        bad += report("ibroadcast ahead", COHORT_F32, COHORT_SUM, COUNT, (size_t)i, bufs[k][i], want, r);
    }
    cohort_work_free(work[k]);
    release(c, bufs[k]);
  }
  return bad + take_arena_misses();
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* one clock for every process of this machine */
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int coll_check_barrier(cohort_comm *c) {
  int r = cohort_rank(c), n = cohort_size(c);
  double entered = 0;
  if (r == n - 1) { /* the last rank comes late */
    usleep(200000);
    entered = now_s();
  }
  cohort_status st = cohort_barrier(c);
  double left = now_s();
  if (st != COHORT_OK) return call_failed("barrier", st, r);
  st = cohort_broadcast(c, &entered, 1, COHORT_F64, n - 1);
  if (st != COHORT_OK) return call_failed("broadcast", st, r);
  if (left < entered) {
    fprintf(stderr, "rank %d left the barrier at %.6f, before rank %d entered it at %.6f\n", r, left, n - 1, entered);
    return 1;
  }
  return 0;
}
