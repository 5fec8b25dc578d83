/*
 * test_comm_fault.c: communicator failures between real processes, on purpose.
 *
 * The parent plays the launcher: it serves the rendezvous store (with the job secret), starts each rank as a child
 * process (this same binary with --child MODE, and the torchrun environment), and reads one RESULT line from each.
 * It does not use cohortrun because cohortrun stops every rank once one fails, and here we want to see what the
 * survivors report.
 *
 *   killed_peer       rank 1 SIGKILLs itself during allreduce: every survivor gets COHORT_ERR_REMOTE naming rank 1
 *                     within 1 s of the kill.
 *   mismatch_count,   one rank calls with another count / op / collective: every rank gets COHORT_ERR_MISMATCH,
 *   mismatch_op,      and the message names the ranks and both calls.
 *   mismatch_coll
 *   mismatch_counts   allgatherv where rank 2 passes another counts array of the same total, gather where rank 0
 *   mismatch_root     names another root, alltoallv where rank 1 sends rank 0 more than rank 0 expects: every rank
 *   mismatch_a2av     gets COHORT_ERR_MISMATCH naming both calls (or both sizes), over tcp and shm.
 *   missing_peer      rank 2 never starts: ranks 0 and 1 time out at init, and the message names rank 2.
 *   silent_peer       rank 1 stops (SIGSTOP) during allreduce: survivors time out after COHORT_OP_TIMEOUT, naming it.
 *   intruders         while the job connects, strangers hit the store port and a peer port with garbage, a wrong
 *                     secret and silence; a wrong-secret process tries to join. The job finishes with correct values.
 *   abort             rank 2 calls cohort_comm_abort(): the others get COHORT_ERR_REMOTE with its reason.
 *   split_killed      8 ranks in two splits (parity, halves): rank 5 dies in the odd group, which fails at once
 *                     naming "rank 2 (rank 5 of the parent)"; the even group finishes; the upper half fails when it
 *                     next runs, the lower half does not; the job's communicator fails naming rank 5.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/sock.h"
#include "store/auth.h"
#include "store/store.h"
#include "test.h"

#define SECRET "0123456789abcdef0123456789abcdef"
#define MAX_RANKS 8

static const char *self_path;

/* ---------------- children ---------------- */

static void result(int rank, cohort_status st, const char *msg) {
  printf("RESULT rank=%d status=%d t=%.6f msg=%s\n", rank, (int)st, cohort__now_s(), msg ? msg : "");
  fflush(stdout);
}

/* split_killed (8 ranks): groups by parity and by half; rank 5 kills itself during an allreduce loop of the odd
 * group, then every survivor runs one allreduce on its half and one on the whole job. The RESULT line carries the
 * odd/even group's status and the time it returned, and the other two outcomes in its message. */
static int child_split_killed(cohort_comm *c, int rank, float *buf, size_t n) {
  cohort_comm *parity = NULL, *half = NULL;
  cohort_status st = cohort_comm_split(c, rank % 2, rank, &parity);
  if (st == COHORT_OK) st = cohort_comm_split(c, rank / 4, rank, &half);
  if (st == COHORT_OK) st = cohort_barrier(c);
  if (st != COHORT_OK) {
    result(rank, st, cohort_last_error());
    return 0;
  }
  cohort_status sa = COHORT_OK, sb, sw;
  char ma[1100] = "", mb[1100] = "", mw[1100] = "";
  for (int it = 0; it < 60 && sa == COHORT_OK; it++) {
    if (rank == 5 && it == 20) {
      printf("KILLED t=%.6f\n", cohort__now_s());
      fflush(stdout);
      raise(SIGKILL);
    }
    sa = cohort_allreduce(parity, buf, buf, n, COHORT_F32, COHORT_SUM);
  }
  double ta = cohort__now_s();
  snprintf(ma, sizeof ma, "%s", sa == COHORT_OK ? "" : cohort_last_error());
  sb = cohort_allreduce(half, buf, buf, 1000, COHORT_F32, COHORT_SUM);
  snprintf(mb, sizeof mb, "%s", sb == COHORT_OK ? "" : cohort_last_error());
  sw = cohort_allreduce(c, buf, buf, 1000, COHORT_F32, COHORT_SUM);
  snprintf(mw, sizeof mw, "%s", sw == COHORT_OK ? "" : cohort_last_error());
  printf("RESULT rank=%d status=%d t=%.6f msg=half=%d world=%d group[%.300s] half[%.300s] world[%.300s]\n", rank,
         (int)sa, ta, (int)sb, (int)sw, ma, mb, mw);
  fflush(stdout);
  cohort_comm_destroy(parity);
  cohort_comm_destroy(half);
  return 0;
}

