/* launcher_worker.c: the worker that test_launcher runs under cohortrun; one behaviour per mode (argv[1]).
 *
 *   lines K               K lines on stdout and on stderr, then a partial line without newline on stdout
 *   flood K               K lines of varying length on stdout, written in large blocks that split lines
 *   env DIR               writes what it was given (job variables, stdin, process group) to DIR/env.RANK
 *   store                 meets the other ranks through the store cohortrun serves, with the secret it was given
 *   fail DIR VICTIM CODE [stubborn]   every rank writes DIR/pid.RANK; once all have, VICTIM exits with CODE and
 *                         the others sleep (ignoring SIGTERM with "stubborn"); CODE "kill" means SIGKILL itself
 *   sleep DIR             writes DIR/pid.RANK and sleeps
 *   hang VICTIM K         every rank joins the job (cohort_init) and does K allreduces; then VICTIM hangs in its own
 *                         code (sleeps) and the others enter allreduce K+1, which waits for it
 *   late VICTIM S         VICTIM sleeps S seconds before cohort_init, where the others wait for it; one allreduce
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/cohort.h"
#include "core/error.h"
#include "store/store.h"

static int env_int(const char *name) {
  const char *v = getenv(name);
  return v ? atoi(v) : -1;
}

static void write_file(const char *dir, const char *name, int rank, const char *text) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/.%s.%d.tmp", dir, name, rank);
  snprintf(path, sizeof path, "%s/%s.%d", dir, name, rank);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s: %s\n", tmp, strerror(errno));
    exit(90);
  }
  fputs(text, f);
  fclose(f);
  /* Atomic, so the test never reads half a file. */
  if (rename(tmp, path) != 0) exit(91);
}

static void write_pid(const char *dir, int rank) {
  char text[32];
  snprintf(text, sizeof text, "%d\n", (int)getpid());
  write_file(dir, "pid", rank, text);
}

static void sleep_long(void) {
  for (int i = 0; i < 300; i++)
    usleep(100000);
}

static int mode_lines(int rank, int k) {
  for (int i = 0; i < k; i++) {
    printf("out %d of rank %d\n", i, rank);
    fflush(stdout);
    fprintf(stderr, "err %d of rank %d\n", i, rank);
  }
  printf("tail of rank %d", rank);
  return 0;
}

static int mode_flood(int rank, int k) {
  /* Fully buffered in odd-sized blocks, so that writes end in the middle of lines. */
  static char block[3001];
  setvbuf(stdout, block, _IOFBF, sizeof block);
  char payload[400];
  for (int i = 0; i < k; i++) {
    int len = (i * 37) % 300;
    memset(payload, 'a' + (i + rank) % 26, (size_t)len);
    payload[len] = '\0';
    printf("%d %d %s\n", rank, i, payload);
  }
  return 0;
}

static int mode_env(const char *dir, int rank) {
  static const char *const names[] = {"RANK",
                                      "WORLD_SIZE",
                                      "LOCAL_RANK",
                                      "LOCAL_WORLD_SIZE",
                                      "GROUP_RANK",
                                      "GROUP_WORLD_SIZE",
                                      "ROLE_RANK",
                                      "ROLE_WORLD_SIZE",
                                      "ROLE_NAME",
                                      "MASTER_ADDR",
                                      "MASTER_PORT",
                                      "TORCHELASTIC_RESTART_COUNT",
                                      "TORCHELASTIC_MAX_RESTARTS",
                                      "TORCHELASTIC_USE_AGENT_STORE",
                                      "COHORT_STORE_ADDR",
                                      "COHORT_STORE_PORT",
                                      "COHORT_SECRET",
                                      "COHORT_LAUNCHER_STORE",
                                      "COHORT_RESTART_COUNT",
                                      "LAUNCHER_TEST_PASSTHROUGH"};
  char text[4096];
  size_t n = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *v = getenv(names[i]);
    n += (size_t)snprintf(text + n, sizeof text - n, "%s=%s\n", names[i], v ? v : "(unset)");
  }
  char c;
  ssize_t got = read(0, &c, 1);
  n += (size_t)snprintf(text + n, sizeof text - n, "STDIN_EOF=%d\n", got == 0);
  n += (size_t)snprintf(text + n, sizeof text - n, "OWN_PGRP=%d\n", getpgid(0) == getpid());
  snprintf(text + n, sizeof text - n, "PID=%d\n", (int)getpid());
  write_file(dir, "env", rank, text);
  return 0;
}

