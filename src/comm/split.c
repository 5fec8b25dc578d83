/*
 * split.c: sub-communicators (cohort_comm_split, cohort_comm_dup).
 *
 * Frames are matched by position, with no tag, so two communicators can never share a transport: a sub-communicator
 * gets a transport of its own, made the way the job's was. Its members meet in a key space of their own within the
 * parent's ("split/<n>/<color>/", n counting the parent's splits: every rank splits in the same order, so n is the
 * same everywhere), over a store connection of their own, and run the same rendezvous as cohort_init (rendezvous.c):
 * shm, tcp or tcp+shm by where the members are. In-process communicators have no store: the members (threads) find
 * one new hub in a registry shared by the parent's members, keyed by n and color. Over MPI (no store under mpirun)
 * the members' transport is a context of their own on one duplicate of MPI_COMM_WORLD, agreed by allreduces over
 * the parent (transport/mpi.h).
 *
 * Who is in which color is agreed by one allgather over the parent of (color, key, host tag); the host tag only
 * gives the sub-communicator its local rank and size (members on the same host).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/board.h"
#include "comm/comm.h"
#include "comm/p2p.h"
#include "core/error.h"
#include "core/log.h"
#include "transport/inproc.h"
#include "transport/mpi.h"
#include "transport/shm.h"

/* ---- the in-process registry ---- */

typedef struct split_entry {
  struct split_entry *next;
  uint32_t split;
  int color;
  int left; /* members still to take it */
  cohort__inproc_hub *hub;
  struct cohort__board *board;
  struct cohort__split_registry *hubs; /* the new communicator's own registry, for its splits */
} split_entry;

struct cohort__split_registry {
  pthread_mutex_t mu;
  int refs;
  split_entry *head;
};

struct cohort__split_registry *cohort__split_registry_create(void) {
  struct cohort__split_registry *reg = calloc(1, sizeof *reg);
  if (!reg) return NULL;
  pthread_mutex_init(&reg->mu, NULL);
  reg->refs = 1;
  return reg;
}

void cohort__split_registry_retain(struct cohort__split_registry *reg) {
  pthread_mutex_lock(&reg->mu);
  reg->refs++;
  pthread_mutex_unlock(&reg->mu);
}

static void entry_free(split_entry *e) {
  cohort__inproc_hub_release(e->hub);
  cohort__board_release(e->board);
  cohort__split_registry_release(e->hubs);
  free(e);
}

void cohort__split_registry_release(struct cohort__split_registry *reg) {
  if (!reg) return;
  pthread_mutex_lock(&reg->mu);
  int last = --reg->refs == 0;
  pthread_mutex_unlock(&reg->mu);
  if (!last) return;
  while (reg->head) { /* splits some member never reached (it failed first) */
    split_entry *e = reg->head;
    reg->head = e->next;
    entry_free(e);
  }
  pthread_mutex_destroy(&reg->mu);
  free(reg);
}

/* Joins split n's color: the first member to arrive makes its hub (and notice board, and registry), the last one to
 * join removes the entry. The transport is made under the registry's lock, so that the hub outlives the entry. The
 * caller gets references of its own to the board and the registry. */
static cohort_status registry_join(struct cohort__split_registry *reg, uint32_t n, int color, int rank, int size,
                                   double op_timeout_s, cohort__transport **t, struct cohort__board **board,
                                   struct cohort__split_registry **hubs) {
  cohort_status st = COHORT_OK;
  pthread_mutex_lock(&reg->mu);
  split_entry **at = &reg->head;
  while (*at && !((*at)->split == n && (*at)->color == color))
    at = &(*at)->next;
  split_entry *e = *at;
  if (!e) {
    e = calloc(1, sizeof *e);
    if (!e || (st = cohort__inproc_hub_create(size, &e->hub)) != COHORT_OK ||
        !(e->board = cohort__board_create(size)) || !(e->hubs = cohort__split_registry_create())) {
      if (e) entry_free(e);
      pthread_mutex_unlock(&reg->mu);
      return st != COHORT_OK ? st : cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    }
    e->split = n, e->color = color, e->left = size;
    e->next = reg->head;
    reg->head = e;
    at = &reg->head;
  }
  st = cohort__inproc_create(e->hub, rank, op_timeout_s, t);
  if (st == COHORT_OK) {
    cohort__board_retain(e->board);
    cohort__split_registry_retain(e->hubs);
    *board = e->board, *hubs = e->hubs;
    if (--e->left == 0) {
      *at = e->next;
      entry_free(e);
    }
  }
  pthread_mutex_unlock(&reg->mu);
  return st;
}