static int child(const char *mode) {
  int rank = atoi(getenv("RANK"));
  cohort_comm *c = NULL;
  cohort_status st = cohort_init(&c);
  if (st != COHORT_OK) {
    result(rank, st, cohort_last_error());
    return 0;
  }
  size_t n = 1 << 18;
  float *buf = malloc(n * sizeof *buf);
  for (size_t i = 0; i < n; i++)
    buf[i] = (float)rank;
  if (!strcmp(mode, "split_killed")) {
    child_split_killed(c, rank, buf, n);
    cohort_comm_destroy(c);
    free(buf);
    return 0;
  }
  if (!strcmp(mode, "killed_peer") || !strcmp(mode, "silent_peer")) {
    for (int it = 0; it < 100000 && st == COHORT_OK; it++) {
      if (rank == 1 && it == 20) {
        printf("KILLED t=%.6f\n", cohort__now_s());
        fflush(stdout);
        raise(!strcmp(mode, "killed_peer") ? SIGKILL : SIGSTOP);
      }
      st = cohort_allreduce(c, buf, buf, n, COHORT_F32, COHORT_SUM);
    }
  } else if (!strcmp(mode, "mismatch_count")) {
    st = cohort_allreduce(c, buf, buf, rank == 2 ? n / 2 : n, COHORT_F32, COHORT_SUM);
  } else if (!strcmp(mode, "mismatch_op")) {
    st = cohort_allreduce(c, buf, buf, 1000, COHORT_F32, rank == 0 ? COHORT_MAX : COHORT_SUM);
  } else if (!strcmp(mode, "mismatch_coll")) {
    st = rank == 1 ? cohort_broadcast(c, buf, 1000, COHORT_F32, 0)
                   : cohort_allreduce(c, buf, buf, 1000, COHORT_F32, COHORT_SUM);
  } else if (!strcmp(mode, "mismatch_counts")) { /* 3 ranks; the same total (4), another array on rank 2 */
    size_t counts[3] = {1, 2, 1}, other[3] = {2, 1, 1};
    const size_t *mine = rank == 2 ? other : counts;
    st = cohort_allgatherv(c, buf, buf + 16, mine, NULL, COHORT_F32);
  } else if (!strcmp(mode, "mismatch_root")) {
    st = cohort_gather(c, buf, buf + 16, 4, COHORT_F32, rank == 0 ? 0 : 1);
  } else if (!strcmp(mode, "mismatch_a2av")) { /* rank 1 sends rank 0 five elements, rank 0 expects three */
    size_t sc[3] = {3, 3, 3}, rc[3] = {3, 3, 3};
    if (rank == 1) sc[0] = 5;
    st = cohort_alltoallv(c, buf, sc, NULL, buf + 64, rc, NULL, COHORT_F32);
  } else if (!strcmp(mode, "abort")) {
    cohort_barrier(c);
    if (rank == 2) {
      cohort_comm_abort(c, "loss became NaN at step 7");
      st = cohort_barrier(c);
    } else {
      st = cohort_allreduce(c, buf, buf, n, COHORT_F32, COHORT_SUM);
    }
  } else if (!strcmp(mode, "intruders")) {
    st = cohort_allreduce(c, buf, buf, n, COHORT_F32, COHORT_SUM);
    int size = cohort_size(c);
    float want = (float)(size * (size - 1) / 2);
    for (size_t i = 0; i < n && st == COHORT_OK; i++)
      if (buf[i] != want) st = cohort__error(COHORT_ERR_INTERNAL, "element %zu is %g, expected %g", i, buf[i], want);
  }
  result(rank, st, st == COHORT_OK ? "" : cohort_last_error());
  /* A survivor must be able to tear down its dead communicator without hanging. */
  cohort_comm_destroy(c);
  free(buf);
  return 0;
}

/* ---------------- parent ---------------- */

