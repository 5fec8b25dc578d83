/* test_store_fault.c: hostile and broken connections against a live TCP store server. Random bytes, an HTTP request,
 * huge length prefixes (before and after the handshake), unknown ops, a truncated frame, a silent connection and a
 * crowd of them at once must each be closed by the server, while legitimate clients connected before and after keep
 * reading back exactly what they wrote. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sock.h"
#include "store/auth.h"
#include "store/store.h"
#include "store/store_hooks.h"
#include "test.h"

#define SECRET "fault-secret"
#define HEADER_LEN 17 /* op(1) key_len(4) value_len(4) arg(8), big-endian (store_impl.h) */

typedef struct fixture {
  cohort__store_server *server;
  int port;
  cohort__store *before;
  int round;
} fixture;

static int fixture_start(fixture *fx) {
  memset(fx, 0, sizeof *fx);
  cohort_status st = cohort__store_server_start("127.0.0.1", 0, SECRET, &fx->server);
  if (st != COHORT_OK) return st;
  cohort__store_server_set_auth_timeout(fx->server, 0.5);
  fx->port = cohort__store_server_port(fx->server);
  st = cohort__store_connect_tcp("127.0.0.1", fx->port, SECRET, 5.0, &fx->before);
  if (st != COHORT_OK) return st;
  return cohort__store_set(fx->before, "seed", "kept", 4);
}

/* The client from before the attack and a fresh one both read and write correct values. */
static void check_legit_clients(fixture *fx) {
  cohort__store *after = NULL;
  ASSERT_OK(cohort__store_connect_tcp("127.0.0.1", fx->port, SECRET, 5.0, &after));
  char key[32], val[32];
  snprintf(key, sizeof key, "round-%d", fx->round);
  snprintf(val, sizeof val, "value-%d", fx->round * 7);
  ASSERT_OK(cohort__store_set(fx->before, key, val, strlen(val)));
  void *v = NULL;
  size_t len = 0;
  ASSERT_OK(cohort__store_get(after, key, 1.0, &v, &len));
  ASSERT_STREQ((char *)v, val);
  free(v);
  ASSERT_OK(cohort__store_get(after, "seed", 1.0, &v, &len));
  ASSERT_STREQ((char *)v, "kept");
  free(v);
  int64_t a = 0, b = 0;
  ASSERT_OK(cohort__store_add(after, "ops", 1, &a));
  ASSERT_OK(cohort__store_add(fx->before, "ops", 1, &b));
  ASSERT_EQ(b, a + 1);
  ASSERT_EQ(b, 2 * (fx->round + 1));
  fx->round++;
  cohort__store_close(after);
}

static void fixture_stop(fixture *fx) {
  cohort__store_close(fx->before);
  cohort__store_server_stop(fx->server);
}

static int raw_connect(int port) {
  int fd = -1;
  if (cohort__sock_connect("127.0.0.1", port, cohort__now_ns() + 2000000000LL, &fd) != COHORT_OK) return -1;
  return fd;
}

/* An authenticated raw connection, for sending malformed frames after the handshake. */
static int raw_authed(int port) {
  int fd = raw_connect(port);
  if (fd < 0) return -1;
  if (cohort__auth_connect(fd, SECRET, "cohort-store", NULL, 0, cohort__now_ns() + 2000000000LL) != COHORT_OK) {
    close(fd);
    return -1;
  }
  return fd;
}

/* 1 when the server closed fd (EOF or reset) within timeout_s; whatever it sent before is skipped. */
static int closed_by_server(int fd, double timeout_s) {
  int64_t deadline = cohort__now_ns() + (int64_t)(timeout_s * 1e9);
  for (;;) {
    int64_t left_ms = (deadline - cohort__now_ns()) / 1000000;
    if (left_ms <= 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)left_ms) <= 0) continue;
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return 1;
  }
}

