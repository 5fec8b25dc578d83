/* cluster.c: the cohortruns of a multi-node job meeting and watching each other through node 0's store.
 *
 * Keys (under "cohortrun/"): node/I = "nnodes=N nproc=K restarts=R inc=C host=H" (this node joined; C is 0 but
 * for a node that replaced a lost one in an elastic job, elastic.c), claim/I (a counter: a second node with the same
 * --node-rank is refused, unless an elastic job lost the first), hb/I (a counter each node bumps on every poll, ~5
 * times a second, also while it stops and restarts), gG/failed (a counter: the node that takes it to 1 owns generation
 * G's root cause), gG/failure ("CODE\nREPORT", that root cause), gG/ready (a counter: nodes whose generation G is
 * stopped and reaped, waiting to start G+1 together), done/I (the node's workers are all finished, with its exit
 * code), worker_port (the workers' MASTER_PORT, chosen by node 0). The failure keys are per generation, so that a
 * restarted job starts with no root cause; node 0's store (and with it the connection of every node) lives across
 * generations.
 *
 * A node that stops bumping its heartbeat for CLUSTER_SILENT_S without having said done is dead (its cohortrun was
 * killed, its host is gone); a lost connection to the store means node 0's cohortrun is gone. Either way, every
 * other node stops its workers, which bounds the time to a full stop by that limit plus the grace.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster_internal.h"
#include "core/clock.h"
#include "core/error.h"

static char *dup_printf(const char *fmt, const char *a, int b, const char *c) {
  size_t n = strlen(fmt) + strlen(a) + strlen(c) + 32;
  char *s = malloc(n);
  if (s) snprintf(s, n, fmt, a, b, c);
  return s;
}

int cohort__cluster_beat(cohort__cluster *c) {
  char key[64];
  int64_t v = 0;
  snprintf(key, sizeof key, "cohortrun/hb/%d", c->node_rank);
  return cohort__store_add(c->store, key, 1, &v) == COHORT_OK;
}

cohort_status cohort__cluster_check(cohort__cluster *c, const char *what) {
  char why[400] = "";
  if (!c->waiter_code && c->waiter.check) c->waiter_code = c->waiter.check(c->waiter.arg, why, sizeof why);
  if (!c->waiter_code) return COHORT_OK;
  return cohort__error(COHORT_ERR_REMOTE, "node %d: %s while waiting for %s", c->node_rank, why[0] ? why : "stopped",
                       what);
}

cohort_status cohort__cluster_get(cohort__cluster *c, const char *key, double timeout_s, int beat, const char *what,
                                  void **value, size_t *len) {
  int64_t deadline = cohort__now_ns() + (int64_t)(timeout_s * 1e9);
  for (;;) {
    COHORT_CHECK(cohort__cluster_check(c, what));
    double left = (double)(deadline - cohort__now_ns()) / 1e9;
    double slice = left < COHORT_LAUNCH_WAIT_SLICE_S ? (left > 0 ? left : 0) : COHORT_LAUNCH_WAIT_SLICE_S;
    cohort_status st = cohort__store_get(c->store, key, slice, value, len);
    if (st != COHORT_ERR_TIMEOUT || cohort__now_ns() >= deadline) return st;
    if (beat) cohort__cluster_beat(c);
  }
}

cohort_status cohort__cluster_pause(cohort__cluster *c, double seconds, const char *what) {
  if (seconds > COHORT_LAUNCH_WAIT_SLICE_S) seconds = COHORT_LAUNCH_WAIT_SLICE_S;
  if (seconds > 0) usleep((useconds_t)(seconds * 1e6));
  return cohort__cluster_check(c, what);
}

int cohort__cluster_stopped_by_waiter(const cohort__cluster *c) { return c ? c->waiter_code : 0; }

cohort_status cohort__cluster_wait_key(cohort__cluster *c, const char *key, double timeout_s, void **value,
                                       size_t *len) {
  char what[160];
  snprintf(what, sizeof what, "%s in node 0's store", key);
  return cohort__cluster_get(c, key, timeout_s, 1, what, value, len);
}

/* Dials node 0's store in slices, so that the waiter is heard while node 0 is not there yet. */
static cohort_status connect_store(cohort__cluster *c, const char *addr, int port, const char *secret,
                                   double timeout_s) {
  int64_t deadline = cohort__now_ns() + (int64_t)(timeout_s * 1e9);
  char what[400];
  snprintf(what, sizeof what, "the rendezvous store of node 0 at %s (COHORT_TIMEOUT %g s)", c->where, timeout_s);
  for (;;) {
    COHORT_CHECK(cohort__cluster_check(c, what));
    double left = (double)(deadline - cohort__now_ns()) / 1e9;
    double slice = left < 0.5 ? (left > 0 ? left : 0) : 0.5;
    cohort_status st = cohort__store_connect_tcp(addr, port, secret, slice, &c->store);
    if (st == COHORT_OK) return cohort__store_tcp_set_op_timeout(c->store, CLUSTER_OP_TIMEOUT_S);
    if (st != COHORT_ERR_TIMEOUT || cohort__now_ns() >= deadline) return st;
  }
}

