/*
 * test_p2p.c: point-to-point messages (cohort_send, cohort_recv, cohort_isend, cohort_irecv) between real processes
 * under cohortrun, on whatever transport the job gets, or between threads of one process (--inproc N):
 *   cohortrun -np N build/tests/test_p2p            the checks below, at any N >= 2
 *   build/tests/test_p2p --inproc N                 the same checks, N ranks as threads
 *   cohortrun -np N build/tests/test_p2p --kill     rank N-1 SIGKILLs itself while rank 0 waits in a receive from it
 * Every check compares values; a rank that finds a wrong one prints it and exits 1 (so cohortrun and ctest fail).
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cohort/cohort.h"

static __thread int failures;

#define CHECK(cond, ...)                                                                                               \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", cohort_rank(c), __FILE__, __LINE__, #cond);                \
      fprintf(stderr, __VA_ARGS__);                                                                                    \
      fprintf(stderr, "\n");                                                                                           \
      failures++;                                                                                                      \
      return;                                                                                                          \
    }                                                                                                                  \
  } while (0)
#define OK(call) CHECK((st = (call)) == COHORT_OK, "%s: %s", cohort_strerror(st), cohort_last_error())

static double value(int src, int tag, size_t i) { return src * 1e6 + tag * 1e3 + (double)(i % 997); }

static void fill(double *b, size_t n, int src, int tag) {
  for (size_t i = 0; i < n; i++)
    b[i] = value(src, tag, i);
}

static size_t bad_at(const double *b, size_t n, int src, int tag) {
  for (size_t i = 0; i < n; i++)
    if (b[i] != value(src, tag, i)) return i;
  return SIZE_MAX;
}

/* Rank 0 and every other rank in turn: a message there and back, at sizes eager and not (1 MiB goes by RTS). */
static void check_ping_pong(cohort_comm *c) {
  cohort_status st;
  int me = cohort_rank(c), n = cohort_size(c);
  static const size_t counts[] = {1, 1000, 131072};
  double *buf = malloc(131072 * sizeof *buf);
  for (int r = 1; r < n; r++)
    for (size_t k = 0; k < 3; k++) {
      size_t cnt = counts[k];
      if (me == 0) {
        fill(buf, cnt, 0, (int)k);
        OK(cohort_send(c, buf, cnt, COHORT_F64, r, (int)k));
        cohort_recv_info info;
        memset(buf, 0, cnt * sizeof *buf);
        OK(cohort_recv(c, buf, cnt, COHORT_F64, r, (int)k, &info));
        CHECK(info.source == r && info.tag == (int)k && info.count == cnt, "info %d %d %zu", info.source, info.tag,
              info.count);
        size_t at = bad_at(buf, cnt, r, (int)k);
        CHECK(at == SIZE_MAX, "pong from rank %d, %zu elements: element %zu is %g", r, cnt, at, buf[at]);
      } else if (me == r) {
        OK(cohort_recv(c, buf, cnt, COHORT_F64, 0, (int)k, NULL));
        size_t at = bad_at(buf, cnt, 0, (int)k);
        CHECK(at == SIZE_MAX, "ping of %zu elements: element %zu is %g", cnt, at, buf[at]);
        fill(buf, cnt, r, (int)k);
        OK(cohort_send(c, buf, cnt, COHORT_F64, 0, (int)k));
      }
    }
  free(buf);
}

/* Each rank sends its right neighbour two messages of each of 8 tags (sizes eager and not); the neighbour receives
 * the tags in reverse order: the two messages of a tag come in the order sent. */
static void check_tag_order(cohort_comm *c) {
  cohort_status st;
  int me = cohort_rank(c), n = cohort_size(c), right = (me + 1) % n, left = (me + n - 1) % n;
  enum { TAGS = 8 };
  size_t cnt[TAGS];
  cohort_work *w[2 * TAGS];
  double *out[2 * TAGS];
  for (int t = 0; t < TAGS; t++) {
    cnt[t] = t % 3 == 0 ? 20000 : (size_t)(t * 17 + 1); /* 160 KB: RTS */
    for (int k = 0; k < 2; k++) {
      double *b = out[2 * t + k] = malloc(cnt[t] * sizeof *b);
      fill(b, cnt[t], me, 10 * t + k);
      OK(cohort_isend(c, b, cnt[t], COHORT_F64, right, t, &w[2 * t + k]));
    }
  }
  double *in = malloc(20000 * sizeof *in);
  for (int t = TAGS - 1; t >= 0; t--)
    for (int k = 0; k < 2; k++) {
      cohort_recv_info info;
      OK(cohort_recv(c, in, 20000, COHORT_F64, left, t, &info));
      CHECK(info.source == left && info.tag == t && info.count == cnt[t], "tag %d: info %d %d %zu", t, info.source,
            info.tag, info.count);
      size_t at = bad_at(in, cnt[t], left, 10 * t + k);
      CHECK(at == SIZE_MAX, "tag %d message %d: element %zu is %g (the messages of a tag overtook?)", t, k, at, in[at]);
    }
  for (int i = 0; i < 2 * TAGS; i++) {
    OK(cohort_work_wait(w[i]));
    cohort_work_free(w[i]);
    free(out[i]);
  }
  free(in);
}

