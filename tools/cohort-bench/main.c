/*
 * cohort-bench: collective benchmark in the nccl-tests form.
 *
 *   cohortrun -np N build/bin/cohort-bench allreduce|broadcast|allgather|reduce_scatter|barrier
 *             [--min 4K] [--max 256M] [--factor 2] [--dtype f32] [--op sum] [--iters N] [--warmup N] [--check]
 *
 * Rank 0 prints '#' header lines, then per size: size_bytes count dtype time_us algbw_GBs busbw_GBs.
 * size_bytes and count are the whole buffer (for allgather and reduce_scatter: all ranks' blocks together).
 * time_us is the mean over iters, the slowest rank's. busbw = algbw * 2(n-1)/n for allreduce, (n-1)/n for
 * allgather and reduce_scatter, 1 for broadcast (as in nccl-tests), so it compares with link bandwidth.
 * --check fills the inputs with rank-dependent values and verifies every element of one more run.
 * --zero-copy takes the buffers from cohort_alloc() (the node's shared arena, with shm and tcp+shm) instead of
 * calloc(); when they fall outside it (no arena, or a full one) a line on stderr says so. calloc() puts a large block
 * 16 bytes past a page boundary; --page-offset N puts both buffers N bytes past one instead (0 and 64 are where
 * torch's and numpy's allocators differ: docs/performance.md, "Buffers 16 bytes past a page").
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cohort/cohort.h"
#include "transport/call.h" /* the collectives' names and what their buffers hold */

typedef struct options {
  cohort__coll kind;
  const char *kind_name;
  size_t min_bytes, max_bytes;
  double factor;
  cohort_dtype dtype;
  cohort_op op;
  int iters; /* 0: automatic */
  int warmup;
  int check;
  int in_place;    /* allreduce with sendbuf == recvbuf, as MPI_IN_PLACE and torch do */
  int zero_copy;   /* buffers from cohort_alloc */
  int page_offset; /* -1: calloc's placement; else the buffers start this many bytes past a page boundary */
} options;

static void usage(FILE *f) {
  fprintf(f, "usage: cohortrun -np N cohort-bench allreduce|broadcast|allgather|reduce_scatter|barrier [options]\n"
             "  --min SIZE      smallest message, e.g. 4K (default 4K)\n"
             "  --max SIZE      largest message, e.g. 256M (default 256M)\n"
             "  --factor F      size multiplier between lines (default 2)\n"
             "  --dtype T       f32 f64 f16 bf16 i32 i64 u8 (default f32)\n"
             "  --op OP         sum avg min max prod (default sum)\n"
             "  --iters N       timed iterations per size (default: about 0.2 s worth, 5 to 1000)\n"
             "  --warmup N      untimed iterations per size (default 3)\n"
             "  --in-place      allreduce/reduce in place (sendbuf == recvbuf), as the OpenMPI and torch anchors do\n"
             "  --check         verify every result element\n"
             "  --zero-copy     buffers from cohort_alloc() (the node's shared-memory arena), not calloc()\n"
             "  --page-offset N the buffers start N bytes (0-4095) past a page boundary, not where calloc() puts them\n"
             "cohort-bench --help: this text; cohort-bench --version: the version\n");
}

/* One line, as cohortrun's refusals: the mistake and where the options are, not the whole usage after it. */
static int bad_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "cohort-bench: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (cohort-bench --help lists the options)\n");
  return 2;
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0) return -1;
  double mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1024, end++;
  else if (*end == 'M' || *end == 'm')
    mult = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g')
    mult = 1024.0 * 1024 * 1024, end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  *out = (size_t)(v * mult);
  return 0;
}

