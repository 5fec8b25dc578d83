/* test_launcher.c: cohortrun as users meet it: real processes, real signals, output and exit codes checked.
 *
 * Every test runs build/bin/cohortrun (COHORT_TEST_COHORTRUN) over launcher_worker (COHORT_TEST_WORKER), captures
 * its stdout and stderr, and checks what came out, the exit status, and that no worker is left alive.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "test.h"

typedef struct proc {
  pid_t pid;
  int out_fd, err_fd;
} proc;

typedef struct result {
  char *out, *err;
  size_t out_len, err_len;
  int code; /* exit code, or 128+signal */
  double seconds;
} result;

static const char *launcher(void) { return getenv("COHORT_TEST_COHORTRUN"); }
static const char *worker(void) { return getenv("COHORT_TEST_WORKER"); }
static const char *host(void) {
  static char name[256];
  if (!name[0]) gethostname(name, sizeof name - 1);
  return name;
}

/* NAME=VALUE settings for the next proc_start's child (NULL-terminated), then cleared. */
static const char *const *child_env;

static int proc_start(proc *p, const char *const *argv) {
  int out_p[2], err_p[2];
  if (pipe2(out_p, O_CLOEXEC) != 0 || pipe2(err_p, O_CLOEXEC) != 0) return -1;
  p->pid = fork();
  if (p->pid < 0) return -1;
  if (p->pid == 0) {
    /* Whatever ran the suite (a background shell ignores SIGINT) must not decide how the workers take signals. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    for (const char *const *e = child_env; e && *e; e++)
      putenv((char *)*e);
    dup2(out_p[1], 1);
    dup2(err_p[1], 2);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  child_env = NULL;
  close(out_p[1]);
  close(err_p[1]);
  p->out_fd = out_p[0];
  p->err_fd = err_p[0];
  return 0;
}

static void append_bytes(char **buf, size_t *len, size_t *cap, const char *data, size_t n) {
  if (*len + n + 1 > *cap) {
    while (*len + n + 1 > *cap)
      *cap = *cap ? *cap * 2 : 65536;
    *buf = realloc(*buf, *cap);
  }
  memcpy(*buf + *len, data, n);
  *len += n;
  (*buf)[*len] = '\0';
}

/* Reads both pipes to EOF and reaps the launcher; a launcher that hangs past timeout_s is killed (code -1). */
static void proc_finish(proc *p, double timeout_s, double started_s, result *r) {
  memset(r, 0, sizeof *r);
  size_t out_cap = 0, err_cap = 0;
  append_bytes(&r->out, &r->out_len, &out_cap, "", 0);
  append_bytes(&r->err, &r->err_len, &err_cap, "", 0);
  int64_t deadline = cohort__now_ns() + (int64_t)(timeout_s * 1e9);
  int open_out = 1, open_err = 1, timed_out = 0;
  static char chunk[65536];
  while (open_out || open_err) {
    struct pollfd fds[2] = {{.fd = open_out ? p->out_fd : -1, .events = POLLIN},
                            {.fd = open_err ? p->err_fd : -1, .events = POLLIN}};
    int64_t left_ms = (deadline - cohort__now_ns()) / 1000000;
    if (left_ms <= 0) {
      timed_out = 1;
      break;
    }
    if (poll(fds, 2, (int)left_ms) <= 0) continue;
    for (int k = 0; k < 2; k++) {
      if (!fds[k].revents) continue;
      ssize_t n = read(fds[k].fd, chunk, sizeof chunk);
      if (n <= 0) {
        if (k == 0)
          open_out = 0;
        else
          open_err = 0;
      } else if (k == 0) {
        append_bytes(&r->out, &r->out_len, &out_cap, chunk, (size_t)n);
      } else {
        append_bytes(&r->err, &r->err_len, &err_cap, chunk, (size_t)n);
      }
    }
  }
  if (timed_out) kill(p->pid, SIGKILL);
  int status = 0;
  waitpid(p->pid, &status, 0);
  close(p->out_fd);
  close(p->err_fd);
  r->seconds = cohort__now_s() - started_s;
  r->code = timed_out ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void run(const char *const *argv, result *r) {
  proc p;
  double t0 = cohort__now_s();
  if (proc_start(&p, argv) != 0) {
    memset(r, 0, sizeof *r);
    r->code = -2;
    return;
  }
  proc_finish(&p, 20.0, t0, r);
}

static void result_free(result *r) {
  free(r->out);
  free(r->err);
}

static void make_dir(char *dir, size_t len) {
  snprintf(dir, len, "/tmp/cohortrun-test-XXXXXX");
  if (!mkdtemp(dir)) dir[0] = '\0';
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[4096];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* The contents of dir/name.rank, malloc'd, or NULL. */
static char *read_file(const char *dir, const char *name, int rank) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%d", dir, name, rank);
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char *buf = calloc(1, 8192);
  size_t n = fread(buf, 1, 8191, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int wait_for_files(const char *dir, const char *name, int n, double timeout_s) {
  int64_t deadline = cohort__now_ns() + (int64_t)(timeout_s * 1e9);
  while (cohort__now_ns() < deadline) {
    int have = 0;
    for (int r = 0; r < n; r++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s.%d", dir, name, r);
      have += access(path, F_OK) == 0;
    }
    if (have == n) return 1;
    usleep(5000);
  }
  return 0;
}

static pid_t read_pid(const char *dir, int rank) {
  char *text = read_file(dir, "pid", rank);
  pid_t pid = text ? (pid_t)atoi(text) : 0;
  free(text);
  return pid;
}

/* A pid is alive while it exists and is not a zombie (an orphan's zombie waits on whoever adopted it). */
static int pid_alive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')');
  return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

/* How many of the n workers whose pid files are in dir are still alive after waiting up to timeout_s. Those are
 * then killed, so that a failing test leaves nothing behind. */
static int alive_after(const char *dir, int n, double timeout_s) {
  int64_t deadline = cohort__now_ns() + (int64_t)(timeout_s * 1e9);
  for (;;) {
    int alive = 0;
    for (int r = 0; r < n; r++) {
      pid_t pid = read_pid(dir, r);
      if (pid > 0 && pid_alive(pid)) alive++;
    }
    if (alive == 0) return 0;
    if (cohort__now_ns() >= deadline) {
      for (int r = 0; r < n; r++) {
        pid_t pid = read_pid(dir, r);
        if (pid > 0 && pid_alive(pid)) kill(pid, SIGKILL);
      }
      return alive;
    }
    usleep(10000);
  }
}

static int count_substr(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

static int count_lines(const char *text) {
  int n = 0;
  for (const char *p = text; (p = strchr(p, '\n')) != NULL; p++)
    n++;
  return n;
}

/* The "VAR=value" line of an env file, as a pointer into a static copy. */
static const char *env_value(const char *text, const char *name) {
  static char value[256];
  char key[64];
  snprintf(key, sizeof key, "%s=", name);
  const char *p = text;
  while (p && *p) {
    if (strncmp(p, key, strlen(key)) == 0) {
      p += strlen(key);
      size_t n = strcspn(p, "\n");
      snprintf(value, sizeof value, "%.*s", (int)n, p);
      return value;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return "(missing)";
}

TEST(three_ranks_succeed_with_prefixed_lines) {
  const char *argv[] = {launcher(), "-np", "3", worker(), "lines", "4", NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 0);
  char line[128];
  for (int rank = 0; rank < 3; rank++) {
    /* Each rank's lines arrive in its own order, whole, with its own prefix, on the stream it wrote them to. */
    const char *prev_out = r.out, *prev_err = r.err;
    for (int i = 0; i < 4; i++) {
      snprintf(line, sizeof line, "[%d] out %d of rank %d\n", rank, i, rank);
      const char *at = strstr(r.out, line);
      ASSERT_TRUE(at != NULL);
      ASSERT_TRUE(at == r.out || at[-1] == '\n');
      ASSERT_TRUE(at >= prev_out);
      prev_out = at;
      snprintf(line, sizeof line, "[%d] err %d of rank %d\n", rank, i, rank);
      at = strstr(r.err, line);
      ASSERT_TRUE(at != NULL);
      ASSERT_TRUE(at >= prev_err);
      prev_err = at;
    }
    /* The last line had no newline: it is still delivered, as a line of its own, when the worker exits. */
    snprintf(line, sizeof line, "[%d] tail of rank %d\n", rank, rank);
    ASSERT_TRUE(strstr(r.out, line) != NULL);
  }
  ASSERT_EQ(count_lines(r.out), 3 * 5);
  ASSERT_EQ(count_lines(r.err), 3 * 4);
  ASSERT_TRUE(strstr(r.err, "cohortrun") == NULL); /* success is quiet */
  result_free(&r);
}

TEST(flood_of_output_arrives_whole_and_in_order) {
  enum { RANKS = 4, LINES = 20000 };
  const char *argv[] = {launcher(), "-np", "4", worker(), "flood", "20000", NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 0);
  int next[RANKS] = {0};
  size_t bytes = 0;
  char *save = NULL;
  char expect[512];
  for (char *l = strtok_r(r.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    int prefix_rank = -1, rank = -1, i = -1, used = 0;
    if (sscanf(l, "[%d] %d %d %n", &prefix_rank, &rank, &i, &used) != 3) TEST_FAIL_("malformed line '%.80s'", l);
    ASSERT_EQ(prefix_rank, rank);
    ASSERT_TRUE(rank >= 0 && rank < RANKS);
    ASSERT_EQ(i, next[rank]);
    int len = (i * 37) % 300;
    memset(expect, 'a' + (i + rank) % 26, (size_t)len);
    expect[len] = '\0';
    ASSERT_STREQ(l + used, expect);
    next[rank]++;
    bytes += strlen(l) + 1;
  }
  for (int k = 0; k < RANKS; k++)
    ASSERT_EQ(next[k], LINES);
  printf("  relayed %d lines (%.1f MB) in %.3f s\n", RANKS * LINES, (double)bytes / 1e6, r.seconds);
  result_free(&r);
}

TEST(workers_get_the_job_environment) {
  char dir[64], secrets[2][80];
  setenv("LAUNCHER_TEST_PASSTHROUGH", "kept", 1);
  setenv("RANK", "99", 1); /* an inherited RANK must not leak into the workers */
  for (int round = 0; round < 2; round++) {
    make_dir(dir, sizeof dir);
    ASSERT_TRUE(dir[0] != '\0');
    const char *argv[] = {launcher(), "-np", "3", worker(), "env", dir, NULL};
    result r;
    run(argv, &r);
    ASSERT_EQ(r.code, 0);
    int seen[3] = {0};
    char port0[32] = "";
    for (int k = 0; k < 3; k++) {
      char *text = read_file(dir, "env", k);
      ASSERT_TRUE(text != NULL);
      int rank = atoi(env_value(text, "RANK"));
      ASSERT_TRUE(rank >= 0 && rank < 3);
      ASSERT_EQ(rank, k);
      seen[rank]++;
      ASSERT_STREQ(env_value(text, "WORLD_SIZE"), "3");
      ASSERT_EQ(atoi(env_value(text, "LOCAL_RANK")), rank);
      ASSERT_STREQ(env_value(text, "LOCAL_WORLD_SIZE"), "3");
      ASSERT_STREQ(env_value(text, "MASTER_ADDR"), "127.0.0.1");
      ASSERT_TRUE(atoi(env_value(text, "MASTER_PORT")) > 0);
      if (k == 0) snprintf(port0, sizeof port0, "%s", env_value(text, "MASTER_PORT"));
      ASSERT_STREQ(env_value(text, "MASTER_PORT"), port0);
      /* torchrun's meanings: MASTER_PORT is the program's (kept free), cohortrun's store is elsewhere. */
      ASSERT_STREQ(env_value(text, "COHORT_STORE_ADDR"), "127.0.0.1");
      ASSERT_TRUE(atoi(env_value(text, "COHORT_STORE_PORT")) > 0);
      ASSERT_TRUE(strcmp(env_value(text, "COHORT_STORE_PORT"), port0) != 0);
      ASSERT_STREQ(env_value(text, "TORCHELASTIC_USE_AGENT_STORE"), "False");
      ASSERT_STREQ(env_value(text, "GROUP_RANK"), "0");
      ASSERT_STREQ(env_value(text, "GROUP_WORLD_SIZE"), "1");
      ASSERT_EQ(atoi(env_value(text, "ROLE_RANK")), rank);
      ASSERT_STREQ(env_value(text, "ROLE_WORLD_SIZE"), "3");
      ASSERT_STREQ(env_value(text, "ROLE_NAME"), "default");
      ASSERT_STREQ(env_value(text, "TORCHELASTIC_RESTART_COUNT"), "0");
      ASSERT_STREQ(env_value(text, "TORCHELASTIC_MAX_RESTARTS"), "0");
      ASSERT_STREQ(env_value(text, "COHORT_LAUNCHER_STORE"), "1");
      ASSERT_STREQ(env_value(text, "COHORT_RESTART_COUNT"), "0");
      ASSERT_STREQ(env_value(text, "LAUNCHER_TEST_PASSTHROUGH"), "kept");
      ASSERT_STREQ(env_value(text, "STDIN_EOF"), "1");
      ASSERT_STREQ(env_value(text, "OWN_PGRP"), "1");
      const char *secret = env_value(text, "COHORT_SECRET");
      ASSERT_EQ(strlen(secret), 64);
      ASSERT_EQ(strspn(secret, "0123456789abcdef"), 64);
      if (k == 0) snprintf(secrets[round], sizeof secrets[round], "%s", secret);
      ASSERT_STREQ(secret, secrets[round]); /* one secret per job */
      free(text);
    }
    for (int k = 0; k < 3; k++)
      ASSERT_EQ(seen[k], 1);
    result_free(&r);
    remove_dir(dir);
  }
  ASSERT_TRUE(strcmp(secrets[0], secrets[1]) != 0); /* and a fresh one per run */
  unsetenv("RANK");
  unsetenv("LAUNCHER_TEST_PASSTHROUGH");
}

TEST(workers_meet_through_the_launcher_store) {
  const char *argv[] = {launcher(), "-np", "3", worker(), "store", NULL};
  result r;
  run(argv, &r);
  if (r.code != 0) fprintf(stderr, "%s", r.err);
  ASSERT_EQ(r.code, 0);
  ASSERT_TRUE(strstr(r.out, "[0] store ok") != NULL);
  ASSERT_TRUE(strstr(r.out, "[1] store ok") != NULL);
  ASSERT_TRUE(strstr(r.out, "[2] store ok") != NULL);
  result_free(&r);
}

TEST(worker_exit_code_stops_the_others_and_is_returned) {
  char dir[64], expect[512];
  make_dir(dir, sizeof dir);
  const char *argv[] = {launcher(), "-np", "4", "--grace", "30", worker(), "fail", dir, "2", "3", NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 3);
  snprintf(expect, sizeof expect, "cohortrun: rank 2 (pid %d, host %s) exited with code 3; stopped the other 3 ranks\n",
           (int)read_pid(dir, 2), host());
  ASSERT_CONTAINS(r.err, expect);
  ASSERT_CONTAINS(r.err, "[2] rank 2 fails now\n");
  /* The summary is the last line: all output of the workers came before it. */
  ASSERT_STREQ(r.err + r.err_len - strlen(expect), expect);
  ASSERT_EQ(alive_after(dir, 4, 0.0), 0);
  /* The others obeyed SIGTERM (the summary would count those that needed SIGKILL), long before the grace. */
  ASSERT_TRUE(r.seconds < 20.0);
  result_free(&r);
  remove_dir(dir);
}

TEST(worker_killed_by_signal_is_named) {
  char dir[64], expect[512];
  make_dir(dir, sizeof dir);
  const char *argv[] = {launcher(), "-np", "3", worker(), "fail", dir, "1", "kill", NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 128 + SIGKILL);
  snprintf(expect, sizeof expect,
           "cohortrun: rank 1 (pid %d, host %s) was killed by signal 9 (SIGKILL); stopped the other 2 ranks\n",
           (int)read_pid(dir, 1), host());
  ASSERT_CONTAINS(r.err, expect);
  ASSERT_EQ(alive_after(dir, 3, 0.0), 0);
  result_free(&r);
  remove_dir(dir);
}

/* A rank killed before its peers mapped its shared segment cannot unlink it: cohortrun removes what a reaped worker
 * left under its pid (/dev/shm/cohort-shm-PID-*), and nothing else. */
TEST(segments_of_killed_workers_are_removed) {
  char other[128];
  snprintf(other, sizeof other, "/dev/shm/cohort-shm-%d-00ff", (int)getpid()); /* not a worker's: must stay */
  FILE *f = fopen(other, "w");
  ASSERT_TRUE(f != NULL);
  fclose(f);
  const char *argv[] = {
      launcher(), "-np", "2",
      "/bin/sh",  "-c",  "touch /dev/shm/cohort-shm-$$-00aa /dev/shm/cohort-shm-$$-00bb; echo $$; kill -9 $$",
      NULL};
  result r;
  run(argv, &r);
  int other_kept = access(other, F_OK) == 0;
  unlink(other);
  ASSERT_TRUE(other_kept);
  ASSERT_EQ(r.code, 128 + SIGKILL);
  int pids[2], n = sscanf(r.out, "[%*d] %d\n[%*d] %d", &pids[0], &pids[1]);
  ASSERT_TRUE(n >= 1);
  for (int k = 0; k < n; k++) {
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/cohort-shm-%d-00aa", pids[k]);
    ASSERT_TRUE(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "/dev/shm/cohort-shm-%d-00bb", pids[k]);
    ASSERT_TRUE(access(path, F_OK) != 0);
  }
  result_free(&r);
}

TEST(workers_ignoring_sigterm_get_sigkill_after_the_grace) {
  char dir[64];
  make_dir(dir, sizeof dir);
  const char *argv[] = {launcher(), "-np", "3", "--grace", "0.3", worker(), "fail", dir, "0", "5", "stubborn", NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 5);
  ASSERT_CONTAINS(r.err, "exited with code 5; stopped the other 2 ranks (2 did not stop within 0.3 s and got SIGKILL)");
  ASSERT_TRUE(r.seconds >= 0.3);
  ASSERT_TRUE(r.seconds < 15.0);
  ASSERT_EQ(alive_after(dir, 3, 0.0), 0);
  result_free(&r);
  remove_dir(dir);
}

TEST(what_the_workers_started_is_stopped_too) {
  char dir[64];
  make_dir(dir, sizeof dir);
  /* Each rank starts a background sleep (in its process group) and records its pid; rank 1 then fails, after
   * having started its own. Both sleeps must go: rank 0's as part of a running worker's group, rank 1's although
   * its worker has already exited. */
  const char *script = "sleep 30 & echo $! > \"$0/pid.$RANK\"; "
                       "if [ \"$RANK\" = 1 ]; then while [ ! -s \"$0/pid.0\" ]; do sleep 0.01; done; exit 7; fi; wait";
  const char *argv[] = {launcher(), "-np", "2", "/bin/sh", "-c", script, dir, NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 7);
  ASSERT_CONTAINS(r.err, "exited with code 7; stopped the other rank\n");
  ASSERT_TRUE(read_pid(dir, 0) > 0);
  ASSERT_TRUE(read_pid(dir, 1) > 0);
  ASSERT_EQ(alive_after(dir, 2, 1.0), 0);
  ASSERT_TRUE(r.seconds < 20.0);
  result_free(&r);
  remove_dir(dir);
}

/* Starts 3 sleeping workers, sends sig to cohortrun once they are all up, and returns what came out. */
static int interrupt_launcher(int sig, const char *dir, result *r) {
  const char *argv[] = {launcher(), "-np", "3", worker(), "sleep", dir, NULL};
  proc p;
  double t0 = cohort__now_s();
  if (proc_start(&p, argv) != 0) return 0;
  int up = wait_for_files(dir, "pid", 3, 10.0);
  if (sig == SIGKILL) {
    /* The launcher dies without a word: its workers must still go (parent-death signal). */
    kill(p.pid, SIGKILL);
  } else {
    kill(p.pid, sig);
  }
  proc_finish(&p, 20.0, t0, r);
  return up;
}

TEST(sigterm_to_the_launcher_stops_the_workers) {
  char dir[64];
  make_dir(dir, sizeof dir);
  result r;
  ASSERT_TRUE(interrupt_launcher(SIGTERM, dir, &r));
  ASSERT_EQ(r.code, 128 + SIGTERM);
  ASSERT_CONTAINS(r.err, "cohortrun: interrupted by SIGTERM; forwarded it to 3 running ranks\n");
  ASSERT_EQ(alive_after(dir, 3, 0.0), 0);
  result_free(&r);
  remove_dir(dir);
}

TEST(sigint_to_the_launcher_stops_the_workers) {
  char dir[64];
  make_dir(dir, sizeof dir);
  result r;
  ASSERT_TRUE(interrupt_launcher(SIGINT, dir, &r));
  ASSERT_EQ(r.code, 128 + SIGINT);
  ASSERT_CONTAINS(r.err, "cohortrun: interrupted by SIGINT; forwarded it to 3 running ranks\n");
  ASSERT_EQ(alive_after(dir, 3, 0.0), 0);
  result_free(&r);
  remove_dir(dir);
}

/* A second Ctrl-C kills at once, and the report says so: it once read "did not stop within 10 s" after 1 s. */
TEST(second_sigint_kills_at_once_and_says_so) {
  char dir[64];
  make_dir(dir, sizeof dir);
  const char *script = "trap '' INT; echo $$ > \"$0/pid.$RANK\"; exec sleep 30";
  const char *argv[] = {launcher(), "-np", "2", "/bin/sh", "-c", script, dir, NULL};
  proc p;
  result r;
  double t0 = cohort__now_s();
  ASSERT_EQ(proc_start(&p, argv), 0);
  ASSERT_TRUE(wait_for_files(dir, "pid", 2, 10.0));
  kill(p.pid, SIGINT);
  usleep(300 * 1000);
  kill(p.pid, SIGINT);
  proc_finish(&p, 20.0, t0, &r);
  ASSERT_EQ(r.code, 128 + SIGINT);
  ASSERT_CONTAINS(r.err, "cohortrun: interrupted by SIGINT; forwarded it to 2 running ranks (2 got SIGKILL at once on "
                         "a second SIGINT)\n");
  ASSERT_TRUE(strstr(r.err, "did not stop within") == NULL);
  ASSERT_TRUE(r.seconds < 5.0); /* the default grace is 10 s */
  ASSERT_EQ(alive_after(dir, 2, 0.0), 0);
  result_free(&r);
  remove_dir(dir);
}

TEST(workers_die_with_a_killed_launcher) {
  char dir[64];
  make_dir(dir, sizeof dir);
  result r;
  ASSERT_TRUE(interrupt_launcher(SIGKILL, dir, &r));
  ASSERT_EQ(r.code, 128 + SIGKILL);
  ASSERT_EQ(alive_after(dir, 3, 5.0), 0);
  result_free(&r);
  remove_dir(dir);
}

/* Runs cohortrun with args and checks: exit 2, nothing on stdout, one line on stderr that contains expect. */
static void expect_refused(const char *const *args, const char *expect) {
  const char *argv[16] = {launcher()};
  int n = 1;
  for (; args[n - 1]; n++)
    argv[n] = args[n - 1];
  argv[n] = NULL;
  result r;
  run(argv, &r);
  if (r.code != 2 || !strstr(r.err, expect) || count_lines(r.err) != 1 || r.out_len != 0)
    fprintf(stderr, "  for '%s': exit %d, stderr: %s", args[0] ? args[0] : "", r.code, r.err);
  ASSERT_EQ(r.code, 2);
  ASSERT_CONTAINS(r.err, expect);
  ASSERT_EQ(count_lines(r.err), 1);
  ASSERT_EQ(r.out_len, 0);
  result_free(&r);
}

/* One rule for COHORT_SECRET: exported, it is the job's secret on one node as with -H and --nnodes (one node used
 * to replace it in silence while -H used it); not exported, one node makes a fresh one (workers_get_the_job_environment
 * checks that). */
TEST(an_exported_secret_is_the_jobs_on_one_node_too) {
  setenv("COHORT_SECRET", "user-chosen-secret-0123456789abcdef", 1);
  const char *argv[] = {launcher(), "-np", "2", "/bin/sh", "-c", "echo \"secret [$COHORT_SECRET]\"", NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 0);
  ASSERT_CONTAINS(r.out, "[0] secret [user-chosen-secret-0123456789abcdef]\n");
  ASSERT_CONTAINS(r.out, "[1] secret [user-chosen-secret-0123456789abcdef]\n");
  result_free(&r);
  char *huge = malloc(1200);
  memset(huge, 'a', 1100);
  huge[1100] = '\0';
  setenv("COHORT_SECRET", huge, 1);
  free(huge);
  expect_refused((const char *[]){"-np", "2", worker(), "lines", "1", NULL},
                 "cohortrun: COHORT_SECRET is 1100 characters long, more than 1024");
  unsetenv("COHORT_SECRET");
}

TEST(bad_command_lines_are_refused_with_one_line) {
  const char *w = worker();
  expect_refused((const char *[]){"--bogus", "-np", "2", w, NULL}, "cohortrun: unknown flag '--bogus'");
  expect_refused((const char *[]){"-np", "0", w, NULL}, "-np needs a positive number of workers (1 to 256), got '0'");
  expect_refused((const char *[]){"-np", "-3", w, NULL}, "got '-3'");
  expect_refused((const char *[]){"-np", "two", w, NULL}, "got 'two'");
  expect_refused((const char *[]){"-np", "2x", w, NULL}, "got '2x'");
  expect_refused((const char *[]){"-np", " 2", w, NULL}, "got ' 2'"); /* strtol would skip the blank */
  expect_refused((const char *[]){"-np", "+2", w, NULL}, "got '+2'");
  /* The same number twice, disagreeing: refused rather than one of them silently winning. */
  expect_refused((const char *[]){"-np", "2", "--nproc-per-node", "3", w, NULL},
                 "--nproc-per-node 3 contradicts -np 2: both give the workers on this node; give one");
  expect_refused((const char *[]){"-np", "2", NULL}, "no program given");
  expect_refused((const char *[]){"-np", NULL}, "-np needs a value");
  expect_refused((const char *[]){"-np", "2", "--master-port", "http", w, NULL},
                 "--master-port needs a port number (0 to 65535), got 'http'");
  expect_refused((const char *[]){"-np", "2", "--master-port=70000", w, NULL}, "got '70000'");
  expect_refused((const char *[]){"-np", "2", "--grace", "soon", w, NULL}, "--grace needs a number of seconds");
  expect_refused((const char *[]){"-np", "2", "/nonexistent/prog", NULL},
                 "cohortrun: program '/nonexistent/prog': No such file or directory");
  expect_refused((const char *[]){"-np", "2", "no-such-program-cohortrun-test", NULL},
                 "cohortrun: program 'no-such-program-cohortrun-test' not found in PATH");
  expect_refused((const char *[]){"-np", "2", "/tmp", NULL}, "program '/tmp' is a directory");
  /* torchrun's --standalone is one node on a free port: anything that says otherwise is a contradiction. */
  static const char *const standalone_conflicts[][4] = {
      {"--nnodes", "2", "--node-rank", "0"}, {"--node-rank", "0", NULL, NULL}, {"--master-port", "29511", NULL, NULL}};
  for (size_t k = 0; k < sizeof standalone_conflicts / sizeof standalone_conflicts[0]; k++) {
    const char *argv[10] = {"--standalone", "-np", "2"};
    int n = 3;
    for (int a = 0; a < 4 && standalone_conflicts[k][a]; a++)
      argv[n++] = standalone_conflicts[k][a];
    argv[n++] = w;
    argv[n] = NULL;
    expect_refused(argv, "--standalone is one node with its store on a free port: leave out --nnodes, --node-rank, "
                         "--master-port and -H/--hostfile");
  }
}

/* torchrun's spellings: `torchrun --standalone --nproc_per_node 2 --max_restarts 0 PROG` is a cohortrun command line
 * too. */
TEST(torchrun_flags_are_accepted) {
  const char *argv[] = {launcher(),
                        "--standalone",
                        "--nproc_per_node",
                        "2",
                        "--max_restarts=0",
                        "/bin/sh",
                        "-c",
                        "echo \"rank $RANK of $WORLD_SIZE group $GROUP_RANK\"",
                        NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 0);
  ASSERT_CONTAINS(r.out, "[0] rank 0 of 2 group 0\n");
  ASSERT_CONTAINS(r.out, "[1] rank 1 of 2 group 0\n");
  ASSERT_EQ(r.err_len, 0);
  result_free(&r);
}

TEST(programs_that_cannot_run_are_named) {
  char dir[64], path[128];
  make_dir(dir, sizeof dir);
  /* Not executable: refused before anything starts. */
  snprintf(path, sizeof path, "%s/plain", dir);
  FILE *f = fopen(path, "w");
  ASSERT_TRUE(f != NULL);
  fputs("just text\n", f);
  fclose(f);
  char expect[256];
  snprintf(expect, sizeof expect, "program '%s' is not executable", path);
  expect_refused((const char *[]){"-np", "2", path, NULL}, expect);
  /* Executable but not a program the kernel can run: exec itself fails, and says why. */
  chmod(path, 0755);
  snprintf(expect, sizeof expect, "cannot start rank 0: cannot run program '%s': Exec format error", path);
  expect_refused((const char *[]){"-np", "2", path, NULL}, expect);
  remove_dir(dir);
}

TEST(help_lists_usage_and_the_worker_environment) {
  const char *argv[] = {launcher(), "--help", NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 0);
  ASSERT_CONTAINS(r.out, "usage: cohortrun -np N");
  const char *vars[] = {"RANK",
                        "WORLD_SIZE",
                        "LOCAL_RANK",
                        "LOCAL_WORLD_SIZE",
                        "GROUP_RANK",
                        "GROUP_WORLD_SIZE",
                        "MASTER_ADDR",
                        "MASTER_PORT",
                        "TORCHELASTIC_USE_AGENT_STORE",
                        "COHORT_STORE_ADDR",
                        "COHORT_STORE_PORT",
                        "COHORT_SECRET",
                        "COHORT_LAUNCHER_STORE",
                        "COHORT_RESTART_COUNT"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    ASSERT_CONTAINS(r.out, vars[i]);
  ASSERT_EQ(r.err_len, 0);
  result_free(&r);
}

static int listen_any(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    return -1;
  *port = ntohs(a.sin_port);
  return fd;
}

TEST(master_port_in_use_is_reported_and_a_free_one_is_used) {
  int port = 0;
  int fd = listen_any(&port);
  ASSERT_TRUE(fd >= 0);
  char port_text[16], expect[128];
  snprintf(port_text, sizeof port_text, "%d", port);
  const char *argv[] = {launcher(), "-np", "2", "--master-port", port_text, worker(), "lines", "1", NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 1);
  snprintf(expect, sizeof expect, "cohortrun: --master-port %d is already in use on 127.0.0.1;", port);
  ASSERT_CONTAINS(r.err, expect);
  ASSERT_CONTAINS(r.err, "--master-port 0");
  ASSERT_EQ(r.out_len, 0); /* no worker started */
  result_free(&r);
  close(fd);

  /* Once the port is free, the store takes it and the workers are told so; their MASTER_PORT is another, free one
   * (the program's own, as under torchrun). */
  char dir[64];
  make_dir(dir, sizeof dir);
  const char *argv2[] = {launcher(), "-np", "1", "--master-port", port_text, worker(), "env", dir, NULL};
  run(argv2, &r);
  ASSERT_EQ(r.code, 0);
  char *text = read_file(dir, "env", 0);
  ASSERT_TRUE(text != NULL);
  ASSERT_STREQ(env_value(text, "COHORT_STORE_PORT"), port_text);
  ASSERT_TRUE(atoi(env_value(text, "MASTER_PORT")) > 0);
  ASSERT_TRUE(strcmp(env_value(text, "MASTER_PORT"), port_text) != 0);
  free(text);
  result_free(&r);
  remove_dir(dir);
}

/* The contents of path, malloc'd ("" when missing). */
static char *slurp(const char *path) {
  char *buf = calloc(1, 65536);
  FILE *f = fopen(path, "r");
  if (f) {
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
  }
  return buf;
}

/* The report after a failure: the failing rank's last 10 stderr lines (not the 2 before them), its host, after
 * the other ranks' output; and --log-dir keeps each rank's output without the rank prefix, each line stamped with
 * the time, stdout and stderr together. */
TEST(log_dir_and_root_cause_report) {
  char dir[64], logs[128], path[256], expect[512];
  make_dir(dir, sizeof dir);
  snprintf(logs, sizeof logs, "%s/logs", dir);
  /* Rank 1 fails once every rank has written its lines (their pid files), so that each log has them all. */
  const char *script = "trap 'echo \"rank $RANK: shutting down\" >&2; exit 0' TERM; echo \"hello from $RANK\"; i=1; "
                       "while [ $i -le 12 ]; do echo \"problem $i of $RANK\" >&2; i=$((i+1)); done; "
                       "echo $$ > \"$0/pid.$RANK\"; if [ $RANK = 1 ]; then "
                       "while [ ! -e \"$0/pid.0\" ] || [ ! -e \"$0/pid.2\" ]; do sleep 0.01; done; exit 7; fi; "
                       "sleep 20 & wait";
  const char *argv[] = {launcher(), "-np", "3", "--log-dir", logs, "/bin/sh", "-c", script, dir, NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 7);
  for (int rank = 0; rank < 3; rank++) {
    snprintf(path, sizeof path, "%s/rank-%d.log", logs, rank);
    char *text = slurp(path);
    snprintf(expect, sizeof expect, "hello from %d\n", rank);
    ASSERT_CONTAINS(text, expect);
    snprintf(expect, sizeof expect, "problem 12 of %d\n", rank);
    ASSERT_CONTAINS(text, expect);
    ASSERT_TRUE(strstr(text, "[") == NULL); /* no rank prefix */
    /* Every line starts with the time cohortrun read it: 2026-11-26T07:12:03.123Z */
    for (const char *line = text; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : line + strlen(line)) {
      int y, mo, d, h, mi, sec, ms;
      char z = 0;
      if (sscanf(line, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c ", &y, &mo, &d, &h, &mi, &sec, &ms, &z) != 8 || z != 'Z' ||
          line[24] != ' ')
        TEST_FAIL_("rank-%d.log: a line without its time stamp: %.60s", rank, line);
    }
    free(text);
    /* The terminal still gets everything, prefixed. */
    snprintf(expect, sizeof expect, "[%d] hello from %d\n", rank, rank);
    ASSERT_CONTAINS(r.out, expect);
  }
  snprintf(expect, sizeof expect,
           "cohortrun: root cause: rank 1 on host %s; the last 10 lines of its stderr (all of its output: "
           "%s/rank-1.log):\n",
           host(), logs);
  const char *report = strstr(r.err, expect);
  ASSERT_TRUE(report != NULL);
  /* The shutdown noise of the others comes before the report. */
  const char *noise = strstr(r.err, "[0] rank 0: shutting down\n");
  ASSERT_TRUE(noise != NULL && noise < report);
  ASSERT_TRUE(strstr(report, "rank 2: shutting down") == NULL);
  ASSERT_TRUE(strstr(report, "cohortrun: | problem 2 of 1\n") == NULL);
  for (int i = 3; i <= 12; i++) {
    snprintf(expect, sizeof expect, "cohortrun: | problem %d of 1\n", i);
    ASSERT_CONTAINS(report, expect);
  }
  snprintf(expect, sizeof expect, ", host %s) exited with code 7; stopped the other 2 ranks\n", host());
  ASSERT_STREQ(r.err + r.err_len - strlen(expect), expect);
  result_free(&r);

  /* A log directory that cannot be made is refused before anything starts. */
  snprintf(path, sizeof path, "%s/logs/rank-0.log/sub", dir);
  expect_refused((const char *[]){"-np", "1", "--log-dir", path, worker(), "lines", "1", NULL},
                 "cohortrun: --log-dir: cannot create directory");
  for (int rank = 0; rank < 3; rank++) {
    snprintf(path, sizeof path, "%s/rank-%d.log", logs, rank);
    unlink(path);
  }
  rmdir(logs);
  remove_dir(dir);
}

/* --max-restarts: a failure in generation 0 restarts every rank under COHORT_RESTART_COUNT=1, and the job
 * succeeds; a failure in every generation ends after K restarts with the last failure's code. */
TEST(max_restarts_starts_a_new_generation) {
  const char *flaky = "if [ \"$COHORT_RESTART_COUNT\" = 0 ] && [ $RANK = 1 ]; then echo 'first try fails' >&2; "
                      "exit 3; fi; [ \"$COHORT_RESTART_COUNT\" = 0 ] && sleep 20; "
                      "echo \"rank $RANK generation $COHORT_RESTART_COUNT\"";
  const char *argv[] = {launcher(), "-np", "2", "--max-restarts", "2", "/bin/sh", "-c", flaky, NULL};
  result r;
  run(argv, &r);
  ASSERT_EQ(r.code, 0);
  ASSERT_CONTAINS(r.out, "[0] rank 0 generation 1\n");
  ASSERT_CONTAINS(r.out, "[1] rank 1 generation 1\n");
  ASSERT_TRUE(strstr(r.out, "generation 0") == NULL);
  ASSERT_TRUE(strstr(r.out, "generation 2") == NULL);
  ASSERT_CONTAINS(r.err, "cohortrun: | first try fails\n");
  ASSERT_CONTAINS(r.err, "cohortrun: restart 1 of 2: starting all 2 ranks again with COHORT_RESTART_COUNT=1\n");
  ASSERT_TRUE(strstr(r.err, "restart 2 of 2") == NULL);
  ASSERT_TRUE(r.seconds < 10.0); /* generation 0's sleeper was stopped, not waited for */
  result_free(&r);

  const char *always = "echo \"gen $COHORT_RESTART_COUNT fails\" >&2; exit 4";
  const char *argv2[] = {launcher(), "-np", "2", "--max-restarts", "2", "/bin/sh", "-c", always, NULL};
  run(argv2, &r);
  ASSERT_EQ(r.code, 4);
  ASSERT_CONTAINS(r.err, "restart 1 of 2: starting all 2 ranks again with COHORT_RESTART_COUNT=1\n");
  ASSERT_CONTAINS(r.err, "restart 2 of 2: starting all 2 ranks again with COHORT_RESTART_COUNT=2\n");
  ASSERT_CONTAINS(r.err, "cohortrun: | gen 2 fails\n");
  ASSERT_TRUE(strstr(r.err, "restart 3") == NULL);
  /* The end of the restarts is said in words. */
  ASSERT_CONTAINS(r.err, "cohortrun: no restart left: all 2 of --max-restarts were used; the job ends with the failure "
                         "above\n");
  result_free(&r);
  expect_refused((const char *[]){"-np", "2", "--max-restarts", "-1", worker(), NULL},
                 "--max-restarts needs a number of restarts (0 to 1000), got '-1'");
}

/* COHORT_HEARTBEAT_S: rank 1 stops making collectives after 10 allreduces (it sleeps in its own code) while ranks
 * 0 and 2 wait for it inside allreduce 11. cohortrun names rank 1, not its victims, within a few seconds, and stops
 * the job with exit 1; under --max-restarts the hang restarts the job like any failure. A worker that never makes a
 * collective is never reported, and a malformed value is refused. */
TEST(heartbeat_names_the_rank_that_hangs) {
  setenv("COHORT_HEARTBEAT_S", "1", 1);
  setenv("COHORT_TRANSPORT", "tcp", 1);
  const char *argv[] = {launcher(), "-np", "3", worker(), "hang", "1", "10", NULL};
  result r;
  run(argv, &r);
  if (r.code != 1) fprintf(stderr, "  stderr: %s", r.err);
  ASSERT_EQ(r.code, 1);
  ASSERT_CONTAINS(r.err, "[1] rank 1 hangs after 10 allreduces\n");
  ASSERT_CONTAINS(r.err, "cohortrun: rank 1 (pid ");
  ASSERT_CONTAINS(r.err, " (COHORT_HEARTBEAT_S=1): it is outside every collective, in its own code; its last "
                         "completed collective was #9 (allreduce); stopping the job\n");
  ASSERT_CONTAINS(r.err, "allreduce); stopped it and the other ranks\n");
  ASSERT_TRUE(strstr(r.err, "cohortrun: rank 0 (pid") == NULL && strstr(r.err, "cohortrun: rank 2 (pid") == NULL);
  ASSERT_TRUE(r.seconds < 6.0);
  result_free(&r);

  const char *argv2[] = {launcher(), "-np", "2", "--max-restarts", "1", worker(), "hang", "0", "3", NULL};
  run(argv2, &r);
  ASSERT_EQ(r.code, 1);
  ASSERT_CONTAINS(r.err, "cohortrun: restart 1 of 1: starting all 2 ranks again with COHORT_RESTART_COUNT=1\n");
  ASSERT_EQ(count_substr(r.err, "completed collective was #2 (allreduce); stopping the job\n"), 2);
  result_free(&r);

  /* A stopped rank (SIGSTOP, Ctrl-Z, a debugger) is said to be stopped, not to hang in its own code; the stop sends
   * SIGCONT after SIGTERM so that it ends at once rather than after the grace. */
  const char *argv_stop[] = {launcher(), "-np", "2", worker(), "stop", "1", "3", NULL};
  run(argv_stop, &r);
  if (r.code != 1) fprintf(stderr, "  stderr: %s", r.err);
  ASSERT_EQ(r.code, 1);
  ASSERT_CONTAINS(r.err, "[1] rank 1 stops after 3 allreduces\n");
  ASSERT_CONTAINS(r.err, " (COHORT_HEARTBEAT_S=1): it is stopped (SIGSTOP or Ctrl-Z; SIGCONT resumes it), after "
                         "collective #2 (allreduce); stopping the job\n");
  ASSERT_TRUE(strstr(r.err, "in its own code") == NULL);
  ASSERT_TRUE(strstr(r.err, "got SIGKILL") == NULL);
  ASSERT_TRUE(r.seconds < 6.0);
  result_free(&r);

  /* Setting up: a cohort program waits 2 s (> COHORT_HEARTBEAT_S=0.5) for a late rank in cohort_init: no collective
   * yet, so no silence counts. (A program without cohort is judged by its CPU time: test_launcher_waits.sh.) */
  setenv("COHORT_HEARTBEAT_S", "0.5", 1);
  const char *argv3[] = {launcher(), "-np", "2", worker(), "late", "1", "2", NULL};
  run(argv3, &r);
  if (r.code != 0) fprintf(stderr, "  stderr: %s", r.err);
  ASSERT_EQ(r.code, 0);
  ASSERT_CONTAINS(r.out, "[1] joined late\n");
  ASSERT_TRUE(strstr(r.err, "no progress") == NULL);
  result_free(&r);

  setenv("COHORT_HEARTBEAT_S", "-1", 1);
  expect_refused((const char *[]){"-np", "2", worker(), "lines", "1", NULL},
                 "COHORT_HEARTBEAT_S=-1 is out of range [0, 1000000]");
  unsetenv("COHORT_HEARTBEAT_S");
  unsetenv("COHORT_TRANSPORT");
}

/* Two "nodes" on this host (loopback): cohortrun --nnodes 2, each with its own env. */
static void start_node(proc *p, const char *const *env, const char *const *argv) {
  child_env = env;
  ASSERT_EQ(proc_start(p, argv), 0);
}

static int free_port(void) {
  int port = 0;
  int fd = listen_any(&port);
  close(fd);
  return port;
}

/* --node-rank auto: three nodes on this host, none told its id. The one that gets to serve --master-port first is
 * node 0, the others take 1 and 2 in the order they reach its store; every rank 0..5 runs once. A fourth node that
 * comes while the job runs finds every id taken and says so. */
TEST(node_rank_auto_numbers_the_nodes) {
  char port[16];
  snprintf(port, sizeof port, "%d", free_port());
  static const char *const env[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=20", NULL};
  const char *script = "echo \"rank $RANK of $WORLD_SIZE group $GROUP_RANK\"; sleep 2";
  const char *argv[] = {launcher(),      "--nnodes", "3",       "--node-rank", "auto", "-np", "2",
                        "--master-port", port,       "/bin/sh", "-c",          script, NULL};
  proc n[4];
  result r[4];
  double t0 = cohort__now_s();
  for (int i = 0; i < 3; i++)
    start_node(&n[i], env, argv);
  usleep(800000); /* the job runs (its workers sleep 2 s) */
  start_node(&n[3], env, argv);
  proc_finish(&n[3], 20.0, t0, &r[3]);
  for (int i = 0; i < 3; i++)
    proc_finish(&n[i], 20.0, t0, &r[i]);
  ASSERT_EQ(r[3].code, 1);
  ASSERT_CONTAINS(r[3].err, "--node-rank auto: the job's 3 node ranks are all taken (--nnodes 3); this node would be "
                            "node 3");
  int seen[6] = {0}, zero = 0;
  for (int i = 0; i < 3; i++) {
    if (r[i].code != 0) fprintf(stderr, "  node %d: exit %d, stderr:\n%s", i, r[i].code, r[i].err);
    ASSERT_EQ(r[i].code, 0);
    zero += strstr(r[i].err, "so it is node 0\n") != NULL;
    for (int rank = 0; rank < 6; rank++) {
      char line[64];
      snprintf(line, sizeof line, "[%d] rank %d of 6 group %d\n", rank, rank, rank / 2);
      seen[rank] += strstr(r[i].out, line) != NULL;
    }
  }
  ASSERT_EQ(zero, 1);
  for (int rank = 0; rank < 6; rank++)
    ASSERT_EQ(seen[rank], 1);
  for (int i = 0; i < 4; i++)
    result_free(&r[i]);
  expect_refused((const char *[]){"-np", "2", "--node-rank", "auto", worker(), NULL},
                 "--node-rank auto numbers the nodes of a job of several: give --nnodes");
}

TEST(nodes_meet_and_number_their_ranks) {
  char port[16];
  snprintf(port, sizeof port, "%d", free_port());
  static const char *const env[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=20", NULL};
  const char *script = "echo \"rank $RANK of $WORLD_SIZE local $LOCAL_RANK of $LOCAL_WORLD_SIZE\"; "
                       "echo \"group $GROUP_RANK of $GROUP_WORLD_SIZE store $COHORT_STORE_PORT master $MASTER_PORT\"";
  proc n0, n1;
  result r0, r1;
  double t0 = cohort__now_s();
  const char *a1[] = {launcher(),      "--nnodes=2", "--node_rank",   "1",  "--nproc_per_node", "2",
                      "--master_addr", "127.0.0.1",  "--master_port", port, "/bin/sh",          "-c",
                      script,          NULL};
  start_node(&n1, env, a1);
  const char *a0[] = {launcher(), "--nnodes",      "2",         "--node-rank",   "0",  "--nproc-per-node",
                      "2",        "--master-addr", "127.0.0.1", "--master-port", port, "/bin/sh",
                      "-c",       script,          NULL};
  start_node(&n0, env, a0);
  proc_finish(&n0, 20.0, t0, &r0);
  proc_finish(&n1, 20.0, t0, &r1);
  ASSERT_EQ(r0.code, 0);
  ASSERT_EQ(r1.code, 0);
  ASSERT_CONTAINS(r0.out, "[0] rank 0 of 4 local 0 of 2\n");
  ASSERT_CONTAINS(r0.out, "[1] rank 1 of 4 local 1 of 2\n");
  ASSERT_CONTAINS(r1.out, "[2] rank 2 of 4 local 0 of 2\n");
  ASSERT_CONTAINS(r1.out, "[3] rank 3 of 4 local 1 of 2\n");
  /* Every worker of both nodes is told the same MASTER_PORT (node 0's choice, for the program's own store), which is
   * not the port of cohortrun's store. */
  char expect[128];
  const char *master = strstr(r0.out, " master ");
  ASSERT_TRUE(master != NULL);
  int master_port = atoi(master + 8);
  ASSERT_TRUE(master_port > 0 && master_port != atoi(port));
  for (int rank = 0; rank < 4; rank++) {
    snprintf(expect, sizeof expect, "[%d] group %d of 2 store %s master %d\n", rank, rank / 2, port, master_port);
    ASSERT_CONTAINS(rank < 2 ? r0.out : r1.out, expect);
  }
  ASSERT_EQ(r0.err_len, 0);
  ASSERT_EQ(r1.err_len, 0);
  result_free(&r0);
  result_free(&r1);
}

/* A failure on node 1 stops node 0's ranks, and both nodes print the same root cause, last. */
TEST(a_failure_on_one_node_stops_every_node) {
  char port[16], dir[64];
  make_dir(dir, sizeof dir);
  snprintf(port, sizeof port, "%d", free_port());
  static const char *const env[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=20", NULL};
  const char *script = "echo $$ > \"$0/pid.$RANK\"; if [ $RANK = 3 ]; then "
                       "while [ ! -e \"$0/pid.0\" ] || [ ! -e \"$0/pid.1\" ]; do sleep 0.01; done; "
                       "echo 'rank 3: disk on fire' >&2; exit 6; fi; exec sleep 30";
  proc n0, n1;
  result r0, r1;
  double t0 = cohort__now_s();
  const char *a1[] = {launcher(),      "--nnodes", "2",       "--node-rank", "1",    "-np", "2",
                      "--master-port", port,       "/bin/sh", "-c",          script, dir,   NULL};
  start_node(&n1, env, a1);
  const char *a0[] = {launcher(),      "--nnodes", "2",       "--node-rank", "0",    "-np", "2",
                      "--master-port", port,       "/bin/sh", "-c",          script, dir,   NULL};
  start_node(&n0, env, a0);
  proc_finish(&n0, 20.0, t0, &r0);
  proc_finish(&n1, 20.0, t0, &r1);
  ASSERT_EQ(r1.code, 6);
  ASSERT_EQ(r0.code, 6);
  ASSERT_TRUE(r0.seconds < 10.0);
  char expect[512];
  snprintf(expect, sizeof expect,
           "cohortrun: root cause: rank 3 on host %s; the last 1 line of its stderr:\n"
           "cohortrun: | rank 3: disk on fire\n",
           host());
  ASSERT_CONTAINS(r0.err, expect);
  ASSERT_CONTAINS(r1.err, expect);
  snprintf(expect, sizeof expect,
           ", host %s, node 1) exited with code 6\n"
           "cohortrun: node 0: stopped its 2 ranks because of the failure above\n",
           host());
  ASSERT_STREQ(r0.err + r0.err_len - strlen(expect), expect);
  ASSERT_EQ(alive_after(dir, 4, 2.0), 0);
  result_free(&r0);
  result_free(&r1);
  remove_dir(dir);
}

/* Each bad multi-node setup: one clear line, non-zero exit, nothing left running. */
TEST(bad_multi_node_setups_are_named) {
  const char *w = worker();
  /* No secret: refused before anything starts. */
  unsetenv("COHORT_SECRET");
  expect_refused((const char *[]){"--nnodes", "2", "--node-rank", "0", "-np", "1", "--master-port", "29999", w, NULL},
                 "--nnodes 2 needs COHORT_SECRET exported, the same on every node");
  /* torchrun's defaults fill in --master-port (29500) and --node-rank (0); only a port of 0 cannot be shared. */
  expect_refused((const char *[]){"--nnodes", "2", "--node-rank", "0", "-np", "1", "--master-port", "0", w, NULL},
                 "--nnodes 2 needs a fixed --master-port P");
  expect_refused((const char *[]){"--nnodes", "2", "--node-rank", "2", "-np", "1", w, NULL},
                 "--node-rank 2 is outside 0..1 (--nnodes 2)");
  expect_refused((const char *[]){"--nnodes", "0", "-np", "1", w, NULL}, "--nnodes needs a number of nodes");

  /* An unreachable master: node 1 dials a port nobody listens on, and gives up after COHORT_TIMEOUT. */
  char port[16];
  snprintf(port, sizeof port, "%d", free_port());
  static const char *const quick[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=1", NULL};
  proc p, q;
  result r, r2;
  double t0 = cohort__now_s();
  const char *a[] = {launcher(),      "--nnodes", "2", "--node-rank", "1", "-np", "1",
                     "--master-port", port,       w,   "lines",       "1", NULL};
  start_node(&p, quick, a);
  proc_finish(&p, 20.0, t0, &r);
  ASSERT_EQ(r.code, 1);
  ASSERT_EQ(count_lines(r.err), 1);
  char expect[600];
  snprintf(expect, sizeof expect,
           "cohortrun: node 1: cannot reach the rendezvous store of node 0 at 127.0.0.1:%s "
           "within 1 s (COHORT_TIMEOUT)",
           port);
  ASSERT_CONTAINS(r.err, expect);
  ASSERT_TRUE(r.seconds >= 0.9 && r.seconds < 10.0);
  ASSERT_EQ(r.out_len, 0);
  result_free(&r);

  /* Mismatched --nnodes: both nodes say so, naming both values. */
  static const char *const env[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=5", NULL};
  t0 = cohort__now_s();
  const char *b0[] = {launcher(),      "--nnodes", "2", "--node-rank", "0", "-np", "1",
                      "--master-port", port,       w,   "lines",       "1", NULL};
  const char *b1[] = {launcher(),      "--nnodes", "3", "--node-rank", "1", "-np", "1",
                      "--master-port", port,       w,   "lines",       "1", NULL};
  start_node(&p, env, b0);
  start_node(&q, env, b1);
  proc_finish(&p, 20.0, t0, &r);
  proc_finish(&q, 20.0, t0, &r2);
  ASSERT_EQ(r.code, 1);
  ASSERT_EQ(r2.code, 1);
  snprintf(expect, sizeof expect,
           "cohortrun: mismatched --nnodes: this node (node 0) has --nnodes 2, node 1 (host %s) "
           "has --nnodes 3",
           host());
  ASSERT_CONTAINS(r.err, expect);
  snprintf(expect, sizeof expect,
           "cohortrun: mismatched --nnodes: this node (node 1) has --nnodes 3, node 0 (host %s) "
           "has --nnodes 2",
           host());
  ASSERT_CONTAINS(r2.err, expect);
  ASSERT_EQ(r.out_len + r2.out_len, 0);
  result_free(&r);
  result_free(&r2);

  /* Mismatched --max-restarts: a restart would wait for a node that has ended, so both refuse at the start. */
  t0 = cohort__now_s();
  const char *m0[] = {launcher(),      "--nnodes", "2", "--node-rank", "0", "-np", "1", "--max-restarts", "1",
                      "--master-port", port,       w,   "lines",       "1", NULL};
  const char *m1[] = {launcher(),      "--nnodes", "2", "--node-rank", "1", "-np", "1",
                      "--master-port", port,       w,   "lines",       "1", NULL};
  start_node(&p, env, m0);
  start_node(&q, env, m1);
  proc_finish(&p, 20.0, t0, &r);
  proc_finish(&q, 20.0, t0, &r2);
  ASSERT_EQ(r.code, 1);
  ASSERT_EQ(r2.code, 1);
  snprintf(expect, sizeof expect,
           "cohortrun: mismatched --max-restarts: this node (node 0) has 1, node 1 (host %s) has 0; give every "
           "node the same value",
           host());
  ASSERT_CONTAINS(r.err, expect);
  snprintf(expect, sizeof expect,
           "cohortrun: mismatched --max-restarts: this node (node 1) has 0, node 0 (host %s) has 1", host());
  ASSERT_CONTAINS(r2.err, expect);
  ASSERT_EQ(r.out_len + r2.out_len, 0);
  result_free(&r);
  result_free(&r2);

  /* A wrong secret on node 1: the store refuses it, node 1 says why; node 0 times out waiting for node 1. */
  static const char *const env0[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=2", NULL};
  static const char *const env1[] = {"COHORT_SECRET=not-the-same-secret", "COHORT_TIMEOUT=2", NULL};
  t0 = cohort__now_s();
  start_node(&p, env0, b0);
  b1[2] = "2";
  start_node(&q, env1, b1);
  proc_finish(&p, 20.0, t0, &r);
  proc_finish(&q, 20.0, t0, &r2);
  ASSERT_EQ(r2.code, 1);
  ASSERT_EQ(count_lines(r2.err), 1);
  snprintf(expect, sizeof expect,
           "cohortrun: node 1: the rendezvous store of node 0 at 127.0.0.1:%s refused this "
           "node's COHORT_SECRET: export the same COHORT_SECRET on every node",
           port);
  ASSERT_CONTAINS(r2.err, expect);
  ASSERT_EQ(r.code, 1);
  ASSERT_CONTAINS(r.err, "cohortrun: node 1 of 2 did not join within 2 s (COHORT_TIMEOUT)");
  ASSERT_EQ(r.out_len + r2.out_len, 0);
  result_free(&r);
  result_free(&r2);
}

/* --nnodes MIN:MAX: a bad range is one usage line (exit 2); nodes that disagree on the range are refused by both,
 * each naming both ranges (the elastic rendezvous itself is tested across namespaces, test_cluster_elastic.sh). */
TEST(elastic_ranges_are_checked) {
  const char *w = worker();
  setenv("COHORT_SECRET", "0123456789abcdef", 1);
  expect_refused((const char *[]){"--nnodes", "3:2", "--node-rank", "0", "-np", "1", "--master-port", "2000", w, NULL},
                 "cohortrun: --nnodes 3:2: MIN (3) is larger than MAX (2); write MIN:MAX, e.g. --nnodes 2:3");
  expect_refused((const char *[]){"--nnodes", "0:2", "--node-rank", "0", "-np", "1", "--master-port", "2000", w, NULL},
                 "cohortrun: --nnodes needs N or MIN:MAX with 1 <= MIN <= MAX <= 4096 (e.g. --nnodes 2:4), got "
                 "'0:2'");
  expect_refused((const char *[]){"--nnodes", "a:b", "--node-rank", "0", "-np", "1", "--master-port", "2000", w, NULL},
                 "got 'a:b'");
  expect_refused((const char *[]){"--nnodes", "2:", "--node-rank", "0", "-np", "1", "--master-port", "2000", w, NULL},
                 "got '2:'");
  expect_refused((const char *[]){"--nnodes", "1:2", "--node-rank", "2", "-np", "1", "--master-port", "2000", w, NULL},
                 "--node-rank 2 is outside 0..1 (--nnodes 1:2)");
  expect_refused((const char *[]){"--nnodes", "1:2", "--node-rank", "0", "-np", "1", "--rdzv-last-call", "x",
                                  "--master-port", "2000", w, NULL},
                 "--rdzv-last-call needs a number of seconds");
  unsetenv("COHORT_SECRET");

  char port[16], expect[600];
  snprintf(port, sizeof port, "%d", free_port());
  static const char *const env[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=5", NULL};
  proc p, q;
  result r, r2;
  double t0 = cohort__now_s();
  const char *b0[] = {launcher(),      "--nnodes", "2:3", "--node-rank", "0", "-np", "1",
                      "--master-port", port,       w,     "lines",       "1", NULL};
  const char *b1[] = {launcher(),      "--nnodes", "2:4", "--node-rank", "1", "-np", "1",
                      "--master-port", port,       w,     "lines",       "1", NULL};
  start_node(&p, env, b0);
  start_node(&q, env, b1);
  proc_finish(&p, 20.0, t0, &r);
  proc_finish(&q, 20.0, t0, &r2);
  ASSERT_EQ(r.code, 1);
  ASSERT_EQ(r2.code, 1);
  snprintf(expect, sizeof expect,
           "cohortrun: mismatched --nnodes: this node (node 0) has --nnodes 2:3, node 1 (host %s) has --nnodes 2:4; "
           "give every node the same value\n",
           host());
  ASSERT_CONTAINS(r.err, expect);
  snprintf(expect, sizeof expect,
           "cohortrun: mismatched --nnodes: this node (node 1) has --nnodes 2:4, node 0 (host %s) has --nnodes 2:3",
           host());
  ASSERT_CONTAINS(r2.err, expect);
  ASSERT_EQ(r.out_len + r2.out_len, 0);
  result_free(&r);
  result_free(&r2);

  /* A fixed --nnodes 3 against an elastic 2:3: refused the same way. */
  t0 = cohort__now_s();
  b1[2] = "3";
  start_node(&p, env, b0);
  start_node(&q, env, b1);
  proc_finish(&p, 20.0, t0, &r);
  proc_finish(&q, 20.0, t0, &r2);
  ASSERT_EQ(r.code, 1);
  ASSERT_EQ(r2.code, 1);
  snprintf(expect, sizeof expect,
           "cohortrun: mismatched --nnodes: this node (node 1) has --nnodes 3, node 0 (host %s) has --nnodes 2:3",
           host());
  ASSERT_CONTAINS(r2.err, expect);
  ASSERT_CONTAINS(r.err, "has --nnodes 2:3, node 1 (host ");
  result_free(&r);
  result_free(&r2);
}

/* The command line of one node of an elastic job: --nnodes RANGE, --node-rank ID, one rank running `sh -c SCRIPT`,
 * a 0.5 s last call, and --grace GRACE unless it is NULL. */
static void elastic_node_argv(const char *argv[18], const char *range, const char *id, const char *port,
                              const char *grace, const char *script) {
  const char *head[] = {launcher(), "--nnodes",      range, "--node-rank",      id,   "-np",
                        "1",        "--master-port", port,  "--rdzv-last-call", "0.5"};
  int k = 0;
  for (size_t i = 0; i < sizeof head / sizeof *head; i++)
    argv[k++] = head[i];
  if (grace) {
    argv[k++] = "--grace";
    argv[k++] = grace;
  }
  argv[k++] = "/bin/sh";
  argv[k++] = "-c";
  argv[k++] = script;
  argv[k] = NULL;
}

/* An elastic job on loopback (the same rendezvous as across namespaces, so that the sanitizers see it too): three
 * nodes of --nnodes 2:3, node 2's cohortrun killed -> nodes 0 and 1 start generation 1 at world 2 and finish; a
 * node that joins later takes part in generation 2 at world 3; then a failure with no restart left ends all. */
TEST(elastic_nodes_leave_and_join) {
  char port[16];
  snprintf(port, sizeof port, "%d", free_port());
  static const char *const env[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=20", NULL};
  /* Generation 0 waits to be stopped; later ones say who they are and finish. */
  const char *script = "if [ $COHORT_RESTART_COUNT = 0 ]; then exec sleep 30; fi; "
                       "echo \"gen $COHORT_RESTART_COUNT rank $RANK of $WORLD_SIZE\"; "
                       "[ $COHORT_RESTART_COUNT = 1 ] && exec sleep 30; exit 0";
  proc n[4];
  result r[4];
  const char *argv[4][18];
  char id[4][4];
  double t0 = cohort__now_s();
  for (int i = 0; i < 4; i++) {
    snprintf(id[i], sizeof id[i], "%d", i);
    elastic_node_argv(argv[i], "2:4", id[i], port, NULL, script);
  }
  for (int i = 0; i < 3; i++)
    start_node(&n[i], env, argv[i]);
  usleep(1500000); /* generation 0 of 3 nodes is running */
  kill(n[2].pid, SIGKILL);
  proc_finish(&n[2], 20.0, t0, &r[2]);
  ASSERT_EQ(r[2].code, 128 + SIGKILL);
  usleep(3500000); /* nodes 0 and 1 noticed (2 s of silence) and run generation 1 */
  start_node(&n[3], env, argv[3]);
  proc_finish(&n[0], 30.0, t0, &r[0]);
  proc_finish(&n[1], 30.0, t0, &r[1]);
  proc_finish(&n[3], 30.0, t0, &r[3]);
  char expect[700];
  for (int i = 0; i < 2; i++) {
    ASSERT_EQ(r[i].code, 0);
    snprintf(expect, sizeof expect,
             "cohortrun: node %d: generation 1 (COHORT_RESTART_COUNT=1): node 2 (host %s) left the job; nodes 0,1 go "
             "on; 2 nodes, world size 2, this node runs ranks %d..%d\n",
             i, host(), i, i);
    ASSERT_CONTAINS(r[i].err, expect);
    snprintf(expect, sizeof expect, "[%d] gen 1 rank %d of 2\n[%d] gen 2 rank %d of 3\n", i, i, i, i);
    ASSERT_CONTAINS(r[i].out, expect);
  }
  ASSERT_EQ(r[3].code, 0);
  snprintf(expect, sizeof expect,
           "cohortrun: node 3: generation 2 (COHORT_RESTART_COUNT=2): node 3 (host %s) joined; nodes 0,1,3; 3 nodes, "
           "world size 3, this node runs ranks 2..2\n",
           host());
  ASSERT_CONTAINS(r[3].err, expect);
  ASSERT_CONTAINS(r[3].out, "[2] gen 2 rank 2 of 3\n");
  for (int i = 0; i < 4; i++)
    result_free(&r[i]);

  /* --max-restarts 0: a worker failure on node 1 (not a change of membership) ends both nodes with its code. */
  snprintf(port, sizeof port, "%d", free_port());
  const char *fails = "sleep 0.5; [ $RANK = 1 ] && exit 3; exec sleep 30";
  t0 = cohort__now_s();
  for (int i = 0; i < 2; i++) {
    const char *a[] = {launcher(),      "--nnodes", "1:2",     "--node-rank", id[i], "-np", "1",
                       "--master-port", port,       "/bin/sh", "-c",          fails, NULL};
    memcpy(argv[i], a, sizeof a);
    start_node(&n[i], env, argv[i]);
  }
  proc_finish(&n[0], 30.0, t0, &r[0]);
  proc_finish(&n[1], 30.0, t0, &r[1]);
  for (int i = 0; i < 2; i++) {
    if (r[i].code != 3) fprintf(stderr, "  node %d: exit %d, stderr:\n%s", i, r[i].code, r[i].err);
    ASSERT_EQ(r[i].code, 3);
    snprintf(expect, sizeof expect, "cohortrun: node %d: no restart: the failure above used up --max-restarts 0\n", i);
    ASSERT_CONTAINS(r[i].err, expect);
    result_free(&r[i]);
  }
}

/* A lost node replaced under its --node-rank: three nodes of --nnodes 2:3, node 2's cohortrun killed, nodes 0 and
 * 1 go on at world 2; a new cohortrun with --node-rank 2 finds the old node silent, takes the id over and is taken
 * in by generation 2 (world 3). A cohortrun with the id of live node 1 is refused, naming it, and nobody notices. */
TEST(elastic_lost_node_is_replaced) {
  char port[16], expect[700];
  snprintf(port, sizeof port, "%d", free_port());
  static const char *const env[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=20", NULL};
  /* Generations 0 and 1 wait to be stopped; generation 2 says who it is and finishes. */
  const char *script = "[ $COHORT_RESTART_COUNT = 2 ] || exec sleep 30; echo \"gen 2 rank $RANK of $WORLD_SIZE\"";
  proc n[5];
  result r[5];
  const char *argv[5][18];
  const char *ids[5] = {"0", "1", "2", "2", "1"};
  for (int i = 0; i < 5; i++)
    elastic_node_argv(argv[i], "2:3", ids[i], port, NULL, script);
  double t0 = cohort__now_s();
  for (int i = 0; i < 3; i++)
    start_node(&n[i], env, argv[i]);
  usleep(1500000); /* generation 0 of 3 nodes is running */
  kill(n[2].pid, SIGKILL);
  proc_finish(&n[2], 20.0, t0, &r[2]);
  ASSERT_EQ(r[2].code, 128 + SIGKILL);
  usleep(3500000); /* nodes 0 and 1 noticed (2 s of silence) and run generation 1 */
  /* A first newcomer wins the id and dies before it has bumped the incarnation: the id must stay free for the next
   * (a claim kept under its own key once refused every later newcomer). */
  static const char *const env_dies[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=20",
                                         "COHORT_TEST_DIE_AFTER_TAKEOVER_CLAIM=1", NULL};
  proc dies;
  result dies_r;
  start_node(&dies, env_dies, argv[3]);
  proc_finish(&dies, 20.0, t0, &dies_r);
  ASSERT_EQ(dies_r.code, 128 + SIGKILL);
  ASSERT_CONTAINS(dies_r.err, "checking for 2.5 s that it is gone");
  result_free(&dies_r);
  start_node(&n[3], env, argv[3]);
  double t_dup = cohort__now_s();
  start_node(&n[4], env, argv[4]);
  proc_finish(&n[4], 20.0, t0, &r[4]);
  ASSERT_EQ(r[4].code, 1);
  ASSERT_TRUE(cohort__now_s() - t_dup < 5.0); /* it looks for 2.5 s at most, and sees node 1 beat at once */
  snprintf(expect, sizeof expect,
           "cohortrun: --node-rank 1 is already taken by a live node of this job (host %s): give this node an id no "
           "live node has\n",
           host());
  ASSERT_CONTAINS(r[4].err, expect);
  ASSERT_EQ(r[4].out_len, 0);
  proc_finish(&n[0], 30.0, t0, &r[0]);
  proc_finish(&n[1], 30.0, t0, &r[1]);
  proc_finish(&n[3], 30.0, t0, &r[3]);
  for (int i = 0; i < 4; i++) {
    if (i == 2) continue;
    int rank = i == 3 ? 2 : i;
    if (r[i].code != 0) fprintf(stderr, "  node %s: exit %d, stderr:\n%s", ids[i], r[i].code, r[i].err);
    ASSERT_EQ(r[i].code, 0);
    snprintf(expect, sizeof expect,
             "cohortrun: node %d: generation 2 (COHORT_RESTART_COUNT=2): node 2 (host %s) joined; nodes 0,1,2; 3 "
             "nodes, world size 3, this node runs ranks %d..%d\n",
             rank, host(), rank, rank);
    ASSERT_CONTAINS(r[i].err, expect);
    snprintf(expect, sizeof expect, "[%d] gen 2 rank %d of 3\n", rank, rank);
    ASSERT_CONTAINS(r[i].out, expect);
  }
  snprintf(expect, sizeof expect,
           "cohortrun: node 2: the node that had --node-rank 2 (host %s) is gone; this node replaces it\n", host());
  ASSERT_CONTAINS(r[3].err, expect);
  for (int i = 0; i < 5; i++)
    result_free(&r[i]);
}

/* A node silent long enough to be replaced (its cohortrun stopped, here by SIGSTOP) that comes back must not run
 * under its id again: the generation records name members by id, so it would start the same ranks as its
 * replacement. Three nodes of --nnodes 2:3, node 2 stopped; a new node 2 takes the id over and generation 2 runs
 * nodes 0,1,2; the old node 2, continued, ends with one line and runs nothing. */
TEST(elastic_replaced_node_that_comes_back_ends) {
  char port[16], expect[700];
  snprintf(port, sizeof port, "%d", free_port());
  static const char *const env[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=20", NULL};
  const char *script =
      "[ $COHORT_RESTART_COUNT = 2 ] || exec sleep 30; echo \"gen 2 rank $RANK of $WORLD_SIZE\"; exec sleep 3";
  proc n[4];
  result r[4];
  const char *argv[4][18];
  const char *ids[4] = {"0", "1", "2", "2"};
  for (int i = 0; i < 4; i++)
    elastic_node_argv(argv[i], "2:3", ids[i], port, NULL, script);
  double t0 = cohort__now_s();
  for (int i = 0; i < 3; i++)
    start_node(&n[i], env, argv[i]);
  usleep(1500000); /* generation 0 of 3 nodes is running */
  kill(n[2].pid, SIGSTOP);
  usleep(3500000); /* nodes 0 and 1 noticed (2 s of silence) and run generation 1 */
  start_node(&n[3], env, argv[3]);
  usleep(4000000); /* the new node 2 took the id over (2.5 s) and generation 2 runs for 3 s */
  kill(n[2].pid, SIGCONT);
  proc_finish(&n[2], 20.0, t0, &r[2]);
  proc_finish(&n[0], 30.0, t0, &r[0]);
  proc_finish(&n[1], 30.0, t0, &r[1]);
  proc_finish(&n[3], 30.0, t0, &r[3]);
  if (r[2].code != 1) fprintf(stderr, "  old node 2: exit %d, stderr:\n%s", r[2].code, r[2].err);
  ASSERT_EQ(r[2].code, 1);
  ASSERT_CONTAINS(r[2].err, "cohortrun: node 2: a newer cohortrun took over --node-rank 2 while this one was silent "
                            "(for more than 2 s); this one ends\n");
  ASSERT_TRUE(strstr(r[2].out, "gen 2") == NULL);
  for (int i = 0; i < 4; i++) {
    if (i == 2) continue;
    int rank = i == 3 ? 2 : i;
    if (r[i].code != 0) fprintf(stderr, "  node %s: exit %d, stderr:\n%s", ids[i], r[i].code, r[i].err);
    ASSERT_EQ(r[i].code, 0);
    snprintf(expect, sizeof expect, "[%d] gen 2 rank %d of 3\n", rank, rank);
    ASSERT_CONTAINS(r[i].out, expect);
  }
  for (int i = 0; i < 4; i++)
    result_free(&r[i]);
}

/* Three nodes of --nnodes 2:3 running script with --grace GRACE; node 2 is killed after 1.5 s and a new node 2 is
 * started at once. Its take-over is done 2.5 s later; the workers of generation 0 ignore SIGTERM, so node 0 writes
 * no generation before the grace has run out, well after that. Waits for nodes 0, 1 and the new 2 (r[0], r[1],
 * r[3]) and checks that each exited 0 and ran generation 1 as rank R of 3 (its own rank only). */
static void replace_node_at_once(const char *script, const char *grace, result r[4]) {
  char port[16], expect[64];
  snprintf(port, sizeof port, "%d", free_port());
  static const char *const env[] = {"COHORT_SECRET=0123456789abcdef", "COHORT_TIMEOUT=20", NULL};
  proc n[4];
  const char *argv[4][18];
  const char *ids[4] = {"0", "1", "2", "2"};
  for (int i = 0; i < 4; i++)
    elastic_node_argv(argv[i], "2:3", ids[i], port, grace, script);
  double t0 = cohort__now_s();
  for (int i = 0; i < 3; i++)
    start_node(&n[i], env, argv[i]);
  usleep(1500000); /* generation 0 of 3 nodes is running */
  kill(n[2].pid, SIGKILL);
  proc_finish(&n[2], 20.0, t0, &r[2]);
  start_node(&n[3], env, argv[3]);
  for (int i = 0; i < 4; i++)
    if (i != 2) proc_finish(&n[i], 30.0, t0, &r[i]);
  for (int i = 0; i < 4; i++) {
    if (i == 2) continue;
    int rank = i == 3 ? 2 : i;
    if (r[i].code != 0) fprintf(stderr, "  node %s: exit %d, stderr:\n%s", ids[i], r[i].code, r[i].err);
    ASSERT_EQ(r[i].code, 0);
    snprintf(expect, sizeof expect, "[%d] gen 1 rank %d of 3\n", rank, rank);
    ASSERT_CONTAINS(r[i].out, expect);
  }
}

/* A replacement that takes the id over before node 0 has written a generation without the lost node must not join
 * the generation that names the old one: generation 0 is still the latest record when the take-over is done. The new
 * node 2 runs nothing before generation 1, which node 0 writes with it. */
TEST(elastic_replacement_skips_the_generation_of_the_old_node) {
  const char *script = "if [ $COHORT_RESTART_COUNT = 0 ]; then trap '' TERM; exec sleep 30; fi; "
                       "echo \"gen $COHORT_RESTART_COUNT rank $RANK of $WORLD_SIZE\"";
  result r[4];
  replace_node_at_once(script, "4", r);
  if (strstr(r[3].err, "generation 0 (")) fprintf(stderr, "  new node 2, stderr:\n%s", r[3].err);
  ASSERT_TRUE(strstr(r[3].err, "generation 0 (") == NULL);
  for (int i = 0; i < 4; i++)
    result_free(&r[i]);
}

/* A node lost while a worker failure stops the generation is a change of membership, not a failure that --max-restarts
 * counts, also when its replacement took the id over before node 0 wrote the next generation: rank 1 fails 2 s into
 * generation 0, the other workers take the grace to stop; --max-restarts 0. Generation 1 runs nodes 0,1,2 (it ended
 * the job with rank 1's code before). */
TEST(elastic_node_lost_in_a_failure_is_no_restart_when_replaced) {
  const char *script = "if [ $COHORT_RESTART_COUNT = 0 ]; then [ $RANK = 1 ] && { sleep 2; exit 3; }; "
                       "trap '' TERM; exec sleep 30; fi; echo \"gen $COHORT_RESTART_COUNT rank $RANK of $WORLD_SIZE\"";
  char expect[700];
  result r[4];
  replace_node_at_once(script, "5", r);
  snprintf(expect, sizeof expect,
           "cohortrun: node 0: generation 1 (COHORT_RESTART_COUNT=1): node 2 (host %s) left the job; nodes 0,1,2 go "
           "on; 3 nodes",
           host());
  ASSERT_CONTAINS(r[0].err, expect);
  for (int i = 0; i < 4; i++)
    result_free(&r[i]);
}

/* -H and --hostfile start the other nodes over ssh. Without an sshd here, a stand-in `ssh` first in PATH runs the
 * remote command on this host: everything but the network hop is real (the command line, the quoting, the secret
 * over stdin, node 1's own cohortrun). */
TEST(hosts_start_the_other_nodes_over_ssh) {
  char dir[64], path[128], env_path[4300], expect[256];
  make_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/ssh", dir);
  FILE *f = fopen(path, "w");
  ASSERT_TRUE(f != NULL);
  fputs("#!/bin/sh\n[ \"$1\" = -o ] && shift 2\necho \"$1\" >> \"$(dirname \"$0\")/hosts\"\nshift\nexec sh -c \"$1\"\n",
        f);
  fclose(f);
  chmod(path, 0755);
  snprintf(env_path, sizeof env_path, "PATH=%s:%s", dir, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
  const char *env[] = {env_path, "COHORT_TIMEOUT=20", NULL};
  /* The secret, generated by node 0, reaches node 1's workers; an argument with a quote and spaces survives. */
  const char *script = "echo \"rank $RANK of $WORLD_SIZE local $LOCAL_RANK secret ${#COHORT_SECRET} arg [$1]\"";
  const char *argv[] = {launcher(), "-H", "127.0.0.1:2,otherhost:2", "/bin/sh", "-c", script, "x", "it's a b", NULL};
  proc p;
  result r;
  double t0 = cohort__now_s();
  unsetenv("COHORT_SECRET");
  start_node(&p, env, argv);
  proc_finish(&p, 20.0, t0, &r);
  ASSERT_EQ(r.code, 0);
  for (int rank = 0; rank < 4; rank++) {
    snprintf(expect, sizeof expect, "[%d] rank %d of 4 local %d secret 64 arg [it's a b]\n", rank, rank, rank % 2);
    ASSERT_CONTAINS(r.out, expect);
  }
  char *hosts = slurp(strcat(strcpy(env_path, dir), "/hosts"));
  ASSERT_STREQ(hosts, "otherhost\n"); /* node 0 runs here, only node 1 goes over ssh */
  free(hosts);
  result_free(&r);

  snprintf(path, sizeof path, "%s/hostfile", dir);
  f = fopen(path, "w");
  fputs("# two nodes\n127.0.0.1 slots=2\nnode2:3\n", f);
  fclose(f);
  expect_refused((const char *[]){"--hostfile", path, worker(), NULL},
                 "host 'node2' has 3 slots, the first host 2: every host must run the same number of workers");
  expect_refused((const char *[]){"-H", "a:2,b:2", "-np", "2", worker(), NULL}, "leave out -np");
  /* Strict lines, each refusal naming file:line: mpirun's "slot=2" typo once ran one worker without a word, and a
   * junk line became a host name. */
  const struct {
    const char *text, *expect;
  } bad[] = {
      {"# comment\nlocalhost slot=2\n", ":2: 'slot=2' is not slots=N"},
      {"localhost slots=2\nthis is junk\n", ":2: 'is' is not slots=N"},
      {"localhost slots=two\n", ":1: 'slots=two' is not slots=N"},
      {"localhost:2 slots=2\n", ":1: host 'localhost:2' gives its slots twice"},
      {"localhost slots=2 slots=2\n", ":1: host 'localhost' gives its slots twice"},
      {"local/host\n", ":1: 'local/host' is not a host name"},
      {"a=b\n", ":1: 'a=b' is not a host name"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    f = fopen(path, "w");
    fputs(bad[i].text, f);
    fclose(f);
    char want[256];
    snprintf(want, sizeof want, "--hostfile %s%s", path, bad[i].expect);
    expect_refused((const char *[]){"--hostfile", path, worker(), NULL}, want);
  }
  unlink(path);
  snprintf(path, sizeof path, "%s/ssh", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/hosts", dir);
  unlink(path);
  remove_dir(dir);
}

COHORT_TEST_MAIN(
    TEST_CASE(three_ranks_succeed_with_prefixed_lines), TEST_CASE(flood_of_output_arrives_whole_and_in_order),
    TEST_CASE(workers_get_the_job_environment), TEST_CASE(an_exported_secret_is_the_jobs_on_one_node_too),
    TEST_CASE(workers_meet_through_the_launcher_store), TEST_CASE(worker_exit_code_stops_the_others_and_is_returned),
    TEST_CASE(worker_killed_by_signal_is_named), TEST_CASE(segments_of_killed_workers_are_removed),
    TEST_CASE(workers_ignoring_sigterm_get_sigkill_after_the_grace), TEST_CASE(what_the_workers_started_is_stopped_too),
    TEST_CASE(sigterm_to_the_launcher_stops_the_workers), TEST_CASE(sigint_to_the_launcher_stops_the_workers),
    TEST_CASE(second_sigint_kills_at_once_and_says_so), TEST_CASE(workers_die_with_a_killed_launcher),
    TEST_CASE(bad_command_lines_are_refused_with_one_line), TEST_CASE(torchrun_flags_are_accepted),
    TEST_CASE(programs_that_cannot_run_are_named), TEST_CASE(help_lists_usage_and_the_worker_environment),
    TEST_CASE(master_port_in_use_is_reported_and_a_free_one_is_used), TEST_CASE(log_dir_and_root_cause_report),
    TEST_CASE(max_restarts_starts_a_new_generation), TEST_CASE(heartbeat_names_the_rank_that_hangs),
    TEST_CASE(nodes_meet_and_number_their_ranks), TEST_CASE(node_rank_auto_numbers_the_nodes),
    TEST_CASE(a_failure_on_one_node_stops_every_node), TEST_CASE(bad_multi_node_setups_are_named),
    TEST_CASE(elastic_ranges_are_checked), TEST_CASE(elastic_nodes_leave_and_join),
    TEST_CASE(elastic_lost_node_is_replaced), TEST_CASE(elastic_replaced_node_that_comes_back_ends),
    TEST_CASE(elastic_replacement_skips_the_generation_of_the_old_node),
    TEST_CASE(elastic_node_lost_in_a_failure_is_no_restart_when_replaced),
    TEST_CASE(hosts_start_the_other_nodes_over_ssh))
