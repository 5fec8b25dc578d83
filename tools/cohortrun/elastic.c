/* elastic.c: --nnodes MIN:MAX, a job whose nodes may leave and join between generations (docs/cohortrun.md,
 * "Elastic jobs").
 *
 * Node 0 (the node started with --node-rank 0, which serves the store) is the coordinator: it alone decides which
 * nodes make up each generation, and writes that decision to the store; every other node only follows it. This
 * keeps the protocol free of votes and races, at the price torchrun's static store also pays: the job cannot
 * outlive node 0.
 *
 * Keys (under "cohortrun/e/"), beside those of cluster.c (node/I, claim/I, hb/I, done/I, gG/failed, gG/failure):
 *   gG            generation G's record, written once by node 0: "ids=0,2,3 restarts=R why=TEXT" (its members by
 *                 id, "I.C" for incarnation C > 0 of id I; the failures restarted so far, why it started), or
 *                 "end=CODE why=TEXT" (the job is over)
 *   latest        the number of the last record written, so that a newcomer knows which generation to wait for
 *   gG/changed    a counter: the node that takes it to 1 says why generation G stops for a change of membership
 *   gG/change     that reason (a node went silent, a newcomer is waiting)
 *   gG/ready/I    node I has stopped and reaped its workers of generation G and waits for the next record
 *
 * A node that is not in a record (a newcomer while the job runs, a node beyond MAX) keeps beating and waits for a
 * later record that takes it in. Node 0 notices a waiting newcomer from its announcement (node/I) on its regular
 * poll, and stops the running generation if there is room for it.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster_internal.h"
#include "core/clock.h"
#include "core/error.h"

/* How often the nodes look at the store while they wait between generations. */
#define WAIT_STEP_S 0.1

/* Reads peer n's heartbeat; returns 1 when it has been silent for more than CLUSTER_SILENT_S. */
static int silent(cohort__cluster *c, int n, int64_t now) {
  char key[64];
  int64_t v = 0;
  peer *p = &c->peers[n];
  snprintf(key, sizeof key, "cohortrun/hb/%d", n);
  if (cohort__store_add(c->store, key, 0, &v) != COHORT_OK) return 0;
  if (v != p->hb) {
    p->hb = v;
    p->changed_ns = now;
    return 0;
  }
  return (double)(now - p->changed_ns) / 1e9 > CLUSTER_SILENT_S;
}

static int said_done(cohort__cluster *c, int n) {
  char key[64];
  int done = 0;
  snprintf(key, sizeof key, "cohortrun/done/%d", n);
  return cohort__store_check(c->store, key, &done) == COHORT_OK && done;
}

/* Whether a newer node took over id n (cohort__elastic_take_over) than the one this node knows of (node 0: of every
 * id; the others: of their own). */
static int replaced(cohort__cluster *c, int n) {
  char key[64];
  int64_t v = 0;
  snprintf(key, sizeof key, "cohortrun/e/inc/%d", n);
  return cohort__store_add(c->store, key, 0, &v) == COHORT_OK && v > c->peers[n].incarnation;
}

/* Node 0: reads the announcements of ids it has not seen yet. A node whose flags disagree is refused: before the
 * first generation that ends the job (as with a fixed --nnodes, both nodes say so); later it is only left out. */
