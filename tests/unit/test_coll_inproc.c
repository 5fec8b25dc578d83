/*
 * test_coll_inproc.c: every collective over the in-process transport, ranks as threads (the Gloo way), for world
 * sizes 1 to 5, with tiny pipeline segments so that every segmenting path is taken; plus the conversion and
 * reduction kernels, and mismatch detection between threads.
 *
 * test_coll_inproc --world N runs only the matrix at N threads (unit.coll_inproc.np16, np32, np64), with the counts
 * of the large-world process tests (tests/mp/large.cmake): 0, 1, 7 and 4097 for every collective, and 300007 for
 * allreduce and broadcast, every dtype and op.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "coll/coll.h"
#include "coll_check.h"
#include "core/clock.h"
#include "core/reduce.h"
#include "split_check.h"
#include "test.h"
#include "transport/mpi.h"

typedef struct rank_job {
  cohort_inproc_group *group;
  int rank;
  int failures;
  int mismatch; /* this rank calls with a different count */
  cohort_status mismatch_status;
  char message[1024];
} rank_job;

/* The rank's communicator in the group, or NULL with the failure counted. */
static cohort_comm *init_rank(rank_job *j) {
  cohort_comm *c = NULL;
  if (cohort_init_inproc(j->group, j->rank, &c) == COHORT_OK) return c;
  fprintf(stderr, "rank %d: init: %s\n", j->rank, cohort_last_error());
  j->failures = 1;
  return NULL;
}

static void *run_matrix(void *arg) {
  rank_job *j = arg;
  cohort_comm *c = init_rank(j);
  if (!c) return NULL;
  static const size_t counts[] = {0, 1, 7, 4097, 100003};
  j->failures = coll_check_all(c, counts, 5) + coll_check_async(c) + coll_check_barrier(c);
  cohort_comm_destroy(c);
  return NULL;
}

/* The matrix at a large world: reduce_scatter and allgather move count x world elements per rank, so their largest
 * count stays at 4097; allreduce and broadcast take 300007 too, for their large-message paths. */
static void *run_matrix_large(void *arg) {
  rank_job *j = arg;
  cohort_comm *c = init_rank(j);
  if (!c) return NULL;
  static const size_t counts[] = {0, 1, 7, 4097}, large[] = {300007};
  j->failures = coll_check_all(c, counts, 4);
  if (!j->failures) j->failures += coll_check_allreduce_broadcast(c, large, 1);
  if (!j->failures) j->failures += coll_check_async(c) + coll_check_barrier(c);
  cohort_comm_destroy(c);
  return NULL;
}

static int run_world(int n, void *(*fn)(void *), rank_job *jobs) {
  cohort_inproc_group *g;
  if (cohort_inproc_group_create(n, &g) != COHORT_OK) return -1;
  pthread_t *th = calloc((size_t)n, sizeof *th);
  if (!th) abort();
  for (int r = 0; r < n; r++) {
    jobs[r].group = g;
    jobs[r].rank = r;
    pthread_create(&th[r], NULL, fn, &jobs[r]);
  }
  int failures = 0;
  for (int r = 0; r < n; r++) {
    pthread_join(th[r], NULL);
    failures += jobs[r].failures;
  }
  free(th);
  cohort_inproc_group_destroy(g);
  return failures;
}

TEST(every_collective_dtype_op_and_count_for_world_sizes_1_to_5) {
  setenv("COHORT_SEGMENT_BYTES", "4096", 1); /* many segments per chunk even for small counts */
  for (int n = 1; n <= 5; n++) {
    rank_job jobs[8] = {0};
    ASSERT_EQ(run_world(n, run_matrix, jobs), 0);
  }
  unsetenv("COHORT_SEGMENT_BYTES");
}

TEST(forced_algorithms_agree) {
  const char *algos[] = {"ring", "rd"};
  for (int a = 0; a < 2; a++) {
    setenv("COHORT_ALGO", algos[a], 1);
    rank_job jobs[8] = {0};
    ASSERT_EQ(run_world(3, run_matrix, jobs), 0);
  }
  unsetenv("COHORT_ALGO");
}