static int mode_store(int rank, int world) {
  cohort__store *store = NULL;
  const char *addr = getenv("COHORT_STORE_ADDR");
  int port = env_int("COHORT_STORE_PORT");
  if (cohort__store_connect_tcp(addr, port, getenv("COHORT_SECRET"), 10.0, &store) != COHORT_OK) {
    fprintf(stderr, "connect to %s:%d failed: %s\n", addr, port, cohort_last_error());
    return 10;
  }
  int rc = 0;
  char key[64], value[64];
  snprintf(key, sizeof key, "hello.%d", rank);
  snprintf(value, sizeof value, "rank %d was here", rank);
  if (cohort__store_set(store, key, value, strlen(value)) != COHORT_OK) rc = 11;
  int64_t count = 0;
  if (!rc && cohort__store_add(store, "arrived", 1, &count) != COHORT_OK) rc = 12;
  for (int r = 0; r < world && !rc; r++) {
    void *got = NULL;
    size_t len = 0;
    snprintf(key, sizeof key, "hello.%d", r);
    snprintf(value, sizeof value, "rank %d was here", r);
    if (cohort__store_get(store, key, 10.0, &got, &len) != COHORT_OK) {
      fprintf(stderr, "get %s failed: %s\n", key, cohort_last_error());
      rc = 13;
    } else if (len != strlen(value) || memcmp(got, value, len) != 0) {
      fprintf(stderr, "get %s: expected '%s', got '%.*s'\n", key, value, (int)len, (const char *)got);
      rc = 14;
    }
    free(got);
  }
  cohort__store_close(store);
  /* A wrong secret must be refused: cohortrun's store really checks it. */
  if (!rc) {
    cohort__store *stranger = NULL;
    cohort_status st = cohort__store_connect_tcp(addr, port, "not-the-secret", 2.0, &stranger);
    if (st == COHORT_OK) {
      void *got = NULL;
      size_t len = 0;
      st = cohort__store_get(stranger, "hello.0", 1.0, &got, &len);
      free(got);
      cohort__store_close(stranger);
    }
    if (st == COHORT_OK) {
      fprintf(stderr, "a client with a wrong secret was served\n");
      rc = 15;
    }
  }
  if (!rc) printf("store ok, %lld arrived when I did\n", (long long)count);
  return rc;
}

static int mode_fail(const char *dir, int rank, int world, int victim, const char *code, int stubborn) {
  if (stubborn && rank != victim) signal(SIGTERM, SIG_IGN);
  write_pid(dir, rank);
  if (rank != victim) {
    sleep_long();
    return 0;
  }
  /* Fail only once every rank is up, so that there really are others to stop. */
  for (int tries = 0; tries < 1000; tries++) {
    int have = 0;
    for (int r = 0; r < world; r++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/pid.%d", dir, r);
      have += access(path, F_OK) == 0;
    }
    if (have == world) break;
    usleep(10000);
  }
  fprintf(stderr, "rank %d fails now\n", rank);
  if (strcmp(code, "kill") == 0) raise(SIGKILL);
  return atoi(code);
}

/* After `count` allreduces, the victim hangs: in a sleep of its own (stop = 0) or stopped by SIGSTOP (stop = 1), as
 * Ctrl-Z or a debugger would leave it. */
static int mode_hang(int rank, int victim, int count, int stop) {
  cohort_comm *comm = NULL;
  if (cohort_init(&comm) != COHORT_OK) {
    fprintf(stderr, "rank %d: cohort_init: %s\n", rank, cohort_last_error());
    return 80;
  }
  for (int k = 0; k <= count; k++) {
    if (k == count && rank == victim) {
      fprintf(stderr, "rank %d %s after %d allreduces\n", rank, stop ? "stops" : "hangs", count);
      if (stop) raise(SIGSTOP);
      sleep_long();
    }
    int v = rank + k, sum = 0;
    if (cohort_allreduce(comm, &v, &sum, 1, COHORT_I32, COHORT_SUM) != COHORT_OK) {
      fprintf(stderr, "rank %d: allreduce %d: %s\n", rank, k, cohort_last_error());
      cohort_comm_destroy(comm);
      return 81;
    }
    usleep(20000);
  }
  cohort_comm_destroy(comm);
  return 0;
}

/* The victim comes to cohort_init `seconds` late; the others wait for it there. Then one allreduce. */
static int mode_late(int rank, int victim, int seconds) {
  if (rank == victim) sleep((unsigned)seconds);
  cohort_comm *comm = NULL;
  if (cohort_init(&comm) != COHORT_OK) {
    fprintf(stderr, "rank %d: cohort_init: %s\n", rank, cohort_last_error());
    return 80;
  }
  int v = rank, sum = 0;
  cohort_status st = cohort_allreduce(comm, &v, &sum, 1, COHORT_I32, COHORT_SUM);
  cohort_comm_destroy(comm);
  if (st != COHORT_OK) return 81;
  printf("joined%s\n", rank == victim ? " late" : "");
  return 0;
}

int main(int argc, char **argv) {
  int rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  if (argc < 2) return 64;
  const char *mode = argv[1];
  if (strcmp(mode, "lines") == 0 && argc == 3) return mode_lines(rank, atoi(argv[2]));
  if (strcmp(mode, "flood") == 0 && argc == 3) return mode_flood(rank, atoi(argv[2]));
  if (strcmp(mode, "env") == 0 && argc == 3) return mode_env(argv[2], rank);
  if (strcmp(mode, "store") == 0) return mode_store(rank, world);
  if (strcmp(mode, "fail") == 0 && (argc == 5 || argc == 6))
    return mode_fail(argv[2], rank, world, atoi(argv[3]), argv[4], argc == 6 && strcmp(argv[5], "stubborn") == 0);
  if (strcmp(mode, "hang") == 0 && argc == 4) return mode_hang(rank, atoi(argv[2]), atoi(argv[3]), 0);
  if (strcmp(mode, "stop") == 0 && argc == 4) return mode_hang(rank, atoi(argv[2]), atoi(argv[3]), 1);
  if (strcmp(mode, "late") == 0 && argc == 4) return mode_late(rank, atoi(argv[2]), atoi(argv[3]));
  if (strcmp(mode, "sleep") == 0 && argc == 3) {
    write_pid(argv[2], rank);
    sleep_long();
    return 0;
  }
  fprintf(stderr, "launcher_worker: bad arguments\n");
  return 64;
}
