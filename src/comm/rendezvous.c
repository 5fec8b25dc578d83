/*
 * rendezvous.c: how the ranks of a job find each other over the store: the choice of transport and the node layer.
 *
 * cohort__rendezvous_connect() joins MPI's world under mpirun (no store), or else opens the job's key space
 * (job.c) and connects a transport over it. The transport's setup (connect_transport) runs over whatever key space it
 * is given: the job's, or a sub-communicator's (cohort__rendezvous_sub: the members of one color of a split, under
 * a prefix of their own within the job's, over a store connection of their own), so that both meet the same way on
 * every transport. The keys below are within that key space.
 *
 * The choice: with COHORT_TRANSPORT=auto every rank first publishes its host ("host/<rank>") and learns where the
 * others are; one host means shm, several nodes of several ranks each mean tcp plus shm within each node (the
 * layered transport), anything else plain tcp. Each transport sets itself up over the store: shm over a view of its
 * own, "shm/" (transport/shm.h; node j's under "node/<j>/shm/"), tcp with "peer/<rank>" and "connected"
 * (transport/tcp.h). A rank that runs another COHORT_TRANSPORT is named as soon as its first key shows up, and a
 * rank that never arrives once COHORT_TIMEOUT has passed.
 *
 * The node layer (several nodes): after the mesh, shm within each node, the knobs that shape the exchange across
 * nodes compared with rank 0's, and one agreement ("node/done", "node/error") so that every rank has its layered
 * transport or every rank fails with the same reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/launch_env.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "transport/frame.h"
#include "transport/layered.h"
#include "transport/mpi.h"
#include "transport/shm.h"
#include "transport/tcp.h"

typedef struct rdv {
  const cohort__launch_env *env;
  const cohort__config *cfg;
  const char *master_addr; /* the store's host: TCP listens on the address whose route leads there */
  long timeout_s;
  char where[600];      /* "the store at host:port (why that port)", for messages */
  cohort__store *store; /* the key space the transport meets in */
} rdv;

/* After a timeout: which ranks never published their address (key "peer") or host (key "host")? */
static cohort_status name_missing(rdv *r, cohort__store *store, int size, const char *what) {
  char missing[512] = "";
  size_t off = 0;
  int count = 0;
  for (int p = 0; p < size; p++) {
    char key[COHORT_STORE_KEY_MAX];
    snprintf(key, sizeof key, "%s/%d", what, p);
    int exists = 1;
    if (cohort__store_check(store, key, &exists) == COHORT_OK && !exists) {
      if (off < sizeof missing - 16)
        off += (size_t)snprintf(missing + off, sizeof missing - off, "%s%d", count ? ", " : "", p);
      count++;
    }
  }
  return cohort__error(COHORT_ERR_TIMEOUT,
                       "rendezvous timed out after %ld s: rank%s %s never arrived at %s (started? same MASTER_ADDR, "
                       "MASTER_PORT and WORLD_SIZE=%d? COHORT_TIMEOUT sets the wait)",
                       r->timeout_s, count == 1 ? "" : "s", missing, r->where, size);
}

/* The key each COHORT_TRANSPORT publishes first for rank p: auto its host identity, tcp its address, shm its
 * arrival (shm.c). */
static const char *const first_key_of[][2] = {{"auto", "host"}, {"tcp", "peer"}, {"shm", "shm/arrived"}};

/* While this rank (running `transport`) waits for rank p's keys: a rank that runs another COHORT_TRANSPORT never
 * publishes them, and every rank would otherwise wait for COHORT_TIMEOUT and blame a rank that did arrive. So when the
 * first key of another transport shows up for p, that is COHORT_ERR_INVALID at once, unless p has published `own`
 * ("<own>/<p>") too: an auto rank publishes its host first and then, past the layout, a shm segment or a TCP
 * address as well, and then p runs what we run. */
typedef struct elsewhere {
  cohort__store *store;
  int rank;
  const char *transport, *own; /* own: NULL for no such exception */
  int p;
} elsewhere;