static cohort_status scan_newcomers(cohort__cluster *c, int64_t now, int first, int *found) {
  char key[64], mine[32], theirs[32], host[256];
  cohort__cluster_nnodes_text(c, mine, sizeof mine);
  for (int n = 1; n < c->nnodes; n++) {
    peer *p = &c->peers[n];
    if (p->announced && !p->lost) continue;
    /* A lost or refused id comes back only with a node that took it over (a newer incarnation). */
    if ((p->lost || p->refused) && !replaced(c, n)) continue;
    int exists = 0;
    snprintf(key, sizeof key, "cohortrun/node/%d", n);
    if (cohort__store_check(c->store, key, &exists) != COHORT_OK || !exists) continue;
    void *got = NULL;
    size_t len = 0;
    int nproc = 0, restarts = 0, incarnation = 0;
    if (cohort__store_get(c->store, key, 1.0, &got, &len) != COHORT_OK) continue;
    cohort_status st =
        cohort__cluster_parse_node(got, theirs, sizeof theirs, &nproc, &restarts, &incarnation, host, sizeof host);
    free(got);
    if (st != COHORT_OK) return st;
    if (p->announced || p->refused || p->lost) {
      /* The take-over bumps the counter before it writes the announcement: wait for the new announcement. */
      if (incarnation <= p->incarnation) continue;
      memset(p, 0, sizeof *p);
    }
    p->incarnation = incarnation;
    snprintf(p->host, sizeof p->host, "%s", host);
    if (strcmp(theirs, mine) != 0)
      st = cohort__error(COHORT_ERR_MISMATCH,
                         "mismatched --nnodes: this node (node 0) has --nnodes %s, node %d (host %s) has --nnodes %s; "
                         "give every node the same value",
                         mine, n, p->host, theirs);
    else if (nproc != c->nproc)
      st = cohort__error(COHORT_ERR_MISMATCH,
                         "mismatched --nproc-per-node: this node (node 0) has %d, node %d (host %s) has %d; give "
                         "every node the same value",
                         c->nproc, n, p->host, nproc);
    else if (restarts != c->max_restarts)
      st = cohort__error(COHORT_ERR_MISMATCH,
                         "mismatched --max-restarts: this node (node 0) has %d, node %d (host %s) has %d; give every "
                         "node the same value",
                         c->max_restarts, n, p->host, restarts);
    if (st != COHORT_OK) {
      if (first) return st;
      fprintf(stderr, "cohortrun: node 0: left out node %d: %s\n", n, cohort_last_error());
      p->refused = 1;
      continue;
    }
    p->announced = 1;
    p->hb = -1;
    p->changed_ns = now;
    *found = 1;
  }
  return COHORT_OK;
}

/* Announced, alive, not yet lost: a node that may be taken into the next generation. Marks the silent as lost. */
static int available(cohort__cluster *c, int n, int64_t now) {
  peer *p = &c->peers[n];
  if (n == 0) return 1;
  if (!p->announced || p->lost || p->refused) return 0;
  if (said_done(c, n) || silent(c, n, now) || replaced(c, n)) {
    p->lost = 1;
    return 0;
  }
  return 1;
}

static cohort_status publish(cohort__cluster *c, int gen, const char *record) {
  char key[64], latest[16];
  snprintf(key, sizeof key, "cohortrun/e/g%d", gen);
  COHORT_CHECK(cohort__store_set(c->store, key, record, strlen(record)));
  int n = snprintf(latest, sizeof latest, "%d", gen);
  return cohort__store_set(c->store, "cohortrun/e/latest", latest, (size_t)n);
}

static void publish_end(cohort__cluster *c, int gen, int code, const char *why) {
  char record[4400];
  snprintf(record, sizeof record, "end=%d why=%s", code, why);
  publish(c, gen, record);
}

/* Node 0: generation gen of the nodes in take[] (ids, ascending). */
static cohort_status publish_members(cohort__cluster *c, int gen, const int *take, int count, const char *why) {
  char record[4400];
  int len = snprintf(record, sizeof record, "ids=");
  for (int k = 0; k < count; k++) {
    len += snprintf(record + len, sizeof record - (size_t)len, "%s%d", k ? "," : "", take[k]);
    /* A node that took an id over is named with its incarnation ("2.1"): apply() in the replacement takes no
     * record that still names the node it replaced. */
    if (c->peers[take[k]].incarnation > 0)
      len += snprintf(record + len, sizeof record - (size_t)len, ".%d", c->peers[take[k]].incarnation);
  }
  snprintf(record + len, sizeof record - (size_t)len, " restarts=%d why=%s", c->restarts_used, why);
  return publish(c, gen, record);
}

/* The incarnation an id of a record's ids= list is named with: "2.1" is 1, "2" is 0 (publish_members). */
static int record_incarnation(const char *id) {
  while (*id >= '0' && *id <= '9')
    id++;
  return *id == '.' ? atoi(id + 1) : 0;
}