/* Every rank sends rank 0 its rank (as many elements as its rank + 1); rank 0 takes them from any source. */
static void check_any_source(cohort_comm *c) {
  cohort_status st;
  int me = cohort_rank(c), n = cohort_size(c);
  int32_t buf[64];
  if (me != 0) {
    for (int i = 0; i <= me; i++)
      buf[i] = me * 100 + i;
    OK(cohort_send(c, buf, (size_t)me + 1, COHORT_I32, 0, 5));
    OK(cohort_barrier(c)); /* the next checks' messages come after rank 0's receives from any source and tag */
    return;
  }
  int seen[64] = {0};
  for (int k = 1; k < n; k++) {
    cohort_recv_info info;
    memset(buf, 0, sizeof buf);
    OK(cohort_recv(c, buf, 64, COHORT_I32, COHORT_ANY_SOURCE, k % 2 ? 5 : COHORT_ANY_TAG, &info));
    int s = info.source;
    CHECK(s >= 1 && s < n && !seen[s] && info.tag == 5 && info.count == (size_t)s + 1, "info %d %d %zu", s, info.tag,
          info.count);
    seen[s] = 1;
    for (int i = 0; i <= s; i++)
      CHECK(buf[i] == s * 100 + i, "from rank %d: element %d is %d", s, i, buf[i]);
  }
  OK(cohort_barrier(c));
}

/* Many in flight both ways between each rank and its right neighbour, completed in reverse order. */
static void check_many_in_flight(cohort_comm *c) {
  cohort_status st;
  int me = cohort_rank(c), n = cohort_size(c), right = (me + 1) % n, left = (me + n - 1) % n;
  enum { M = 48 };
  cohort_work *rw[M], *sw[M];
  double *in[M], *out[M];
  for (int i = 0; i < M; i++) {
    size_t cnt = i % 8 == 0 ? 30000 : (size_t)i * 31 + 1;
    in[i] = calloc(cnt, sizeof(double));
    out[i] = malloc(cnt * sizeof(double));
    fill(out[i], cnt, me, i);
    OK(cohort_irecv(c, in[i], cnt, COHORT_F64, left, 1000 + i, &rw[i]));
  }
  for (int i = 0; i < M; i++) {
    size_t cnt = i % 8 == 0 ? 30000 : (size_t)i * 31 + 1;
    OK(cohort_isend(c, out[i], cnt, COHORT_F64, right, 1000 + i, &sw[i]));
  }
  for (int i = M - 1; i >= 0; i--) {
    size_t cnt = i % 8 == 0 ? 30000 : (size_t)i * 31 + 1;
    OK(cohort_work_wait(rw[i]));
    cohort_recv_info info;
    OK(cohort_work_recv_info(rw[i], &info));
    CHECK(info.source == left && info.count == cnt, "info %d %zu", info.source, info.count);
    size_t at = bad_at(in[i], cnt, left, i);
    CHECK(at == SIZE_MAX, "message %d: element %zu is %g", i, at, in[i][at]);
    int done = 0;
    OK(cohort_work_test(sw[i], &done));
    OK(cohort_work_wait(sw[i]));
    cohort_work_free(rw[i]);
    cohort_work_free(sw[i]);
    free(in[i]);
    free(out[i]);
  }
}