static cohort_status runs_elsewhere(void *arg) {
  const elsewhere *w = arg;
  char sign[COHORT_STORE_KEY_MAX], key[COHORT_STORE_KEY_MAX];
  for (size_t i = 0; i < sizeof first_key_of / sizeof first_key_of[0]; i++) {
    if (strcmp(first_key_of[i][0], w->transport) == 0) continue;
    int there = 0, exists = 0;
    snprintf(sign, sizeof sign, "%s/%d", first_key_of[i][1], w->p);
    COHORT_CHECK(cohort__store_check(w->store, sign, &there));
    if (!there) continue;
    if (w->own) {
      snprintf(key, sizeof key, "%s/%d", w->own, w->p);
      COHORT_CHECK(cohort__store_check(w->store, key, &exists));
      if (exists) return COHORT_OK;
    }
    return cohort__error(COHORT_ERR_INVALID,
                         "rank %d runs with COHORT_TRANSPORT=%s but rank %d with %s: set it alike on every rank", w->p,
                         first_key_of[i][0], w->rank, w->transport);
  }
  return COHORT_OK;
}

/* The setups' hooks (tcp.h, shm.h): p's first keys, and the ranks that never published theirs. */
static cohort_status tcp_peer_elsewhere(void *arg, int p) {
  rdv *r = arg;
  elsewhere w = {.store = r->store, .rank = r->env->rank, .transport = r->cfg->transport, .own = "peer", .p = p};
  return runs_elsewhere(&w);
}

static cohort_status shm_peer_elsewhere(void *arg, int p) {
  rdv *r = arg;
  elsewhere w = {.store = r->store, .rank = r->env->rank, .transport = "shm", .own = NULL, .p = p};
  return runs_elsewhere(&w);
}

static cohort_status never_arrived(void *arg, const char *key) {
  rdv *r = arg;
  return name_missing(r, r->store, r->env->size, key);
}

/* COHORT_TRANSPORT=auto: every rank publishes its host identity (COHORT_NODE_ID included) and reads everyone's, so
 * that all ranks see the same list and choose alike. node_of[p] numbers the hosts in order of first appearance. */
static cohort_status host_layout(rdv *r, cohort__store *store, int rank, int size, int64_t deadline, int *node_of,
                                 int *nodes) {
  char mine[COHORT__SHM_HOST_ID_MAX], key[COHORT_STORE_KEY_MAX];
  cohort__shm_host_identity(r->cfg->node_id, mine, sizeof mine);
  snprintf(key, sizeof key, "host/%d", rank);
  COHORT_CHECK(cohort__store_set(store, key, mine, strlen(mine)));
  char **ids = calloc((size_t)size, sizeof *ids);
  if (!ids) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort_status st = COHORT_OK;
  *nodes = 0;
  for (int p = 0; p < size && st == COHORT_OK; p++) {
    size_t len = 0;
    snprintf(key, sizeof key, "host/%d", p);
    elsewhere w = {.store = store, .rank = rank, .transport = "auto", .own = "host", .p = p};
    st = cohort__store_await(store, key, deadline, runs_elsewhere, &w, (void **)&ids[p], &len);
    if (st == COHORT_ERR_TIMEOUT) st = name_missing(r, store, size, "host");
    if (st != COHORT_OK) break;
    char *id = realloc(ids[p], len + 1); /* store values are not terminated */
    if (!id) {
      st = cohort__error(COHORT_ERR_SYSTEM, "out of memory");
      break;
    }
    id[len] = '\0';
    ids[p] = id;
    node_of[p] = -1;
    for (int q = 0; q < p && node_of[p] < 0; q++)
      if (strcmp(ids[q], id) == 0) node_of[p] = node_of[q];
    if (node_of[p] < 0) node_of[p] = (*nodes)++;
  }
  for (int p = 0; p < size; p++)
    free(ids[p]);
  free(ids);
  return st;
}

/* Ranks per node when the layout allows the hierarchical allreduce (several nodes, the same number > 1 of ranks on
 * each, node j holding ranks [j * per_node, (j + 1) * per_node)), else 0. */
static int regular_per_node(const int *node_of, int size, int nodes) {
  if (nodes < 2 || size % nodes != 0 || size / nodes < 2) return 0;
  int per_node = size / nodes;
  for (int p = 0; p < size; p++)
    if (node_of[p] != p / per_node) return 0;
  return per_node;
}

/* COHORT_SPIN_US: a number, or auto (-1). Spinning pays only while every rank of this host has a CPU of its own. */
static long spin_us(const rdv *r) {
  if (r->cfg->spin_us >= 0) return r->cfg->spin_us;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return r->env->local_size <= cpus ? 1000 : 0;
}

/* The TCP transport's options, from the knobs and where the store is. */
static cohort__tcp_setup_options tcp_options(const rdv *r) {
  const cohort__config *cfg = r->cfg;
  return (cohort__tcp_setup_options){.mesh = {.secret = cfg->secret,
                                              .sockets_per_peer = (int)cfg->sockets_per_peer,
                                              .socket_buffer = (int)cfg->socket_buffer,
                                              .spin_us = (int)spin_us(r),
                                              .op_timeout_s = (double)cfg->op_timeout_s},
                                     .bind_addr = cfg->bind_addr,
                                     .ifname = cfg->socket_ifname,
                                     .towards = r->master_addr,
                                     .timeout_s = r->timeout_s};
}