void cohort__cluster_nnodes_text(const cohort__cluster *c, char *out, size_t len) {
  if (c->elastic)
    snprintf(out, len, "%d:%d", c->nnodes_min, c->nnodes);
  else
    snprintf(out, len, "%d", c->nnodes);
}

cohort_status cohort__cluster_parse_node(const char *value, char *nnodes, size_t nnodes_len, int *nproc, int *restarts,
                                         int *incarnation, char *host, size_t host_len) {
  const char *h = strstr(value, " host=");
  char text[32] = "";
  if (sscanf(value, "nnodes=%31s nproc=%d restarts=%d inc=%d", text, nproc, restarts, incarnation) != 4 || !h)
    return cohort__error(COHORT_ERR_PROTOCOL, "malformed node announcement '%s' in the store", value);
  snprintf(nnodes, nnodes_len, "%s", text);
  snprintf(host, host_len, "%s", h + 6);
  return COHORT_OK;
}

cohort_status cohort__cluster_join(const char *addr, int port, const char *secret, double timeout_s,
                                   const cohort__launch_opts *opts, const char *host,
                                   const cohort__launch_waiter *waiter, int *end_code, cohort__cluster **out) {
  *end_code = 1;
  const int nnodes = opts->nnodes, nproc = opts->np, max_restarts = opts->max_restarts;
  int node_rank = opts->node_rank; /* decided below for --node-rank auto */
  *out = NULL;
  cohort_status st = COHORT_OK;
  char key[64], value[400];
  void *got = NULL;
  size_t len = 0;
  int64_t deadline = cohort__now_ns() + (int64_t)(timeout_s * 1e9);
  cohort__cluster *c = calloc(1, sizeof *c);
  if (!c || !(c->peers = calloc((size_t)nnodes, sizeof *c->peers))) {
    st = cohort__error(COHORT_ERR_SYSTEM, "out of memory for %d nodes", nnodes);
    goto fail;
  }
  c->nnodes = nnodes;
  c->node_rank = node_rank;
  if (waiter) c->waiter = *waiter;
  c->elastic = opts->elastic;
  c->nnodes_min = opts->nnodes_min;
  c->nproc = nproc;
  c->max_restarts = max_restarts;
  c->last_call_s = opts->last_call_s;
  c->size = nnodes;
  c->rank = node_rank;
  char mine[32];
  cohort__cluster_nnodes_text(c, mine, sizeof mine);
  snprintf(c->where, sizeof c->where, "%s:%d", addr, port);
  st = connect_store(c, addr, port, secret, timeout_s);
  if (c->waiter_code) goto fail;
  if (st == COHORT_ERR_AUTH) {
    char why[512];
    snprintf(why, sizeof why, "%s", cohort_last_error());
    st = cohort__error(st,
                       "node %d: the rendezvous store of node 0 at %s refused this node's COHORT_SECRET: export "
                       "the same COHORT_SECRET on every node (%s)",
                       node_rank, c->where, why);
    goto fail;
  }
  if (st == COHORT_ERR_TIMEOUT) {
    st = cohort__error(st,
                       "node %d: cannot reach the rendezvous store of node 0 at %s within %g s (COHORT_TIMEOUT): "
                       "is node 0's cohortrun running, and are --master-addr/--master-port right?",
                       node_rank, c->where, timeout_s);
    goto fail;
  }
  if (st != COHORT_OK) {
    st = cohort__error_prefix(st, "node %d: joining the rendezvous store of node 0 at %s", node_rank, c->where);
    goto fail;
  }
  if (node_rank == COHORT_LAUNCH_NODE_RANK_AUTO) {
    /* Node 0 took its id by serving the store; the others number themselves in the order they reach it. */
    int64_t k = 0;
    if ((st = cohort__store_add(c->store, "cohortrun/auto/ids", 1, &k)) != COHORT_OK) goto fail;
    if (k >= nnodes) {
      st = cohort__error(COHORT_ERR_INVALID,
                         "--node-rank auto: the job's %d node ranks are all taken (--nnodes %s); this node would be "
                         "node %lld",
                         nnodes, mine, (long long)k);
      goto fail;
    }
    node_rank = c->node_rank = c->rank = (int)k;
    fprintf(stderr, "cohortrun: --node-rank auto: this node is node %d\n", node_rank);
  }
  int64_t claims = 0;
  int incarnation = 0;
  snprintf(key, sizeof key, "cohortrun/claim/%d", node_rank);
  if ((st = cohort__store_add(c->store, key, 1, &claims)) != COHORT_OK) goto fail;
  if (claims > 1 && !c->elastic) {
    st = cohort__error(COHORT_ERR_INVALID, "--node-rank %d is already taken by another node of this job", node_rank);
    goto fail;
  }
  /* Elastic: the id may belong to a node that is gone, which this one then replaces. */
  if (claims > 1 && (st = cohort__elastic_take_over(c, &incarnation)) != COHORT_OK) goto fail;
  c->peers[node_rank].incarnation = incarnation; /* elastic.c: a node that finds a newer one ends */
  snprintf(key, sizeof key, "cohortrun/node/%d", node_rank);
  snprintf(value, sizeof value, "nnodes=%s nproc=%d restarts=%d inc=%d host=%s", mine, nproc, max_restarts, incarnation,
           host);
  if ((st = cohort__store_set(c->store, key, value, strlen(value))) != COHORT_OK) goto fail;
  snprintf(c->peers[node_rank].host, sizeof c->peers[node_rank].host, "%s", host);
  if (c->elastic) {
    if ((st = cohort__elastic_join(c, timeout_s, end_code)) != COHORT_OK) goto fail;
    *out = c;
    return COHORT_OK;
  }
  /* Node 0 first: its word on --nnodes is the reference, so a node that expects more nodes than exist finds out
   * at once instead of waiting for a node that will never come. */
  for (int n = 0; n < nnodes; n++) {
    double left = (double)(deadline - cohort__now_ns()) / 1e9;
    char what[200];
    snprintf(what, sizeof what, "node %d of %d to join (COHORT_TIMEOUT %g s)", n, nnodes, timeout_s);
    snprintf(key, sizeof key, "cohortrun/node/%d", n);
    st = cohort__cluster_get(c, key, left > 0 ? left : 0, 0, what, &got, &len);
    if (c->waiter_code) goto fail;
    if (st == COHORT_ERR_TIMEOUT) {
      st = cohort__error(st,
                         "node %d of %d did not join within %g s (COHORT_TIMEOUT): was its cohortrun started, "
                         "with the same --master-addr, --master-port and --nnodes?",
                         n, nnodes, timeout_s);
      goto fail;
    }
    if (st != COHORT_OK) goto fail;
    char their_nnodes[32];
    int their_nproc = 0, their_restarts = 0, their_incarnation = 0;
    if ((st = cohort__cluster_parse_node(got, their_nnodes, sizeof their_nnodes, &their_nproc, &their_restarts,
                                         &their_incarnation, c->peers[n].host, sizeof c->peers[n].host)) != COHORT_OK)
      goto fail;
    free(got);
    got = NULL;
    if (strcmp(their_nnodes, mine) != 0) {
      st = cohort__error(COHORT_ERR_MISMATCH,
                         "mismatched --nnodes: this node (node %d) has --nnodes %s, node %d (host "
                         "%s) has --nnodes %s; give every node the same value",
                         node_rank, mine, n, c->peers[n].host, their_nnodes);
      goto fail;
    }
    if (their_nproc != nproc) {
      st = cohort__error(COHORT_ERR_MISMATCH,
                         "mismatched --nproc-per-node: this node (node %d) has %d, node %d (host "
                         "%s) has %d; give every node the same value",
                         node_rank, nproc, n, c->peers[n].host, their_nproc);
      goto fail;
    }
    /* Every node must restart as often as the others, or a restart would wait for a node that has ended. */
    if (their_restarts != max_restarts) {
      st = cohort__error(COHORT_ERR_MISMATCH,
                         "mismatched --max-restarts: this node (node %d) has %d, node %d (host %s) has %d; give "
                         "every node the same value",
                         node_rank, max_restarts, n, c->peers[n].host, their_restarts);
      goto fail;
    }
    c->peers[n].changed_ns = cohort__now_ns();
    c->peers[n].member = 1;
  }
  *out = c;
  return COHORT_OK;
fail:
  free(got);
  if (c && c->waiter_code) *end_code = c->waiter_code;
  cohort__cluster_leave(c);
  return st;
}