/* Messages and allreduces on the same communicator, the messages posted before the allreduce and received after. */
static void check_with_allreduce(cohort_comm *c) {
  cohort_status st;
  int me = cohort_rank(c), n = cohort_size(c), right = (me + 1) % n, left = (me + n - 1) % n;
  double msg[100], got[100], v[1000];
  for (int it = 0; it < 20; it++) {
    size_t cnt = it % 4 == 0 ? 100 : 3;
    fill(msg, cnt, me, it);
    cohort_work *w;
    OK(cohort_isend(c, msg, cnt, COHORT_F64, right, it, &w));
    for (int i = 0; i < 1000; i++)
      v[i] = me + i;
    OK(cohort_allreduce(c, v, v, 1000, COHORT_F64, COHORT_SUM));
    for (int i = 0; i < 1000; i++)
      CHECK(v[i] == (double)n * (n - 1) / 2 + (double)n * i, "allreduce element %d is %g", i, v[i]);
    OK(cohort_recv(c, got, cnt, COHORT_F64, left, it, NULL));
    size_t at = bad_at(got, cnt, left, it);
    CHECK(at == SIZE_MAX, "round %d: element %zu is %g", it, at, got[at]);
    OK(cohort_work_wait(w));
    cohort_work_free(w);
  }
  /* a send before a barrier that the receiver receives after it: the send completes without the receiver */
  fill(msg, 100, me, 77);
  OK(cohort_send(c, msg, 100, COHORT_F64, right, 77));
  OK(cohort_barrier(c));
  OK(cohort_recv(c, got, 100, COHORT_F64, left, 77, NULL));
  CHECK(bad_at(got, 100, left, 77) == SIZE_MAX, "message across a barrier");
}

/* Zero elements, to itself, and messages that do not fit their receive (which fail it and leave comm usable). */
static void check_edges(cohort_comm *c) {
  cohort_status st;
  int me = cohort_rank(c), n = cohort_size(c), right = (me + 1) % n, left = (me + n - 1) % n;
  cohort_recv_info info;
  double b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  OK(cohort_send(c, NULL, 0, COHORT_F64, right, 3));
  OK(cohort_recv(c, b, 8, COHORT_F64, left, 3, &info));
  CHECK(info.count == 0 && info.source == left && b[0] == 1, "zero-length: count %zu", info.count);

  double self[4] = {9, 8, 7, 6}, back[4] = {0};
  OK(cohort_send(c, self, 4, COHORT_F64, me, 4));
  OK(cohort_recv(c, back, 4, COHORT_F64, me, 4, &info));
  CHECK(back[3] == 6 && info.source == me, "to itself: %g", back[3]);

  /* too large, eager and by RTS, and of another dtype */
  static double big[100000];
  static const size_t sent[] = {10, 100000};
  for (int k = 0; k < 2; k++) {
    cohort_work *w; /* a large send completes only once the receive takes (here: rejects) it */
    OK(cohort_isend(c, big, sent[k], COHORT_F64, right, 99, &w));
    st = cohort_recv(c, b, 5, COHORT_F64, left, 99, &info);
    cohort_status sst = cohort_work_wait(w);
    cohort_work_free(w);
    CHECK(sst == COHORT_OK, "the send of a message its receive rejected: %s", cohort_strerror(sst));
    char want[64];
    snprintf(want, sizeof want, "sent %zu elements of f64 with tag 99", sent[k]);
    CHECK(st == COHORT_ERR_MISMATCH && strstr(cohort_last_error(), want) &&
              strstr(cohort_last_error(), "receive of 5 elements"),
          "too large: %s: %s", cohort_strerror(st), cohort_last_error());
  }
  OK(cohort_send(c, big, 3, COHORT_F64, right, 98));
  st = cohort_recv(c, b, 8, COHORT_F32, left, 98, &info);
  CHECK(st == COHORT_ERR_MISMATCH && strstr(cohort_last_error(), "of f64 with tag 98") &&
            strstr(cohort_last_error(), "expects f32"),
        "dtype: %s: %s", cohort_strerror(st), cohort_last_error());
  /* still usable */
  fill(b, 8, me, 1);
  OK(cohort_send(c, b, 8, COHORT_F64, right, 97));
  OK(cohort_recv(c, b, 8, COHORT_F64, left, 97, NULL));
  CHECK(bad_at(b, 8, left, 1) == SIZE_MAX, "after a failed receive");
  /* bad arguments */
  CHECK(cohort_send(c, b, 1, COHORT_F64, n, 0) == COHORT_ERR_INVALID && strstr(cohort_last_error(), "rank"),
        "send to rank %d", n);
  CHECK(cohort_send(c, b, 1, COHORT_F64, 0, -1) == COHORT_ERR_INVALID, "tag -1");
  OK(cohort_barrier(c));
}

