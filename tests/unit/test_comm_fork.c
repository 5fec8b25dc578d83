/*
 * test_comm_fork.c: a process forked from one with a live communicator (comm.h, cohort__fork_generation): the
 * child's calls on the parent's communicator are refused with the reason, destroying it there returns at once
 * (it joined the parent's progress thread, which the child does not have), a communicator the child makes itself
 * works, and the parent's goes on working.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cohort/cohort.h"
#include "test.h"

static int allreduce_ok(cohort_comm *c) {
  float x[3] = {1, 2, 3}, y[3] = {0};
  return cohort_allreduce(c, x, y, 3, COHORT_F32, COHORT_SUM) == COHORT_OK && y[2] == 3.0f;
}

/* In the child: 0 where every answer is as expected. */
static int child(cohort_comm *parents) {
  float x[3] = {1, 2, 3}, y[3];
  if (cohort_allreduce(parents, x, y, 3, COHORT_F32, COHORT_SUM) != COHORT_ERR_INVALID) return 10;
  printf("child: %s\n", cohort_last_error());
  if (!strstr(cohort_last_error(), "forked")) return 11;
  cohort_work *w = NULL;
  if (cohort_ibroadcast(parents, x, 3, COHORT_F32, 0, &w) != COHORT_ERR_INVALID || w) return 12;
  if (cohort_send(parents, x, 3, COHORT_F32, 0, 1) != COHORT_ERR_INVALID) return 13;
  cohort_comm_destroy(parents); /* returns at once, touching nothing of the parent's */
  cohort_comm *mine = NULL;
  if (cohort_init(&mine) != COHORT_OK) return 14;
  if (!allreduce_ok(mine)) return 15;
  cohort_comm_destroy(mine);
  fflush(stdout);
  return 0;
}

TEST(forked_child) {
  cohort_comm *c = NULL;
  ASSERT_EQ(cohort_init(&c), COHORT_OK);
  ASSERT_TRUE(allreduce_ok(c));
  fflush(stdout);
  pid_t pid = fork();
  ASSERT_TRUE(pid >= 0);
  if (pid == 0) _exit(child(c));
  int status = 0;
  struct timespec nap = {0, 20 * 1000 * 1000};
  int waited = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (++waited > 500) { /* 10 s: the child hung (in cohort_comm_destroy, before the fix) */
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ASSERT_TRUE(!"the forked child did not finish within 10 s");
    }
    nanosleep(&nap, NULL);
  }
  printf("child: %s %d\n", WIFEXITED(status) ? "exit" : "signal",
         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ASSERT_TRUE(allreduce_ok(c)); /* the parent's communicator is untouched */
  cohort_comm_destroy(c);
}

COHORT_TEST_MAIN(TEST_CASE(forked_child))