/* The shm transport's options, from the knobs. */
static cohort__shm_options shm_options(const rdv *r) {
  return (cohort__shm_options){.ring_bytes = r->cfg->shm_ring_bytes,
                               .chunk_bytes = r->cfg->shm_chunk_bytes,
                               .small_bytes = r->cfg->shm_small_bytes,
                               .arena_bytes = r->cfg->shm_arena_bytes,
                               .op_timeout_s = (double)r->cfg->op_timeout_s,
                               .spin_us = spin_us(r),
                               .node_id = r->cfg->node_id};
}

/* The shm transport's setup over its own view of the store, keys under "shm/" of `store` (the job's view, or a
 * node's). */
static cohort_status shm_rendezvous(cohort__store *store, int rank, int size, int world_offset, int64_t deadline,
                                    const cohort__shm_options *opt, cohort__transport **out) {
  cohort__store *view = NULL;
  COHORT_CHECK(cohort__store_prefixed(store, "shm/", &view));
  cohort_status st = cohort__shm_rendezvous(rank, size, world_offset, view, deadline, opt, out);
  cohort__store_close(view);
  return st;
}

/* Several nodes with per_node ranks each: shared memory among the ranks of this node too (over a view of the store
 * under "node/<j>/"), and *out becomes the layered transport of both (transport/layered.h). On failure *out is
 * destroyed and NULL. */
static cohort_status add_node_layer(rdv *r, cohort__store *store, int rank, int per_node, int64_t deadline,
                                    cohort__transport **out) {
  char scope[32];
  snprintf(scope, sizeof scope, "node/%d/", rank / per_node);
  cohort__transport *node = NULL, *wide = *out;
  cohort__store *node_store = NULL;
  cohort__shm_options opt = shm_options(r);
  cohort_status st = cohort__store_prefixed(store, scope, &node_store);
  if (st == COHORT_OK)
    st = shm_rendezvous(node_store, rank % per_node, per_node, rank - rank % per_node, deadline, &opt, &node);
  cohort__store_close(node_store);
  if (st != COHORT_OK) {
    (*out)->ops->destroy(*out);
    *out = NULL;
    return cohort__error_prefix(st, "shared memory within node %d", rank / per_node);
  }
  *out = NULL;
  return cohort__layered_create(wide, node, per_node, out);
}

/* Knobs that shape the exchange across nodes without being part of the call its frames carry: COHORT_SHM_CHUNK_BYTES
 * cuts the vector into the slices that the nodes exchange, COHORT_SMALL_BYTES picks ring or recursive doubling for
 * them (both under the one algorithm "hier"). Nodes that differ would fail their first allreduce with a frame size
 * that blames another knob; instead every rank compares its values with rank 0's, which rank 0 publishes before its
 * own node setup (so that a failure there cannot keep the others waiting), and says which knob differs. */
static cohort_status read_knobs(const rdv *r, char *out, size_t len) {
  snprintf(out, len, "%ld %ld", r->cfg->shm_chunk_bytes, r->cfg->small_bytes);
  return COHORT_OK;
}

static cohort_status publish_knobs(rdv *r, cohort__store *store) {
  char key[COHORT_STORE_KEY_MAX], mine[64];
  COHORT_CHECK(read_knobs(r, mine, sizeof mine));
  snprintf(key, sizeof key, "node/knobs");
  return cohort__store_set(store, key, mine, strlen(mine));
}