static int parse_int(const char *s, int min, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < min || v > 100000000) return -1;
  *out = (int)v;
  return 0;
}

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.min_bytes = 4096,
                 .max_bytes = 256u << 20,
                 .factor = 2,
                 .dtype = COHORT_F32,
                 .op = COHORT_SUM,
                 .warmup = 3,
                 .page_offset = -1};
  if (argc < 2) return bad_usage("%s", "which collective? allreduce, broadcast, allgather, reduce_scatter or barrier");
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(stdout);
    exit(0);
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
    printf("cohort-bench (cohort) %s\n", cohort_version());
    exit(0);
  }
  static const cohort__coll benched[] = {COHORT__COLL_ALLREDUCE, COHORT__COLL_BROADCAST, COHORT__COLL_ALLGATHER,
                                         COHORT__COLL_REDUCE_SCATTER, COHORT__COLL_BARRIER};
  int found = 0;
  for (size_t i = 0; i < sizeof benched / sizeof benched[0]; i++)
    if (!strcmp(argv[1], cohort__coll_name(benched[i]))) o->kind = benched[i], found = 1;
  if (!found)
    return bad_usage("unknown collective '%s' (allreduce, broadcast, allgather, reduce_scatter or barrier)", argv[1]);
  o->kind_name = argv[1];
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--check")) {
      o->check = 1;
      continue;
    }
    if (!strcmp(a, "--in-place")) {
      o->in_place = 1;
      continue;
    }
    if (!strcmp(a, "--zero-copy")) {
      o->zero_copy = 1;
      continue;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      exit(0);
    }
    static const char *const valued[] = {"--min", "--max",   "--factor", "--dtype",
                                         "--op",  "--iters", "--warmup", "--page-offset"};
    int known = 0;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
      known |= !strcmp(a, valued[k]);
    if (!known) return bad_usage("unknown option '%s'", a);
    if (!v) return bad_usage("option %s needs a value", a);
    i++;
    if (!strcmp(a, "--min")) {
      if (parse_size(v, &o->min_bytes)) return bad_usage("bad size '%s' for --min", v);
    } else if (!strcmp(a, "--max")) {
      if (parse_size(v, &o->max_bytes)) return bad_usage("bad size '%s' for --max", v);
    } else if (!strcmp(a, "--factor")) {
      char *end;
      o->factor = strtod(v, &end);
      if (*end || o->factor <= 1.0) return bad_usage("--factor must be a number above 1, not '%s'", v);
    } else if (!strcmp(a, "--dtype")) {
      if (cohort_dtype_parse(v, &o->dtype) != COHORT_OK) return bad_usage("%s", cohort_last_error());
    } else if (!strcmp(a, "--op")) {
      if (cohort_op_parse(v, &o->op) != COHORT_OK) return bad_usage("%s", cohort_last_error());
    } else if (!strcmp(a, "--iters")) {
      if (parse_int(v, 1, &o->iters)) return bad_usage("--iters must be a positive integer, not '%s'", v);
    } else if (!strcmp(a, "--warmup")) {
      if (parse_int(v, 0, &o->warmup)) return bad_usage("--warmup must be a non-negative integer, not '%s'", v);
    } else if (!strcmp(a, "--page-offset")) {
      if (parse_int(v, 0, &o->page_offset) || o->page_offset > 4095)
        return bad_usage("--page-offset must be an integer from 0 to 4095, not '%s'", v);
    } else {
      return bad_usage("unknown option '%s'", a);
    }
  }
  if (o->min_bytes > o->max_bytes) return bad_usage("%s", "--min is larger than --max");
  if (o->page_offset >= 0 && o->zero_copy) return bad_usage("%s", "--page-offset and --zero-copy: choose one");
  if (o->page_offset > 0 && o->page_offset % (int)cohort_dtype_size(o->dtype)) {
    char why[96];
    snprintf(why, sizeof why, "--page-offset %d is not a multiple of %s's %zu bytes", o->page_offset,
             cohort_dtype_name(o->dtype), cohort_dtype_size(o->dtype));
    return bad_usage("%s", why);
  }
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct buffers {
  void *send, *recv;
  size_t count; /* elements per rank-block (allgather/reduce_scatter) or whole (others) */
} buffers;