/* Makes record (of generation gen) the current generation if it names this node: 1 if it does, 0 if not. */
static int apply(cohort__cluster *c, int gen, const char *record) {
  const char *ids = record + 4, *why = strstr(record, " why=");
  int restarts = 0;
  const char *r = strstr(record, " restarts=");
  if (r) restarts = atoi(r + 10);
  int in = 0;
  for (const char *p = ids; *p && *p != ' ';) {
    if (atoi(p) == c->node_rank && record_incarnation(p) == c->peers[c->node_rank].incarnation) in = 1;
    while (*p && *p != ',' && *p != ' ')
      p++;
    if (*p == ',') p++;
  }
  if (!in) return 0;
  int64_t now = cohort__now_ns();
  for (int n = 0; n < c->nnodes; n++)
    c->peers[n].member = 0;
  c->size = 0;
  for (const char *p = ids; *p && *p != ' ';) {
    int id = atoi(p);
    if (id >= 0 && id < c->nnodes) {
      if (id == c->node_rank) c->rank = c->size;
      c->peers[id].member = 1;
      c->peers[id].done = 0;
      c->peers[id].lost = 0;
      c->peers[id].changed_ns = now;
      c->size++;
    }
    while (*p && *p != ',' && *p != ' ')
      p++;
    if (*p == ',') p++;
  }
  c->gen = gen;
  c->restarts_used = restarts;
  c->stopped = 0;
  c->changed = 0;
  snprintf(c->why, sizeof c->why, "%s", why ? why + 5 : "");
  return 1;
}

/* Every node but 0: waits (beating) for a record from generation gen on that takes this node in. An end record is
 * COHORT_ERR_REMOTE with its reason, and *end_code set. deadline_ns 0: no limit but the store's life. */
static cohort_status follow(cohort__cluster *c, int gen, int64_t deadline_ns, int *end_code) {
  char key[64], what[160];
  for (;;) {
    snprintf(what, sizeof what, "node 0 to start generation %d (or a later one) with this node in it", gen);
    COHORT_CHECK(cohort__cluster_check(c, what));
    /* Records name their members by id only. A node that was silent long enough for a newcomer to take its id over
     * (stopped, paused, cut off) and then came back would start the same ranks as its replacement, and its beats
     * would hide the replacement's death: it ends instead. */
    if (replaced(c, c->node_rank))
      return cohort__error(COHORT_ERR_INVALID,
                           "a newer cohortrun took over --node-rank %d while this one was silent (for more than %g "
                           "s); this one ends",
                           c->node_rank, CLUSTER_SILENT_S);
    if (!cohort__cluster_beat(c))
      return cohort__error(COHORT_ERR_REMOTE,
                           "lost the connection to the rendezvous store of node 0 at %s while waiting for a "
                           "generation: node 0's cohortrun or its host is gone, and an elastic job cannot outlive "
                           "node 0, which serves its store",
                           c->where);
    void *got = NULL;
    size_t len = 0;
    snprintf(key, sizeof key, "cohortrun/e/g%d", gen);
    cohort_status st = cohort__store_get(c->store, key, WAIT_STEP_S, &got, &len);
    if (st == COHORT_ERR_TIMEOUT) {
      if (deadline_ns && cohort__now_ns() > deadline_ns)
        return cohort__error(COHORT_ERR_TIMEOUT,
                             "node 0 did not start a generation within COHORT_TIMEOUT (waiting for generation %d)",
                             gen);
      continue;
    }
    if (st != COHORT_OK) continue; /* the loss of the store shows at the next beat */
    if (strncmp(got, "end=", 4) == 0) {
      *end_code = atoi((char *)got + 4);
      const char *why = strstr(got, " why=");
      st = cohort__error(COHORT_ERR_REMOTE, "%s", why ? why + 5 : "the job ended");
      free(got);
      return st;
    }
    int in = apply(c, gen, got);
    free(got);
    if (in) return COHORT_OK;
    gen++; /* a generation without this node: wait for a later one */
  }
}

/* Node 0: the ids of the next generation, old members first (they keep their places), then newcomers by id, at
 * most MAX, sorted by id. */
