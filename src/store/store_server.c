/*
 * store_server.c: the TCP store server: one accept thread, and one thread per connection.
 *
 * A thread per connection keeps the server simple and makes isolation structural: a client that is slow, silent,
 * malicious or blocked in a long GET only ever holds its own thread. A connection proves the job secret
 * (auth.h) within auth_timeout before any request is read; afterwards every frame is checked against the limits of
 * store.h before anything is allocated, and anything malformed closes that connection only.
 *
 * Ownership: a connection thread never closes its socket. It shuts it down when it is done (so the peer sees EOF
 * at once) and marks itself done; the accept thread (or stop) joins it, then closes the fd and frees it. This way
 * stop can shut down every live socket to wake its thread without racing against an fd being closed and reused.
 *
 * Locking: `lock` guards the map and `stopping`; `changed` is signalled on every SET/ADD and on stop, and waiting
 * GETs wake on it. `conns_lock` guards the connection list and the auth timeout.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sock.h"
#include "store/auth.h"
#include "store/store_hooks.h"
#include "store/store_impl.h"

#define SERVER_MAX_CONNS 1024
#define SERVER_FRAME_TIMEOUT_NS (30 * 1000000000LL) /* once a frame has started, the rest must follow */
#define SERVER_GET_SLICE_NS (200 * 1000000LL)       /* how often a waiting GET checks that its client is alive */
#define SERVER_GET_MAX_MS (7LL * 24 * 3600 * 1000)

typedef struct entry {
  struct entry *next;
  char *key;
  unsigned char *value;
  size_t len;
} entry;

typedef struct conn {
  struct conn *next;
  cohort__store_server *server;
  int fd;
  pthread_t thread;
  int done; /* under conns_lock */
  char peer[64];
} conn;

struct cohort__store_server {
  int listen_fd;
  int port;
  int wake[2]; /* stop writes a byte here to end the accept thread's poll */
  char *secret;
  pthread_t accept_thread;

  pthread_mutex_t lock;
  pthread_cond_t changed;
  entry **buckets;
  size_t nbuckets, count;
  int stopping;

  pthread_mutex_t conns_lock;
  conn *conns;
  int nconns;
  int64_t auth_timeout_ns;
  cohort__log_budget refusals; /* a port scan logs a few lines and a count, not a line per probe */
};

/* ---- the map (callers hold server->lock) ---- */

static uint64_t hash_key(const char *key) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *key; key++)
    h = (h ^ (unsigned char)*key) * 1099511628211ull;
  return h;
}

static entry **find_slot(cohort__store_server *s, const char *key) {
  entry **slot = &s->buckets[hash_key(key) & (s->nbuckets - 1)];
  while (*slot && strcmp((*slot)->key, key) != 0)
    slot = &(*slot)->next;
  return slot;
}

static void grow(cohort__store_server *s) {
  size_t n = s->nbuckets * 2;
  entry **b = calloc(n, sizeof *b);
  if (!b) return; /* a longer chain is slower, not wrong */
  for (size_t i = 0; i < s->nbuckets; i++) {
    entry *e = s->buckets[i];
    while (e) {
      entry *next = e->next;
      size_t j = hash_key(e->key) & (n - 1);
      e->next = b[j];
      b[j] = e;
      e = next;
    }
  }
  free(s->buckets);
  s->buckets = b;
  s->nbuckets = n;
}

/* Stores value (taking ownership) under key; returns -1 when out of memory (value is freed either way). */
static int map_put(cohort__store_server *s, const char *key, unsigned char *value, size_t len) {
  entry **slot = find_slot(s, key);
  if (*slot) {
    free((*slot)->value);
    (*slot)->value = value;
    (*slot)->len = len;
    return 0;
  }
  entry *e = calloc(1, sizeof *e);
  char *k = strdup(key);
  if (!e || !k) {
    free(e);
    free(k);
    free(value);
    return -1;
  }
  e->key = k;
  e->value = value;
  e->len = len;
  *slot = e;
  if (++s->count > s->nbuckets) grow(s);
  return 0;
}

static void map_delete(cohort__store_server *s, const char *key) {
  entry **slot = find_slot(s, key);
  entry *e = *slot;
  if (!e) return;
  *slot = e->next;
  free(e->key);
  free(e->value);
  free(e);
  s->count--;
}

/* ---- one connection ---- */

static void deadline_to_timespec(int64_t deadline_ns, struct timespec *ts) {
  ts->tv_sec = (time_t)(deadline_ns / 1000000000);
  ts->tv_nsec = (long)(deadline_ns % 1000000000);
}

