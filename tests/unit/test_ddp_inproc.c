/*
 * test_ddp_inproc.c: the DDP engine's checks (ddp_check.c) with ranks as threads of this process, over the
 * in-process transport: 1, 2 and 3 ranks. The same checks run between processes in tests/mp/test_ddp.c; this
 * form is the one the thread sanitizer can see whole.
 */
#include <pthread.h>

#include "ddp_check.h"
#include "test.h"

typedef struct rank_arg {
  cohort_inproc_group *group;
  int rank;
  int failures;
} rank_arg;

static void *rank_main(void *p) {
  rank_arg *a = p;
  cohort_comm *c = NULL;
  if (cohort_init_inproc(a->group, a->rank, &c) != COHORT_OK) {
    fprintf(stderr, "rank %d: cohort_init_inproc: %s\n", a->rank, cohort_last_error());
    a->failures = 1;
    return NULL;
  }
  a->failures = ddp_check_run(c, NULL);
  cohort_comm_destroy(c);
  return NULL;
}

static int run_group(int size) {
  cohort_inproc_group *g;
  if (cohort_inproc_group_create(size, &g) != COHORT_OK) return 1;
  pthread_t th[4];
  rank_arg args[4];
  for (int r = 0; r < size; r++) {
    args[r] = (rank_arg){g, r, 0};
    pthread_create(&th[r], NULL, rank_main, &args[r]);
  }
  int failures = 0;
  for (int r = 0; r < size; r++) {
    pthread_join(th[r], NULL);
    failures += args[r].failures;
  }
  cohort_inproc_group_destroy(g);
  return failures;
}

TEST(ddp_one_rank) { ASSERT_EQ(run_group(1), 0); }
TEST(ddp_two_ranks) { ASSERT_EQ(run_group(2), 0); }
TEST(ddp_three_ranks) { ASSERT_EQ(run_group(3), 0); }

COHORT_TEST_MAIN(TEST_CASE(ddp_one_rank), TEST_CASE(ddp_two_ranks), TEST_CASE(ddp_three_ranks))
