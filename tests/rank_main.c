/* rank_main.c: see rank_main.h. */
#include "rank_main.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct thread_job {
  cohort_inproc_group *group;
  int rank, failures;
  int (*run)(cohort_comm *);
  const char *prog;
} thread_job;

static int fail(const char *prog, int rank, const char *what, const char *detail) {
  printf("%s FAILED on rank %d: %s: %s\n", prog, rank, what, detail);
  fflush(stdout);
  return 1;
}

static void *thread_main(void *arg) {
  thread_job *j = arg;
  cohort_comm *c = NULL;
  if (cohort_init_inproc(j->group, j->rank, &c) != COHORT_OK) {
    j->failures = fail(j->prog, j->rank, "cohort_init_inproc", cohort_last_error());
    return NULL;
  }
  j->failures = j->run(c);
  cohort_comm_destroy(c);
  return NULL;
}

int test_rank_main(int argc, char **argv, const char *prog, int (*run)(cohort_comm *comm)) {
  if (argc == 3 && !strcmp(argv[1], "--inproc")) {
    int n = atoi(argv[2]);
    if (n < 2 || n > 16) return fail(prog, -1, "--inproc N", "N must be in [2, 16]") + 1;
    cohort_inproc_group *g = NULL;
    if (cohort_inproc_group_create(n, &g) != COHORT_OK) return fail(prog, -1, "group", cohort_last_error()) + 1;
    thread_job jobs[16];
    pthread_t th[16];
    for (int r = 0; r < n; r++) {
      jobs[r] = (thread_job){.group = g, .rank = r, .run = run, .prog = prog};
      pthread_create(&th[r], NULL, thread_main, &jobs[r]);
    }
    int failures = 0;
    for (int r = 0; r < n; r++) {
      pthread_join(th[r], NULL);
      failures += jobs[r].failures;
    }
    cohort_inproc_group_destroy(g);
    printf("%s (inproc, %d ranks)\n", failures ? "FAILED" : "PASS", n);
    return failures ? 1 : 0;
  }
  if (argc != 1) {
    fprintf(stderr, "usage: %s [--inproc N]   (without --inproc: one rank, under cohortrun)\n", prog);
    return 2;
  }
  cohort_comm *c = NULL;
  if (cohort_init(&c) != COHORT_OK) return fail(prog, -1, "cohort_init", cohort_last_error());
  if (cohort_size(c) < 2) return fail(prog, cohort_rank(c), "world size", "needs at least 2 ranks");
  int failures = run(c);
  printf("%s (%s, rank %d of %d)\n", failures ? "FAILED" : "PASS", cohort_transport_name(c), cohort_rank(c),
         cohort_size(c));
  cohort_comm_destroy(c);
  return failures ? 1 : 0;
}