/* A client that gave up (closed or reset) while its GET waits should not keep the thread until the timeout. */
static int peer_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static cohort_status send_reply(int fd, int code, const void *value, uint32_t len, int64_t arg) {
  unsigned char h[COHORT__STORE_FRAME_HEADER];
  cohort__store_put_header(h, code, 0, len, arg);
  int64_t deadline = cohort__now_ns() + SERVER_FRAME_TIMEOUT_NS;
  COHORT_CHECK(cohort__sock_send_all(fd, h, sizeof h, deadline));
  if (len) COHORT_CHECK(cohort__sock_send_all(fd, value, len, deadline));
  return COHORT_OK;
}

static cohort_status serve_get(conn *c, const char *key, int64_t wait_ms) {
  cohort__store_server *s = c->server;
  int64_t deadline = cohort__now_ns() + wait_ms * 1000000;
  unsigned char *copy = NULL;
  size_t len = 0;
  int code = COHORT__STORE_REPLY_TIMEOUT;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    entry *e = *find_slot(s, key);
    if (e) {
      copy = malloc(e->len ? e->len : 1);
      if (copy) {
        memcpy(copy, e->value, e->len);
        len = e->len;
        code = COHORT__STORE_REPLY_OK;
      }
      break;
    }
    if (s->stopping) {
      code = COHORT__STORE_REPLY_STOPPING;
      break;
    }
    int64_t now = cohort__now_ns();
    if (now >= deadline) break;
    if (peer_gone(c->fd)) {
      pthread_mutex_unlock(&s->lock);
      return cohort__error(COHORT_ERR_REMOTE, "client left while waiting for key '%s'", key);
    }
    int64_t until = deadline < now + SERVER_GET_SLICE_NS ? deadline : now + SERVER_GET_SLICE_NS;
    struct timespec ts;
    deadline_to_timespec(until, &ts);
    pthread_cond_timedwait(&s->changed, &s->lock, &ts);
  }
  pthread_mutex_unlock(&s->lock);
  if (code == COHORT__STORE_REPLY_OK && !copy)
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory copying a %zu-byte value", len);
  cohort_status st = send_reply(c->fd, code, copy, (uint32_t)len, 0);
  free(copy);
  return st;
}

static cohort_status serve_add(conn *c, const char *key, int64_t delta) {
  cohort__store_server *s = c->server;
  int code = COHORT__STORE_REPLY_OK;
  int64_t result = 0;
  pthread_mutex_lock(&s->lock);
  entry *e = *find_slot(s, key);
  int64_t old = 0;
  if (e && cohort__store_parse_int(e->value, e->len, &old) != 0) {
    code = COHORT__STORE_REPLY_NOT_INTEGER;
  } else if (__builtin_add_overflow(old, delta, &result)) {
    code = COHORT__STORE_REPLY_OVERFLOW;
  } else {
    unsigned char *text = malloc(COHORT__STORE_INT_TEXT_MAX + 1);
    if (!text || map_put(s, key, text, cohort__store_format_int(result, (char *)text)) != 0) {
      pthread_mutex_unlock(&s->lock);
      return cohort__error(COHORT_ERR_SYSTEM, "out of memory storing counter '%s'", key);
    }
    pthread_cond_broadcast(&s->changed);
  }
  pthread_mutex_unlock(&s->lock);
  return send_reply(c->fd, code, NULL, 0, result);
}

