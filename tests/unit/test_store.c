/* test_store.c: the store on both backends (TCP over real sockets, file store in a temp directory): round trips,
 * blocking GET, GET timeouts, exact totals from concurrent ADD by threads and by a forked process, the job secret,
 * connect retries and timeouts, and stopping a server under a waiting client. */
#include <dirent.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/sock.h"
#include "store/store.h"
#include "test.h"

enum { TCP, FILE_STORE };

typedef struct fixture {
  int kind;
  cohort__store_server *server;
  char dir[128];
  const char *secret;
} fixture;

static int fixture_open(fixture *fx, cohort__store **out) {
  if (fx->kind == TCP)
    return cohort__store_connect_tcp("127.0.0.1", cohort__store_server_port(fx->server), fx->secret, 5.0, out);
  return cohort__store_open_file(fx->dir, out);
}

static int fixture_start(fixture *fx, int kind) {
  memset(fx, 0, sizeof *fx);
  fx->kind = kind;
  if (kind == TCP) return cohort__store_server_start("127.0.0.1", 0, "", &fx->server);
  snprintf(fx->dir, sizeof fx->dir, "/tmp/cohort-test-store-XXXXXX");
  return mkdtemp(fx->dir) ? COHORT_OK : COHORT_ERR_SYSTEM;
}

static void remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char child[512];
      snprintf(child, sizeof child, "%s/%s", path, e->d_name);
      struct stat sb;
      if (lstat(child, &sb) == 0 && S_ISDIR(sb.st_mode))
        remove_tree(child);
      else
        unlink(child);
    }
    closedir(d);
  }
  rmdir(path);
}

static void fixture_stop(fixture *fx) {
  if (fx->kind == TCP)
    cohort__store_server_stop(fx->server);
  else
    remove_tree(fx->dir);
}

static double since(int64_t t0) { return (double)(cohort__now_ns() - t0) * 1e-9; }

/* ---- round trips ---- */