static int choose(cohort__cluster *c, int64_t now, int *take) {
  int count = 0, chosen[4096] = {0};
  for (int pass = 0; pass < 2; pass++)
    for (int n = 0; n < c->nnodes && count < c->nnodes; n++) {
      peer *p = &c->peers[n];
      if (chosen[n] || (pass == 0 && !p->member && n != 0) || !available(c, n, now)) continue;
      chosen[n] = 1;
      count++;
    }
  int k = 0;
  for (int n = 0; n < c->nnodes; n++)
    if (chosen[n]) take[k++] = n;
  return count;
}

static void list_ids(const int *ids, int count, char *out, size_t len) {
  size_t at = 0;
  out[0] = '\0';
  for (int k = 0; k < count && at < len; k++)
    at += (size_t)snprintf(out + at, len - at, "%s%d", k ? "," : "", ids[k]);
}

/* Node 0, before the first generation: waits for MAX nodes, or for MIN once no newcomer came for the last call. */
static cohort_status form_first(cohort__cluster *c, double timeout_s) {
  int64_t start = cohort__now_ns(), last_new = start;
  int64_t deadline = start + (int64_t)(timeout_s * 1e9);
  int take[4096];
  c->peers[0].announced = 1;
  for (;;) {
    int64_t now = cohort__now_ns();
    if (!cohort__cluster_beat(c))
      return cohort__error(COHORT_ERR_REMOTE, "node 0: cannot reach its own store at %s", c->where);
    int found = 0;
    COHORT_CHECK(scan_newcomers(c, now, 1, &found));
    if (found) last_new = now;
    int count = 0;
    for (int n = 0; n < c->nnodes; n++)
      count += available(c, n, now);
    if (count == c->nnodes || (count >= c->nnodes_min && (double)(now - last_new) / 1e9 >= c->last_call_s)) break;
    if (now > deadline) {
      cohort_status st = cohort__error(COHORT_ERR_TIMEOUT,
                                       "only %d of at least %d nodes (--nnodes %d:%d) joined within %g s "
                                       "(COHORT_TIMEOUT): were their cohortruns started, with the same --master-addr, "
                                       "--master-port and --nnodes?",
                                       count, c->nnodes_min, c->nnodes_min, c->nnodes, timeout_s);
      publish_end(c, 0, 1, cohort_last_error());
      return st;
    }
    char what[200];
    snprintf(what, sizeof what, "the nodes to join (%d of --nnodes %d:%d so far; COHORT_TIMEOUT %g s)", count,
             c->nnodes_min, c->nnodes, timeout_s);
    cohort_status st = cohort__cluster_pause(c, WAIT_STEP_S, what);
    if (st != COHORT_OK) {
      char text[700];
      snprintf(text, sizeof text, "%s", cohort_last_error());
      publish_end(c, 0, c->waiter_code, text);
      return cohort__error(st, "%s", text);
    }
  }
  int count = choose(c, cohort__now_ns(), take);
  char ids[600], why[700];
  list_ids(take, count, ids, sizeof ids);
  snprintf(why, sizeof why, "the first generation: nodes %s", ids);
  COHORT_CHECK(publish_members(c, 0, take, count, why));
  char record[4400];
  void *got = NULL;
  size_t len = 0;
  COHORT_CHECK(cohort__store_get(c->store, "cohortrun/e/g0", 1.0, &got, &len));
  snprintf(record, sizeof record, "%s", (char *)got);
  free(got);
  apply(c, 0, record);
  return COHORT_OK;
}