int cohort__cluster_publish_failure(cohort__cluster *c, const char *report, int code) {
  int64_t first = 0;
  char key[64];
  snprintf(key, sizeof key, "cohortrun/g%d/failed", c->gen);
  if (cohort__store_add(c->store, key, 1, &first) != COHORT_OK) return 1;
  if (first != 1) return 0;
  c->stopped = 1; /* this node's own report: poll need not fetch it back */
  size_t n = strlen(report) + 32;
  char *value = malloc(n);
  if (!value) return 1;
  int len = snprintf(value, n, "%d\n%s", code, report);
  snprintf(key, sizeof key, "cohortrun/g%d/failure", c->gen);
  cohort__store_set(c->store, key, value, (size_t)len);
  free(value);
  return 1;
}

/* The root cause another node published (it may still be on its way: the counter is taken first). */
static char *fetch_failure(cohort__cluster *c, int *code) {
  void *got = NULL;
  size_t len = 0;
  char key[64];
  snprintf(key, sizeof key, "cohortrun/g%d/failure", c->gen);
  if (cohort__cluster_wait_key(c, key, 2.0, &got, &len) != COHORT_OK)
    return dup_printf("cohortrun: another node reported a failure, but not what it was (%s%d%s)\n", "", 0, "");
  char *nl = strchr(got, '\n');
  *code = atoi(got);
  char *report = strdup(nl ? nl + 1 : "");
  free(got);
  return report;
}