/* ---- naming ranks ---- */

static void name_ranks(const int *parent_ranks, int size, char *text, size_t len) {
  char out[2 * COHORT__MESSAGE_MAX];
  size_t o = 0;
  for (const char *s = text; *s && o < sizeof out - 40;) {
    if (strncmp(s, "rank ", 5) == 0 && isdigit((unsigned char)s[5]) && (s == text || !isalnum((unsigned char)s[-1]))) {
      char *end;
      long r = strtol(s + 5, &end, 10);
      o += (size_t)snprintf(out + o, sizeof out - o, "%.*s", (int)(end - s), s);
      /* A message relayed from a member may be named already. */
      if (r >= 0 && r < size && strncmp(end, " (rank", 6) != 0 && strncmp(end, " of the parent", 14) != 0)
        o += (size_t)snprintf(out + o, sizeof out - o, " (rank %d of the parent)", parent_ranks[r]);
      s = end;
      continue;
    }
    out[o++] = *s++;
  }
  out[o] = '\0';
  snprintf(text, len, "%s", out);
}

void cohort__comm_name_parent_ranks(const cohort_comm *c, char *text, size_t len) {
  if (c && c->parent_ranks) name_ranks(c->parent_ranks, c->size, text, len);
}

/* ---- split ---- */

/* Which host a rank runs on, as a number for the allgather (the same identity as the shm transport's check). */
static int32_t host_tag(const cohort__config *cfg) {
  char id[COHORT__SHM_HOST_ID_MAX];
  cohort__shm_host_identity(cfg->node_id, id, sizeof id);
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const char *p = id; *p; p++)
    h = (h ^ (uint8_t)*p) * 16777619u;
  return (int32_t)(h & 0x7fffffff);
}

typedef struct member {
  int32_t key, parent_rank;
} member;

static int by_key_then_rank(const void *a, const void *b) {
  const member *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->parent_rank < y->parent_rank ? -1 : x->parent_rank > y->parent_rank;
}

/* The new communicator's transport, and what it keeps of the meeting (its key space, its registry, its board). */
static cohort_status make_sub(cohort_comm *c, const char *suffix, uint32_t n, int color, int rank, int size,
                              int local_rank, int local_size, cohort__transport *given, cohort_comm **out) {
  cohort__transport *t = given;
  cohort__store *store = NULL;
  cohort__store_place *place = NULL;
  struct cohort__board *board = NULL;
  struct cohort__split_registry *hubs = NULL;
  cohort_status st;
  if (given) { /* made by the caller (over MPI: cohort__mpi_split, cohort__mpi_derive) */
    st = COHORT_OK;
  } else if (size == 1) { /* nobody to meet: a one-rank hub, as cohort_init does */
    cohort__inproc_hub *hub;
    if ((st = cohort__inproc_hub_create(1, &hub)) != COHORT_OK) return st;
    st = cohort__inproc_create(hub, 0, (double)c->config.op_timeout_s, &t);
    cohort__inproc_hub_release(hub);
  } else if (c->place) {
    if (strlen(c->place->prefix) + strlen(suffix) >= sizeof place->prefix)
      return cohort__error(COHORT_ERR_INVALID, "sub-communicators nested too deep (key space %s)", c->place->prefix);
    if (!(place = malloc(sizeof *place))) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    *place = *c->place;
    snprintf(place->prefix, sizeof place->prefix, "%.300s%.60s", c->place->prefix, suffix);
    st = cohort__store_place_open(c->place, &c->config, suffix, &store);
    if (st == COHORT_OK)
      st = cohort__rendezvous_sub(c->place, &c->config, rank, size, local_rank, local_size, store, &t);
  } else if (c->hubs) {
    st = registry_join(c->hubs, n, color, rank, size, (double)c->config.op_timeout_s, &t, &board, &hubs);
  } else {
    st = cohort__error(COHORT_ERR_INTERNAL, "a communicator of %d ranks with neither a store nor a hub", c->size);
  }
  cohort_comm *sub = NULL;
  if (st == COHORT_OK) st = cohort__comm_create(t, local_rank, local_size, &c->config, &sub);
  if (st != COHORT_OK) {
    if (store) cohort__store_close(store);
    free(place);
    cohort__board_release(board);
    cohort__split_registry_release(hubs);
    return st;
  }
  sub->store = store, sub->place = place, sub->board = board, sub->hubs = hubs;
  if ((st = cohort__comm_start_p2p(sub)) != COHORT_OK) {
    cohort_comm_destroy(sub);
    return st;
  }
  *out = sub;
  return COHORT_OK;
}

