/*
 * test_stall_inproc.c: the stall inspector (src/ddp/stall.c) in an in-process group, where the ranks share a
 * progress board instead of a store. Rank 2 is held back; ranks 0 and 1 wait for bucket 1 in an allreduce and must
 * warn, repeatedly, naming rank 2 and what it last submitted, and never each other. The log is captured by pointing
 * stderr at a file while the ranks run. Also: the inspector is off for one rank or stall_s 0, and destroy is prompt.
 */
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "core/clock.h"
#include "ddp/stall.h"
#include "test.h"

#define NRANKS 3
#define STALL_S 0.4
#define HOLD_S 1.5

typedef struct rank_arg {
  cohort_inproc_group *group;
  int rank;
  cohort_status st;
  char error[512];
  int warnings;
  int warnings_before_join; /* rank 2: warnings before it joined the allreduce (must be 0 too) */
} rank_arg;

static void *rank_main(void *p) {
  rank_arg *a = p;
  cohort_comm *comm = NULL;
  cohort__stall *s = NULL;
  if ((a->st = cohort_init_inproc(a->group, a->rank, &comm)) != COHORT_OK) goto done;
  if ((a->st = cohort__stall_create(comm, STALL_S, &s)) != COHORT_OK) goto done;
  if (!s) {
    a->st = COHORT_ERR_INTERNAL;
    snprintf(a->error, sizeof a->error, "the inspector is off on a %d-rank group", NRANKS);
    goto done;
  }
  cohort__stall_progress(s, 0, 0);
  if (a->rank == 2) {
    usleep((useconds_t)(HOLD_S * 1e6));
    a->warnings_before_join = cohort__stall_warnings(s);
  }
  cohort__stall_progress(s, 0, 1);
  cohort__stall_wait_begin(s, 0, 1);
  float x = 1.0f;
  a->st = cohort_allreduce(comm, &x, &x, 1, COHORT_F32, COHORT_SUM);
  cohort__stall_wait_end(s);
  if (a->st == COHORT_OK && x != (float)NRANKS) {
    a->st = COHORT_ERR_INTERNAL;
    snprintf(a->error, sizeof a->error, "allreduce gave %g", (double)x);
  }
  /* A wait that ended is never warned about, however long the rank then idles. */
  usleep((useconds_t)(STALL_S * 1.5e6));
  a->warnings = cohort__stall_warnings(s);
done:
  if (a->st != COHORT_OK && !a->error[0]) snprintf(a->error, sizeof a->error, "%s", cohort_last_error());
  cohort__stall_destroy(s);
  cohort_comm_destroy(comm);
  return NULL;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  buf[got] = '\0';
  return buf;
}

static int count_lines_with(const char *text, const char *needle) {
  int n = 0;
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
    if (strstr(buf, needle)) n++;
    line = end ? end + 1 : NULL;
  }
  return n;
}

