/*
 * test_crash_report.c: the suite's own crash report (tests/test.c): a case that dies of a signal names itself and
 * its stack on stderr and dies of the same signal, also when it overflowed its stack (the handler runs on a stack
 * of its own). Each crash runs in a child: this binary runs itself with the case's name.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

static volatile int sink;
static int *volatile nowhere;    /* NULL, which the compiler cannot know */
static volatile int bottom = -1; /* never reached */

TEST(crash_segv) { sink = *nowhere; }

static int recurse(int depth) {
  volatile char pad[4096];
  pad[0] = (char)depth;
  if (depth == bottom) return 0;
  return recurse(depth + 1) + pad[0]; /* not a tail call: each level keeps its frame */
}

TEST(crash_overflow) { sink = recurse(0); }

static const char *self;

/* The child: this binary again, running one case. */
static int run_case(void *name) {
  execl(self, self, (const char *)name, (char *)NULL);
  return 127;
}

static void expect_report(const char *name, int sig) {
  char err[16384], want[128];
  int status = cohort_test_in_child(run_case, (void *)name, err, sizeof err);
  printf("%s: %s %d; stderr:\n%s\n", name, WIFSIGNALED(status) ? "signal" : "exit",
         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), err);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(WTERMSIG(status), sig);
  snprintf(want, sizeof want, "CRASH in case %s: SIGSEGV; its stack, innermost first:", name);
  ASSERT_TRUE(strstr(err, want) != NULL);
  ASSERT_TRUE(strstr(err, "test_crash_report") != NULL); /* at least one frame of this binary */
}

TEST(segv_reported) { expect_report("crash_segv", SIGSEGV); }

TEST(overflow_reported) { expect_report("crash_overflow", SIGSEGV); }

int main(int argc, char **argv) {
  self = argv[0];
  static const cohort_test_case cases[] = {TEST_CASE(segv_reported), TEST_CASE(overflow_reported),
                                           TEST_CASE(crash_segv), TEST_CASE(crash_overflow)};
  /* The crashing cases only when named (by the reporting ones, in a child). */
  return cohort_test_run(argc, argv, cases, argc > 1 ? 4 : 2);
}