/* Over MPI: the new communicators' contexts, agreed by every rank of the parent in the rounds transport/mpi.h
 * describes. A round fails only where two splits of this process's threads wanted one context at once; each tries
 * again above it, so rounds are few (the limit is for a livelock nobody has seen). */
static cohort_status agree_mpi_context(cohort_comm *c, uint64_t *context) {
  uint64_t floor = 0;
  for (int round = 0; round < 1000; round++) {
    uint64_t mine = cohort__mpi_context_propose(floor);
    int64_t proposed = (int64_t)(mine == UINT64_MAX ? INT64_MAX : mine), agreed = 0;
    cohort_status st = cohort_allreduce(c, &proposed, &agreed, 1, COHORT_I64, COHORT_MAX);
    if (st != COHORT_OK) {
      cohort__mpi_context_release(mine);
      return st;
    }
    uint64_t a = agreed == INT64_MAX ? UINT64_MAX : (uint64_t)agreed;
    int32_t held = cohort__mpi_context_claim(mine, a), all = 0;
    if ((st = cohort_allreduce(c, &held, &all, 1, COHORT_I32, COHORT_MIN)) != COHORT_OK || !all) {
      if (held) cohort__mpi_context_release(a);
      if (st != COHORT_OK) return st;
      if (a == UINT64_MAX) return cohort__error(COHORT_ERR_SYSTEM, "out of memory agreeing on an MPI context");
      floor = a + COHORT__MPI_SPLIT_CONTEXTS;
      continue;
    }
    *context = a;
    return COHORT_OK;
  }
  return cohort__error(COHORT_ERR_INTERNAL, "no MPI context agreed after 1000 rounds (concurrent splits)");
}

