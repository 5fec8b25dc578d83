/*
 * mismatch_refused.c: ranks that call different collectives are refused before any data moves, on every rank, and
 * the communicator goes on (src/coll/agree.c).
 *
 *   cohortrun -np N build/tests/mismatch_refused      (the ranks as processes: COHORT_TRANSPORT=tcp or shm)
 *   build/tests/mismatch_refused --inproc N           (the ranks as threads of this process: the inproc transport)
 *
 * Every case makes every rank's call fail with COHORT_ERR_MISMATCH, a message naming rank 0's call and the first
 * rank's that differs, and its buffers untouched; then an allreduce on the same communicator must give the right
 * sum. The cases: a broadcast in which every rank names itself root, a broadcast whose counts differ, allreduces
 * whose dtype, op or count differ (small, and large enough for the ring and the shared-memory node allreduce), an
 * allgather whose counts differ, a barrier against an allreduce, an allreduce whose tags differ
 * (cohort_tag_next_call: a binding's shape hash), an alltoallv whose send and receive counts disagree, and an
 * allgatherv whose counts arrays differ. A rank that sees anything else prints what and exits 1 (so cohortrun, and
 * ctest, fail).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/cohort.h"
#include "rank_main.h"

#define BIG (1 << 18)

static int fail(int rank, const char *what, const char *detail) {
  printf("mismatch_refused FAILED on rank %d: %s%s%s\n", rank, what, detail ? ": " : "", detail ? detail : "");
  fflush(stdout);
  return 1;
}

/* The call just made must have been refused with a message holding both needles. */
static int expect_refused(int rank, const char *what, cohort_status st, const char *mine, const char *theirs) {
  char msg[2048];
  snprintf(msg, sizeof msg, "%s", st == COHORT_OK ? "(success)" : cohort_last_error());
  int failures = 0;
  if (st != COHORT_ERR_MISMATCH) failures += fail(rank, what, "did not return COHORT_ERR_MISMATCH");
  if (!strstr(msg, mine) || !strstr(msg, theirs) || !strstr(msg, "before any data moved"))
    failures += fail(rank, what, msg);
  if (failures) printf("  expected \"%s\" ... \"%s\"\n", mine, theirs);
  return failures;
}

/* Then the communicator must go on: an allreduce of rank + 1 gives n(n+1)/2 everywhere. */
static int expect_usable(cohort_comm *c, const char *after) {
  int rank = cohort_rank(c), n = cohort_size(c);
  float v[4];
  for (int i = 0; i < 4; i++)
    v[i] = (float)(rank + 1);
  cohort_status st = cohort_allreduce(c, v, v, 4, COHORT_F32, COHORT_SUM);
  char what[160];
  snprintf(what, sizeof what, "the allreduce after %s", after);
  if (st != COHORT_OK) return fail(rank, what, cohort_last_error());
  for (int i = 0; i < 4; i++)
    if (v[i] != (float)(n * (n + 1) / 2)) return fail(rank, what, "wrong value");
  return 0;
}

static int untouched(int rank, const char *what, const float *buf, size_t count, float want) {
  for (size_t i = 0; i < count; i++)
    if (buf[i] != want) return fail(rank, what, "a buffer changed although the call was refused");
  return 0;
}