static void round_trips(int kind) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx, kind));
  cohort__store *s = NULL;
  ASSERT_OK(fixture_open(&fx, &s));
  void *v = NULL;
  size_t len = 0;
  int exists = -1;

  ASSERT_OK(cohort__store_set(s, "a", "hello", 5));
  ASSERT_OK(cohort__store_get(s, "a", 1.0, &v, &len));
  ASSERT_EQ(len, 5);
  ASSERT_STREQ((char *)v, "hello"); /* the trailing NUL is there */
  free(v);
  ASSERT_OK(cohort__store_set(s, "a", "world!!", 7));
  ASSERT_OK(cohort__store_get(s, "a", 1.0, &v, &len));
  ASSERT_EQ(len, 7);
  ASSERT_STREQ((char *)v, "world!!");
  free(v);

  unsigned char bin[256];
  for (int i = 0; i < 256; i++)
    bin[i] = (unsigned char)(255 - i);
  ASSERT_OK(cohort__store_set(s, "bin", bin, sizeof bin));
  ASSERT_OK(cohort__store_get(s, "bin", 1.0, &v, &len));
  ASSERT_EQ(len, 256);
  ASSERT_EQ(memcmp(v, bin, 256), 0);
  free(v);

  ASSERT_OK(cohort__store_set(s, "empty", NULL, 0));
  ASSERT_OK(cohort__store_get(s, "empty", 0.0, &v, &len));
  ASSERT_EQ(len, 0);
  ASSERT_TRUE(v != NULL);
  ASSERT_EQ(((char *)v)[0], 0);
  free(v);

  size_t big_len = 1u << 20;
  unsigned char *big = malloc(big_len);
  for (size_t i = 0; i < big_len; i++)
    big[i] = (unsigned char)(i * 2654435761u >> 13);
  ASSERT_OK(cohort__store_set(s, "big", big, big_len));
  ASSERT_OK(cohort__store_get(s, "big", 1.0, &v, &len));
  ASSERT_EQ(len, big_len);
  ASSERT_EQ(memcmp(v, big, big_len), 0);
  free(v);
  free(big);

  ASSERT_OK(cohort__store_check(s, "a", &exists));
  ASSERT_EQ(exists, 1);
  ASSERT_OK(cohort__store_check(s, "nope", &exists));
  ASSERT_EQ(exists, 0);

  int64_t r = 0;
  ASSERT_OK(cohort__store_add(s, "ctr", 5, &r));
  ASSERT_EQ(r, 5);
  ASSERT_OK(cohort__store_add(s, "ctr", -7, &r));
  ASSERT_EQ(r, -2);
  ASSERT_OK(cohort__store_get(s, "ctr", 1.0, &v, &len));
  ASSERT_STREQ((char *)v, "-2");
  free(v);
  ASSERT_STATUS(cohort__store_add(s, "a", 1, &r), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "not an integer");
  ASSERT_OK(cohort__store_set(s, "max", "9223372036854775807", 19));
  ASSERT_STATUS(cohort__store_add(s, "max", 1, &r), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "overflow");
  ASSERT_OK(cohort__store_add(s, "max", -7, &r));
  ASSERT_EQ(r, INT64_MAX - 7);

  ASSERT_OK(cohort__store_delete(s, "a"));
  ASSERT_OK(cohort__store_check(s, "a", &exists));
  ASSERT_EQ(exists, 0);
  ASSERT_OK(cohort__store_delete(s, "a")); /* missing: not an error */

  /* Keys with separators, dots, spaces and UTF-8; and a key that would escape a naive file layout. */
  const char *odd[] = {"rank/0/addr",
                       "../evil",
                       ".",
                       "..",
                       "with space",
                       "gr\xc3\xbc\xc3\x9f"
                       "e",
                       "%41"};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    char val[32];
    snprintf(val, sizeof val, "value-%zu", i);
    ASSERT_OK(cohort__store_set(s, odd[i], val, strlen(val)));
  }
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    char val[32];
    snprintf(val, sizeof val, "value-%zu", i);
    ASSERT_OK(cohort__store_get(s, odd[i], 0.0, &v, &len));
    ASSERT_STREQ((char *)v, val);
    free(v);
  }
  ASSERT_OK(cohort__store_check(s, "A", &exists)); /* "%41" must not alias "A" */
  ASSERT_EQ(exists, 0);
  if (kind == FILE_STORE) {
    char outside[256];
    snprintf(outside, sizeof outside, "%s/../evil", fx.dir);
    ASSERT_NE(access(outside, F_OK), 0);
  }

  char key[COHORT_STORE_KEY_MAX + 2];
  memset(key, 'x', sizeof key);
  key[COHORT_STORE_KEY_MAX] = '\0';
  ASSERT_OK(cohort__store_set(s, key, "long", 4));
  key[COHORT_STORE_KEY_MAX - 1] = 'y'; /* a different key of the same length must not collide */
  ASSERT_OK(cohort__store_check(s, key, &exists));
  ASSERT_EQ(exists, 0);
  key[COHORT_STORE_KEY_MAX - 1] = 'x';
  ASSERT_OK(cohort__store_get(s, key, 0.0, &v, &len));
  ASSERT_STREQ((char *)v, "long");
  free(v);
  key[COHORT_STORE_KEY_MAX] = 'x';
  key[COHORT_STORE_KEY_MAX + 1] = '\0';
  ASSERT_STATUS(cohort__store_set(s, key, "x", 1), COHORT_ERR_INVALID);
  ASSERT_STATUS(cohort__store_set(s, "", "x", 1), COHORT_ERR_INVALID);
  ASSERT_STATUS(cohort__store_get(s, "a", -1.0, &v, &len), COHORT_ERR_INVALID);

  /* A second handle sees what the first wrote. */
  cohort__store *s2 = NULL;
  ASSERT_OK(fixture_open(&fx, &s2));
  ASSERT_OK(cohort__store_get(s2, "bin", 0.0, &v, &len));
  ASSERT_EQ(memcmp(v, bin, 256), 0);
  free(v);
  cohort__store_close(s2);

  cohort__store_close(s);
  fixture_stop(&fx);
}

TEST(round_trips_tcp) { round_trips(TCP); }
TEST(round_trips_file) { round_trips(FILE_STORE); }

/* ---- blocking GET ---- */

typedef struct late_setter {
  fixture *fx;
  double delay_s;
  cohort_status status;
} late_setter;

static void *late_set_main(void *arg) {
  late_setter *ls = arg;
  cohort__store *s = NULL;
  ls->status = fixture_open(ls->fx, &s);
  if (ls->status != COHORT_OK) return NULL;
  usleep((useconds_t)(ls->delay_s * 1e6));
  ls->status = cohort__store_set(s, "late", "arrived", 7);
  cohort__store_close(s);
  return NULL;
}