cohort_status cohort_comm_split(cohort_comm *c, int color, int key, cohort_comm **out) {
  if (!c || !out) return cohort__error(COHORT_ERR_INVALID, "cohort_comm_split: comm or sub pointer is NULL");
  *out = NULL;
  if (color < 0) color = COHORT_UNDEFINED;
  pthread_mutex_lock(&c->mu);
  uint32_t n = c->splits++;
  pthread_mutex_unlock(&c->mu);

  int32_t mine[3] = {color, key, host_tag(&c->config)};
  int32_t *all = malloc(sizeof mine * (size_t)c->size);
  member *members = malloc(sizeof *members * (size_t)c->size);
  int *parent_ranks = malloc(sizeof *parent_ranks * (size_t)c->size);
  cohort_status st = all && members && parent_ranks ? COHORT_OK : cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  if (st == COHORT_OK) st = cohort_allgather(c, mine, all, 3, COHORT_I32);
  int over_mpi = c->size > 1 && strcmp(c->transport->ops->name, "mpi") == 0;
  uint64_t context = 0;
  if (st == COHORT_OK && over_mpi) st = agree_mpi_context(c, &context);
  if (st != COHORT_OK || color == COHORT_UNDEFINED) goto done;

  int size = 0, rank = -1, local_rank = 0, local_size = 0;
  for (int p = 0; p < c->size; p++)
    if (all[3 * p] == color) members[size++] = (member){.key = all[3 * p + 1], .parent_rank = p};
  qsort(members, (size_t)size, sizeof *members, by_key_then_rank);
  for (int i = 0; i < size; i++) {
    int p = members[i].parent_rank;
    parent_ranks[i] = p;
    if (p == c->rank) rank = i, local_rank = local_size;
    if (all[3 * p + 2] == mine[2]) local_size++;
  }
  if (c->hubs) local_rank = rank, local_size = size; /* threads of one process: all on this host */
  cohort_comm *sub = NULL;
  char suffix[64];
  snprintf(suffix, sizeof suffix, "split/%u/%d/", n, color);
  cohort__transport *given = NULL;
  if (over_mpi && size > 1)
    st = cohort__mpi_split(c->transport, context, rank, size, parent_ranks, (double)c->config.op_timeout_s, &given);
  if (st == COHORT_OK) st = make_sub(c, suffix, n, color, rank, size, local_rank, local_size, given, &sub);
  if (st == COHORT_OK) {
    sub->parent_ranks = parent_ranks;
    parent_ranks = NULL;
    /* In-process members join a hub without waiting for each other; returning only once all have joined makes
     * this the same as a split of processes (and as cohort_init_inproc). */
    if (c->hubs && size > 1 && (st = cohort_barrier(sub)) != COHORT_OK)
      cohort_comm_destroy(sub);
    else
      *out = sub;
  }
  if (st != COHORT_OK) {
    char text[COHORT__MESSAGE_MAX];
    snprintf(text, sizeof text, "%s", cohort_last_error());
    if (parent_ranks) name_ranks(parent_ranks, size, text, sizeof text);
    st = cohort__error(st, "cohort_comm_split (color %d, %d members, split #%u): %s", color, size, n, text);
  } else {
    COHORT_LOG_DEBUG("split #%u: color %d, rank %d of %d (transport %s)", n, color, rank, size,
                     cohort_transport_name(sub));
  }

done:
  free(all);
  free(members);
  free(parent_ranks);
  return st;
}

cohort_status cohort_comm_dup(cohort_comm *c, cohort_comm **out) {
  if (!c || !out) return cohort__error(COHORT_ERR_INVALID, "cohort_comm_dup: comm or dup pointer is NULL");
  return cohort_comm_split(c, 0, c->rank, out);
}

/* ---- twins ---- */

/* A twin meets in key space "twin/<name>/" (in-process: registry split number 2^31 + a hash of the name, far above
 * any count of splits), so no collective on comm is needed: the name, not the position among comm's calls, is what
 * the ranks agree on. Names are remembered per communicator so that a second twin of one name, which would meet
 * the first one's leftovers in the store, is refused. */
