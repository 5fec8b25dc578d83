/*
 * test_join.c: cohort_join (Horovod's hvd.join() for collectives): a rank whose data has ended takes part in the
 * others' allreduces and reduce-scatters with zeros until every rank has joined; the others' other calls are refused
 * naming the joined ranks, and they go on; every rank learns the same last rank to join.
 *
 *   cohortrun -np N build/tests/test_join      (the ranks as processes: COHORT_TRANSPORT=tcp or shm)
 *   build/tests/test_join --inproc N           (the ranks as threads of this process: the inproc transport)
 *
 * With COHORT_CALL_CHECK=off, cohort_join must refuse (COHORT_ERR_INVALID naming the variable): a joined rank learns
 * the others' calls from the agreement, which that switches off.
 *
 * For every rank j as the first to join, the others run: a small float sum (recursive doubling, or shm's staged node
 * allreduce), a small float average (divided by the whole world, as Horovod's join does), a large float sum (ring,
 * or shm's chunked node allreduce), a small int32 sum, a reduce-scatter, a broadcast and an allgather (both refused
 * with COHORT_ERR_MISMATCH naming the joined ranks), then join themselves. Each result is checked against the sum over
 * the ranks that had not joined; the last rank is the same everywhere, the highest of those that joined together last.
 * With 3 ranks or more, ranks join at three different times. After each join, a plain allreduce must work.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/cohort.h"
#include "rank_main.h"

#define BIG (1 << 18)

static int fail(int rank, const char *what, const char *detail) {
  printf("test_join FAILED on rank %d: %s%s%s\n", rank, what, detail ? ": " : "", detail ? detail : "");
  fflush(stdout);
  return 1;
}

static int ok_or_fail(int rank, const char *what, cohort_status st) {
  return st == COHORT_OK ? 0 : fail(rank, what, cohort_last_error());
}

/* The plain allreduce after a join: rank + 1 sums to n(n+1)/2. */
static int usable(cohort_comm *c, const char *after) {
  int r = cohort_rank(c), n = cohort_size(c);
  float v[3] = {(float)(r + 1), (float)(r + 1), (float)(r + 1)};
  if (cohort_allreduce(c, v, v, 3, COHORT_F32, COHORT_SUM) != COHORT_OK) return fail(r, after, cohort_last_error());
  for (int i = 0; i < 3; i++)
    if (v[i] != (float)(n * (n + 1) / 2)) return fail(r, after, "the allreduce after the join summed wrong");
  return 0;
}

/* The rank that joined last must be `want`, on every rank. */
static int check_last(cohort_comm *c, int last, int want, const char *what) {
  int r = cohort_rank(c), n = cohort_size(c), failures = 0;
  int *all = malloc(sizeof(int) * (size_t)n);
  if (!all) return fail(r, "malloc", NULL);
  failures += ok_or_fail(r, "allgather of the last ranks", cohort_allgather(c, &last, all, 1, COHORT_I32));
  for (int q = 0; q < n && !failures; q++)
    if (all[q] != want) {
      char msg[160];
      snprintf(msg, sizeof msg, "rank %d says rank %d joined last, expected %d", q, all[q], want);
      failures += fail(r, what, msg);
    }
  free(all);
  return failures;
}

/* What a rank that has not joined runs while `joined` ranks (all[q] set) have: every result against the sum over
 * the others. */