cohort_status cohort__elastic_join(cohort__cluster *c, double timeout_s, int *end_code) {
  if (c->node_rank == 0) return form_first(c, timeout_s);
  /* Node 0's word on the flags first, so that a node that disagrees finds out at once. */
  void *got = NULL;
  size_t len = 0;
  char theirs[32], mine[32], host[256];
  int nproc = 0, restarts = 0, incarnation = 0;
  cohort__cluster_nnodes_text(c, mine, sizeof mine);
  char what[160];
  snprintf(what, sizeof what, "node 0 to join (COHORT_TIMEOUT %g s)", timeout_s);
  cohort_status st = cohort__cluster_get(c, "cohortrun/node/0", timeout_s, 0, what, &got, &len);
  if (c->waiter_code) return st;
  if (st == COHORT_ERR_TIMEOUT)
    return cohort__error(st, "node 0 did not join within %g s (COHORT_TIMEOUT): was its cohortrun started?", timeout_s);
  COHORT_CHECK(st);
  st = cohort__cluster_parse_node(got, theirs, sizeof theirs, &nproc, &restarts, &incarnation, host, sizeof host);
  free(got);
  COHORT_CHECK(st);
  snprintf(c->peers[0].host, sizeof c->peers[0].host, "%s", host);
  if (strcmp(theirs, mine) != 0)
    return cohort__error(COHORT_ERR_MISMATCH,
                         "mismatched --nnodes: this node (node %d) has --nnodes %s, node 0 (host %s) has --nnodes %s; "
                         "give every node the same value",
                         c->node_rank, mine, host, theirs);
  if (nproc != c->nproc)
    return cohort__error(COHORT_ERR_MISMATCH,
                         "mismatched --nproc-per-node: this node (node %d) has %d, node 0 (host %s) has %d; give "
                         "every node the same value",
                         c->node_rank, c->nproc, host, nproc);
  if (restarts != c->max_restarts)
    return cohort__error(COHORT_ERR_MISMATCH,
                         "mismatched --max-restarts: this node (node %d) has %d, node 0 (host %s) has %d; give every "
                         "node the same value",
                         c->node_rank, c->max_restarts, host, restarts);
  /* Join the generation being formed, or the latest one written: node 0 may have taken this node in (it saw the
   * announcement) before this node got here. follow() moves past records that leave this node out. */
  int gen = 0;
  if (cohort__store_get(c->store, "cohortrun/e/latest", 0.001, &got, &len) == COHORT_OK) {
    gen = atoi(got);
    free(got);
  }
  int64_t deadline = gen == 0 ? cohort__now_ns() + (int64_t)(timeout_s * 1e9) + 5000000000LL : 0;
  return follow(c, gen, deadline, end_code);
}

cohort_status cohort__elastic_take_over(cohort__cluster *c, int *incarnation) {
  const int id = c->node_rank;
  char key[96], host[256] = "unknown", nnodes[32];
  void *got = NULL;
  size_t len = 0;
  int nproc = 0, restarts = 0, theirs = 0;
  if (id == 0)
    return cohort__error(COHORT_ERR_INVALID,
                         "--node-rank 0 is already taken: node 0 serves the job's store, and an elastic job cannot "
                         "outlive it, so it is never replaced");
  snprintf(key, sizeof key, "cohortrun/node/%d", id);
  if (cohort__store_get(c->store, key, 1.0, &got, &len) == COHORT_OK) {
    cohort__cluster_parse_node(got, nnodes, sizeof nnodes, &nproc, &restarts, &theirs, host, sizeof host);
    free(got);
  }
  if (said_done(c, id))
    return cohort__error(COHORT_ERR_INVALID,
                         "--node-rank %d is already taken: the node that has it (host %s) finished its part of this "
                         "job, which is ending",
                         id, host);
  /* The node that has the id beats several times a second while it lives, also between generations; one that
   * stays silent for longer than the others wait for a lost node is gone. */
  int64_t v0 = 0, v = 0;
  snprintf(key, sizeof key, "cohortrun/hb/%d", id);
  COHORT_CHECK(cohort__store_add(c->store, key, 0, &v0));
  fprintf(stderr,
          "cohortrun: node %d: --node-rank %d was taken by a node of this job (host %s): checking for %g s that it "
          "is gone\n",
          id, id, host, CLUSTER_SILENT_S + 0.5);
  int64_t until = cohort__now_ns() + (int64_t)((CLUSTER_SILENT_S + 0.5) * 1e9);
  char what[160];
  snprintf(what, sizeof what, "the node that had --node-rank %d to show whether it lives", id);
  while (cohort__now_ns() < until) {
    COHORT_CHECK(cohort__cluster_pause(c, WAIT_STEP_S, what));
    COHORT_CHECK(cohort__store_add(c->store, key, 0, &v));
    if (v != v0 || said_done(c, id))
      return cohort__error(COHORT_ERR_INVALID,
                           "--node-rank %d is already taken by a live node of this job (host %s): give this node an "
                           "id no live node has",
                           id, host);
  }
  /* The claim is the first beat after the silence: of several newcomers that saw the id silent at v0, the one whose
   * increment takes it to v0 + 1 wins, in one store operation. A winner that dies right after leaves nothing
   * behind but that beat, so the next newcomer sees the id silent again (at v0 + 1) and takes it over in turn; a
   * claim kept under a key of its own would have refused every later newcomer. */
  int64_t after = 0;
  COHORT_CHECK(cohort__store_add(c->store, key, 1, &after));
  if (after != v0 + 1)
    return cohort__error(COHORT_ERR_INVALID,
                         "--node-rank %d: another node is taking over this id of a lost node at the same time; give "
                         "this node another id",
                         id);
  /* Test hook (fault.launcher): die between the claim and the incarnation's bump, as a power cut might. */
  if (getenv("COHORT_TEST_DIE_AFTER_TAKEOVER_CLAIM")) raise(SIGKILL);
  int64_t k = 0;
  snprintf(key, sizeof key, "cohortrun/e/inc/%d", id);
  COHORT_CHECK(cohort__store_add(c->store, key, 1, &k));
  *incarnation = (int)k;
  fprintf(stderr, "cohortrun: node %d: the node that had --node-rank %d (host %s) is gone; this node replaces it\n", id,
          id, host);
  return COHORT_OK;
}