static void get_blocks_until_set(int kind) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx, kind));
  cohort__store *s = NULL;
  ASSERT_OK(fixture_open(&fx, &s));
  late_setter ls = {.fx = &fx, .delay_s = 0.15};
  pthread_t t;
  int64_t t0 = cohort__now_ns();
  pthread_create(&t, NULL, late_set_main, &ls);
  void *v = NULL;
  size_t len = 0;
  cohort_status st = cohort__store_get(s, "late", 5.0, &v, &len);
  double waited = since(t0);
  pthread_join(t, NULL);
  ASSERT_OK(ls.status);
  ASSERT_OK(st);
  ASSERT_EQ(len, 7);
  ASSERT_STREQ((char *)v, "arrived");
  free(v);
  ASSERT_TRUE(waited >= 0.14);
  ASSERT_TRUE(waited < 2.0);
  cohort__store_close(s);
  fixture_stop(&fx);
}

TEST(get_blocks_until_set_tcp) { get_blocks_until_set(TCP); }
TEST(get_blocks_until_set_file) { get_blocks_until_set(FILE_STORE); }

static void get_times_out(int kind) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx, kind));
  cohort__store *s = NULL;
  ASSERT_OK(fixture_open(&fx, &s));
  void *v = NULL;
  size_t len = 0;
  int64_t t0 = cohort__now_ns();
  ASSERT_STATUS(cohort__store_get(s, "never", 0.3, &v, &len), COHORT_ERR_TIMEOUT);
  double waited = since(t0);
  ASSERT_CONTAINS(cohort_last_error(), "key 'never' was not set");
  ASSERT_TRUE(waited >= 0.29);
  ASSERT_TRUE(waited < 1.5);
  ASSERT_TRUE(v == NULL);
  /* The handle is still good after a timeout. */
  ASSERT_OK(cohort__store_set(s, "never", "now", 3));
  ASSERT_OK(cohort__store_get(s, "never", 0.0, &v, &len));
  ASSERT_STREQ((char *)v, "now");
  free(v);
  cohort__store_close(s);
  fixture_stop(&fx);
}

TEST(get_times_out_tcp) { get_times_out(TCP); }
TEST(get_times_out_file) { get_times_out(FILE_STORE); }

/* ---- concurrent ADD: threads and a forked process ---- */

#define ADDERS 4
#define ADDS_EACH 100

typedef struct adder {
  fixture *fx;
  int64_t results[ADDS_EACH];
  cohort_status status;
} adder;

static cohort_status add_many(fixture *fx, int64_t *results) {
  cohort__store *s = NULL;
  cohort_status st = fixture_open(fx, &s);
  for (int i = 0; st == COHORT_OK && i < ADDS_EACH; i++)
    st = cohort__store_add(s, "counter", 1, &results[i]);
  cohort__store_close(s);
  return st;
}

static void *adder_main(void *arg) {
  adder *a = arg;
  a->status = add_many(a->fx, a->results);
  return NULL;
}

static void concurrent_add(int kind) {
  fixture fx;
  ASSERT_OK(fixture_start(&fx, kind));
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork();
  ASSERT_TRUE(pid >= 0);
  if (pid == 0) {
    close(pipefd[0]);
    int64_t results[ADDS_EACH];
    cohort_status st = add_many(&fx, results);
    if (st == COHORT_OK && write(pipefd[1], results, sizeof results) != (ssize_t)sizeof results) st = COHORT_ERR_SYSTEM;
    _exit(st == COHORT_OK ? 0 : 10 + (int)st);
  }
  close(pipefd[1]);
  static adder adders[ADDERS];
  pthread_t threads[ADDERS];
  for (int i = 0; i < ADDERS; i++) {
    adders[i].fx = &fx;
    pthread_create(&threads[i], NULL, adder_main, &adders[i]);
  }
  for (int i = 0; i < ADDERS; i++)
    pthread_join(threads[i], NULL);
  int64_t child[ADDS_EACH];
  ssize_t got = 0;
  while (got < (ssize_t)sizeof child) {
    ssize_t r = read(pipefd[0], (char *)child + got, sizeof child - (size_t)got);
    if (r <= 0) break;
    got += r;
  }
  close(pipefd[0]);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  ASSERT_EQ(WEXITSTATUS(wstatus), 0);
  ASSERT_EQ(got, (ssize_t)sizeof child);
  for (int i = 0; i < ADDERS; i++)
    ASSERT_OK(adders[i].status);

  /* Every value 1..N was handed out exactly once: no lost or duplicated increment anywhere. */
  enum { N = (ADDERS + 1) * ADDS_EACH };
  static unsigned char seen[N + 1];
  memset(seen, 0, sizeof seen);
  for (int i = 0; i <= ADDERS; i++) {
    const int64_t *res = i < ADDERS ? adders[i].results : child;
    for (int j = 0; j < ADDS_EACH; j++) {
      ASSERT_TRUE(res[j] >= 1 && res[j] <= N);
      ASSERT_EQ(seen[res[j]], 0);
      seen[res[j]] = 1;
      if (j > 0) ASSERT_TRUE(res[j] > res[j - 1]); /* one handle's increments are ordered */
    }
  }
  cohort__store *s = NULL;
  ASSERT_OK(fixture_open(&fx, &s));
  int64_t total = 0;
  ASSERT_OK(cohort__store_add(s, "counter", 0, &total));
  ASSERT_EQ(total, N);
  cohort__store_close(s);
  fixture_stop(&fx);
}