static void put_header(unsigned char *h, int op, uint32_t key_len, uint32_t value_len, int64_t arg) {
  h[0] = (unsigned char)op;
  for (int i = 0; i < 4; i++)
    h[1 + i] = (unsigned char)(key_len >> (24 - 8 * i));
  for (int i = 0; i < 4; i++)
    h[5 + i] = (unsigned char)(value_len >> (24 - 8 * i));
  for (int i = 0; i < 8; i++)
    h[9 + i] = (unsigned char)((uint64_t)arg >> (56 - 8 * i));
}

static void fill_random(unsigned char *buf, size_t len, uint32_t seed) {
  for (size_t i = 0; i < len; i++) {
    seed = seed * 1664525u + 1013904223u;
    buf[i] = (unsigned char)(seed >> 24);
  }
}

/* What the server logs on stderr while a test pokes it: stderr goes to a file from capture_begin() to capture_end(),
 * which returns the text (malloc'ed) and shows it in the test output too. */
typedef struct capture {
  char path[40];
  int fd, saved;
} capture;

static int capture_begin(capture *c) {
  snprintf(c->path, sizeof c->path, "/tmp/cohort-store-fault-log-XXXXXX");
  c->fd = mkstemp(c->path);
  if (c->fd < 0) return -1;
  fflush(stderr);
  c->saved = dup(2);
  dup2(c->fd, 2);
  return 0;
}

static char *capture_end(capture *c) {
  fflush(stderr);
  dup2(c->saved, 2);
  close(c->saved);
  char *text = calloc(1, 16384);
  ssize_t n = text ? pread(c->fd, text, 16383, 0) : 0;
  if (text) text[n > 0 ? n : 0] = '\0';
  close(c->fd);
  unlink(c->path);
  if (text) fprintf(stderr, "%s", text);
  return text;
}

TEST(http_request_is_refused_and_logged_with_the_address) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx));
  check_legit_clients(&fx);

  /* Capture the server's warning: it must name the remote address and the reason. */
  capture cap;
  ASSERT_EQ(capture_begin(&cap), 0);

  int fd = raw_connect(fx.port);
  char me[64] = "";
  if (fd >= 0) cohort__sock_name(fd, me, sizeof me, NULL);
  const char http[] = "GET /store HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/8.0\r\n\r\n";
  if (fd >= 0) cohort__sock_send_all(fd, http, sizeof http - 1, 0);
  int closed = fd >= 0 && closed_by_server(fd, 2.0);
  usleep(20000); /* the warning is written before the socket is shut down; let the line land */
  char *logged = capture_end(&cap);
  ASSERT_TRUE(logged != NULL);

  ASSERT_TRUE(fd >= 0);
  ASSERT_TRUE(closed);
  close(fd);
  if (cohort__log_enabled(COHORT__LOG_WARN)) {
    char want[96];
    snprintf(want, sizeof want, "refused connection from %s", me);
    ASSERT_CONTAINS(logged, want);
    ASSERT_CONTAINS(logged, "bad magic: not a cohort peer");
  }
  free(logged);
  check_legit_clients(&fx);
  fixture_stop(&fx);
}

TEST(random_bytes_are_refused) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx));
  check_legit_clients(&fx);
  for (uint32_t seed = 1; seed <= 4; seed++) {
    unsigned char junk[4096];
    fill_random(junk, sizeof junk, seed);
    ASSERT_TRUE(memcmp(junk, "CHRT", 4) != 0);
    int fd = raw_connect(fx.port);
    ASSERT_TRUE(fd >= 0);
    /* Some before the challenge is even read, the rest after: neither order may confuse the server. */
    cohort__sock_send_all(fd, junk, seed * 100, cohort__now_ns() + 1000000000LL);
    cohort__sock_send_all(fd, junk + seed * 100, sizeof junk - seed * 100, cohort__now_ns() + 1000000000LL);
    ASSERT_TRUE(closed_by_server(fd, 2.0));
    close(fd);
    check_legit_clients(&fx);
  }
  fixture_stop(&fx);
}