/* Asks every node to stop generation G for a change of membership (once: the first reason wins). */
static char *publish_change(cohort__cluster *c, const char *why) {
  char key[64];
  int64_t first = 0;
  snprintf(key, sizeof key, "cohortrun/e/g%d/changed", c->gen);
  if (cohort__store_add(c->store, key, 1, &first) == COHORT_OK && first == 1) {
    snprintf(key, sizeof key, "cohortrun/e/g%d/change", c->gen);
    cohort__store_set(c->store, key, why, strlen(why));
    return strdup(why);
  }
  void *got = NULL;
  size_t len = 0;
  snprintf(key, sizeof key, "cohortrun/e/g%d/change", c->gen);
  if (cohort__cluster_wait_key(c, key, 2.0, &got, &len) != COHORT_OK) return strdup(why);
  return got;
}

int cohort__elastic_poll(cohort__cluster *c, int64_t now, char **report) {
  char key[64], text[700];
  int exists = 0;
  if (c->stopped || c->finished) { /* only keep track of who is done or gone, for node 0's wait at the end */
    for (int n = 0; n < c->nnodes; n++) {
      peer *p = &c->peers[n];
      if (n == c->node_rank || !p->member || p->done || p->lost) continue;
      if (said_done(c, n))
        p->done = 1;
      else if (silent(c, n, now))
        p->lost = 1;
    }
    return 0;
  }
  snprintf(key, sizeof key, "cohortrun/e/g%d/changed", c->gen);
  if (cohort__store_check(c->store, key, &exists) == COHORT_OK && exists) {
    *report = publish_change(c, "cohortrun: the membership changed\n");
    return 1;
  }
  for (int n = 0; n < c->nnodes; n++) {
    peer *p = &c->peers[n];
    if (n == c->node_rank || !p->member || p->done) continue;
    if (said_done(c, n)) {
      p->done = 1;
      continue;
    }
    /* Only node 0 knows which incarnation of each id is the member. */
    int gone = silent(c, n, now), superseded = !gone && c->node_rank == 0 && replaced(c, n);
    if (!gone && !superseded) continue;
    p->lost = 1;
    if (gone)
      snprintf(text, sizeof text,
               "cohortrun: node %d (host %s) went silent for %g s: its cohortrun was killed or its host is gone, and "
               "its ranks with it; the others go on without it\n",
               n, p->host, CLUSTER_SILENT_S);
    else
      snprintf(text, sizeof text,
               "cohortrun: node %d (host %s) was replaced: a new cohortrun took over --node-rank %d; the others go "
               "on without the old one\n",
               n, p->host, n);
    *report = publish_change(c, text);
    return 1;
  }
  if (c->node_rank != 0 || c->size >= c->nnodes) return 0;
  int found = 0;
  scan_newcomers(c, now, 0, &found);
  for (int n = 1; n < c->nnodes; n++) {
    peer *p = &c->peers[n];
    if (p->member || !available(c, n, now)) continue;
    snprintf(text, sizeof text,
             "cohortrun: node %d (host %s) joined the job: a new generation of %d nodes takes it in\n", n, p->host,
             c->size + 1);
    *report = publish_change(c, text);
    return 1;
  }
  return 0;
}