/* Handles the caller still holds when it destroys their communicator (cohort_comm_destroy detaches them): a finished
 * collective keeps its result, a receive never matched and a collective only rank 0 started fail (the communicator
 * was destroyed), and waiting on, testing and freeing them afterwards touches no freed memory (ASan: mp.p2p.*.np2 carry
 * the sanitize label). */
static void check_handles_outlive_destroy(cohort_comm *c) {
  cohort_status st;
  int me = cohort_rank(c), n = cohort_size(c), got = -1, done = 0;
  cohort_comm *d = NULL;
  OK(cohort_comm_dup(c, &d));
  float x[4] = {1, 2, 3, 4}, y[4] = {0};
  cohort_work *finished = NULL, *unmatched = NULL, *lone = NULL;
  OK(cohort_iallreduce(d, x, y, 4, COHORT_F32, COHORT_SUM, &finished));
  OK(cohort_work_wait(finished));
  OK(cohort_irecv(d, &got, 1, COHORT_I32, me, 77, &unmatched));
  OK(cohort_barrier(c)); /* every rank holds its receive before any destroys d */
  if (me == 0) OK(cohort_iallreduce(d, x, x, 4, COHORT_F32, COHORT_SUM, &lone));
  cohort_comm_destroy(d);
  OK(cohort_work_wait(finished));
  OK(cohort_work_test(finished, &done));
  CHECK(done == 1 && y[3] == 4.0f * (float)n, "the finished allreduce: done %d, %g", done, (double)y[3]);
  st = cohort_work_wait(unmatched);
  CHECK(st == COHORT_ERR_REMOTE && strstr(cohort_last_error(), "destroyed") && got == -1,
        "the unmatched receive after destroy: %s: %s", cohort_strerror(st), cohort_last_error());
  done = 0;
  st = cohort_work_test(unmatched, &done);
  CHECK(st == COHORT_ERR_REMOTE && done == 1, "testing it: %s, done %d", cohort_strerror(st), done);
  if (lone) {
    st = cohort_work_wait(lone);
    CHECK(st == COHORT_ERR_REMOTE, "rank 0's lone allreduce after destroy: %s: %s", cohort_strerror(st),
          cohort_last_error());
  }
  cohort_work_free(finished);
  cohort_work_free(unmatched);
  cohort_work_free(lone);
  OK(cohort_barrier(c));
}

/* A receive from any source that nothing can satisfy any more: every other rank destroys its communicator while
 * rank 0 waits at it (a world of 2 or more). It fails naming that; it used to wait for ever. */
static void check_any_source_when_all_left(cohort_comm *c) {
  cohort_status st;
  int me = cohort_rank(c), got = -1;
  cohort_comm *d = NULL;
  OK(cohort_comm_dup(c, &d));
  OK(cohort_barrier(c));
  if (me != 0) {
    usleep(100000); /* rank 0 is in its receive first, mostly (either way it must fail) */
    cohort_comm_destroy(d);
  } else {
    st = cohort_recv(d, &got, 1, COHORT_I32, COHORT_ANY_SOURCE, 78, NULL);
    CHECK(st == COHORT_ERR_REMOTE && strstr(cohort_last_error(), "every other rank") &&
              strstr(cohort_last_error(), "any source") && got == -1,
          "a receive from any source after every other rank left: %s: %s", cohort_strerror(st), cohort_last_error());
    /* and one posted after they left fails at once */
    st = cohort_recv(d, &got, 1, COHORT_I32, COHORT_ANY_SOURCE, 79, NULL);
    CHECK(st == COHORT_ERR_REMOTE && got == -1, "a later receive from any source: %s: %s", cohort_strerror(st),
          cohort_last_error());
    cohort_comm_destroy(d);
  }
  OK(cohort_barrier(c));
}

/* ... but a nonblocking receive from any source is not a caller blocked in it: once every other rank has left it
 * may still be matched by a send of this rank to itself, posted after it (as before the rule above). */
static void check_any_source_self_after_all_left(cohort_comm *c) {
  cohort_status st;
  int me = cohort_rank(c), got = -1, one = 41;
  cohort_comm *d = NULL;
  OK(cohort_comm_dup(c, &d));
  if (me != 0) cohort_comm_destroy(d);
  OK(cohort_barrier(c)); /* the others have left d */
  if (me == 0) {
    usleep(200000); /* their goodbyes are in */
    cohort_work *w = NULL;
    OK(cohort_irecv(d, &got, 1, COHORT_I32, COHORT_ANY_SOURCE, 80, &w));
    OK(cohort_send(d, &one, 1, COHORT_I32, 0, 80));
    st = cohort_work_wait(w);
    CHECK(st == COHORT_OK && got == 41,
          "an irecv from any source, then a send to itself, after every other rank left: "
          "%s: %s (got %d)",
          cohort_strerror(st), st == COHORT_OK ? "" : cohort_last_error(), got);
    cohort_work_free(w);
    cohort_comm_destroy(d);
  }
  OK(cohort_barrier(c));
}