/* Reads and answers one request. COHORT_ERR_REMOTE when the client closed between frames (the normal end). */
static cohort_status serve_one(conn *c) {
  cohort__store_server *s = c->server;
  unsigned char h[COHORT__STORE_FRAME_HEADER];
  /* Between frames an authenticated client may idle as long as it likes; stop wakes us by shutting the socket. */
  COHORT_CHECK(cohort__sock_recv_all(c->fd, h, 1, 0));
  int64_t deadline = cohort__now_ns() + SERVER_FRAME_TIMEOUT_NS;
  cohort_status st = cohort__sock_recv_all(c->fd, h + 1, sizeof h - 1, deadline);
  if (st != COHORT_OK) return cohort__error_prefix(COHORT_ERR_PROTOCOL, "truncated request header");
  int op;
  uint32_t key_len, value_len;
  int64_t arg;
  cohort__store_get_header(h, &op, &key_len, &value_len, &arg);
  if (op < COHORT__STORE_OP_SET || op > COHORT__STORE_OP_DELETE)
    return cohort__error(COHORT_ERR_PROTOCOL, "unknown request op %d", op);
  if (key_len == 0 || key_len > COHORT_STORE_KEY_MAX)
    return cohort__error(COHORT_ERR_PROTOCOL, "key length %u outside 1..%d", key_len, COHORT_STORE_KEY_MAX);
  if (value_len > COHORT_STORE_VALUE_MAX || (value_len > 0 && op != COHORT__STORE_OP_SET))
    return cohort__error(COHORT_ERR_PROTOCOL, "value length %u is invalid for op %d (limit %u)", value_len, op,
                         COHORT_STORE_VALUE_MAX);
  if (op == COHORT__STORE_OP_GET && (arg < 0 || arg > SERVER_GET_MAX_MS))
    return cohort__error(COHORT_ERR_PROTOCOL, "GET wait of %lld ms is out of range", (long long)arg);

  char key[COHORT_STORE_KEY_MAX + 1];
  st = cohort__sock_recv_all(c->fd, key, key_len, deadline);
  if (st != COHORT_OK) return cohort__error_prefix(COHORT_ERR_PROTOCOL, "truncated key of %u bytes", key_len);
  key[key_len] = '\0';
  if (strlen(key) != key_len) return cohort__error(COHORT_ERR_PROTOCOL, "key contains a NUL byte");

  switch (op) {
  case COHORT__STORE_OP_SET: {
    unsigned char *value = malloc(value_len ? value_len : 1);
    if (!value) return cohort__error(COHORT_ERR_SYSTEM, "out of memory for a %u-byte value", value_len);
    st = cohort__sock_recv_all(c->fd, value, value_len, deadline);
    if (st != COHORT_OK) {
      free(value);
      return cohort__error_prefix(COHORT_ERR_PROTOCOL, "truncated value of %u bytes for key '%s'", value_len, key);
    }
    pthread_mutex_lock(&s->lock);
    int rc = map_put(s, key, value, value_len);
    if (rc == 0) pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    if (rc != 0) return cohort__error(COHORT_ERR_SYSTEM, "out of memory storing key '%s'", key);
    return send_reply(c->fd, COHORT__STORE_REPLY_OK, NULL, 0, 0);
  }
  case COHORT__STORE_OP_GET:
    return serve_get(c, key, arg);
  case COHORT__STORE_OP_CHECK: {
    pthread_mutex_lock(&s->lock);
    int exists = *find_slot(s, key) != NULL;
    pthread_mutex_unlock(&s->lock);
    return send_reply(c->fd, COHORT__STORE_REPLY_OK, NULL, 0, exists);
  }
  case COHORT__STORE_OP_ADD:
    return serve_add(c, key, arg);
  default: /* COHORT__STORE_OP_DELETE */
    pthread_mutex_lock(&s->lock);
    map_delete(s, key);
    pthread_mutex_unlock(&s->lock);
    return send_reply(c->fd, COHORT__STORE_REPLY_OK, NULL, 0, 0);
  }
}

static int server_stopping(cohort__store_server *s) {
  pthread_mutex_lock(&s->lock);
  int stopping = s->stopping;
  pthread_mutex_unlock(&s->lock);
  return stopping;
}

static void log_refused(cohort__store_server *s, const char *peer, const char *why) {
  uint64_t held;
  if (!cohort__log_budget_take(&s->refusals, &held)) return;
  if (held)
    COHORT_LOG_WARN("store: refused connection from %s: %s (and %llu earlier refusals not logged)", peer, why,
                    (unsigned long long)held);
  else
    COHORT_LOG_WARN("store: refused connection from %s: %s", peer, why);
}

static void *conn_main(void *arg) {
  conn *c = arg;
  cohort__store_server *s = c->server;
  pthread_mutex_lock(&s->conns_lock);
  int64_t auth_timeout = s->auth_timeout_ns;
  pthread_mutex_unlock(&s->conns_lock);

  cohort_status st =
      cohort__auth_accept(c->fd, s->secret, COHORT__STORE_PURPOSE, NULL, 0, cohort__now_ns() + auth_timeout);
  if (st != COHORT_OK) {
    if (!server_stopping(s)) log_refused(s, c->peer, cohort_last_error());
  } else {
    COHORT_LOG_DEBUG("store: client %s connected", c->peer);
    while ((st = serve_one(c)) == COHORT_OK) {
    }
    if (st == COHORT_ERR_REMOTE || server_stopping(s))
      COHORT_LOG_DEBUG("store: client %s left: %s", c->peer, cohort_last_error());
    else
      COHORT_LOG_WARN("store: dropping connection from %s: %s", c->peer, cohort_last_error());
  }
  shutdown(c->fd, SHUT_RDWR);
  pthread_mutex_lock(&s->conns_lock);
  c->done = 1;
  pthread_mutex_unlock(&s->conns_lock);
  return NULL;
}