/* Node 0 between generations: waits until every member of generation G is ready or gone, then writes G+1. */
static int coordinate(cohort__cluster *c, double timeout_s, int *end_code, char **message) {
  char key[64], why[2048], ids[600];
  int64_t deadline = cohort__now_ns() + (int64_t)(timeout_s * 1e9);
  int *ready = calloc((size_t)c->nnodes, sizeof *ready);
  int take[4096];
  if (!ready) {
    *message = strdup("cohortrun: node 0: out of memory\n");
    return 0;
  }
  ready[0] = 1;
  for (;;) {
    int64_t now = cohort__now_ns();
    cohort__cluster_beat(c);
    int waiting = 0;
    for (int n = 1; n < c->nnodes; n++) {
      peer *p = &c->peers[n];
      if (!p->member || ready[n] || p->lost) continue;
      int exists = 0;
      snprintf(key, sizeof key, "cohortrun/e/g%d/ready/%d", c->gen, n);
      if (cohort__store_check(c->store, key, &exists) == COHORT_OK && exists)
        ready[n] = 1;
      else if (!available(c, n, now))
        p->lost = 1;
      else
        waiting++;
    }
    if (!waiting) break;
    if (now > deadline) { /* alive but never ready: it cannot be waited for forever */
      for (int n = 1; n < c->nnodes; n++)
        if (c->peers[n].member && !ready[n]) c->peers[n].lost = 1;
      break;
    }
    char what[200];
    snprintf(what, sizeof what, "%d node%s to stop generation %d (COHORT_TIMEOUT %g s)", waiting,
             waiting == 1 ? "" : "s", c->gen, timeout_s);
    if (cohort__cluster_pause(c, WAIT_STEP_S / 2, what) != COHORT_OK) {
      /* Node 0 ends the job; the nodes that follow it read why. */
      *end_code = c->waiter_code;
      *message = strdup(cohort_last_error());
      publish_end(c, c->gen + 1, c->waiter_code, *message ? *message : "node 0 was stopped");
      free(ready);
      return 0;
    }
  }
  /* Why this generation ended: a member lost (whatever its ranks' peers reported first) or a newcomer is a change
   * of membership; otherwise a worker failed, which is what --max-restarts counts. The lost are counted before the
   * scan for newcomers, which resets the entry of a lost id that a replacement took over: else a node lost to a
   * failure counted as that failure whenever its replacement was quick. */
  int lost[4096], nlost = 0;
  char lost_host[256] = "";
  for (int n = 1; n < c->nnodes; n++)
    if (c->peers[n].member && c->peers[n].lost) lost[nlost++] = n;
  if (nlost > 0) snprintf(lost_host, sizeof lost_host, "%s", c->peers[lost[0]].host);
  int found = 0;
  scan_newcomers(c, cohort__now_ns(), 0, &found);
  int exists = 0;
  snprintf(key, sizeof key, "cohortrun/e/g%d/changed", c->gen);
  int changed = nlost > 0 || (cohort__store_check(c->store, key, &exists) == COHORT_OK && exists);
  int code = 1;
  if (!changed) {
    void *got = NULL;
    size_t len = 0;
    snprintf(key, sizeof key, "cohortrun/g%d/failure", c->gen);
    if (cohort__store_get(c->store, key, 1.0, &got, &len) == COHORT_OK) {
      code = atoi(got);
      free(got);
    }
    if (c->restarts_used >= c->max_restarts) {
      snprintf(why, sizeof why, "no restart: the failure above used up --max-restarts %d", c->max_restarts);
      publish_end(c, c->gen + 1, code, why);
      free(ready);
      *end_code = code;
      *message = strdup(why);
      return 0;
    }
    c->restarts_used++;
  }
  int count = choose(c, cohort__now_ns(), take);
  free(ready);
  list_ids(take, count, ids, sizeof ids);
  if (nlost > 0) {
    char gone[600];
    list_ids(lost, nlost, gone, sizeof gone);
    snprintf(why, sizeof why, "node%s %s (host %s%s) left the job; nodes %s go on", nlost == 1 ? "" : "s", gone,
             lost_host, nlost > 1 ? ", ..." : "", ids);
  } else if (changed) {
    int joined[4096], njoined = 0;
    for (int k = 0; k < count; k++)
      if (!c->peers[take[k]].member) joined[njoined++] = take[k];
    if (njoined > 0) {
      char came[600];
      list_ids(joined, njoined, came, sizeof came);
      snprintf(why, sizeof why, "node%s %s (host %s%s) joined; nodes %s", njoined == 1 ? "" : "s", came,
               c->peers[joined[0]].host, njoined > 1 ? ", ..." : "", ids);
    } else {
      snprintf(why, sizeof why, "a membership change: nodes %s", ids);
    }
  } else {
    snprintf(why, sizeof why, "restart %d of %d after a failure: nodes %s", c->restarts_used, c->max_restarts, ids);
  }
  if (count < c->nnodes_min) {
    char text[4096];
    snprintf(text, sizeof text, "%s: only %d node%s left (%s), fewer than MIN %d of --nnodes %d:%d, so the job ends",
             why, count, count == 1 ? "" : "s", ids, c->nnodes_min, c->nnodes_min, c->nnodes);
    publish_end(c, c->gen + 1, 1, text);
    *end_code = 1;
    *message = strdup(text);
    return 0;
  }
  if (publish_members(c, c->gen + 1, take, count, why) != COHORT_OK) {
    *end_code = 1;
    *message = strdup("node 0 cannot write the next generation to its own store");
    return 0;
  }
  char record[4400];
  void *got = NULL;
  size_t len = 0;
  snprintf(key, sizeof key, "cohortrun/e/g%d", c->gen + 1);
  if (cohort__store_get(c->store, key, 1.0, &got, &len) != COHORT_OK) {
    *end_code = 1;
    *message = strdup("node 0 cannot read the next generation from its own store");
    return 0;
  }
  snprintf(record, sizeof record, "%s", (char *)got);
  free(got);
  apply(c, c->gen + 1, record);
  return 1;
}