int cohort__cluster_poll(cohort__cluster *c, char **report, int *code) {
  *report = NULL;
  *code = 1;
  char key[64];
  int64_t v = 0;
  int exists = 0;
  char failed_key[64];
  snprintf(failed_key, sizeof failed_key, "cohortrun/g%d/failed", c->gen);
  snprintf(key, sizeof key, "cohortrun/hb/%d", c->node_rank);
  if (cohort__store_add(c->store, key, 1, &v) != COHORT_OK ||
      cohort__store_check(c->store, failed_key, &exists) != COHORT_OK) {
    if (c->stopped) return 0;
    *report = dup_printf(c->elastic ? "cohortrun: lost the connection to the rendezvous store of node 0 at %s (node "
                                      "%d: %s): node 0's cohortrun or its host is gone, and an elastic job cannot "
                                      "outlive node 0, which serves its store\n"
                                    : "cohortrun: lost the connection to the rendezvous store of node 0 at %s (node "
                                      "%d: %s): node 0's cohortrun or its host is gone\n",
                         c->where, c->node_rank, cohort_last_error());
    c->stopped = 1;
    return 1;
  }
  if (exists && !c->stopped) {
    *report = fetch_failure(c, code);
    c->stopped = 1;
    return 1;
  }
  int64_t now = cohort__now_ns();
  if (c->elastic) {
    if (cohort__elastic_poll(c, now, report)) {
      c->stopped = 1;
      c->changed = 1;
      *code = 0;
      return 1;
    }
    return 0;
  }
  for (int n = 0; n < c->nnodes; n++) {
    peer *p = &c->peers[n];
    if (n == c->node_rank || p->done || !p->member) continue;
    snprintf(key, sizeof key, "cohortrun/done/%d", n);
    if (cohort__store_check(c->store, key, &p->done) != COHORT_OK) continue;
    if (p->done) continue;
    snprintf(key, sizeof key, "cohortrun/hb/%d", n);
    if (cohort__store_add(c->store, key, 0, &v) != COHORT_OK) continue;
    if (v != p->hb) {
      p->hb = v;
      p->changed_ns = now;
    } else if ((double)(now - p->changed_ns) / 1e9 > CLUSTER_SILENT_S) {
      if (c->stopped) { /* already stopping: a silent node is simply gone, not a new root cause */
        p->done = 1;
        continue;
      }
      char text[600];
      snprintf(text, sizeof text,
               "cohortrun: root cause: node %d (host %s) went silent for %g s: its cohortrun was killed or its host "
               "is gone, and its ranks with it\n",
               n, p->host, CLUSTER_SILENT_S);
      /* Whoever notices first tells the rest, so that every node names the same root cause. */
      if (!cohort__cluster_publish_failure(c, text, 1)) {
        *report = fetch_failure(c, code);
      } else {
        *report = strdup(text);
        *code = 1;
      }
      c->stopped = 1;
      return 1;
    }
  }
  return 0;
}