TEST(concurrent_add_exact_total_tcp) { concurrent_add(TCP); }
TEST(concurrent_add_exact_total_file) { concurrent_add(FILE_STORE); }

/* ---- the job secret ---- */

TEST(secret_right_connects_wrong_is_refused_and_server_keeps_serving) {
  cohort__store_server *server = NULL;
  ASSERT_OK(cohort__store_server_start("127.0.0.1", 0, "job-secret", &server));
  int port = cohort__store_server_port(server);
  cohort__store *before = NULL, *bad = NULL, *after = NULL;
  ASSERT_OK(cohort__store_connect_tcp("127.0.0.1", port, "job-secret", 5.0, &before));
  ASSERT_OK(cohort__store_set(before, "k", "v1", 2));

  int64_t t0 = cohort__now_ns();
  ASSERT_STATUS(cohort__store_connect_tcp("127.0.0.1", port, "not-the-secret", 10.0, &bad), COHORT_ERR_AUTH);
  ASSERT_TRUE(since(t0) < 2.0); /* a refused proof is final: no retrying until the timeout */
  ASSERT_TRUE(bad == NULL);
  ASSERT_CONTAINS(cohort_last_error(), "rendezvous store at 127.0.0.1:");
  ASSERT_CONTAINS(cohort_last_error(), "refused our proof of the job secret (wrong COHORT_SECRET?)");
  ASSERT_STATUS(cohort__store_connect_tcp("127.0.0.1", port, "", 10.0, &bad), COHORT_ERR_AUTH);
  ASSERT_CONTAINS(cohort_last_error(), "the accepting side has a secret and this side has none");

  ASSERT_OK(cohort__store_connect_tcp("127.0.0.1", port, "job-secret", 5.0, &after));
  void *v = NULL;
  size_t len = 0;
  ASSERT_OK(cohort__store_get(after, "k", 1.0, &v, &len));
  ASSERT_STREQ((char *)v, "v1");
  free(v);
  ASSERT_OK(cohort__store_set(after, "k", "v2", 2));
  ASSERT_OK(cohort__store_get(before, "k", 1.0, &v, &len));
  ASSERT_STREQ((char *)v, "v2");
  free(v);
  cohort__store_close(before);
  cohort__store_close(after);
  cohort__store_server_stop(server);
}

TEST(secret_on_client_only_is_refused) {
  cohort__store_server *server = NULL;
  ASSERT_OK(cohort__store_server_start("127.0.0.1", 0, "", &server));
  cohort__store *s = NULL;
  ASSERT_STATUS(cohort__store_connect_tcp("127.0.0.1", cohort__store_server_port(server), "job-secret", 5.0, &s),
                COHORT_ERR_AUTH);
  ASSERT_CONTAINS(cohort_last_error(), "this side has a secret and the accepting side has none");
  ASSERT_OK(cohort__store_connect_tcp("127.0.0.1", cohort__store_server_port(server), NULL, 5.0, &s));
  int exists = 1;
  ASSERT_OK(cohort__store_check(s, "x", &exists));
  ASSERT_EQ(exists, 0);
  cohort__store_close(s);
  cohort__store_server_stop(server);
}

/* ---- connecting ---- */

static int free_port(void) {
  int fd = -1, port = 0;
  if (cohort__sock_listen("127.0.0.1", 0, 1, &fd, &port) != COHORT_OK) return -1;
  close(fd);
  return port;
}

typedef struct late_server {
  int port;
  cohort__store_server *server;
  cohort_status status;
} late_server;