static cohort_status check_knobs(rdv *r, cohort__store *store, int rank, int64_t deadline) {
  char key[COHORT_STORE_KEY_MAX], mine[64], theirs[64];
  COHORT_CHECK(read_knobs(r, mine, sizeof mine));
  snprintf(key, sizeof key, "node/knobs");
  char *v = NULL;
  size_t len = 0;
  double left = (double)(deadline - cohort__now_ns()) * 1e-9;
  cohort_status st = cohort__store_get(store, key, left > 0 ? left : 0.001, (void **)&v, &len);
  if (st == COHORT_ERR_TIMEOUT)
    return cohort__error(COHORT_ERR_TIMEOUT, "rendezvous timed out after %ld s: rank 0 never published %s at %s",
                         r->timeout_s, key, r->where);
  COHORT_CHECK(st);
  snprintf(theirs, sizeof theirs, "%.*s", (int)(len < sizeof theirs ? len : sizeof theirs - 1), v);
  free(v);
  long chunk = 0, small = 0, chunk0 = -1, small0 = -1;
  if (sscanf(mine, "%ld %ld", &chunk, &small) != 2 || sscanf(theirs, "%ld %ld", &chunk0, &small0) != 2)
    return cohort__error(COHORT_ERR_PROTOCOL, "rank 0 published malformed knobs '%s' under %s", theirs, key);
  if (chunk0 != chunk)
    return cohort__error(COHORT_ERR_INVALID,
                         "ranks disagree on COHORT_SHM_CHUNK_BYTES: rank %d uses %ld, rank 0 uses %ld (it cuts the "
                         "vector into the slices that the nodes exchange: set it alike everywhere)",
                         rank, chunk, chunk0);
  if (small0 != small)
    return cohort__error(COHORT_ERR_INVALID,
                         "ranks disagree on COHORT_SMALL_BYTES: rank %d uses %ld, rank 0 uses %ld (it picks the "
                         "algorithm across nodes: set it alike everywhere)",
                         rank, small, small0);
  return COHORT_OK;
}

/* After add_node_layer (whose outcome on this rank is mine): every rank counts in under "node/done" and waits for
 * all, and a rank whose node layer failed first leaves its reason under "node/error". So either every rank
 * has its layered transport or every rank fails, with the failing node's reason (a node cannot go on with a mesh
 * whose other half gave up); and no rank returns (rank 0 stops no store) while another still needs the store, as
 * the "connected" counter ensures for the mesh. */
