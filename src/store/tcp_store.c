/*
 * tcp_store.c: the client of the TCP store: one blocking connection, authenticated in connect.
 *
 * Each call is one request frame and one reply frame (store_impl.h). A failure in the middle of a frame leaves the
 * stream out of step, so the handle is then marked broken and every later call fails at once instead of reading
 * some other reply's bytes as its own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/sock.h"
#include "store/auth.h"
#include "store/store_impl.h"

#define TCP_AUTH_TIMEOUT_NS (5 * 1000000000LL)
#define TCP_MIN_OP_TIMEOUT_S 30.0

typedef struct tcp_store {
  cohort__store base;
  int fd;
  int port;
  int broken;
  double op_timeout_s; /* how long a non-waiting request may take before the server counts as hung */
  char host[256];
} tcp_store;

static int64_t deadline_after(double seconds) { return cohort__now_ns() + (int64_t)(seconds * 1e9); }

/* Sends one request and reads its reply. *reply_value (when asked for) is malloc'd with a trailing NUL. */
static cohort_status roundtrip(tcp_store *t, int op, const char *key, const void *value, size_t len, int64_t arg,
                               int64_t deadline, int *code, int64_t *reply_arg, void **reply_value, size_t *reply_len) {
  if (t->broken)
    return cohort__error(COHORT_ERR_REMOTE, "rendezvous store at %s:%d: the connection broke in an earlier call",
                         t->host, t->port);
  size_t key_len = strlen(key);
  unsigned char frame[COHORT__STORE_FRAME_HEADER + COHORT_STORE_KEY_MAX];
  cohort__store_put_header(frame, op, (uint32_t)key_len, (uint32_t)len, arg);
  memcpy(frame + COHORT__STORE_FRAME_HEADER, key, key_len);
  unsigned char *got = NULL;
  cohort_status st = cohort__sock_send_all(t->fd, frame, COHORT__STORE_FRAME_HEADER + key_len, deadline);
  if (st == COHORT_OK && len) st = cohort__sock_send_all(t->fd, value, len, deadline);
  unsigned char h[COHORT__STORE_FRAME_HEADER];
  if (st == COHORT_OK) st = cohort__sock_recv_all(t->fd, h, sizeof h, deadline);
  if (st != COHORT_OK) goto fail;
  int rcode;
  uint32_t rkey_len, rvalue_len;
  cohort__store_get_header(h, &rcode, &rkey_len, &rvalue_len, reply_arg);
  if (rkey_len != 0 || rvalue_len > COHORT_STORE_VALUE_MAX || rcode > COHORT__STORE_REPLY_STOPPING ||
      (rvalue_len > 0 && !reply_value)) {
    st = cohort__error(COHORT_ERR_PROTOCOL, "malformed reply (code %d, key length %u, value length %u)", rcode,
                       rkey_len, rvalue_len);
    goto fail;
  }
  if (reply_value) {
    got = malloc((size_t)rvalue_len + 1);
    if (!got) {
      st = cohort__error(COHORT_ERR_SYSTEM, "out of memory for a %u-byte value", rvalue_len);
      goto fail;
    }
    st = cohort__sock_recv_all(t->fd, got, rvalue_len, deadline);
    if (st != COHORT_OK) goto fail;
    got[rvalue_len] = '\0';
    *reply_value = got;
    *reply_len = rvalue_len;
  }
  *code = rcode;
  return COHORT_OK;

fail:
  free(got);
  t->broken = 1;
  return cohort__error_prefix(st, "rendezvous store at %s:%d, key '%s'", t->host, t->port, key);
}