typedef struct job {
  int size;
  pid_t pid[MAX_RANKS];
  FILE *out[MAX_RANKS];
  int started[MAX_RANKS];
  cohort__store_server *server;
  int port;
  /* parsed results */
  int have[MAX_RANKS];
  int status[MAX_RANKS];
  double t[MAX_RANKS];
  char msg[MAX_RANKS][1024];
  double killed_at;
} job;

static int job_start_server(job *j) {
  if (cohort__store_server_start("127.0.0.1", 0, SECRET, &j->server) != COHORT_OK) return -1;
  j->port = cohort__store_server_port(j->server);
  return 0;
}

static void start_rank(job *j, const char *mode, int rank, const char *secret, const char *extra_env) {
  int fds[2];
  if (pipe(fds) != 0) abort();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    char v[64];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", j->size);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", j->port);
    setenv("MASTER_PORT", v, 1);
    setenv("COHORT_SECRET", secret, 1);
    setenv("COHORT_LAUNCHER_STORE", "1", 1);
    setenv("COHORT_RUN_ID", "fault",
           1); /* keys under cohort/fault/0/0/ (run id, generation, first open): the intruder test reads one */
    setenv("COHORT_LOG_LEVEL", "error", 1);
    if (extra_env) {
      char buf[256];
      snprintf(buf, sizeof buf, "%s", extra_env);
      for (char *kv = strtok(buf, ";"); kv; kv = strtok(NULL, ";")) {
        char *eq = strchr(kv, '=');
        *eq = '\0';
        setenv(kv, eq + 1, 1);
      }
    }
    execl(self_path, self_path, "--child", mode, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  j->pid[rank] = pid;
  j->out[rank] = fdopen(fds[0], "r");
  j->started[rank] = 1;
}

static void collect(job *j) {
  for (int r = 0; r < j->size; r++) {
    if (!j->started[r]) continue;
    char line[2048];
    while (fgets(line, sizeof line, j->out[r])) {
      double t;
      if (sscanf(line, "KILLED t=%lf", &t) == 1) { /* it is dead or stopped: it will say nothing more */
        j->killed_at = t;
        break;
      }
      int rank, st;
      if (sscanf(line, "RESULT rank=%d status=%d t=%lf", &rank, &st, &t) == 3 && rank == r) {
        j->have[r] = 1;
        j->status[r] = st;
        j->t[r] = t;
        char *m = strstr(line, "msg=");
        snprintf(j->msg[r], sizeof j->msg[r], "%s", m ? m + 4 : "");
        j->msg[r][strcspn(j->msg[r], "\n")] = '\0';
        break;
      }
    }
  }
}

static void finish(job *j) {
  for (int r = 0; r < j->size; r++) {
    if (!j->started[r]) continue;
    kill(j->pid[r], SIGKILL); /* the stopped or killed rank, and anything left */
    waitpid(j->pid[r], NULL, 0);
    fclose(j->out[r]);
  }
  cohort__store_server_stop(j->server);
}

static job *run_job(const char *mode, int size, const char *extra_env) {
  static job j;
  memset(&j, 0, sizeof j);
  j.size = size;
  if (job_start_server(&j) != 0) return NULL;
  for (int r = 0; r < size; r++)
    start_rank(&j, mode, r, SECRET, extra_env);
  collect(&j);
  finish(&j);
  return &j;
}

static void print_results(const job *j) {
  for (int r = 0; r < j->size; r++)
    fprintf(stderr, "  rank %d: have=%d status=%s msg=%s\n", r, j->have[r],
            cohort_strerror((cohort_status)j->status[r]), j->msg[r]);
}

/* A failure relayed from rank to rank keeps the first "(reported by rank P)" and gets no second one. */
static int times_reported(const char *msg) {
  int n = 0;
  for (const char *p = msg; (p = strstr(p, "(reported by rank ")) != NULL; p++)
    n++;
  return n;
}

TEST(killed_peer_is_reported_by_every_survivor_within_a_second) {
  job *j = run_job("killed_peer", 4, NULL);
  ASSERT_TRUE(j != NULL);
  print_results(j);
  ASSERT_TRUE(j->killed_at > 0);
  for (int r = 0; r < 4; r++) {
    if (r == 1) continue;
    ASSERT_TRUE(j->have[r]);
    ASSERT_EQ(j->status[r], COHORT_ERR_REMOTE);
    ASSERT_CONTAINS(j->msg[r], "rank 1");
    ASSERT_TRUE(times_reported(j->msg[r]) <= 1);
    ASSERT_TRUE(j->t[r] - j->killed_at < 1.0);
  }
}