static cohort_status run_once(cohort_comm *c, const options *o, buffers *b) {
  switch (o->kind) {
  case COHORT__COLL_ALLREDUCE:
    return cohort_allreduce(c, o->in_place ? b->recv : b->send, b->recv, b->count, o->dtype, o->op);
  case COHORT__COLL_BROADCAST:
    return cohort_broadcast(c, b->recv, b->count, o->dtype, 0);
  case COHORT__COLL_ALLGATHER:
    return cohort_allgather(c, b->send, b->recv, b->count, o->dtype);
  case COHORT__COLL_REDUCE_SCATTER:
    return cohort_reduce_scatter(c, b->send, b->recv, b->count, o->dtype, o->op);
  default:
    return cohort_barrier(c);
  }
}

/* Small integers: exact in every dtype, so the check compares exactly (except AVG's division). */
static double input_value(int rank, size_t i) { return (double)((i + (size_t)rank * 3) % 7); }

static void put(void *buf, size_t i, cohort_dtype d, double v) {
  switch (d) {
  case COHORT_F32:
    ((float *)buf)[i] = (float)v;
    break;
  case COHORT_F64:
    ((double *)buf)[i] = v;
    break;
  case COHORT_I32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case COHORT_I64:
    ((int64_t *)buf)[i] = (int64_t)v;
    break;
  case COHORT_U8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case COHORT_F16: { /* small integers have exact halves: build the bits directly */
    float f = (float)v;
    uint16_t h = 0;
    if (f != 0) {
      int e;
      float m = frexpf(f, &e); /* f = m * 2^e, 0.5 <= m < 1 */
      h = (uint16_t)(((e - 1 + 15) << 10) | ((uint16_t)((m * 2 - 1) * 1024) & 0x3ff));
    }
    ((uint16_t *)buf)[i] = h;
    break;
  }
  case COHORT_BF16: {
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16);
    break;
  }
  default:
    break;
  }
}