TEST(huge_length_prefixes_are_refused) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx));
  check_legit_clients(&fx);

  /* Before the handshake: the right magic, then a hello length of 4 GiB. */
  int fd = raw_connect(fx.port);
  ASSERT_TRUE(fd >= 0);
  unsigned char hs[8 + 32 + 4] = {'C', 'H', 'R', 'T', 1, 0, 0, 0};
  memset(hs + 40, 0xff, 4);
  ASSERT_OK(cohort__sock_send_all(fd, hs, sizeof hs, 0));
  ASSERT_TRUE(closed_by_server(fd, 2.0));
  close(fd);
  check_legit_clients(&fx);

  /* After the handshake: frames whose lengths or op are out of bounds, each on its own connection. */
  struct {
    int op;
    uint32_t key_len, value_len;
    int64_t arg;
  } bad[] = {
      {2, 0xffffffffu, 0, 0},     /* GET with a 4 GiB key */
      {1, 3, 0xfffffff0u, 0},     /* SET with a ~4 GiB value */
      {1, 3, (16u << 20) + 1, 0}, /* SET one byte over the value limit */
      {2, COHORT_STORE_KEY_MAX + 1, 0, 0},
      {2, 0, 0, 0},  /* empty key */
      {4, 3, 5, 1},  /* ADD carrying a value */
      {99, 3, 0, 0}, /* unknown op */
      {0, 3, 0, 0},
      {2, 3, 0, -5}, /* GET with a negative wait */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fd = raw_authed(fx.port);
    ASSERT_TRUE(fd >= 0);
    unsigned char h[HEADER_LEN + 3];
    put_header(h, bad[i].op, bad[i].key_len, bad[i].value_len, bad[i].arg);
    memcpy(h + HEADER_LEN, "abc", 3);
    ASSERT_OK(cohort__sock_send_all(fd, h, sizeof h, 0));
    if (!closed_by_server(fd, 2.0)) TEST_FAIL_("bad frame %zu (op %d) was not refused", i, bad[i].op);
    close(fd);
  }
  /* A key with a NUL inside is not a string key. */
  fd = raw_authed(fx.port);
  ASSERT_TRUE(fd >= 0);
  unsigned char h[HEADER_LEN + 3];
  put_header(h, 3, 3, 0, 0);
  memcpy(h + HEADER_LEN, "a\0b", 3);
  ASSERT_OK(cohort__sock_send_all(fd, h, sizeof h, 0));
  ASSERT_TRUE(closed_by_server(fd, 2.0));
  close(fd);
  check_legit_clients(&fx);
  fixture_stop(&fx);
}

TEST(truncated_frame_is_dropped_and_not_applied) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx));
  check_legit_clients(&fx);
  int fd = raw_authed(fx.port);
  ASSERT_TRUE(fd >= 0);
  unsigned char frame[HEADER_LEN + 9 + 50];
  put_header(frame, 1, 9, 100, 0); /* SET "truncated" with 100 bytes promised, 50 sent */
  memcpy(frame + HEADER_LEN, "truncated", 9);
  memset(frame + HEADER_LEN + 9, 'z', 50);
  ASSERT_OK(cohort__sock_send_all(fd, frame, sizeof frame, 0));
  shutdown(fd, SHUT_WR);
  ASSERT_TRUE(closed_by_server(fd, 2.0));
  close(fd);
  int exists = 1;
  ASSERT_OK(cohort__store_check(fx.before, "truncated", &exists));
  ASSERT_EQ(exists, 0);

  /* A header cut short, too. */
  fd = raw_authed(fx.port);
  ASSERT_TRUE(fd >= 0);
  ASSERT_OK(cohort__sock_send_all(fd, frame, 7, 0));
  shutdown(fd, SHUT_WR);
  ASSERT_TRUE(closed_by_server(fd, 2.0));
  close(fd);
  check_legit_clients(&fx);
  fixture_stop(&fx);
}