static int run(cohort_comm *c) {
  int r = cohort_rank(c), n = cohort_size(c), last = n - 1, failures = 0;
  float *buf = malloc(sizeof(float) * BIG * 2), *out = malloc(sizeof(float) * BIG * 2 * (size_t)n);
  if (!buf || !out) return fail(r, "malloc", NULL);
  char mine[128], theirs[128];
#define FILL(count)                                                                                                    \
  for (size_t i_ = 0; i_ < (size_t)(count); i_++)                                                                      \
  buf[i_] = (float)r
#define OUT_FILL(count)                                                                                                \
  for (size_t i_ = 0; i_ < (size_t)(count); i_++)                                                                      \
  out[i_] = -1.0f

  /* 1. every rank its own root: each would keep its own data and report success */
  FILL(4);
  cohort_status st = cohort_broadcast(c, buf, 4, COHORT_F32, r);
  failures +=
      expect_refused(r, "broadcast, every rank its own root", st, "rank 0 called broadcast(count=4, f32, root=0",
                     "but rank 1 called broadcast(count=4, f32, root=1");
  failures += untouched(r, "broadcast, every rank its own root", buf, 4, (float)r);
  failures += expect_usable(c, "the broadcast with every rank its own root");

  /* 2. a broadcast whose counts differ (rank 1 wants 8) */
  FILL(8);
  st = cohort_broadcast(c, buf, r == 1 ? 8 : 4, COHORT_F32, 0);
  failures += expect_refused(r, "broadcast, counts differ", st, "rank 0 called broadcast(count=4, f32, root=0",
                             "but rank 1 called broadcast(count=8, f32, root=0");
  failures += untouched(r, "broadcast, counts differ", buf, 8, (float)r);
  failures += expect_usable(c, "the broadcast whose counts differ");

  /* 3. an allreduce whose dtype differs (rank 1: f64 over the same bytes as 4 f32... and more) */
  FILL(8);
  st = r == 1 ? cohort_allreduce(c, buf, buf, 4, COHORT_F64, COHORT_SUM)
              : cohort_allreduce(c, buf, buf, 4, COHORT_F32, COHORT_SUM);
  failures += expect_refused(r, "allreduce, dtypes differ", st, "rank 0 called allreduce(count=4, f32, sum",
                             "but rank 1 called allreduce(count=4, f64, sum");
  failures += untouched(r, "allreduce, dtypes differ", buf, 8, (float)r);
  failures += expect_usable(c, "the allreduce whose dtypes differ");

  /* 4. an allreduce whose op differs */
  FILL(4);
  st = cohort_allreduce(c, buf, buf, 4, COHORT_F32, r == 1 ? COHORT_MAX : COHORT_SUM);
  failures += expect_refused(r, "allreduce, ops differ", st, "rank 0 called allreduce(count=4, f32, sum",
                             "but rank 1 called allreduce(count=4, f32, max");
  failures += untouched(r, "allreduce, ops differ", buf, 4, (float)r);
  failures += expect_usable(c, "the allreduce whose ops differ");

  /* 5. an allreduce whose count differs on the last rank only (the message names the first that differs) */
  FILL(5);
  st = cohort_allreduce(c, buf, buf, r == last ? 5 : 4, COHORT_F32, COHORT_SUM);
  snprintf(theirs, sizeof theirs, "but rank %d called allreduce(count=5, f32, sum", last);
  failures += expect_refused(r, "allreduce, counts differ", st, "rank 0 called allreduce(count=4, f32, sum", theirs);
  failures += untouched(r, "allreduce, counts differ", buf, 5, (float)r);
  failures += expect_usable(c, "the allreduce whose counts differ");

  /* 6. large allreduces whose counts differ: the ring, or the node allreduce of shared memory */
  FILL(BIG);
  st = cohort_allreduce(c, buf, buf, r == 1 ? BIG / 2 : BIG, COHORT_F32, COHORT_SUM);
  snprintf(mine, sizeof mine, "rank 0 called allreduce(count=%d, f32, sum", BIG);
  snprintf(theirs, sizeof theirs, "but rank 1 called allreduce(count=%d, f32, sum", BIG / 2);
  failures += expect_refused(r, "large allreduce, counts differ", st, mine, theirs);
  failures += untouched(r, "large allreduce, counts differ", buf, BIG, (float)r);
  failures += expect_usable(c, "the large allreduce whose counts differ");

  /* 7. an allgather whose counts differ */
  FILL(3);
  OUT_FILL(3 * n);
  st = cohort_allgather(c, buf, out, r == 1 ? 3 : 2, COHORT_F32);
  failures += expect_refused(r, "allgather, counts differ", st, "rank 0 called allgather(count=2, f32",
                             "but rank 1 called allgather(count=3, f32");
  failures += untouched(r, "allgather, counts differ (its output)", out, 3 * (size_t)n, -1.0f);
  failures += expect_usable(c, "the allgather whose counts differ");

  /* 8. a barrier against an allreduce */
  FILL(4);
  st = r == 1 ? cohort_barrier(c) : cohort_allreduce(c, buf, buf, 4, COHORT_F32, COHORT_SUM);
  failures += expect_refused(r, "barrier against allreduce", st, "rank 0 called allreduce(count=4, f32, sum",
                             "but rank 1 called barrier()");
  failures += expect_usable(c, "the barrier against an allreduce");

  /* 9. the same allreduce, but rank 1 tags it otherwise (a binding's shape hash: 2x3 against 3x2) */
  FILL(6);
  cohort_tag_next_call(r == 1 ? 0x302 : 0x203);
  st = cohort_allreduce(c, buf, buf, 6, COHORT_F32, COHORT_SUM);
  failures += expect_refused(r, "allreduce, tags differ", st, "rank 0 called allreduce(count=6, f32, sum",
                             "with another tag (cohort_tag_next_call");
  failures += untouched(r, "allreduce, tags differ", buf, 6, (float)r);
  failures += expect_usable(c, "the allreduce whose tags differ");
  /* ... equal tags pass, and a tag is taken by one call only (the next is untagged everywhere) */
  cohort_tag_next_call(0x203);
  if (cohort_allreduce(c, buf, buf, 6, COHORT_F32, COHORT_SUM) != COHORT_OK)
    failures += fail(r, "an allreduce with equal tags", cohort_last_error());
  if (r == 0) cohort_tag_next_call(7); /* then an untagged call on rank 0 only: */
  FILL(4);
  if (r == 0)
    (void)cohort_allreduce(c, buf, buf, 4, COHORT_F32, COHORT_SUM); /* takes the tag ... refused */
  else
    st = cohort_allreduce(c, buf, buf, 4, COHORT_F32, COHORT_SUM);
  if (r != 0)
    failures +=
        expect_refused(r, "rank 0's tagged call", st, "rank 0 called allreduce(count=4, f32, sum", "with another tag");
  failures += expect_usable(c, "a tagged call on one rank"); /* untagged on every rank now */

  /* 10. an alltoallv whose counts disagree (torch's all_to_all_single with split sizes): rank 1 sends rank 0 three
   * elements, rank 0 expects two; every other pair agrees. Then the same exchange with the counts right. */
  size_t *sc = calloc((size_t)n, sizeof *sc), *rc = calloc((size_t)n, sizeof *rc);
  if (!sc || !rc) return fail(r, "calloc", NULL);
  for (int p = 0; p < n; p++) {
    sc[p] = rc[p] = 2;
    buf[2 * p] = buf[2 * p + 1] = (float)(100 * r + p);
  }
  if (r == 1) sc[0] = 3, buf[2 * n] = -7.0f; /* rank 1's blocks shift by one: its sendbuf holds 2n + 1 */
  OUT_FILL(2 * n);
  st = cohort_alltoallv(c, buf, sc, NULL, out, rc, NULL, COHORT_F32);
  failures += expect_refused(r, "alltoallv, counts differ", st, "counts of cohort_alltoallv: rank 1 sends 3",
                             "rank 0, which expects 2 from it");
  failures += untouched(r, "alltoallv, counts differ", out, 2 * (size_t)n, -1.0f);
  failures += expect_usable(c, "the alltoallv whose counts differ");
  sc[0] = 2;
  for (int p = 0; p < n; p++)
    buf[2 * p] = buf[2 * p + 1] = (float)(100 * r + p);
  if (cohort_alltoallv(c, buf, sc, NULL, out, rc, NULL, COHORT_F32) != COHORT_OK)
    failures += fail(r, "the alltoallv with its counts right", cohort_last_error());
  else
    for (int p = 0; p < n; p++)
      if (out[2 * p] != (float)(100 * p + r) || out[2 * p + 1] != (float)(100 * p + r))
        failures += fail(r, "the alltoallv with its counts right", "wrong value");
  free(sc);
  free(rc);

  /* 11. an allgatherv whose counts arrays differ: the last rank gives rank 0 three elements where the others give
   * it one (a different total too): the message names the first count that differs and both values. */
  size_t *gc = calloc((size_t)n, sizeof *gc);
  if (!gc) return fail(r, "calloc", NULL);
  for (int p = 0; p < n; p++)
    gc[p] = 1;
  if (r == last) gc[0] = 3;
  FILL(3);
  OUT_FILL(n + 2);
  st = cohort_allgatherv(c, buf, out, gc, NULL, COHORT_F32);
  snprintf(theirs, sizeof theirs, "rank %d passes counts[0] = 3 where rank 0 passes 1", last);
  failures +=
      expect_refused(r, "allgatherv, counts differ", st, "ranks disagree on the counts of cohort_allgatherv", theirs);
  failures += untouched(r, "allgatherv, counts differ", out, (size_t)n + 2, -1.0f);
  failures += expect_usable(c, "the allgatherv whose counts differ");
  free(gc);

  /* Right calls still give right results after all that: a broadcast from the last rank. */
  FILL(4);
  if (cohort_broadcast(c, buf, 4, COHORT_F32, last) != COHORT_OK)
    failures += fail(r, "the final broadcast", cohort_last_error());
  else
    failures += untouched(r, "the final broadcast", buf, 4, (float)last);
  free(buf);
  free(out);
  return failures;
}

int main(int argc, char **argv) { return test_rank_main(argc, argv, "mismatch_refused", run); }
