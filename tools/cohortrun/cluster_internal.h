/*
 * cluster_internal.h: the state that cluster.c (joining, watching, restarting a fixed set of nodes) and elastic.c
 * (generations of a changing set of nodes, --nnodes MIN:MAX) share. Not thread-safe: cohortrun's main thread only.
 *
 * A node is known by its id, the --node-rank it was started with (0..MAX-1; id 0 serves the store). With a fixed
 * --nnodes every id is a member of every generation and the node rank is the id. In an elastic job a generation's
 * members are a subset of the ids, and a node's rank in that generation is its place among them in id order.
 */
#ifndef COHORT_TOOLS_COHORTRUN_CLUSTER_INTERNAL_H
#define COHORT_TOOLS_COHORTRUN_CLUSTER_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "launcher.h"
#include "store/store.h"

/* A node that has not bumped its heartbeat for this long is gone. */
#define CLUSTER_SILENT_S 2.0
/* A request to node 0's store that is not answered within this long (beyond a GET's own wait) means node 0, or the
 * way to it, is gone: the same limit as a node's silence, so that no wait and no stop outlasts a node that cannot
 * answer (the default, 30 s or COHORT_TIMEOUT, once held a cut-off node and its Ctrl-C for that long). */
#define CLUSTER_OP_TIMEOUT_S CLUSTER_SILENT_S

typedef struct peer {
  char host[256];
  int64_t hb;         /* the last heartbeat seen */
  int64_t changed_ns; /* when it last changed */
  int done;
  int member;    /* in the current generation */
  int announced; /* elastic: its announcement was read and agrees with node 0's flags */
  int refused;   /* elastic: its flags disagree; never taken in */
  int lost;      /* elastic: went silent, ended or was replaced; not taken in again unless a newer incarnation comes */
  int incarnation; /* elastic, node 0: which node holding this id it knows of (0 the first, then one per take-over) */
} peer;

struct cohort__cluster {
  cohort__store *store;
  char where[300]; /* "A:P", for messages */
  int nnodes;      /* fixed: the nodes; elastic: MAX (peers has this many slots, one per id) */
  int node_rank;   /* this node's id */
  int gen;         /* the generation the failure keys are scoped to (COHORT_RESTART_COUNT) */
  peer *peers;
  int stopped; /* a stop was already reported by poll */
  /* elastic (--nnodes MIN:MAX) */
  int elastic, nnodes_min, nproc, max_restarts;
  double last_call_s;
  int size, rank;               /* this generation: how many nodes, and this node's place among them */
  int restarts_used;            /* failures restarted so far (membership changes do not count) */
  int changed;                  /* the current generation was stopped by a change of membership */
  int finished;                 /* this node said done: no more generations, newcomers are not taken in */
  char why[2100];               /* why the current generation started (the coordinator's words) */
  cohort__launch_waiter waiter; /* what every wait answers (signals to cohortrun, a failed ssh) */
  int waiter_code;              /* its code once it stopped a wait, else 0 */
};

/* Bumps this node's heartbeat; 0 when the store cannot be reached. */
int cohort__cluster_beat(cohort__cluster *c);
/* cohort__store_get for up to timeout_s, in slices of 0.1 s with a heartbeat between them: a node waiting for
 * another's word (a failure report, the reason of a change) must not go silent for as long as CLUSTER_SILENT_S and
 * be taken for gone by the others. Answers the waiter like cohort__cluster_get. */
cohort_status cohort__cluster_wait_key(cohort__cluster *c, const char *key, double timeout_s, void **value,
                                       size_t *len);
/* Asks the waiter whether the wait for `what` (e.g. "node 1 of 2 to join") goes on: COHORT_OK, or, once it says
 * stop, COHORT_ERR_REMOTE "node I: WHY while waiting for WHAT" with c->waiter_code set (and every later call
 * stops at once too). */
cohort_status cohort__cluster_check(cohort__cluster *c, const char *what);
/* cohort__store_get for up to timeout_s in slices of COHORT_LAUNCH_WAIT_SLICE_S, asking the waiter between them
 * (and bumping this node's heartbeat when beat is set). */
cohort_status cohort__cluster_get(cohort__cluster *c, const char *key, double timeout_s, int beat, const char *what,
                                  void **value, size_t *len);
/* Sleeps for seconds (at most one slice), then asks the waiter. */
cohort_status cohort__cluster_pause(cohort__cluster *c, double seconds, const char *what);

/* "N" or "MIN:MAX", as announced and compared. */
void cohort__cluster_nnodes_text(const cohort__cluster *c, char *out, size_t len);
/* Parses a node announcement "nnodes=T nproc=K restarts=R inc=C host=H". */
cohort_status cohort__cluster_parse_node(const char *value, char *nnodes, size_t nnodes_len, int *nproc, int *restarts,
                                         int *incarnation, char *host, size_t host_len);
/* elastic.c: the part of joining that follows the announcement (node 0 forms generation 0, the others wait for a
 * generation that takes them in), and the per-poll work of an elastic job (silent members, newcomers). */
cohort_status cohort__elastic_join(cohort__cluster *c, double timeout_s, int *end_code);
/* A node whose --node-rank was claimed before: takes the id over if the node that had it is gone (silent for
 * CLUSTER_SILENT_S), with *incarnation its number (1, 2, ...); refuses with a one-line error if that node lives,
 * finished, or another newcomer takes the id over at the same time. */
cohort_status cohort__elastic_take_over(cohort__cluster *c, int *incarnation);
/* Returns 1 with *report set when the generation must stop for a change of membership. */
int cohort__elastic_poll(cohort__cluster *c, int64_t now, char **report);

#endif