static void *late_server_main(void *arg) {
  late_server *ls = arg;
  usleep(300000);
  ls->status = cohort__store_server_start("127.0.0.1", ls->port, "s", &ls->server);
  return NULL;
}

TEST(connect_waits_for_a_server_that_starts_later) {
  late_server ls = {.port = free_port()};
  ASSERT_TRUE(ls.port > 0);
  pthread_t t;
  int64_t t0 = cohort__now_ns();
  pthread_create(&t, NULL, late_server_main, &ls);
  cohort__store *s = NULL;
  cohort_status st = cohort__store_connect_tcp("127.0.0.1", ls.port, "s", 5.0, &s);
  double waited = since(t0);
  pthread_join(t, NULL);
  ASSERT_OK(ls.status);
  ASSERT_OK(st);
  ASSERT_TRUE(waited >= 0.29);
  int64_t r = 0;
  ASSERT_OK(cohort__store_add(s, "n", 3, &r));
  ASSERT_EQ(r, 3);
  cohort__store_close(s);
  cohort__store_server_stop(ls.server);
}

TEST(connect_timeout_names_the_store) {
  int port = free_port();
  ASSERT_TRUE(port > 0);
  cohort__store *s = NULL;
  int64_t t0 = cohort__now_ns();
  ASSERT_STATUS(cohort__store_connect_tcp("127.0.0.1", port, "", 0.3, &s), COHORT_ERR_TIMEOUT);
  double waited = since(t0);
  char want[96];
  snprintf(want, sizeof want, "rendezvous store at 127.0.0.1:%d did not answer within 0.3 s", port);
  ASSERT_CONTAINS(cohort_last_error(), want);
  ASSERT_TRUE(waited >= 0.2 && waited < 1.5);
  ASSERT_TRUE(s == NULL);
}

typedef struct waiter {
  cohort__store *s;
  cohort_status status;
  double waited;
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  void *v = NULL;
  size_t len = 0;
  int64_t t0 = cohort__now_ns();
  w->status = cohort__store_get(w->s, "never", 20.0, &v, &len);
  w->waited = since(t0);
  free(v);
  return NULL;
}

TEST(stopping_the_server_releases_a_waiting_client) {
  cohort__store_server *server = NULL;
  ASSERT_OK(cohort__store_server_start("127.0.0.1", 0, "s", &server));
  waiter w = {0};
  ASSERT_OK(cohort__store_connect_tcp("127.0.0.1", cohort__store_server_port(server), "s", 5.0, &w.s));
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  usleep(150000);
  int64_t t0 = cohort__now_ns();
  cohort__store_server_stop(server);
  double stop_took = since(t0);
  pthread_join(t, NULL);
  ASSERT_EQ(w.status, COHORT_ERR_REMOTE);
  ASSERT_TRUE(w.waited < 3.0);
  ASSERT_TRUE(stop_took < 2.0);
  /* The handle knows its connection is gone and says so at once. */
  int exists = 0;
  ASSERT_STATUS(cohort__store_check(w.s, "x", &exists), COHORT_ERR_REMOTE);
  cohort__store_close(w.s);
}

TEST(file_store_creates_nested_directories) {
  char base[64] = "/tmp/cohort-test-nested-XXXXXX";
  ASSERT_TRUE(mkdtemp(base) != NULL);
  char dir[128];
  snprintf(dir, sizeof dir, "%s/a/b/c/", base);
  cohort__store *s = NULL, *s2 = NULL;
  ASSERT_OK(cohort__store_open_file(dir, &s));
  ASSERT_OK(cohort__store_open_file(dir, &s2)); /* a second opener finds it there */
  ASSERT_OK(cohort__store_set(s, "x", "1", 1));
  int exists = 0;
  ASSERT_OK(cohort__store_check(s2, "x", &exists));
  ASSERT_EQ(exists, 1);
  cohort__store_close(s);
  cohort__store_close(s2);
  remove_tree(base);
  ASSERT_STATUS(cohort__store_open_file("/proc/cohort-cannot-be-here", &s), COHORT_ERR_SYSTEM);
  ASSERT_CONTAINS(cohort_last_error(), "cannot create directory '/proc/cohort-cannot-be-here'");
}

/* The job's key space as the rendezvous builds it: an owning view under the job prefix, views nested inside it
 * (a node's, its shm setup's), and keys that land under the concatenation of all prefixes. */