cohort_status cohort__cluster_restart(cohort__cluster *c, double timeout_s) {
  char key[64];
  int64_t ready = 0, v = 0;
  snprintf(key, sizeof key, "cohortrun/g%d/ready", c->gen);
  if (cohort__store_add(c->store, key, 1, &ready) != COHORT_OK)
    return cohort__error_prefix(COHORT_ERR_REMOTE, "node %d: lost the rendezvous store of node 0 at %s, so no restart",
                                c->node_rank, c->where);
  int64_t start = cohort__now_ns();
  int64_t deadline = start + (int64_t)(timeout_s * 1e9);
  char what[200];
  snprintf(what, sizeof what, "every node to be ready to restart (generation %d; %d nodes)", c->gen + 1, c->nnodes);
  while (ready < c->nnodes) {
    COHORT_CHECK(cohort__cluster_pause(c, 0.05, what));
    int64_t now = cohort__now_ns();
    /* Keep beating: a node waiting here is alive, and the others may still be stopping their workers. */
    snprintf(key, sizeof key, "cohortrun/hb/%d", c->node_rank);
    if (cohort__store_add(c->store, key, 1, &v) != COHORT_OK)
      return cohort__error_prefix(COHORT_ERR_REMOTE,
                                  "node %d: lost the rendezvous store of node 0 at %s while "
                                  "waiting to restart",
                                  c->node_rank, c->where);
    for (int n = 0; n < c->nnodes; n++) {
      peer *p = &c->peers[n];
      if (n == c->node_rank) continue;
      int done = p->done;
      snprintf(key, sizeof key, "cohortrun/done/%d", n);
      if (!done && cohort__store_check(c->store, key, &done) != COHORT_OK) done = 0;
      if (done)
        return cohort__error(COHORT_ERR_REMOTE,
                             "node %d (host %s) ended instead of restarting, so the job cannot start "
                             "generation %d with all %d nodes",
                             n, p->host, c->gen + 1, c->nnodes);
      snprintf(key, sizeof key, "cohortrun/hb/%d", n);
      if (cohort__store_add(c->store, key, 0, &v) != COHORT_OK) continue;
      if (v != p->hb) {
        p->hb = v;
        p->changed_ns = now;
      } else if ((double)(now - p->changed_ns) / 1e9 > CLUSTER_SILENT_S) {
        return cohort__error(COHORT_ERR_REMOTE,
                             "node %d (host %s) went silent for %g s: its cohortrun or its host is "
                             "gone, so the job cannot start generation %d with all %d nodes",
                             n, p->host, CLUSTER_SILENT_S, c->gen + 1, c->nnodes);
      }
    }
    if (now > deadline)
      return cohort__error(COHORT_ERR_TIMEOUT, "node %d: not every node was ready to restart within %g s (%lld of %d)",
                           c->node_rank, timeout_s, (long long)ready, c->nnodes);
    snprintf(key, sizeof key, "cohortrun/g%d/ready", c->gen);
    if (cohort__store_add(c->store, key, 0, &ready) != COHORT_OK)
      return cohort__error_prefix(COHORT_ERR_REMOTE,
                                  "node %d: lost the rendezvous store of node 0 at %s while "
                                  "waiting to restart",
                                  c->node_rank, c->where);
  }
  c->gen++;
  c->stopped = 0;
  int64_t now = cohort__now_ns();
  for (int n = 0; n < c->nnodes; n++)
    c->peers[n].changed_ns = now;
  return COHORT_OK;
}