TEST(silent_connection_neither_blocks_others_nor_stays) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx));
  int silent = raw_connect(fx.port);
  ASSERT_TRUE(silent >= 0);
  int64_t t0 = cohort__now_ns();
  check_legit_clients(&fx); /* while the silent one holds its own thread */
  check_legit_clients(&fx);
  ASSERT_TRUE((double)(cohort__now_ns() - t0) * 1e-9 < 0.4);
  ASSERT_TRUE(closed_by_server(silent, 2.0)); /* dropped at the 0.5 s auth deadline */
  double held = (double)(cohort__now_ns() - t0) * 1e-9;
  ASSERT_TRUE(held >= 0.4 && held < 2.0);
  close(silent);

  /* A client that authenticated and then idles is a legitimate client: it is not dropped. */
  cohort__store *idle = NULL;
  ASSERT_OK(cohort__store_connect_tcp("127.0.0.1", fx.port, SECRET, 5.0, &idle));
  usleep(700000);
  int exists = 0;
  ASSERT_OK(cohort__store_check(idle, "seed", &exists));
  ASSERT_EQ(exists, 1);
  cohort__store_close(idle);
  check_legit_clients(&fx);
  fixture_stop(&fx);
}

TEST(crowd_of_bad_connections_at_once) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx));
  enum { CROWD = 24 };
  int fds[CROWD];
  for (int i = 0; i < CROWD; i++) {
    fds[i] = raw_connect(fx.port);
    ASSERT_TRUE(fds[i] >= 0);
    if (i % 3 == 0) continue; /* silent */
    unsigned char junk[512];
    fill_random(junk, sizeof junk, 100u + (uint32_t)i);
    if (i % 3 == 1) memcpy(junk, "CHRT\x01\x01\x00\x00", 8); /* right magic, then a forged proof */
    memset(junk + 40, 0, 4);                                 /* ... for an empty hello */
    cohort__sock_send_all(fds[i], junk, i % 3 == 1 ? 8 + 32 + 4 + 32 : sizeof junk, cohort__now_ns() + 1000000000LL);
  }
  check_legit_clients(&fx);
  for (int i = 0; i < CROWD; i++) {
    if (!closed_by_server(fds[i], 2.0)) TEST_FAIL_("bad connection %d was not closed", i);
    close(fds[i]);
  }
  check_legit_clients(&fx);
  /* And the server still stops cleanly with a client connected mid-handshake. */
  int late = raw_connect(fx.port);
  ASSERT_TRUE(late >= 0);
  fixture_stop(&fx);
  ASSERT_TRUE(closed_by_server(late, 1.0));
  close(late);
}

/* Polls until the server has `want` live connections; returns the last count seen. */
static int wait_live(cohort__store_server *server, int want, double timeout_s) {
  int64_t deadline = cohort__now_ns() + (int64_t)(timeout_s * 1e9);
  int live;
  while ((live = cohort__store_server_live_connections(server)) != want && cohort__now_ns() < deadline)
    usleep(10000);
  return live;
}