static void conn_free(conn *c) {
  pthread_join(c->thread, NULL);
  close(c->fd);
  free(c);
}

/* Joins and frees the connections whose threads have finished. */
static void reap(cohort__store_server *s) {
  conn *finished = NULL;
  pthread_mutex_lock(&s->conns_lock);
  conn **pc = &s->conns;
  while (*pc) {
    conn *c = *pc;
    if (c->done) {
      *pc = c->next;
      c->next = finished;
      finished = c;
      s->nconns--;
    } else {
      pc = &c->next;
    }
  }
  pthread_mutex_unlock(&s->conns_lock);
  while (finished) {
    conn *next = finished->next;
    conn_free(finished);
    finished = next;
  }
}

static void spawn(cohort__store_server *s, int fd, const char *peer) {
  pthread_mutex_lock(&s->conns_lock);
  int full = s->nconns >= SERVER_MAX_CONNS;
  pthread_mutex_unlock(&s->conns_lock);
  conn *c = full ? NULL : calloc(1, sizeof *c);
  if (!c) {
    log_refused(s, peer, full ? "too many open connections" : "out of memory");
    close(fd);
    return;
  }
  c->server = s;
  c->fd = fd;
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  /* Linked before the thread starts so that the thread's `done` store is always seen under conns_lock. */
  pthread_mutex_lock(&s->conns_lock);
  int rc = pthread_create(&c->thread, NULL, conn_main, c);
  if (rc == 0) {
    c->next = s->conns;
    s->conns = c;
    s->nconns++;
  }
  pthread_mutex_unlock(&s->conns_lock);
  if (rc != 0) {
    COHORT_LOG_WARN("store: cannot start a thread for %s: %s", peer, strerror(rc));
    close(fd);
    free(c);
  }
}

static void *accept_main(void *arg) {
  cohort__store_server *s = arg;
  for (;;) {
    struct pollfd p[2] = {{.fd = s->listen_fd, .events = POLLIN}, {.fd = s->wake[0], .events = POLLIN}};
    int n = poll(p, 2, 500);
    reap(s);
    if (n < 0 && errno != EINTR) {
      COHORT_LOG_WARN("store: poll on the listening socket failed: %s", strerror(errno));
      usleep(100000);
      continue;
    }
    if (server_stopping(s) || (n > 0 && p[1].revents)) break;
    if (n <= 0 || !p[0].revents) continue;
    int fd = -1;
    char peer[64] = "?";
    /* The listening socket is non-blocking, so a connection that vanished since poll() costs one EAGAIN. */
    cohort_status st = cohort__sock_accept(s->listen_fd, cohort__now_ns() + 1000000, &fd, peer, sizeof peer);
    if (st == COHORT_OK) {
      spawn(s, fd, peer);
    } else if (st != COHORT_ERR_TIMEOUT) {
      COHORT_LOG_WARN("store: %s", cohort_last_error()); /* e.g. EMFILE: back off instead of spinning */
      usleep(100000);
    }
  }
  return NULL;
}