/* Turns a reply code other than OK into the caller's status. */
static cohort_status reply_status(tcp_store *t, int code, const char *key) {
  switch (code) {
  case COHORT__STORE_REPLY_OK:
    return COHORT_OK;
  case COHORT__STORE_REPLY_NOT_INTEGER:
    return cohort__error(COHORT_ERR_INVALID, "rendezvous store: key '%s' holds a value that is not an integer counter",
                         key);
  case COHORT__STORE_REPLY_OVERFLOW:
    return cohort__error(COHORT_ERR_INVALID, "rendezvous store: adding to counter '%s' would overflow int64", key);
  case COHORT__STORE_REPLY_STOPPING:
    t->broken = 1; /* nothing more will be answered here */
    return cohort__error(COHORT_ERR_REMOTE, "rendezvous store at %s:%d is shutting down", t->host, t->port);
  default:
    return cohort__error(COHORT_ERR_PROTOCOL, "rendezvous store at %s:%d: unexpected reply code %d for key '%s'",
                         t->host, t->port, code, key);
  }
}

static cohort_status tcp_set(cohort__store *store, const char *key, const void *value, size_t len) {
  tcp_store *t = (tcp_store *)store;
  int code;
  int64_t arg;
  COHORT_CHECK(
      roundtrip(t, COHORT__STORE_OP_SET, key, value, len, 0, deadline_after(t->op_timeout_s), &code, &arg, NULL, NULL));
  return reply_status(t, code, key);
}

static cohort_status tcp_get(cohort__store *store, const char *key, double timeout_s, void **value, size_t *len) {
  tcp_store *t = (tcp_store *)store;
  int code;
  int64_t arg;
  void *got = NULL;
  size_t got_len = 0;
  double ms = ceil(timeout_s * 1000.0);
  if (ms > 7.0 * 24 * 3600 * 1000) ms = 7.0 * 24 * 3600 * 1000; /* the server's cap: a week is "forever" here */
  /* The server answers by itself when the wait ends; the margin only guards against a server that hung. */
  COHORT_CHECK(roundtrip(t, COHORT__STORE_OP_GET, key, NULL, 0, (int64_t)ms,
                         deadline_after(ms / 1000.0 + t->op_timeout_s), &code, &arg, &got, &got_len));
  if (code == COHORT__STORE_REPLY_TIMEOUT) {
    free(got);
    return cohort__error(COHORT_ERR_TIMEOUT, "key '%s' was not set in the rendezvous store at %s:%d within %.3g s", key,
                         t->host, t->port, timeout_s);
  }
  if (code != COHORT__STORE_REPLY_OK) {
    free(got);
    return reply_status(t, code, key);
  }
  *value = got;
  *len = got_len;
  return COHORT_OK;
}

static cohort_status tcp_check(cohort__store *store, const char *key, int *exists) {
  tcp_store *t = (tcp_store *)store;
  int code;
  int64_t arg;
  COHORT_CHECK(
      roundtrip(t, COHORT__STORE_OP_CHECK, key, NULL, 0, 0, deadline_after(t->op_timeout_s), &code, &arg, NULL, NULL));
  COHORT_CHECK(reply_status(t, code, key));
  *exists = arg != 0;
  return COHORT_OK;
}

static cohort_status tcp_add(cohort__store *store, const char *key, int64_t delta, int64_t *result) {
  tcp_store *t = (tcp_store *)store;
  int code;
  int64_t arg;
  COHORT_CHECK(roundtrip(t, COHORT__STORE_OP_ADD, key, NULL, 0, delta, deadline_after(t->op_timeout_s), &code, &arg,
                         NULL, NULL));
  COHORT_CHECK(reply_status(t, code, key));
  *result = arg;
  return COHORT_OK;
}

static cohort_status tcp_del(cohort__store *store, const char *key) {
  tcp_store *t = (tcp_store *)store;
  int code;
  int64_t arg;
  COHORT_CHECK(
      roundtrip(t, COHORT__STORE_OP_DELETE, key, NULL, 0, 0, deadline_after(t->op_timeout_s), &code, &arg, NULL, NULL));
  return reply_status(t, code, key);
}

static void tcp_close(cohort__store *store) {
  tcp_store *t = (tcp_store *)store;
  close(t->fd);
  free(t);
}

static const cohort__store_ops tcp_ops = {.name = "tcp",
                                          .set = tcp_set,
                                          .get = tcp_get,
                                          .check = tcp_check,
                                          .add = tcp_add,
                                          .del = tcp_del,
                                          .close = tcp_close};