TEST(killed_clients_release_their_connections) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx));
  check_legit_clients(&fx);
  ASSERT_EQ(wait_live(fx.server, 1, 1.0), 1); /* fx.before */
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t waiter = fork();
  ASSERT_TRUE(waiter >= 0);
  if (waiter == 0) { /* a client blocked in a long GET */
    close(ready[0]);
    cohort__store *s = NULL;
    if (cohort__store_connect_tcp("127.0.0.1", fx.port, SECRET, 5.0, &s) == COHORT_OK && write(ready[1], "w", 1) == 1) {
      void *v = NULL;
      size_t len = 0;
      cohort__store_get(s, "never-set", 30.0, &v, &len);
    }
    _exit(1);
  }
  pid_t setter = fork();
  ASSERT_TRUE(setter >= 0);
  if (setter == 0) { /* a client in the middle of sending a 4 MiB value */
    close(ready[0]);
    int fd = raw_authed(fx.port);
    static unsigned char frame[HEADER_LEN + 4 + (1u << 20)];
    put_header(frame, 1, 4, 4u << 20, 0);
    memcpy(frame + HEADER_LEN, "half", 4);
    if (fd >= 0 && cohort__sock_send_all(fd, frame, sizeof frame, 0) == COHORT_OK && write(ready[1], "s", 1) == 1)
      pause();
    _exit(1);
  }
  close(ready[1]);
  char got[2];
  ASSERT_EQ(read(ready[0], got, 1) + read(ready[0], got + 1, 1), 2);
  close(ready[0]);
  usleep(100000); /* let the GET reach the server */
  ASSERT_EQ(wait_live(fx.server, 3, 1.0), 3);

  kill(waiter, SIGKILL);
  kill(setter, SIGKILL);
  int ws;
  ASSERT_EQ(waitpid(waiter, &ws, 0), waiter);
  ASSERT_TRUE(WIFSIGNALED(ws));
  ASSERT_EQ(waitpid(setter, &ws, 0), setter);
  ASSERT_TRUE(WIFSIGNALED(ws));
  int64_t t0 = cohort__now_ns();
  /* The GET's thread notices the dead client well before its 30 s wait ends; the half frame ends at once. */
  ASSERT_EQ(wait_live(fx.server, 1, 2.0), 1);
  ASSERT_TRUE((double)(cohort__now_ns() - t0) * 1e-9 < 2.0);
  int exists = 1;
  ASSERT_OK(cohort__store_check(fx.before, "half", &exists));
  ASSERT_EQ(exists, 0);
  check_legit_clients(&fx);
  fixture_stop(&fx);
}

static int count_lines_with(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

/* A port scan: 40 strangers one after another. The job's stderr gets at most COHORT__LOG_BUDGET_LINES refusal lines
 * and one count of the rest when the server stops (307 lines once), and the job is undisturbed. */
TEST(port_scan_is_logged_in_a_few_lines_and_a_count) {
  if (!cohort__log_enabled(COHORT__LOG_WARN)) return;
  fixture fx;
  ASSERT_OK(fixture_start(&fx));
  capture cap;
  ASSERT_EQ(capture_begin(&cap), 0);
  enum { SCAN = 40 };
  int closed = 0;
  for (int i = 0; i < SCAN; i++) {
    int fd = raw_connect(fx.port);
    if (fd < 0) continue;
    cohort__sock_send_all(fd, "GET / HTTP/1.0\r\n\r\n", 18, 0);
    closed += closed_by_server(fd, 2.0);
    close(fd);
  }
  check_legit_clients(&fx);
  fixture_stop(&fx);
  char *logged = capture_end(&cap);
  ASSERT_TRUE(logged != NULL);
  ASSERT_EQ(closed, SCAN);
  ASSERT_EQ(count_lines_with(logged, "store: refused connection from"), COHORT__LOG_BUDGET_LINES);
  char want[128];
  snprintf(want, sizeof want, "store: %d more refused connections were not logged (at most %d lines per %d s)\n",
           SCAN - COHORT__LOG_BUDGET_LINES, COHORT__LOG_BUDGET_LINES, COHORT__LOG_BUDGET_WINDOW_S);
  ASSERT_CONTAINS(logged, want);
  free(logged);
}

COHORT_TEST_MAIN(TEST_CASE(http_request_is_refused_and_logged_with_the_address), TEST_CASE(random_bytes_are_refused),
                 TEST_CASE(huge_length_prefixes_are_refused), TEST_CASE(truncated_frame_is_dropped_and_not_applied),
                 TEST_CASE(silent_connection_neither_blocks_others_nor_stays),
                 TEST_CASE(crowd_of_bad_connections_at_once), TEST_CASE(killed_clients_release_their_connections),
                 TEST_CASE(port_scan_is_logged_in_a_few_lines_and_a_count))