static double get(const void *buf, size_t i, cohort_dtype d) {
  switch (d) {
  case COHORT_F32:
    return ((const float *)buf)[i];
  case COHORT_F64:
    return ((const double *)buf)[i];
  case COHORT_I32:
    return ((const int32_t *)buf)[i];
  case COHORT_I64:
    return (double)((const int64_t *)buf)[i];
  case COHORT_U8:
    return ((const uint8_t *)buf)[i];
  case COHORT_F16: {
    uint16_t h = ((const uint16_t *)buf)[i];
    if (!h) return 0;
    return ldexp(1.0 + (h & 0x3ff) / 1024.0, ((h >> 10) & 0x1f) - 15);
  }
  case COHORT_BF16: {
    uint32_t bits = (uint32_t)((const uint16_t *)buf)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  default:
    return NAN;
  }
}

static double expected(const options *o, int n, int rank, size_t block_count, size_t i) {
  switch (o->kind) {
  case COHORT__COLL_BROADCAST:
    return input_value(0, i);
  case COHORT__COLL_ALLGATHER:
    return input_value((int)(i / block_count), i % block_count);
  default: {
    size_t idx = o->kind == COHORT__COLL_REDUCE_SCATTER ? (size_t)rank * block_count + i : i;
    double acc = input_value(0, idx);
    for (int r = 1; r < n; r++) {
      double v = input_value(r, idx);
      if (o->op == COHORT_MIN)
        acc = fmin(acc, v);
      else if (o->op == COHORT_MAX)
        acc = fmax(acc, v);
      else if (o->op == COHORT_PROD)
        acc *= v;
      else
        acc += v;
    }
    if (o->op == COHORT_AVG)
      acc = (o->dtype == COHORT_I32 || o->dtype == COHORT_I64 || o->dtype == COHORT_U8) ? trunc(acc / n) : acc / n;
    return acc;
  }
  }
}

static int check(cohort_comm *c, const options *o, buffers *b) {
  int n = cohort_size(c), r = cohort_rank(c);
  unsigned f = cohort__coll_flags(o->kind);
  size_t send_n = f & COHORT__CALL_SEND_PER_RANK ? b->count * (size_t)n : b->count;
  size_t recv_n = f & COHORT__CALL_RECV_PER_RANK ? b->count * (size_t)n : b->count;
  for (size_t i = 0; i < send_n; i++) {
    size_t idx = o->kind == COHORT__COLL_REDUCE_SCATTER ? i : i;
    put(b->send, i, o->dtype, input_value(r, idx));
  }
  if (o->kind == COHORT__COLL_BROADCAST)
    for (size_t i = 0; i < recv_n; i++)
      put(b->recv, i, o->dtype, r == 0 ? input_value(0, i) : 99);
  if (o->kind == COHORT__COLL_ALLREDUCE && o->in_place) memcpy(b->recv, b->send, send_n * cohort_dtype_size(o->dtype));
  cohort_status st = run_once(c, o, b);
  if (st != COHORT_OK) {
    fprintf(stderr, "rank %d: %s failed: %s\n", r, o->kind_name, cohort_last_error());
    return 1;
  }
  double tol = (o->dtype == COHORT_F16 || o->dtype == COHORT_BF16) ? 0.02 : 1e-6;
  for (size_t i = 0; i < recv_n && !(f & COHORT__CALL_NO_DATA); i++) {
    double want = expected(o, n, r, b->count, i), got = get(b->recv, i, o->dtype);
    if (fabs(got - want) > tol * fmax(1.0, fabs(want))) {
      fprintf(stderr, "rank %d: %s check failed at element %zu: got %g, expected %g\n", r, o->kind_name, i, got, want);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  options o;
  int rc = parse_args(argc, argv, &o);
  if (rc) return rc;
  cohort_comm *c;
  cohort_status st = cohort_init(&c);
  if (st != COHORT_OK) {
    fprintf(stderr, "cohort-bench: cohort_init: %s: %s\n", cohort_strerror(st), cohort_last_error());
    return 1;
  }
  int n = cohort_size(c), r = cohort_rank(c);
  size_t es = cohort_dtype_size(o.dtype);
  double bus_factor = o.kind == COHORT__COLL_ALLREDUCE ? 2.0 * (n - 1) / n
                      : (o.kind == COHORT__COLL_ALLGATHER || o.kind == COHORT__COLL_REDUCE_SCATTER)
                          ? (double)(n - 1) / n
                          : 1.0;
  char placement[64] = "";
  if (o.page_offset >= 0) snprintf(placement, sizeof placement, ", buffers %d bytes past a page", o.page_offset);
  if (r == 0) {
    printf("# cohort-bench %s: %d rank%s, transport %s, dtype %s, op %s, %s%s, %s\n", o.kind_name, n, n == 1 ? "" : "s",
           n == 1 ? "none (1 rank)" : cohort_transport_name(c), cohort_dtype_name(o.dtype), cohort_op_name(o.op),
           o.in_place && o.kind == COHORT__COLL_ALLREDUCE ? "in place" : "out of place",
           o.zero_copy ? ", zero copy (cohort_alloc)" : placement,
           o.check ? "results checked" : "results not checked (--check checks them)");
    printf("# size_bytes count dtype time_us algbw_GBs busbw_GBs\n");
    fflush(stdout);
  }
  int failed = 0;
  size_t last = 0;
  /* A buffer that holds a block per rank (allgather's output, reduce_scatter's input) is a whole number of blocks. */
  int per_rank = (cohort__coll_flags(o.kind) & (COHORT__CALL_SEND_PER_RANK | COHORT__CALL_RECV_PER_RANK)) != 0;
  int outside_told = 0; /* the zero-copy fallback was reported */
  /* Sizes from min to max, multiplied by factor each line (from 0, the next size is one element). */
  for (double sz = (double)o.min_bytes; sz <= (double)o.max_bytes * 1.0000001 && !failed;
       sz = sz * o.factor > sz ? sz * o.factor : sz + (double)es) {
    size_t bytes = (size_t)sz / es * es;
    if (per_rank) bytes = bytes / ((size_t)n * es) * (size_t)n * es;
    if (cohort__coll_flags(o.kind) & COHORT__CALL_NO_DATA) bytes = 0;
    if (bytes == last && sz > (double)o.min_bytes) continue;
    last = bytes;
    buffers b = {0};
    size_t total = bytes / es;
    b.count = per_rank ? total / (size_t)n : total;
    if (o.zero_copy) {
      b.send = cohort_alloc(c, total * es);
      b.recv = cohort_alloc(c, total * es);
      if (b.send) memset(b.send, 0, total * es);
      if (b.recv) memset(b.recv, 0, total * es);
      /* cohort_alloc falls back to malloc (no arena on this transport, or it is full): say so, once, rather than
       * print figures labelled zero copy that were not. */
      if (b.send && b.recv && !outside_told &&
          (!cohort_in_arena(c, b.send, total * es) || !cohort_in_arena(c, b.recv, total * es))) {
        fprintf(stderr,
                "rank %d: cohort_alloc gave memory outside the shared arena from %zu bytes on (transport %s):"
                " those figures are not zero copy\n",
                r, bytes, cohort_transport_name(c));
        outside_told = 1;
      }
    } else if (o.page_offset >= 0) {
      size_t room = (size_t)o.page_offset + (total ? total : 1) * es;
      char *s = aligned_alloc(4096, (room + 4095) / 4096 * 4096), *d = aligned_alloc(4096, (room + 4095) / 4096 * 4096);
      if (s) memset(s, 0, room);
      if (d) memset(d, 0, room);
      b.send = s ? s + o.page_offset : NULL;
      b.recv = d ? d + o.page_offset : NULL;
    } else {
      b.send = calloc(total ? total : 1, es);
      b.recv = calloc(total ? total : 1, es);
    }
    if (!b.send || !b.recv) {
      fprintf(stderr, "rank %d: cannot allocate %zu bytes\n", r, bytes);
      failed = 1;
      break;
    }
    for (int i = 0; i < o.warmup && !failed; i++)
      failed = run_once(c, &o, &b) != COHORT_OK;
    int iters = o.iters;
    if (!iters && !failed) { /* about 0.2 s of work, agreed by all ranks (rank 0's estimate) */
      double t0 = now_s();
      failed = run_once(c, &o, &b) != COHORT_OK;
      double one = now_s() - t0;
      double est = one > 0 ? 0.2 / one : 1000;
      iters = est < 5 ? 5 : est > 1000 ? 1000 : (int)est;
      int32_t agreed = iters;
      if (!failed) failed = cohort_broadcast(c, &agreed, 1, COHORT_I32, 0) != COHORT_OK;
      iters = agreed;
    }
    if (!failed) failed = cohort_barrier(c) != COHORT_OK;
    double t0 = now_s();
    for (int i = 0; i < iters && !failed; i++)
      failed = run_once(c, &o, &b) != COHORT_OK;
    double elapsed = now_s() - t0;
    if (!failed) failed = cohort_allreduce(c, &elapsed, &elapsed, 1, COHORT_F64, COHORT_MAX) != COHORT_OK;
    if (failed) {
      fprintf(stderr, "rank %d: %s failed: %s\n", r, o.kind_name, cohort_last_error());
      break;
    }
    double t_us = elapsed / iters * 1e6;
    double algbw = t_us > 0 ? (double)bytes / (t_us * 1e-6) / 1e9 : 0;
    if (o.check) failed = check(c, &o, &b);
    if (r == 0 && !failed) {
      printf("%12zu %12zu %5s %12.2f %10.3f %10.3f\n", bytes, total, cohort_dtype_name(o.dtype), t_us, algbw,
             algbw * bus_factor);
      fflush(stdout);
    }
    if (o.zero_copy) {
      cohort_free(c, b.send);
      cohort_free(c, b.recv);
    } else if (o.page_offset >= 0) {
      free(b.send ? (char *)b.send - o.page_offset : NULL);
      free(b.recv ? (char *)b.recv - o.page_offset : NULL);
    } else {
      free(b.send);
      free(b.recv);
    }
    if (o.kind == COHORT__COLL_BARRIER) break;
  }
  if (r == 0 && !failed && o.check) printf("# check: every result correct\n");
  cohort_comm_destroy(c);
  return failed ? 1 : 0;
}