static cohort_status agree_on_node_layer(rdv *r, cohort__store *store, int rank, int size, int64_t deadline,
                                         cohort_status mine) {
  char err_key[COHORT_STORE_KEY_MAX], key[COHORT_STORE_KEY_MAX], text[COHORT__MESSAGE_MAX];
  snprintf(err_key, sizeof err_key, "node/error");
  snprintf(key, sizeof key, "node/done");
  snprintf(text, sizeof text, "%s", mine == COHORT_OK ? "" : cohort_last_error());
  if (mine != COHORT_OK) {
    char why[COHORT__MESSAGE_MAX + 32];
    snprintf(why, sizeof why, "%d %d %s", (int)mine, rank, text);
    int reported = 0; /* the first reason stays: a later one may be its consequence */
    if (cohort__store_check(store, err_key, &reported) == COHORT_OK && !reported)
      cohort__store_set(store, err_key, why, strlen(why)); /* best effort: the counter below still lets everyone go */
  }
  int64_t joined = 0;
  cohort_status st = cohort__store_count_in(store, key, size, deadline, NULL, NULL, &joined);
  if (st == COHORT_ERR_TIMEOUT)
    st = cohort__error(COHORT_ERR_TIMEOUT,
                       "rendezvous: only %lld of %d ranks finished setting up shared memory within their node in %ld s",
                       (long long)joined, size, r->timeout_s);
  if (mine != COHORT_OK) return cohort__error(mine, "%s", text);
  if (st != COHORT_OK) return st;
  int failed = 0;
  COHORT_CHECK(cohort__store_check(store, err_key, &failed));
  if (!failed) return COHORT_OK;
  char *why = NULL;
  size_t len = 0;
  COHORT_CHECK(cohort__store_get(store, err_key, 1.0, (void **)&why, &len));
  int status = 0, who = -1, used = 0;
  char *v = realloc(why, len + 1); /* store values are not terminated */
  if (!v) {
    free(why);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  v[len] = '\0';
  if (sscanf(v, "%d %d %n", &status, &who, &used) < 2 || status <= COHORT_OK || status > COHORT_ERR_PROTOCOL)
    status = COHORT_ERR_REMOTE;
  char msg[COHORT__ABORT_TEXT_MAX + 40];
  cohort__relayed_failure(msg, sizeof msg, v + used, who);
  st = cohort__error((cohort_status)status, "%s", msg);
  free(v);
  return st;
}

/* Everything after the store: the choice of transport and its setup, over r->store (a key space of its own: the
 * job's, or a sub-communicator's) among r->env->size ranks. On failure nothing is left open but the store. */
static cohort_status connect_transport(rdv *r, int64_t deadline, cohort__transport **out) {
  cohort__store *store = r->store;
  int rank = r->env->rank, size = r->env->size;
  int *node_of = NULL; /* COHORT_TRANSPORT=auto: each rank's node */
  cohort_status st;
  *out = NULL;
  const char *transport = r->cfg->transport;
  int use_shm = strcmp(transport, "shm") == 0, per_node = 0;
  if (strcmp(transport, "auto") == 0) {
    if (!(node_of = calloc((size_t)size, sizeof *node_of))) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    int nodes = 0;
    st = host_layout(r, store, rank, size, deadline, node_of, &nodes);
    use_shm = nodes == 1;
    per_node = regular_per_node(node_of, size, nodes);
    free(node_of);
    if (st != COHORT_OK) return st;
    if (use_shm)
      COHORT_LOG_DEBUG("COHORT_TRANSPORT=auto: every rank is on this host: shm");
    else if (per_node)
      COHORT_LOG_DEBUG("COHORT_TRANSPORT=auto: %d nodes x %d ranks: tcp, and shm within the node", nodes, per_node);
    else
      COHORT_LOG_DEBUG("COHORT_TRANSPORT=auto: %d hosts, not %s: tcp only (flat allreduce)", nodes,
                       nodes == size ? "several ranks on each" : "the same number of ranks on each, node by node");
  }
  if (use_shm) { /* one host: rings and staging buffers in shared memory (shm.h) */
    cohort__shm_options opt = shm_options(r);
    if (strcmp(transport, "shm") == 0) opt.peer_elsewhere = shm_peer_elsewhere, opt.arg = r;
    /* shm's own barrier ("mapped") keeps everyone until all are done with the store */
    return shm_rendezvous(store, rank, size, 0, deadline, &opt, out);
  }
  cohort__tcp_setup_options opt = tcp_options(r);
  opt.peer_elsewhere = tcp_peer_elsewhere, opt.never_arrived = never_arrived, opt.arg = r;
  COHORT_CHECK(cohort__tcp_rendezvous(rank, size, store, deadline, &opt, out));
  if (!per_node) return COHORT_OK;
  st = rank == 0 ? publish_knobs(r, store) : COHORT_OK;
  if (st != COHORT_OK) {
    (*out)->ops->destroy(*out);
    *out = NULL;
    return st;
  }
  st = add_node_layer(r, store, rank, per_node, deadline, out);
  if (st == COHORT_OK && rank != 0) st = check_knobs(r, store, rank, deadline);
  if ((st = agree_on_node_layer(r, store, rank, size, deadline, st)) != COHORT_OK) {
    if (*out) (*out)->ops->destroy(*out);
    *out = NULL;
  }
  return st;
}

cohort_status cohort__rendezvous_connect(const cohort__launch_env *env, const cohort__config *cfg,
                                         cohort__transport **out, cohort__store **store_out,
                                         cohort__store_server **server_out, cohort__store_place *place) {
  *store_out = NULL;
  *server_out = NULL;
  /* Under MPI, MPI already knows every rank: no store, no rendezvous. */
  if (strcmp(cfg->transport, "mpi") == 0 || (strcmp(cfg->transport, "auto") == 0 && cohort__mpi_available() &&
                                             (strcmp(env->source, "openmpi") == 0 || strcmp(env->source, "pmi") == 0)))
    return cohort__mpi_create(env->rank, env->size, (double)cfg->op_timeout_s, out);
  rdv r = {.env = env, .cfg = cfg, .timeout_s = cfg->timeout_s};
  int64_t deadline = cohort__now_ns() + (int64_t)r.timeout_s * 1000000000;
  cohort__store_server *server = NULL;
  COHORT_CHECK(cohort__job_open(env, cfg, deadline, &r.store, &server, place, r.where, sizeof r.where));
  r.master_addr = place->addr;
  cohort_status st = connect_transport(&r, deadline, out);
  if (st != COHORT_OK) {
    cohort__store_close(r.store);
    cohort__store_server_stop(server);
    return st;
  }
  *store_out = r.store;
  *server_out = server;
  return COHORT_OK;
}

cohort_status cohort__rendezvous_sub(const cohort__store_place *place, const cohort__config *cfg, int rank, int size,
                                     int local_rank, int local_size, cohort__store *store, cohort__transport **out) {
  cohort__launch_env env = place->env;
  env.rank = rank, env.size = size, env.local_rank = local_rank, env.local_size = local_size;
  rdv r = {.env = &env, .cfg = cfg, .master_addr = place->addr, .timeout_s = cfg->timeout_s, .store = store};
  snprintf(r.where, sizeof r.where, "the store of the job (keys %.500s)", place->prefix);
  return connect_transport(&r, cohort__now_ns() + (int64_t)r.timeout_s * 1000000000, out);
}