TEST(held_back_rank_is_named_by_the_waiting_ranks) {
  const char *log_path = cohort_test_tmp_path("stall.log");
  fflush(stderr);
  int saved = dup(2);
  int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(saved >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);

  cohort_inproc_group *g;
  cohort_status gst = cohort_inproc_group_create(NRANKS, &g);
  rank_arg args[NRANKS];
  pthread_t th[NRANKS];
  if (gst == COHORT_OK) {
    for (int r = 0; r < NRANKS; r++) {
      args[r] = (rank_arg){.group = g, .rank = r};
      pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < NRANKS; r++)
      pthread_join(th[r], NULL);
    cohort_inproc_group_destroy(g);
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ASSERT_OK(gst);

  char *log = read_file(log_path);
  ASSERT_TRUE(log != NULL);
  fprintf(stderr, "--- captured log ---\n%s--- end ---\n", log);
  for (int r = 0; r < NRANKS; r++)
    if (args[r].st != COHORT_OK) TEST_FAIL_("rank %d: %s", r, args[r].error);
  /* 1.5 s held back, warnings at 0.4 s and then every 0.4 s: at least 2 each (3 when nothing is late). */
  ASSERT_TRUE(args[0].warnings >= 2);
  ASSERT_TRUE(args[1].warnings >= 2);
  ASSERT_TRUE(args[0].warnings <= 4);
  ASSERT_EQ(args[2].warnings_before_join, 0);
  ASSERT_EQ(args[2].warnings, 0);
  int stall_lines = count_lines_with(log, "stall: waited ");
  ASSERT_EQ(stall_lines, args[0].warnings + args[1].warnings);
  ASSERT_EQ(count_lines_with(log, "for bucket 1 of step 0; missing: rank 2 (last submitted: bucket 0 of step 0)"),
            stall_lines);
  ASSERT_EQ(count_lines_with(log, "rank 0 ("), 0);
  ASSERT_EQ(count_lines_with(log, "rank 1 ("), 0);
  free(log);
}

TEST(off_for_one_rank) {
  cohort_inproc_group *g;
  ASSERT_OK(cohort_inproc_group_create(1, &g));
  cohort_comm *comm;
  ASSERT_OK(cohort_init_inproc(g, 0, &comm));
  cohort_inproc_group_destroy(g);
  cohort__stall *s = (cohort__stall *)1;
  ASSERT_OK(cohort__stall_create(comm, 60, &s));
  ASSERT_TRUE(s == NULL);
  /* Everything accepts the NULL an inspector that is off gives. */
  cohort__stall_progress(s, 1, 2);
  cohort__stall_wait_begin(s, 1, 2);
  cohort__stall_wait_end(s);
  ASSERT_EQ(cohort__stall_warnings(s), 0);
  cohort__stall_destroy(s);
  cohort_comm_destroy(comm);
}

typedef struct pair_arg {
  cohort_inproc_group *group;
  int rank;
  double zero_s_ok, destroy_s;
  cohort_status st;
} pair_arg;

static void *pair_main(void *p) {
  pair_arg *a = p;
  cohort_comm *comm = NULL;
  if ((a->st = cohort_init_inproc(a->group, a->rank, &comm)) != COHORT_OK) return NULL;
  cohort__stall *s = (cohort__stall *)1;
  a->st = cohort__stall_create(comm, 0, &s);
  a->zero_s_ok = a->st == COHORT_OK && s == NULL;
  if (a->st == COHORT_OK) a->st = cohort__stall_create(comm, 60, &s);
  if (a->st == COHORT_OK) {
    cohort__stall_progress(s, 3, 0);
    cohort__stall_wait_begin(s, 3, 0);
    usleep(20000);
    int64_t t0 = cohort__now_ns();
    cohort__stall_destroy(s); /* wakes the thread sleeping for up to 1 s */
    a->destroy_s = (double)(cohort__now_ns() - t0) * 1e-9;
  }
  cohort_comm_destroy(comm);
  return NULL;
}

TEST(zero_seconds_is_off_and_destroy_does_not_wait_for_the_period) {
  cohort_inproc_group *g;
  ASSERT_OK(cohort_inproc_group_create(2, &g));
  pair_arg args[2];
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    args[r] = (pair_arg){.group = g, .rank = r};
    pthread_create(&th[r], NULL, pair_main, &args[r]);
  }
  for (int r = 0; r < 2; r++)
    pthread_join(th[r], NULL);
  cohort_inproc_group_destroy(g);
  for (int r = 0; r < 2; r++) {
    ASSERT_OK(args[r].st);
    ASSERT_TRUE(args[r].zero_s_ok);
    ASSERT_TRUE(args[r].destroy_s < 0.5);
  }
}

COHORT_TEST_MAIN(TEST_CASE(held_back_rank_is_named_by_the_waiting_ranks), TEST_CASE(off_for_one_rank),
                 TEST_CASE(zero_seconds_is_off_and_destroy_does_not_wait_for_the_period))