void cohort__cluster_done(cohort__cluster *c, int code) {
  char key[64], value[16];
  c->finished = 1;
  snprintf(key, sizeof key, "cohortrun/done/%d", c->node_rank);
  int n = snprintf(value, sizeof value, "%d", code);
  cohort__store_set(c->store, key, value, (size_t)n);
}

/* Done or gone (silent after a stop). */
int cohort__cluster_all_done(cohort__cluster *c) {
  for (int n = 0; n < c->nnodes; n++)
    if (n != c->node_rank && c->peers[n].member && !c->peers[n].done && !c->peers[n].lost) return 0;
  return 1;
}

int cohort__cluster_rank(const cohort__cluster *c) { return c->rank; }
int cohort__cluster_node_rank(const cohort__cluster *c) { return c->node_rank; }
int cohort__cluster_size(const cohort__cluster *c) { return c->size; }
int cohort__cluster_gen(const cohort__cluster *c) { return c->gen; }
int cohort__cluster_changed(const cohort__cluster *c) { return c->changed; }

void cohort__cluster_leave(cohort__cluster *c) {
  if (!c) return;
  cohort__store_close(c->store);
  free(c->peers);
  free(c);
}

cohort_status cohort__cluster_share_number(cohort__cluster *c, const char *name, int *value, double timeout_s) {
  char key[96], text[32];
  snprintf(key, sizeof key, "cohortrun/%s", name);
  if (c->node_rank == 0) {
    snprintf(text, sizeof text, "%d", *value);
    return cohort__store_set(c->store, key, text, strlen(text));
  }
  void *got = NULL;
  size_t len = 0;
  char what[200];
  snprintf(what, sizeof what, "node 0 to publish %s", key);
  cohort_status st = cohort__cluster_get(c, key, timeout_s, 1, what, &got, &len);
  if (c->waiter_code) return st;
  if (st != COHORT_OK)
    return cohort__error_prefix(st, "node %d: reading %s from node 0's store at %s", c->node_rank, key, c->where);
  snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text ? len : sizeof text - 1), (const char *)got);
  free(got);
  char *end = NULL;
  long v = strtol(text, &end, 10);
  if (text[0] == '\0' || *end != '\0' || v < 0 || v > 1L << 30)
    return cohort__error(COHORT_ERR_PROTOCOL, "node %d: %s in node 0's store is '%s', not a number", c->node_rank, key,
                         text);
  *value = (int)v;
  return COHORT_OK;
}