/* A rank killed in one sub-communicator fails that group at once (within 1 s, naming it by its rank in the group
 * and in the job); a group it is not in carries on; another group it is in fails when it next needs it; so does the
 * job's communicator. */
static void expect_split_kill(const char *extra_env) {
  job *j = run_job("split_killed", 8, extra_env);
  ASSERT_TRUE(j != NULL);
  print_results(j);
  ASSERT_TRUE(j->killed_at > 0);
  for (int r = 0; r < 8; r++) {
    if (r == 5) continue;
    ASSERT_TRUE(j->have[r]);
    int half_status = -1, world_status = -1;
    ASSERT_EQ(sscanf(j->msg[r], "half=%d world=%d", &half_status, &world_status), 2);
    if (r % 2) { /* the odd group {1, 3, 5, 7}: rank 5 is its rank 2 */
      ASSERT_EQ(j->status[r], COHORT_ERR_REMOTE);
      ASSERT_CONTAINS(j->msg[r], "rank 2 (rank 5 of the parent)");
      ASSERT_TRUE(j->t[r] - j->killed_at < 1.0);
    } else {
      ASSERT_EQ(j->status[r], COHORT_OK);
    }
    if (r < 4) { /* the lower half never needs rank 5 */
      ASSERT_EQ(half_status, COHORT_OK);
    } else { /* the upper half {4, 5, 6, 7}: rank 5 is its rank 1 */
      ASSERT_EQ(half_status, COHORT_ERR_REMOTE);
      ASSERT_CONTAINS(j->msg[r], "rank 1 (rank 5 of the parent)");
    }
    ASSERT_EQ(world_status, COHORT_ERR_REMOTE);
    ASSERT_CONTAINS(strstr(j->msg[r], "world["), "rank 5");
  }
}

TEST(a_rank_killed_in_a_tcp_group_fails_its_groups_and_no_other) {
  expect_split_kill("COHORT_TRANSPORT=tcp;COHORT_OP_TIMEOUT=30");
}
TEST(a_rank_killed_in_a_shm_group_fails_its_groups_and_no_other) { expect_split_kill("COHORT_OP_TIMEOUT=30"); }

static void expect_mismatch_on(const char *mode, const char *env, const char *a, const char *b) {
  job *j = run_job(mode, 3, env);
  ASSERT_TRUE(j != NULL);
  print_results(j);
  for (int r = 0; r < 3; r++) {
    ASSERT_TRUE(j->have[r]);
    ASSERT_EQ(j->status[r], COHORT_ERR_MISMATCH);
    ASSERT_CONTAINS(j->msg[r], a);
    ASSERT_CONTAINS(j->msg[r], b);
    ASSERT_TRUE(times_reported(j->msg[r]) <= 1);
  }
}

static void expect_mismatch_everywhere(const char *mode, const char *a, const char *b) {
  expect_mismatch_on(mode, NULL, a, b);
}

/* The counts arrays of rank 2 and of the others hash to different signatures (same total): the message names the
 * first count that differs, and both values. */
TEST(mismatched_counts_arrays_fail_on_every_rank_tcp) {
  expect_mismatch_on("mismatch_counts", "COHORT_TRANSPORT=tcp",
                     "ranks disagree on the counts of cohort_allgatherv (f32)",
                     "rank 2 passes counts[0] = 2 where rank 0 passes 1");
}
TEST(mismatched_counts_arrays_fail_on_every_rank_shm) {
  expect_mismatch_on("mismatch_counts", "COHORT_TRANSPORT=shm",
                     "ranks disagree on the counts of cohort_allgatherv (f32)",
                     "rank 2 passes counts[0] = 2 where rank 0 passes 1");
}
TEST(mismatched_roots_fail_on_every_rank_tcp) {
  expect_mismatch_on("mismatch_root", "COHORT_TRANSPORT=tcp", "gather(count=4, f32, root=0", "root=1");
}
TEST(mismatched_roots_fail_on_every_rank_shm) {
  expect_mismatch_on("mismatch_root", "COHORT_TRANSPORT=shm", "gather(count=4, f32, root=0", "root=1");
}
TEST(mismatched_alltoallv_counts_fail_on_every_rank_tcp) {
  expect_mismatch_on("mismatch_a2av", "COHORT_TRANSPORT=tcp", "counts of cohort_alltoallv: rank 1 sends 5",
                     "rank 0, which expects 3");
}
TEST(mismatched_alltoallv_counts_fail_on_every_rank_shm) {
  expect_mismatch_on("mismatch_a2av", "COHORT_TRANSPORT=shm", "counts of cohort_alltoallv: rank 1 sends 5",
                     "rank 0, which expects 3");
}