cohort_status cohort__store_server_start(const char *host, int port, const char *secret, cohort__store_server **out) {
  if (!out) return cohort__error(COHORT_ERR_INVALID, "store server start: out is NULL");
  *out = NULL;
  if (port < 0 || port > 65535)
    return cohort__error(COHORT_ERR_INVALID, "store server start: port %d is outside 0..65535", port);
  cohort__store_server *s = calloc(1, sizeof *s);
  if (!s) return cohort__error(COHORT_ERR_SYSTEM, "out of memory for the store server");
  s->refusals = (cohort__log_budget)COHORT__LOG_BUDGET_INIT;
  cohort_status st = COHORT_OK;
  int have_lock = 0, have_cond = 0, have_conns_lock = 0;
  s->listen_fd = -1;
  s->wake[0] = s->wake[1] = -1;
  s->auth_timeout_ns = 5 * 1000000000LL;
  s->nbuckets = 64;
  s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
  s->secret = strdup(secret ? secret : "");
  if (!s->buckets || !s->secret) {
    st = cohort__error(COHORT_ERR_SYSTEM, "out of memory for the store server");
    goto fail;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* GET deadlines are cohort__now_ns() times */
  have_cond = pthread_cond_init(&s->changed, &ca) == 0;
  pthread_condattr_destroy(&ca);
  have_lock = pthread_mutex_init(&s->lock, NULL) == 0;
  have_conns_lock = pthread_mutex_init(&s->conns_lock, NULL) == 0;
  if (!have_cond || !have_lock || !have_conns_lock) {
    st = cohort__error(COHORT_ERR_SYSTEM, "store server: cannot initialise its locks");
    goto fail;
  }
  if (pipe2(s->wake, O_CLOEXEC) != 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "store server: pipe");
    goto fail;
  }
  st = cohort__sock_listen(host, port, 128, &s->listen_fd, &s->port);
  if (st != COHORT_OK) {
    cohort__error_prefix(st, "rendezvous store server");
    goto fail;
  }
  st = cohort__sock_set_nonblocking(s->listen_fd, 1);
  if (st != COHORT_OK) goto fail;
  int rc = pthread_create(&s->accept_thread, NULL, accept_main, s);
  if (rc != 0) {
    st = cohort__error(COHORT_ERR_SYSTEM, "store server: cannot start the accept thread: %s", strerror(rc));
    goto fail;
  }
  COHORT_LOG_DEBUG("store: serving on %s:%d", host && host[0] ? host : "*", s->port);
  *out = s;
  return COHORT_OK;

fail:
  if (s->listen_fd >= 0) close(s->listen_fd);
  if (s->wake[0] >= 0) close(s->wake[0]);
  if (s->wake[1] >= 0) close(s->wake[1]);
  if (have_cond) pthread_cond_destroy(&s->changed);
  if (have_lock) pthread_mutex_destroy(&s->lock);
  if (have_conns_lock) pthread_mutex_destroy(&s->conns_lock);
  free(s->buckets);
  free(s->secret);
  free(s);
  return st;
}

int cohort__store_server_port(const cohort__store_server *server) { return server ? server->port : -1; }

void cohort__store_server_set_auth_timeout(cohort__store_server *server, double seconds) {
  pthread_mutex_lock(&server->conns_lock);
  server->auth_timeout_ns = (int64_t)(seconds * 1e9);
  pthread_mutex_unlock(&server->conns_lock);
}

int cohort__store_server_live_connections(cohort__store_server *server) {
  int live = 0;
  pthread_mutex_lock(&server->conns_lock);
  for (conn *c = server->conns; c; c = c->next)
    live += !c->done;
  pthread_mutex_unlock(&server->conns_lock);
  return live;
}

void cohort__store_server_stop(cohort__store_server *server) {
  if (!server) return;
  cohort__store_server *s = server;
  pthread_mutex_lock(&s->lock);
  s->stopping = 1;
  pthread_cond_broadcast(&s->changed);
  pthread_mutex_unlock(&s->lock);
  char byte = 1;
  while (write(s->wake[1], &byte, 1) < 0 && errno == EINTR) {
  }
  pthread_join(s->accept_thread, NULL);
  close(s->listen_fd);

  /* No new connection can appear now. Shutting each socket wakes its thread wherever it blocks: in recv or poll on
   * the socket, or (through `stopping` and the broadcast above) in a GET's wait. */
  pthread_mutex_lock(&s->conns_lock);
  for (conn *c = s->conns; c; c = c->next)
    shutdown(c->fd, SHUT_RDWR);
  conn *list = s->conns;
  s->conns = NULL;
  pthread_mutex_unlock(&s->conns_lock);
  while (list) {
    conn *next = list->next;
    conn_free(list);
    list = next;
  }

  for (size_t i = 0; i < s->nbuckets; i++) {
    entry *e = s->buckets[i];
    while (e) {
      entry *next = e->next;
      free(e->key);
      free(e->value);
      free(e);
      e = next;
    }
  }
  free(s->buckets);
  uint64_t held = cohort__log_budget_flush(&s->refusals);
  if (held)
    COHORT_LOG_WARN("store: %llu more refused connections were not logged (at most %d lines per %d s)",
                    (unsigned long long)held, COHORT__LOG_BUDGET_LINES, COHORT__LOG_BUDGET_WINDOW_S);
  close(s->wake[0]);
  close(s->wake[1]);
  pthread_cond_destroy(&s->changed);
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->conns_lock);
  free(s->secret);
  free(s);
}