static void *run_mismatch(void *arg) {
  rank_job *j = arg;
  cohort_comm *c = NULL;
  cohort_status st = cohort_init_inproc(j->group, j->rank, &c);
  if (st != COHORT_OK) { /* init itself must not be failed by the mismatch of the call after it */
    fprintf(stderr, "rank %d: init: %s\n", j->rank, cohort_last_error());
    j->failures = 1;
    return NULL;
  }
  float buf[64] = {0};
  j->mismatch_status = cohort_allreduce(c, buf, buf, j->mismatch ? 32 : 64, COHORT_F32, COHORT_SUM);
  snprintf(j->message, sizeof j->message, "%s", cohort_last_error());
  /* Refused on every rank before data moved: the communicator goes on, and its next call is right. */
  float one = (float)(j->rank + 1);
  if (cohort_allreduce(c, &one, &one, 1, COHORT_F32, COHORT_SUM) != COHORT_OK || one != 6.0f) j->failures = 1;
  cohort_comm_destroy(c);
  return NULL;
}

TEST(mismatched_counts_fail_on_every_thread) {
  rank_job jobs[8] = {0};
  jobs[1].mismatch = 1;
  run_world(3, run_mismatch, jobs);
  for (int r = 0; r < 3; r++) {
    ASSERT_EQ(jobs[r].mismatch_status, COHORT_ERR_MISMATCH);
    ASSERT_EQ(jobs[r].failures, 0);
    ASSERT_CONTAINS(jobs[r].message, "count=32");
    ASSERT_CONTAINS(jobs[r].message, "count=64");
  }
}