TEST(mismatched_counts_fail_on_every_rank) {
  expect_mismatch_everywhere("mismatch_count", "count=262144", "count=131072");
}

TEST(mismatched_ops_fail_on_every_rank) { expect_mismatch_everywhere("mismatch_op", "max", "sum"); }

TEST(mismatched_collectives_fail_on_every_rank) {
  expect_mismatch_everywhere("mismatch_coll", "broadcast(", "allreduce(");
}

TEST(missing_peer_times_out_at_init_naming_it) {
  static job j;
  memset(&j, 0, sizeof j);
  j.size = 3;
  ASSERT_TRUE(job_start_server(&j) == 0);
  double t0 = cohort__now_s();
  start_rank(&j, "intruders", 0, SECRET, "COHORT_TIMEOUT=2");
  start_rank(&j, "intruders", 1, SECRET, "COHORT_TIMEOUT=2");
  collect(&j);
  finish(&j);
  print_results(&j);
  for (int r = 0; r < 2; r++) {
    ASSERT_TRUE(j.have[r]);
    ASSERT_EQ(j.status[r], COHORT_ERR_TIMEOUT);
    ASSERT_CONTAINS(j.msg[r], "rank 2 never arrived");
    ASSERT_TRUE(j.t[r] - t0 < 6.0);
  }
}

TEST(silent_peer_times_out_naming_it) {
  job *j = run_job("silent_peer", 3, "COHORT_OP_TIMEOUT=2");
  ASSERT_TRUE(j != NULL);
  print_results(j);
  ASSERT_TRUE(j->killed_at > 0);
  int named = 0;
  for (int r = 0; r < 3; r++) {
    if (r == 1) continue;
    ASSERT_TRUE(j->have[r]);
    ASSERT_NE(j->status[r], COHORT_OK);
    /* The rank that waits on rank 1 times out and names it; the other learns it from that rank's abort. */
    if (j->status[r] == COHORT_ERR_TIMEOUT) {
      ASSERT_CONTAINS(j->msg[r], "1");
      named++;
    }
    ASSERT_TRUE(j->t[r] - j->killed_at < 6.0);
  }
  ASSERT_TRUE(named >= 1);
}

TEST(abort_reaches_every_rank_with_its_reason) {
  job *j = run_job("abort", 3, NULL);
  ASSERT_TRUE(j != NULL);
  print_results(j);
  for (int r = 0; r < 3; r++) {
    ASSERT_TRUE(j->have[r]);
    ASSERT_EQ(j->status[r], COHORT_ERR_REMOTE);
    ASSERT_CONTAINS(j->msg[r], "rank 2 aborted the job: loss became NaN at step 7");
    ASSERT_EQ(times_reported(j->msg[r]), r == 2 ? 0 : 1); /* rank 2's own words, the others' from one relay */
  }
}

/* Strangers: raw garbage, a wrong secret, and silence, on the store port and on rank 1's peer port. */
static int attack(const char *host, int port) {
  int fds[3], ok = 0;
  int64_t dl = cohort__now_ns() + 2000000000LL;
  if (cohort__sock_connect(host, port, dl, &fds[0]) != COHORT_OK) return -1;
  dl = cohort__now_ns() + 2000000000LL;
  static const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n\xff\xfe\x00\x01 random bytes";
  cohort__sock_send_all(fds[0], garbage, sizeof garbage, dl);
  if (cohort__sock_connect(host, port, dl, &fds[1]) != COHORT_OK) return -1;
  char hello[16] = {0};
  /* The peer protocol's hello is 16 bytes; the store's differs, and either must refuse the wrong secret. */
  cohort_status st = cohort__auth_connect(fds[1], "not-the-secret", "cohort-peer-v1", hello, sizeof hello, dl);
  if (st == COHORT_OK) ok = -1; /* a wrong secret must never be accepted */
  dl = cohort__now_ns() + 2000000000LL;
  if (cohort__sock_connect(host, port, dl, &fds[2]) != COHORT_OK) return -1; /* says nothing, stays open */
  close(fds[0]);
  close(fds[1]);
  return ok == 0 ? fds[2] : -1;
}