int cohort__cluster_regroup(cohort__cluster *c, double timeout_s, int *end_code, char **message) {
  *end_code = 1;
  *message = NULL;
  if (c->node_rank == 0) return coordinate(c, timeout_s, end_code, message);
  char key[64];
  snprintf(key, sizeof key, "cohortrun/e/g%d/ready/%d", c->gen, c->node_rank);
  cohort__store_set(c->store, key, "1", 1);
  if (follow(c, c->gen + 1, 0, end_code) == COHORT_OK) return 1;
  *message = strdup(cohort_last_error());
  return 0;
}

const char *cohort__cluster_why(const cohort__cluster *c) { return c->why; }

void cohort__cluster_finish(cohort__cluster *c, int code) {
  if (!c || !c->elastic || c->node_rank != 0) return;
  char key[64], why[200];
  int exists = 0;
  snprintf(key, sizeof key, "cohortrun/e/g%d", c->gen + 1);
  if (cohort__store_check(c->store, key, &exists) != COHORT_OK || exists) return;
  /* Node 0's workers may have finished while another node's failed: the job did not succeed then. */
  void *got = NULL;
  size_t len = 0;
  snprintf(key, sizeof key, "cohortrun/g%d/failed", c->gen);
  if (code == 0 && cohort__store_check(c->store, key, &exists) == COHORT_OK && exists) {
    snprintf(key, sizeof key, "cohortrun/g%d/failure", c->gen);
    if (cohort__store_get(c->store, key, 1.0, &got, &len) == COHORT_OK) {
      code = atoi(got);
      free(got);
    }
    if (code == 0) code = 1;
  }
  if (code == 0)
    snprintf(why, sizeof why, "the job finished");
  else
    snprintf(why, sizeof why, "the job ended with exit code %d on node 0", code);
  publish_end(c, c->gen + 1, code, why);
}
