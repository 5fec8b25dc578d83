/*
 * store.h: the rendezvous key-value store, behind one small interface with two backends.
 *
 *  - TCP: a server (run by the launcher, or by rank 0 in a background thread) and a client per rank. Every
 *    connection authenticates with the job secret (auth.h) before any request is served; a connection that fails
 *    is dropped and logged and never disturbs the other clients.
 *  - File: a directory on a shared filesystem; one file per key, written atomically (temp file + rename).
 *
 * Keys are strings (at most COHORT_STORE_KEY_MAX bytes), values are byte strings (at most COHORT_STORE_VALUE_MAX).
 * A store handle is used by one thread at a time. The server is thread-safe and serves every client concurrently.
 */
#ifndef COHORT_STORE_STORE_H
#define COHORT_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

#define COHORT_STORE_KEY_MAX 512
#define COHORT_STORE_VALUE_MAX (16u << 20)

typedef struct cohort__store cohort__store;

/* Connects to a TCP store at host:port, retrying until timeout_s (the server may not be up yet). */
cohort_status cohort__store_connect_tcp(const char *host, int port, const char *secret, double timeout_s,
                                        cohort__store **out);
/* How long a request on a TCP store connection may go unanswered (beyond a GET's own wait) before it fails with
 * COHORT_ERR_TIMEOUT and the connection is spent; the default is the connect timeout, at least 30 s. A caller that
 * must hear a server that cannot answer sooner (cohortrun's nodes) sets less. COHORT_ERR_INVALID on another store. */
cohort_status cohort__store_tcp_set_op_timeout(cohort__store *store, double seconds);
/* 1 when store is a TCP store whose server went away (its connection broke, or it answered that it is stopping):
 * every later request fails at once. */
int cohort__store_tcp_gone(cohort__store *store);
/* Opens (and creates if needed) a file store in dir. */
cohort_status cohort__store_open_file(const char *dir, cohort__store **out);
void cohort__store_close(cohort__store *store);

/* Sets key to value (replacing any older value). */
cohort_status cohort__store_set(cohort__store *store, const char *key, const void *value, size_t len);
/* Waits until key exists (at most timeout_s; COHORT_ERR_TIMEOUT then), and returns a malloc'd copy of its value,
 * which the caller frees. A trailing NUL is added (not counted in *len), so string values can be used directly. */
cohort_status cohort__store_get(cohort__store *store, const char *key, double timeout_s, void **value, size_t *len);
/* *exists = 1 if key is set now; never waits. */
cohort_status cohort__store_check(cohort__store *store, const char *key, int *exists);
/* Atomically adds delta to the integer counter at key (missing counts as 0) and returns the new value. */
cohort_status cohort__store_add(cohort__store *store, const char *key, int64_t delta, int64_t *result);
/* Removes key; removing a missing key is not an error. */
cohort_status cohort__store_delete(cohort__store *store, const char *key);

/* GETs key as cohort__store_get does, waiting until it exists or deadline_ns (cohort__now_ns()) passes
 * (COHORT_ERR_TIMEOUT), in waits of at most 50 ms between which check(arg) (NULL: none) may end the wait with the
 * failure it returns (the rank that should publish key runs something else, say). */
cohort_status cohort__store_await(cohort__store *store, const char *key, int64_t deadline_ns,
                                  cohort_status (*check)(void *arg), void *arg, void **value, size_t *len);
/* The store as a barrier: counts this rank in under the counter key (adds 1), then waits until count ranks have,
 * reading the counter every millisecond. While it waits, check(arg) (NULL: none) may end the wait with the failure
 * it returns (a peer that reported one, say); past deadline_ns (cohort__now_ns()) the wait ends with
 * COHORT_ERR_TIMEOUT, and *joined (NULL: not wanted) says how many ranks had counted in, for the caller's message. */
cohort_status cohort__store_count_in(cohort__store *store, const char *key, int64_t count, int64_t deadline_ns,
                                     cohort_status (*check)(void *arg), void *arg, int64_t *joined);

/* A view of inner in which every key is prefix + key (Gloo's PrefixStore): a part of the setup gets a key space of
 * its own without knowing the job's key names. Closing the view leaves inner open; inner must outlive the view, and
 * the view shares inner's thread (one thread at a time for both). */
cohort_status cohort__store_prefixed(cohort__store *inner, const char *prefix, cohort__store **out);
/* The same view, owning inner: closing the view closes inner. On failure inner is closed. (A communicator holds its
 * job's key space this way: it never sees a key outside it.) */
cohort_status cohort__store_prefixed_owner(cohort__store *inner, const char *prefix, cohort__store **out);

/* The TCP server. Binds host:port (port 0: any free port; host NULL or "": all interfaces) and serves from a
 * background thread until stopped. */
typedef struct cohort__store_server cohort__store_server;
cohort_status cohort__store_server_start(const char *host, int port, const char *secret, cohort__store_server **out);
/* The port the server listens on (useful after binding port 0). */
int cohort__store_server_port(const cohort__store_server *server);
/* Stops serving, closes every connection and frees the server. Safe on NULL. */
void cohort__store_server_stop(cohort__store_server *server);

#endif