TEST(strangers_are_refused_and_the_job_is_unaffected) {
  static job j;
  memset(&j, 0, sizeof j);
  j.size = 3;
  ASSERT_TRUE(job_start_server(&j) == 0);
  int silent_store = attack("127.0.0.1", j.port);
  ASSERT_TRUE(silent_store >= 0);
  /* Rank 0 accepts every other rank's link: start it first, attack its peer port, then start the others. */
  start_rank(&j, "intruders", 0, SECRET, NULL);
  cohort__store *store;
  ASSERT_OK(cohort__store_connect_tcp("127.0.0.1", j.port, SECRET, 10, &store));
  void *addr = NULL;
  size_t len = 0;
  ASSERT_OK(cohort__store_get(store, "cohort/fault/0/0/peer/0", 20, &addr, &len));
  char host[128];
  snprintf(host, sizeof host, "%s", (char *)addr);
  char *colon = strrchr(host, ':');
  *colon = '\0';
  int silent_peer = attack(host, atoi(colon + 1));
  free(addr);
  cohort__store_close(store);
  ASSERT_TRUE(silent_peer >= 0);
  /* A process with the wrong secret tries to join as rank 1 before the real one. */
  static job intruder;
  memset(&intruder, 0, sizeof intruder);
  intruder.size = 3;
  intruder.port = j.port;
  start_rank(&intruder, "intruders", 1, "wrong-secret-wrong-secret-wrong!", "COHORT_TIMEOUT=3");
  collect(&intruder);
  double t0 = cohort__now_s();
  start_rank(&j, "intruders", 1, SECRET, NULL);
  start_rank(&j, "intruders", 2, SECRET, NULL);
  collect(&j);
  double took = cohort__now_s() - t0;
  close(silent_store);
  close(silent_peer);
  kill(intruder.pid[1], SIGKILL);
  waitpid(intruder.pid[1], NULL, 0);
  fclose(intruder.out[1]);
  finish(&j);
  print_results(&j);
  ASSERT_TRUE(intruder.have[1]);
  ASSERT_EQ(intruder.status[1], COHORT_ERR_AUTH);
  /* The silent strangers held no one up: the 5 s handshake limit never came into play. */
  ASSERT_TRUE(took < 4.0);
  for (int r = 0; r < 3; r++) {
    ASSERT_TRUE(j.have[r]);
    ASSERT_EQ(j.status[r], COHORT_OK);
  }
}

int main(int argc, char **argv) {
  self_path = argv[0];
  if (argc >= 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
  signal(SIGPIPE, SIG_IGN);
  static const cohort_test_case cases[] = {
      TEST_CASE(killed_peer_is_reported_by_every_survivor_within_a_second),
      TEST_CASE(mismatched_counts_fail_on_every_rank),
      TEST_CASE(mismatched_ops_fail_on_every_rank),
      TEST_CASE(mismatched_collectives_fail_on_every_rank),
      TEST_CASE(mismatched_counts_arrays_fail_on_every_rank_tcp),
      TEST_CASE(mismatched_counts_arrays_fail_on_every_rank_shm),
      TEST_CASE(mismatched_roots_fail_on_every_rank_tcp),
      TEST_CASE(mismatched_roots_fail_on_every_rank_shm),
      TEST_CASE(mismatched_alltoallv_counts_fail_on_every_rank_tcp),
      TEST_CASE(mismatched_alltoallv_counts_fail_on_every_rank_shm),
      TEST_CASE(missing_peer_times_out_at_init_naming_it),
      TEST_CASE(silent_peer_times_out_naming_it),
      TEST_CASE(abort_reaches_every_rank_with_its_reason),
      TEST_CASE(strangers_are_refused_and_the_job_is_unaffected),
      TEST_CASE(a_rank_killed_in_a_tcp_group_fails_its_groups_and_no_other),
      TEST_CASE(a_rank_killed_in_a_shm_group_fails_its_groups_and_no_other),
  };
  return cohort_test_run(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}