cohort_status cohort_comm_twin(cohort_comm *c, const char *name, cohort_comm **out) {
  if (!c || !name || !out)
    return cohort__error(COHORT_ERR_INVALID, "cohort_comm_twin: comm, name or twin pointer is NULL");
  *out = NULL;
  size_t len = strlen(name);
  int good = len >= 1 && len <= 48;
  for (const char *p = name; good && *p; p++)
    good = isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-';
  if (!good)
    return cohort__error(COHORT_ERR_INVALID, "cohort_comm_twin: name '%.60s' must be 1 to 48 of [A-Za-z0-9_.-]", name);
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const char *p = name; *p; p++)
    h = (h ^ (uint8_t)*p) * 16777619u;
  pthread_mutex_lock(&c->mu);
  int seen = 0;
  for (int i = 0; i < c->ntwins; i++)
    seen |= c->twins[i] == h;
  if (!seen && c->ntwins < (int)(sizeof c->twins / sizeof c->twins[0]))
    c->twins[c->ntwins++] = h;
  else if (!seen)
    seen = -1;
  pthread_mutex_unlock(&c->mu);
  if (seen)
    return cohort__error(COHORT_ERR_INVALID, "cohort_comm_twin: %s",
                         seen > 0 ? "this communicator has a twin of that "
                                    "name already (each name once)"
                                  : "this communicator has all the twins it may have");
  char suffix[64];
  snprintf(suffix, sizeof suffix, "twin/%s/", name);
  /* Over MPI: the duplicate of MPI_COMM_WORLD the job's transport set aside for it (mpi.h says why). */
  cohort__transport *over_mpi = NULL;
  cohort_status st = COHORT_OK;
  if (c->size > 1 && strcmp(c->transport->ops->name, "mpi") == 0)
    st = cohort__mpi_derive(c->transport, COHORT__MPI_TWIN, (double)c->config.op_timeout_s, &over_mpi);
  if (st == COHORT_OK)
    st = make_sub(c, suffix, 0x80000000u | h, 0, c->rank, c->size, c->local_rank, c->local_size, over_mpi, out);
  if (st != COHORT_OK) return cohort__error(st, "cohort_comm_twin '%s': %s", name, cohort_last_error());
  /* In-process members join a hub without waiting for each other (see cohort_comm_split). */
  if (c->hubs && c->size > 1 && (st = cohort_barrier(*out)) != COHORT_OK) {
    cohort_comm_destroy(*out);
    *out = NULL;
  }
  return st;
}

/* ---- the point-to-point engine's transport ---- */

/* Made like a split's, in a key space of the communicator's own ("p2p/"; in-process: its registry's split number
 * UINT32_MAX, which no split reaches), with one socket per peer and no arena (messages are copied). */
cohort_status cohort__comm_start_p2p(cohort_comm *c) {
  cohort__transport *t = NULL;
  cohort__store *store = NULL;
  int goodbye = 1;
  cohort_status st = COHORT_OK;
  if (strcmp(c->config.p2p, "off") == 0) return COHORT_OK; /* COHORT_P2P=off: no engine (work.c says so) */
  if (c->size == 1) {
    /* no transport: messages to itself only */
  } else if (strcmp(c->transport->ops->name, "mpi") == 0) {
    st = cohort__mpi_derive(c->transport, COHORT__MPI_P2P, (double)c->config.op_timeout_s, &t);
  } else if (c->place) {
    cohort__config *cfg = malloc(sizeof *cfg);
    if (!cfg) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    *cfg = c->config;
    cfg->sockets_per_peer = 1;
    cfg->shm_arena_bytes = 0;
    st = cohort__store_place_open(c->place, cfg, "p2p/", &store);
    if (st == COHORT_OK)
      st = cohort__rendezvous_sub(c->place, cfg, c->rank, c->size, c->local_rank, c->local_size, store, &t);
    free(cfg);
  } else if (c->hubs) {
    struct cohort__board *board = NULL;
    struct cohort__split_registry *hubs = NULL;
    st = registry_join(c->hubs, UINT32_MAX, 0, c->rank, c->size, (double)c->config.op_timeout_s, &t, &board, &hubs);
    cohort__board_release(board);
    cohort__split_registry_release(hubs);
    goodbye = 0; /* a hub's queues would keep pointers into a peer that has left */
  } else {
    st = cohort__error(COHORT_ERR_INTERNAL, "a communicator of %d ranks with neither a store nor a hub", c->size);
  }
  if (st != COHORT_OK) {
    if (store) cohort__store_close(store);
    return cohort__error(st, "setting up point-to-point messages: %s", cohort_last_error());
  }
  return cohort__p2p_create(t, c->rank, c->size, goodbye, store, &c->p2p);
}