static int run_checks(cohort_comm *c) {
  failures = 0;
  check_ping_pong(c);
  if (!failures) check_tag_order(c);
  if (!failures) check_any_source(c);
  if (!failures) check_many_in_flight(c);
  if (!failures) check_with_allreduce(c);
  if (!failures) check_edges(c);
  if (!failures) check_handles_outlive_destroy(c);
  /* Not inproc: its ranks, threads on one hub, do not say goodbye (src/comm/split.c), so a receive from a thread
   * that left waits there, from any source or not. */
  if (!failures && cohort_size(c) > 1 && strcmp(cohort_transport_name(c), "inproc") != 0)
    check_any_source_when_all_left(c);
  if (!failures && cohort_size(c) > 1 && strcmp(cohort_transport_name(c), "inproc") != 0)
    check_any_source_self_after_all_left(c);
  if (!failures) {
    cohort_status st = cohort_barrier(c);
    if (st != COHORT_OK) failures++;
  }
  printf("rank %d of %d (%s): %s\n", cohort_rank(c), cohort_size(c), cohort_transport_name(c),
         failures ? "FAILED" : "all p2p checks correct");
  return failures;
}

/* Rank n-1 dies while rank 0 waits for its message; the other ranks wait at a receive from rank 0 that never comes
 * (they fail once rank 0 exits). Rank 0 prints what it got. */
static int run_kill(cohort_comm *c) {
  int me = cohort_rank(c), n = cohort_size(c);
  signal(SIGTERM, SIG_IGN); /* cohortrun stops the job when a rank dies: the survivors stay for --grace seconds */
  cohort_barrier(c);
  if (me == n - 1) {
    usleep(300000);
    raise(SIGKILL);
  }
  if (me != 0) {
    double x;
    cohort_recv(c, &x, 1, COHORT_F64, 0, 1, NULL);
    return 0;
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  double x;
  cohort_status st = cohort_recv(c, &x, 1, COHORT_F64, n - 1, 1, NULL);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
  char want[32];
  snprintf(want, sizeof want, "rank %d", n - 1);
  int ok = st == COHORT_ERR_REMOTE && strstr(cohort_last_error(), want) && s < 5;
  printf("survivor: %s after %.2f s: %s: %s\n", ok ? "ok" : "WRONG", s, cohort_strerror(st), cohort_last_error());
  fflush(stdout);
  _exit(ok ? 0 : 1);
}

typedef struct {
  cohort_inproc_group *g;
  int rank, failures;
} thread_arg;

static void *inproc_rank(void *p) {
  thread_arg *a = p;
  cohort_comm *c = NULL;
  if (cohort_init_inproc(a->g, a->rank, &c) != COHORT_OK) {
    fprintf(stderr, "cohort_init_inproc: %s\n", cohort_last_error());
    a->failures = 1;
    return NULL;
  }
  a->failures = run_checks(c);
  cohort_comm_destroy(c);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "--inproc") == 0) {
    int n = atoi(argv[2]);
    cohort_inproc_group *g;
    if (n < 1 || cohort_inproc_group_create(n, &g) != COHORT_OK) return 2;
    pthread_t th[16];
    thread_arg args[16];
    for (int r = 0; r < n && r < 16; r++) {
      args[r] = (thread_arg){.g = g, .rank = r};
      pthread_create(&th[r], NULL, inproc_rank, &args[r]);
    }
    int bad = 0;
    for (int r = 0; r < n && r < 16; r++) {
      pthread_join(th[r], NULL);
      bad += args[r].failures;
    }
    cohort_inproc_group_destroy(g);
    return bad ? 1 : 0;
  }
  cohort_comm *c = NULL;
  cohort_status st = cohort_init(&c);
  if (st != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s: %s\n", cohort_strerror(st), cohort_last_error());
    return 1;
  }
  int bad = argc > 1 && strcmp(argv[1], "--kill") == 0 ? run_kill(c) : run_checks(c);
  cohort_comm_destroy(c);
  return bad ? 1 : 0;
}