int cohort__store_tcp_gone(cohort__store *store) {
  return store && store->ops == &tcp_ops && ((tcp_store *)store)->broken;
}

cohort_status cohort__store_tcp_set_op_timeout(cohort__store *store, double seconds) {
  if (!store || store->ops != &tcp_ops || !(seconds > 0) || isinf(seconds))
    return cohort__error(COHORT_ERR_INVALID, "store op timeout: not a TCP store, or %g s is not a positive number",
                         seconds);
  ((tcp_store *)store)->op_timeout_s = seconds;
  return COHORT_OK;
}

cohort_status cohort__store_connect_tcp(const char *host, int port, const char *secret, double timeout_s,
                                        cohort__store **out) {
  if (!out) return cohort__error(COHORT_ERR_INVALID, "store connect: out is NULL");
  *out = NULL;
  if (!host || !host[0] || strlen(host) >= sizeof((tcp_store *)0)->host)
    return cohort__error(COHORT_ERR_INVALID, "store connect: host is empty or too long");
  if (port <= 0 || port > 65535)
    return cohort__error(COHORT_ERR_INVALID, "store connect: port %d is outside 1..65535", port);
  if (!(timeout_s >= 0) || isinf(timeout_s))
    return cohort__error(COHORT_ERR_INVALID, "store connect: timeout %g s is not a finite number >= 0", timeout_s);

  int64_t deadline = deadline_after(timeout_s);
  char last[256] = "nothing listening";
  int reached = 0; /* once a handshake failed, its reason says more than the refused re-dials after it */
  for (;;) {
    int fd = -1;
    cohort_status st = cohort__sock_connect(host, port, deadline, &fd);
    if (st == COHORT_ERR_TIMEOUT) {
      if (!reached) snprintf(last, sizeof last, "%s", cohort_last_error());
      /* sock_connect gives up when its next back-off would pass the deadline; keep dialing until it has passed. */
      int64_t left_ns = deadline - cohort__now_ns();
      if (left_ns <= 0) break;
      usleep((useconds_t)((left_ns < 20000000 ? left_ns : 20000000) / 1000));
      continue;
    }
    if (st != COHORT_OK) return cohort__error_prefix(st, "rendezvous store at %s:%d", host, port);
    /* The server may be up but busy; a handshake gets its own few seconds, never beyond the caller's deadline. */
    int64_t auth_deadline = cohort__now_ns() + TCP_AUTH_TIMEOUT_NS;
    if (auth_deadline > deadline) auth_deadline = deadline;
    st = cohort__auth_connect(fd, secret, COHORT__STORE_PURPOSE, NULL, 0, auth_deadline);
    if (st == COHORT_OK) {
      tcp_store *t = calloc(1, sizeof *t);
      if (!t) {
        close(fd);
        return cohort__error(COHORT_ERR_SYSTEM, "out of memory for a store handle");
      }
      t->base.ops = &tcp_ops;
      t->fd = fd;
      t->port = port;
      t->op_timeout_s = timeout_s > TCP_MIN_OP_TIMEOUT_S ? timeout_s : TCP_MIN_OP_TIMEOUT_S;
      snprintf(t->host, sizeof t->host, "%s", host);
      *out = &t->base;
      return COHORT_OK;
    }
    close(fd);
    /* A refused proof will not get better by retrying; a server that closed on us or was slow may. */
    if (st != COHORT_ERR_REMOTE && st != COHORT_ERR_TIMEOUT && st != COHORT_ERR_SYSTEM)
      return cohort__error_prefix(st, "rendezvous store at %s:%d", host, port);
    snprintf(last, sizeof last, "%s", cohort_last_error());
    reached = 1;
    if (cohort__now_ns() + 50000000 >= deadline) break;
    usleep(50000);
  }
  return cohort__error(COHORT_ERR_TIMEOUT, "rendezvous store at %s:%d did not answer within %g s (last: %s)", host,
                       port, timeout_s, last);
}
