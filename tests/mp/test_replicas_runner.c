/*
 * test_replicas_runner.c: fmnist-train's --replicas runner (examples/fmnist-train/replicas.c) with small jobs in
 * place of train_run: every replica is a rank of one in-process communicator, the exit code is the worst one, and
 * a replica that fails while the others wait in a collective ends the job at once (the others see
 * COHORT_ERR_REMOTE naming it) instead of leaving them blocked until COHORT_OP_TIMEOUT.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "replicas.h"
#include "test.h"

#define MAX_REPLICAS 8

/* What each replica saw, by rank. */
static struct {
  int ran;
  int rank, world;
  const train_config *cfg;
  cohort_status status;
  char error[512];
  int32_t sum;
} seen[MAX_REPLICAS];
static atomic_int calls;

static void reset(void) {
  memset(seen, 0, sizeof seen);
  atomic_store(&calls, 0);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Every replica contributes rank + 1 to a sum; the job succeeds when the sum is right everywhere. */
static int allreduce_job(const train_config *cfg, cohort_comm *comm) {
  int r = cohort_rank(comm);
  atomic_fetch_add(&calls, 1);
  seen[r].ran = 1;
  seen[r].rank = r;
  seen[r].world = cohort_size(comm);
  seen[r].cfg = cfg;
  seen[r].sum = r + 1;
  seen[r].status = cohort_allreduce(comm, &seen[r].sum, &seen[r].sum, 1, COHORT_I32, COHORT_SUM);
  if (seen[r].status != COHORT_OK) {
    snprintf(seen[r].error, sizeof seen[r].error, "%s", cohort_last_error());
    return TRAIN_EXIT_FAIL;
  }
  return seen[r].sum == seen[r].world * (seen[r].world + 1) / 2 ? TRAIN_EXIT_OK : TRAIN_EXIT_FAIL;
}

/* Replica 1 fails before its first collective; the others wait in an allreduce it will never join. */
static int fail_early_job(const train_config *cfg, cohort_comm *comm) {
  if (cohort_rank(comm) == 1) {
    struct timespec pause = {0, 50 * 1000 * 1000}; /* let the others block first */
    nanosleep(&pause, NULL);
    seen[1].ran = 1;
    return TRAIN_EXIT_FAIL;
  }
  return allreduce_job(cfg, comm);
}

/* Every collective completes; then replica 0 fails on its own (like rank 0's --dump-params write). */
static int fail_late_job(const train_config *cfg, cohort_comm *comm) {
  int rc = allreduce_job(cfg, comm);
  return cohort_rank(comm) == 0 ? TRAIN_EXIT_FAIL : rc;
}

TEST(every_replica_is_a_rank_of_one_communicator) {
  for (int n = 1; n <= 4; n++) {
    reset();
    train_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.replicas = n;
    ASSERT_EQ(train_replicas_run(&cfg, n, allreduce_job), TRAIN_EXIT_OK);
    ASSERT_EQ(atomic_load(&calls), n);
    for (int r = 0; r < n; r++) {
      ASSERT_TRUE(seen[r].ran);
      ASSERT_EQ(seen[r].rank, r);
      ASSERT_EQ(seen[r].world, n);
      ASSERT_TRUE(seen[r].cfg == &cfg);
      ASSERT_OK(seen[r].status);
      ASSERT_EQ(seen[r].sum, n * (n + 1) / 2);
    }
  }
}

TEST(a_failing_replica_releases_the_others_at_once) {
  /* Without the runner's abort the waiting replicas would give up only after this timeout (with TIMEOUT). */
  setenv("COHORT_OP_TIMEOUT", "30", 1);
  reset();
  train_config cfg;
  memset(&cfg, 0, sizeof cfg);
  double t0 = now_s();
  int rc = train_replicas_run(&cfg, 3, fail_early_job);
  double took = now_s() - t0;
  unsetenv("COHORT_OP_TIMEOUT");
  ASSERT_EQ(rc, TRAIN_EXIT_FAIL);
  ASSERT_TRUE(took < 10.0);
  ASSERT_TRUE(seen[1].ran);
  for (int r = 0; r < 3; r += 2) {
    ASSERT_TRUE(seen[r].ran);
    ASSERT_STATUS(seen[r].status, COHORT_ERR_REMOTE);
    ASSERT_CONTAINS(seen[r].error, "replica 1 failed");
  }
}

TEST(the_exit_code_is_the_worst_replicas) {
  reset();
  train_config cfg;
  memset(&cfg, 0, sizeof cfg);
  ASSERT_EQ(train_replicas_run(&cfg, 2, fail_late_job), TRAIN_EXIT_FAIL);
  ASSERT_OK(seen[0].status);
  ASSERT_OK(seen[1].status);
  ASSERT_EQ(seen[1].sum, 3);
}

TEST(a_bad_replica_count_is_refused) {
  train_config cfg;
  memset(&cfg, 0, sizeof cfg);
  reset();
  ASSERT_EQ(train_replicas_run(&cfg, 0, allreduce_job), TRAIN_EXIT_FAIL);
  ASSERT_EQ(train_replicas_run(&cfg, 65, allreduce_job), TRAIN_EXIT_FAIL);
  ASSERT_EQ(atomic_load(&calls), 0);
}

COHORT_TEST_MAIN(TEST_CASE(every_replica_is_a_rank_of_one_communicator),
                 TEST_CASE(a_failing_replica_releases_the_others_at_once),
                 TEST_CASE(the_exit_code_is_the_worst_replicas), TEST_CASE(a_bad_replica_count_is_refused))