TEST(prefix_views_nest_and_the_owning_one_closes_the_store) {
  char base[64] = "/tmp/cohort-test-prefix-XXXXXX";
  ASSERT_TRUE(mkdtemp(base) != NULL);
  cohort__store *whole = NULL, *peek = NULL, *job = NULL, *node = NULL, *shm = NULL;
  ASSERT_OK(cohort__store_open_file(base, &whole));
  ASSERT_OK(cohort__store_open_file(base, &peek)); /* a second handle, to look at the whole key space */
  ASSERT_OK(cohort__store_prefixed_owner(whole, "cohort/run/0/", &job));
  ASSERT_OK(cohort__store_prefixed(job, "node/1/", &node));
  ASSERT_OK(cohort__store_prefixed(node, "shm/", &shm));
  ASSERT_OK(cohort__store_set(shm, "arrived/3", "h", 1));
  int64_t v = 0;
  ASSERT_OK(cohort__store_add(job, "connected", 2, &v));
  int exists = 0;
  ASSERT_OK(cohort__store_check(peek, "cohort/run/0/node/1/shm/arrived/3", &exists));
  ASSERT_EQ(exists, 1);
  ASSERT_OK(cohort__store_add(peek, "cohort/run/0/connected", 0, &v));
  ASSERT_EQ(v, 2);
  ASSERT_OK(cohort__store_check(peek, "arrived/3", &exists));
  ASSERT_EQ(exists, 0);
  cohort__store_close(shm);
  cohort__store_close(node); /* a plain view leaves job open */
  ASSERT_OK(cohort__store_check(job, "connected", &exists));
  ASSERT_EQ(exists, 1);
  cohort__store_close(job); /* and closes whole (ASan would report it leaked otherwise) */
  cohort__store_close(peek);
  remove_tree(base);
}

static cohort_status refuse_after_two(void *arg) {
  int *calls = arg;
  return ++*calls < 2 ? COHORT_OK : cohort__error(COHORT_ERR_REMOTE, "rank 1 gave up");
}

TEST(count_in_waits_for_every_rank_times_out_and_stops_at_a_check) {
  char base[64] = "/tmp/cohort-test-count-XXXXXX";
  ASSERT_TRUE(mkdtemp(base) != NULL);
  cohort__store *a = NULL, *b = NULL;
  ASSERT_OK(cohort__store_open_file(base, &a));
  ASSERT_OK(cohort__store_open_file(base, &b));
  int64_t joined = -1;
  /* Alone of two: the deadline passes with one rank counted in. */
  ASSERT_STATUS(cohort__store_count_in(a, "done", 2, cohort__now_ns() + 20000000, NULL, NULL, &joined),
                COHORT_ERR_TIMEOUT);
  ASSERT_EQ(joined, 1);
  /* The second rank makes two: it returns at once. */
  ASSERT_OK(cohort__store_count_in(b, "done", 2, cohort__now_ns(), NULL, NULL, &joined));
  ASSERT_EQ(joined, 2);
  /* A check's failure ends the wait before the deadline. */
  int calls = 0;
  ASSERT_STATUS(
      cohort__store_count_in(a, "other", 2, cohort__now_ns() + 60000000000LL, refuse_after_two, &calls, &joined),
      COHORT_ERR_REMOTE);
  ASSERT_EQ(calls, 2);
  ASSERT_STREQ(cohort_last_error(), "rank 1 gave up");
  cohort__store_close(a);
  cohort__store_close(b);
  remove_tree(base);
}

COHORT_TEST_MAIN(TEST_CASE(round_trips_tcp), TEST_CASE(round_trips_file), TEST_CASE(get_blocks_until_set_tcp),
                 TEST_CASE(get_blocks_until_set_file), TEST_CASE(get_times_out_tcp), TEST_CASE(get_times_out_file),
                 TEST_CASE(concurrent_add_exact_total_tcp), TEST_CASE(concurrent_add_exact_total_file),
                 TEST_CASE(secret_right_connects_wrong_is_refused_and_server_keeps_serving),
                 TEST_CASE(secret_on_client_only_is_refused), TEST_CASE(connect_waits_for_a_server_that_starts_later),
                 TEST_CASE(connect_timeout_names_the_store), TEST_CASE(stopping_the_server_releases_a_waiting_client),
                 TEST_CASE(file_store_creates_nested_directories),
                 TEST_CASE(prefix_views_nest_and_the_owning_one_closes_the_store),
                 TEST_CASE(count_in_waits_for_every_rank_times_out_and_stops_at_a_check))