static int still_running(cohort_comm *c, const int *joined, float *buf, float *out) {
  int r = cohort_rank(c), n = cohort_size(c), failures = 0;
  double sum = 0; /* of rank + 1 over the ranks still running */
  for (int q = 0; q < n; q++)
    if (!joined[q]) sum += q + 1;
  /* an empty sum (shm: staged by the others at any COHORT_SHM_SMALL_BYTES, auto's 0 from 3 ranks on included, so
   * the joined rank must stage too) */
  failures += ok_or_fail(r, "empty allreduce sum", cohort_allreduce(c, buf, buf, 0, COHORT_F32, COHORT_SUM));
  /* a small sum and a small average */
  for (int i = 0; i < 5; i++)
    buf[i] = (float)(r + 1);
  failures += ok_or_fail(r, "small allreduce sum", cohort_allreduce(c, buf, buf, 5, COHORT_F32, COHORT_SUM));
  for (int i = 0; i < 5 && !failures; i++)
    if (buf[i] != (float)sum) failures += fail(r, "small allreduce sum", "wrong sum (the joined rank added data?)");
  for (int i = 0; i < 5; i++)
    buf[i] = (float)(r + 1);
  failures += ok_or_fail(r, "small allreduce average", cohort_allreduce(c, buf, buf, 5, COHORT_F32, COHORT_AVG));
  for (int i = 0; i < 5 && !failures; i++)
    if (fabsf(buf[i] - (float)(sum / n)) > 1e-6f)
      failures += fail(r, "small allreduce average", "not the sum divided by the whole world");
  /* a large sum */
  for (size_t i = 0; i < BIG; i++)
    buf[i] = (float)(r + 1) + (float)(i % 7);
  failures += ok_or_fail(r, "large allreduce sum", cohort_allreduce(c, buf, buf, BIG, COHORT_F32, COHORT_SUM));
  int running = 0;
  for (int q = 0; q < n; q++)
    running += !joined[q];
  for (size_t i = 0; i < BIG && !failures; i++)
    if (buf[i] != (float)sum + (float)running * (float)(i % 7)) failures += fail(r, "large allreduce sum", "wrong sum");
  /* an int32 sum */
  int iv[3] = {r + 1, 2 * (r + 1), 0};
  failures += ok_or_fail(r, "int32 allreduce sum", cohort_allreduce(c, iv, iv, 3, COHORT_I32, COHORT_SUM));
  if (!failures && (iv[0] != (int)sum || iv[1] != 2 * (int)sum || iv[2] != 0))
    failures += fail(r, "int32 allreduce sum", "wrong sum");
  /* a reduce-scatter: block q of every rank's input is rank + 1 + q */
  for (int q = 0; q < n; q++)
    for (int i = 0; i < 3; i++)
      buf[q * 3 + i] = (float)(r + 1 + q);
  failures += ok_or_fail(r, "reduce_scatter", cohort_reduce_scatter(c, buf, out, 3, COHORT_F32, COHORT_SUM));
  for (int i = 0; i < 3 && !failures; i++)
    if (out[i] != (float)(sum + running * r)) failures += fail(r, "reduce_scatter", "wrong block");
  /* refused: a broadcast and an allgather, naming the first joined rank; the buffers untouched */
  char name[160] = ""; /* "rank 1 joined", "ranks 0, 1 joined" */
  int count = 0;
  for (int q = 0; q < n; q++)
    count += joined[q];
  snprintf(name, sizeof name, "rank%s ", count > 1 ? "s" : "");
  for (int q = 0, shown = 0; q < n; q++)
    if (joined[q]) {
      size_t at = strlen(name);
      snprintf(name + at, sizeof name - at, "%s%d", shown++ ? ", " : "", q);
    }
  strncat(name, " joined", sizeof name - strlen(name) - 1);
  for (int which = 0; which < 2; which++) {
    buf[0] = (float)r;
    out[0] = -1.0f;
    cohort_status st =
        which == 0 ? cohort_broadcast(c, buf, 1, COHORT_F32, 0) : cohort_allgather(c, buf, out, 1, COHORT_F32);
    const char *what = which == 0 ? "broadcast while a rank is joined" : "allgather while a rank is joined";
    const char *msg = st == COHORT_OK ? "(success)" : cohort_last_error();
    if (st != COHORT_ERR_MISMATCH || !strstr(msg, name) || !strstr(msg, "joined") ||
        !strstr(msg, "before any data moved"))
      failures += fail(r, what, msg);
    if (buf[0] != (float)r || out[0] != -1.0f) failures += fail(r, what, "a buffer changed although refused");
  }
  return failures;
}

static int run(cohort_comm *c) {
  int r = cohort_rank(c), n = cohort_size(c), failures = 0, last = -2;
  float *buf = malloc(sizeof(float) * BIG), *out = malloc(sizeof(float) * BIG);
  int *joined = calloc((size_t)n, sizeof(int));
  if (!buf || !out || !joined) return fail(r, "malloc", NULL);
  const char *check = getenv("COHORT_CALL_CHECK");
  if (check && !strcmp(check, "off")) {
    cohort_status st = cohort_join(c, &last);
    if (st != COHORT_ERR_INVALID || !strstr(cohort_last_error(), "COHORT_CALL_CHECK"))
      failures +=
          fail(r, "cohort_join with COHORT_CALL_CHECK=off", st == COHORT_OK ? "succeeded" : cohort_last_error());
    free(buf), free(out), free(joined);
    return failures;
  }
  /* One rank j joins first; the others run their calls, then join together. */
  for (int j = 0; j < n && !failures; j++) {
    memset(joined, 0, sizeof(int) * (size_t)n);
    joined[j] = 1;
    if (r == j) {
      failures += ok_or_fail(r, "cohort_join (first)", cohort_join(c, &last));
    } else {
      failures += still_running(c, joined, buf, out);
      failures += ok_or_fail(r, "cohort_join (the others)", cohort_join(c, &last));
    }
    /* The others joined in the same round (tied at 0 rounds): the highest of them is the last. */
    failures += check_last(c, last, j == n - 1 ? n - 2 : n - 1, "the last rank to join");
    failures += usable(c, "a join");
  }
  /* Three times (3 ranks or more): rank 0 first, rank 1 after one round of calls, the rest after two. */
  if (n >= 3 && !failures) {
    memset(joined, 0, sizeof(int) * (size_t)n);
    joined[0] = 1;
    if (r == 0) {
      failures += ok_or_fail(r, "cohort_join (rank 0)", cohort_join(c, &last));
    } else {
      failures += still_running(c, joined, buf, out);
      joined[1] = 1;
      if (r == 1)
        failures += ok_or_fail(r, "cohort_join (rank 1)", cohort_join(c, &last));
      else {
        failures += still_running(c, joined, buf, out);
        failures += ok_or_fail(r, "cohort_join (the rest)", cohort_join(c, &last));
      }
    }
    failures += check_last(c, last, n - 1, "the last rank of three joins");
    failures += usable(c, "three joins");
  }
  /* Every rank at once: nothing to take part in. */
  if (!failures) {
    failures += ok_or_fail(r, "cohort_join (all at once)", cohort_join(c, &last));
    failures += check_last(c, last, n - 1, "the last rank when all join at once");
  }
  free(buf), free(out), free(joined);
  return failures;
}

int main(int argc, char **argv) { return test_rank_main(argc, argv, "test_join", run); }