TEST(half_conversions_round_to_nearest_even) {
  ASSERT_EQ(cohort__f32_to_f16(1.0f), 0x3c00);
  ASSERT_EQ(cohort__f32_to_f16(-2.0f), 0xc000);
  ASSERT_EQ(cohort__f32_to_f16(65504.0f), 0x7bff);
  ASSERT_EQ(cohort__f32_to_f16(1e6f), 0x7c00);               /* overflow to inf */
  ASSERT_EQ(cohort__f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie: to even */
  ASSERT_EQ(cohort__f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); /* tie: to even, upward */
  ASSERT_EQ(cohort__f32_to_f16(5.9604645e-08f), 0x0001);     /* smallest subnormal */
  ASSERT_NEAR(cohort__f16_to_f32(0x0001), 5.9604645e-08, 1e-15);
  ASSERT_NEAR(cohort__f16_to_f32(0x3555), 0.333251953125, 0);
  ASSERT_EQ(cohort__f32_to_bf16(1.0f), 0x3f80);
  ASSERT_EQ(cohort__f32_to_bf16(1.00390625f), 0x3f80); /* tie: to even */
  ASSERT_EQ(cohort__f32_to_bf16(1.01171875f), 0x3f82); /* tie: to even, upward */
  ASSERT_NEAR(cohort__bf16_to_f32(0xc040), -3.0, 0);
  for (uint32_t h = 0; h < 0x7c00; h++)
    ASSERT_EQ(cohort__f32_to_f16(cohort__f16_to_f32((uint16_t)h)), h);
}

TEST(integer_kernels_wrap_and_avg_truncates) {
  int32_t a[3] = {INT32_MAX, -7, 9}, b[3] = {1, 2, 2}, d[3];
  cohort__reduce(d, a, b, 3, COHORT_I32, COHORT_SUM);
  ASSERT_EQ(d[0], INT32_MIN);
  ASSERT_EQ(d[1], -5);
  cohort__reduce_avg(d, 3, COHORT_I32, 2);
  ASSERT_EQ(d[1], -2); /* toward zero */
  ASSERT_EQ(d[2], 5);
  uint8_t u[2] = {200, 3}, v[2] = {100, 4}, w[2];
  cohort__reduce(w, u, v, 2, COHORT_U8, COHORT_SUM);
  ASSERT_EQ(w[0], 44);
  cohort__reduce(w, u, v, 2, COHORT_U8, COHORT_PROD);
  ASSERT_EQ(w[1], 12);
}

/* A thread that cannot join (a rank out of range, a rank taken twice) fails the group at once: the others do not
 * wait for it until the op timeout. */
typedef struct join_arg {
  cohort_inproc_group *g;
  int rank;
  cohort_status st;
  char message[512];
} join_arg;

static void *join_main(void *p) {
  join_arg *a = p;
  cohort_comm *c = NULL;
  a->st = cohort_init_inproc(a->g, a->rank, &c);
  snprintf(a->message, sizeof a->message, "%s", cohort_last_error());
  cohort_comm_destroy(c);
  return NULL;
}

TEST(a_rank_that_cannot_join_fails_the_group_at_once) {
  for (int bad = 0; bad < 2; bad++) { /* 0: rank 7 of 3; 1: rank 1 twice */
    cohort_inproc_group *g;
    ASSERT_OK(cohort_inproc_group_create(3, &g));
    join_arg a[3] = {{g, 0, COHORT_OK, ""}, {g, 1, COHORT_OK, ""}, {g, bad ? 1 : 7, COHORT_OK, ""}};
    pthread_t th[3];
    double t0 = cohort__now_s();
    pthread_create(&th[0], NULL, join_main, &a[0]);
    pthread_create(&th[1], NULL, join_main, &a[1]);
    usleep(100000); /* with bad == 1 the second rank 1 must come after the first */
    pthread_create(&th[2], NULL, join_main, &a[2]);
    for (int r = 0; r < 3; r++)
      pthread_join(th[r], NULL);
    double took = cohort__now_s() - t0;
    cohort_inproc_group_destroy(g);
    ASSERT_EQ(a[2].st, COHORT_ERR_INVALID);
    ASSERT_CONTAINS(a[2].message, bad ? "joined the in-process group twice" : "rank 7 is not in [0, 3)");
    for (int r = 0; r < 2; r++) {
      ASSERT_EQ(a[r].st, COHORT_ERR_REMOTE);
      ASSERT_CONTAINS(a[r].message, bad ? "rank 1 could not join" : "rank 7 could not join");
    }
    ASSERT_TRUE(took < 5.0);
  }
}

/* Sub-communicators of threads: each split finds one new hub through the group's registry. */
static void *run_split(void *arg) {
  rank_job *j = arg;
  cohort_comm *c = NULL;
  if (cohort_init_inproc(j->group, j->rank, &c) != COHORT_OK) {
    fprintf(stderr, "rank %d: init: %s\n", j->rank, cohort_last_error());
    j->failures = 1;
    return NULL;
  }
  static const size_t counts[] = {0, 1, 7, 4097};
  j->failures = split_check_matrix(c, counts, 4);
  if (!j->failures) j->failures += split_check_concurrent(c);
  if (!j->failures && cohort_size(c) >= 4) j->failures += split_check_mismatch(c);
  if (!j->failures) j->failures += split_check_twin(c);
  cohort_comm_destroy(c);
  return NULL;
}

/* A wait held up longer than COHORT_STALL_S logs one warning naming the peer (as tcp and shm do), and the call then
 * completes: the warning is no failure. Rank 1 comes 2.2 s late to an allreduce; COHORT_STALL_S=1. Past
 * COHORT_OP_TIMEOUT the wait fails instead, naming the peer too. */
static void *late_allreduce(void *arg) {
  rank_job *j = arg;
  cohort_comm *c = init_rank(j);
  if (!c) return NULL;
  if (j->rank == 1) usleep(2200000);
  float x = (float)(j->rank + 1);
  cohort_status st = cohort_allreduce(c, &x, &x, 1, COHORT_F32, COHORT_SUM);
  if (st != COHORT_OK || x != 3.0f) {
    snprintf(j->message, sizeof j->message, "%s", cohort_last_error());
    j->failures = 1;
  }
  cohort_comm_destroy(c);
  return NULL;
}

TEST(a_stalled_wait_warns_once_naming_the_peer) {
  setenv("COHORT_STALL_S", "1", 1);
  char path[] = "/tmp/test_coll_inproc_stall.XXXXXX";
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  rank_job jobs[2] = {{0}};
  int failures = run_world(2, late_allreduce, jobs);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  unsetenv("COHORT_STALL_S");
  char log[8192] = "";
  ssize_t n = pread(fd, log, sizeof log - 1, 0);
  close(fd);
  unlink(path);
  log[n > 0 ? n : 0] = '\0';
  fputs(log, stderr);
  ASSERT_EQ(failures, 0);
  ASSERT_CONTAINS(log, "cohort W: ");
  ASSERT_CONTAINS(log, "[call #1] on rank 0 has waited 1 s for rank(s) 1 (COHORT_STALL_S)");
  ASSERT_CONTAINS(log, "it fails after 600 s without progress (COHORT_OP_TIMEOUT)");
  int warnings = 0;
  for (const char *p = log; (p = strstr(p, "(COHORT_STALL_S)")) != NULL; p++)
    warnings++;
  ASSERT_EQ(warnings, 1);
  /* With COHORT_OP_TIMEOUT=1 the same wait fails on both ranks, naming the rank waited on. */
  setenv("COHORT_OP_TIMEOUT", "1", 1);
  rank_job late[2] = {{0}};
  failures = run_world(2, late_allreduce, late);
  unsetenv("COHORT_OP_TIMEOUT");
  ASSERT_EQ(failures, 2);
  for (int r = 0; r < 2; r++)
    ASSERT_CONTAINS(late[r].message, "no progress for 1 s on rank 0, waiting on rank(s) 1 (COHORT_OP_TIMEOUT)");
}

TEST(split_communicators_at_world_2_5_and_8) {
  setenv("COHORT_SEGMENT_BYTES", "4096", 1);
  int sizes[] = {2, 5, 8};
  for (int i = 0; i < 3; i++) {
    rank_job jobs[8] = {0};
    ASSERT_EQ(run_world(sizes[i], run_split, jobs), 0);
  }
  unsetenv("COHORT_SEGMENT_BYTES");
}

/* The bookkeeping of MPI contexts (src/transport/mpi_context.c), in one process: two proposals at once get different
 * groups; a claim of a group another proposal holds fails and lets its own go; a group kept for good is never
 * proposed again, from any floor; a released one is. */
TEST(mpi_contexts_are_held_by_one_proposal_and_never_reused) {
  uint64_t k = COHORT__MPI_SPLIT_CONTEXTS, a = cohort__mpi_context_propose(0), b = cohort__mpi_context_propose(0);
  ASSERT_EQ(a % k, 0);
  ASSERT_EQ(b % k, 0);
  ASSERT_TRUE(a != b);
  ASSERT_EQ(cohort__mpi_context_claim(a, b), 0); /* b is held by the other proposal: a is let go too */
  ASSERT_EQ(cohort__mpi_context_claim(b, b), 1); /* kept for good */
  uint64_t c = cohort__mpi_context_propose(0);
  ASSERT_EQ(c, a); /* a was let go: the first free group again */
  ASSERT_EQ(cohort__mpi_context_claim(c, b + k), 1);
  cohort__mpi_context_release(b + k); /* a round that failed elsewhere */
  for (uint64_t floor = 0; floor <= b + 2 * k; floor += 1) {
    uint64_t p = cohort__mpi_context_propose(floor);
    ASSERT_TRUE(p != b && p >= floor);
    cohort__mpi_context_release(p);
  }
  ASSERT_EQ(cohort__mpi_context_claim(cohort__mpi_context_propose(0), UINT64_MAX), 0); /* an out-of-memory round */
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--world") == 0) {
    int n = atoi(argv[2]);
    if (n < 1 || n > 1024) {
      fprintf(stderr, "test_coll_inproc: --world takes a number of threads from 1 to 1024\n");
      return 2;
    }
    rank_job *jobs = calloc((size_t)n, sizeof *jobs);
    if (!jobs) abort();
    int failures = run_world(n, run_matrix_large, jobs);
    free(jobs);
    printf("%d threads (inproc): %s\n", n, failures ? "FAILED" : "all collectives correct");
    return failures ? 1 : 0;
  }
  static const cohort_test_case cases[] = {
      TEST_CASE(split_communicators_at_world_2_5_and_8),
      TEST_CASE(a_rank_that_cannot_join_fails_the_group_at_once),
      TEST_CASE(a_stalled_wait_warns_once_naming_the_peer),
      TEST_CASE(half_conversions_round_to_nearest_even),
      TEST_CASE(integer_kernels_wrap_and_avg_truncates),
      TEST_CASE(every_collective_dtype_op_and_count_for_world_sizes_1_to_5),
      TEST_CASE(forced_algorithms_agree),
      TEST_CASE(mismatched_counts_fail_on_every_thread),
      TEST_CASE(mpi_contexts_are_held_by_one_proposal_and_never_reused),
  };
  return cohort_test_run(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}
