/*
 * test_stall.c: the stall inspector across real processes (run by test_stall.sh under cohortrun -np 3), where the
 * ranks publish their progress to the job's store.
 *
 * Phase 1: every rank submits bucket 0 of step 0; ranks 0 and 1 submit bucket 1 and wait in its allreduce while
 * rank 2 sleeps 3.5 s. With stall_s = 1, ranks 0 and 1 must warn (at about 1, 2 and 3 s) naming rank 2 and its
 * last submission; rank 2 must not warn. Phase 2: rank 0 is held back 1.6 s at step 1, so ranks 1 and 2 name it,
 * last seen at bucket 1 of step 0 (an earlier step counts as missing). The script checks the logged text.
 */
#include <unistd.h>

#include "ddp/stall.h"
#include "test.h"

static cohort_comm *comm;

static void reduce_bucket(cohort__stall *s, int64_t step, int bucket) {
  cohort__stall_progress(s, step, bucket);
  cohort__stall_wait_begin(s, step, bucket);
  int32_t x = cohort_rank(comm) + 1;
  ASSERT_OK(cohort_allreduce(comm, &x, &x, 1, COHORT_I32, COHORT_SUM));
  cohort__stall_wait_end(s);
  ASSERT_EQ(x, 6);
}

TEST(a_held_back_rank_is_named) {
  int rank = cohort_rank(comm);
  ASSERT_EQ(cohort_size(comm), 3);
  cohort__stall *s = NULL;
  ASSERT_OK(cohort__stall_create(comm, 1.0, &s));
  ASSERT_TRUE(s != NULL);

  /* Phase 1: rank 2 held back at bucket 0 of step 0. */
  cohort__stall_progress(s, 0, 0);
  if (rank == 2) usleep(3500000);
  reduce_bucket(s, 0, 1);
  if (cohort_test_failed) goto done;
  int phase1 = cohort__stall_warnings(s);
  printf("rank %d: %d stall warnings in phase 1\n", rank, phase1);
  if (rank == 2) {
    ASSERT_EQ(phase1, 0);
  } else {
    ASSERT_TRUE(phase1 >= 2); /* the first after 1 s, then again every second */
    ASSERT_TRUE(phase1 <= 4);
  }

  /* Phase 2: rank 0 held back before it submits anything of step 1. */
  if (rank == 0) usleep(1600000);
  reduce_bucket(s, 1, 0);
  if (cohort_test_failed) goto done;
  int phase2 = cohort__stall_warnings(s) - phase1;
  printf("rank %d: %d stall warnings in phase 2\n", rank, phase2);
  if (rank == 0)
    ASSERT_EQ(phase2, 0);
  else
    ASSERT_TRUE(phase2 >= 1 && phase2 <= 2);
  ASSERT_OK(cohort_barrier(comm));
done:
  cohort__stall_destroy(s);
}

int main(int argc, char **argv) {
  cohort_status st = cohort_init(&comm);
  if (st != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s: %s\n", cohort_strerror(st), cohort_last_error());
    return 1;
  }
  static const cohort_test_case cases[] = {TEST_CASE(a_held_back_rank_is_named)};
  int rc = cohort_test_run(argc, argv, cases, 1);
  cohort_comm_destroy(comm);
  return rc;
}
