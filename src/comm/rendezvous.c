/*
 * rendezvous.c: how the ranks of a job find each other over the store.
 *
 * cohort__rendezvous_connect() opens the store and works in the job's key space only: a view of the store under
 * "cohort/<run id>/<generation>/" (job_store(), the one place that names it). The run id (COHORT_RUN_ID, else
 * derived from COHORT_SECRET) keeps jobs sharing a store apart, and the generation (COHORT_RESTART_COUNT) keeps a
 * restarted job from meeting stale addresses. The keys below are within that view.
 *
 * Then it chooses the transport: with COHORT_TRANSPORT=auto every rank first publishes its host ("host/<rank>")
 * and learns where the others are; one host means shm (whose setup runs over a view of its own, "shm/":
 * transport/shm.h), several nodes of several ranks each mean tcp plus shm within each node (the layered transport;
 * node j's setup runs under "node/<j>/shm/"), anything else plain tcp.
 *
 * The transport's setup (connect_transport) runs over whatever key space it is given: the job's, or a
 * sub-communicator's (cohort__rendezvous_sub: the members of one color of a split, under a prefix of their own within
 * the job's, over a store connection of their own), so that both meet the same way on every transport.
 *
 * For tcp every rank listens on a fresh port, publishes "peer/<rank>" = "ip:port", and waits for everyone else's;
 * then the TCP transport connects the mesh, authenticating each link with the job secret. A final counter
 * ("connected") makes sure no rank leaves (and rank 0 stops no store) while another still needs it. If a rank never
 * arrives, the error names it once COHORT_TIMEOUT has passed.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "comm/comm.h"
#include "comm/launch_env.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sock.h"
#include "transport/frame.h"
#include "transport/layered.h"
#include "transport/mpi.h"
#include "transport/shm.h"
#include "transport/tcp.h"

typedef struct rdv {
  const cohort__launch_env *env;
  const cohort__config *cfg;
  const char *master_addr;
  long master_port;
  long timeout_s;
  char where[600]; /* "the store at host:port (why that port)", for messages */
} rdv;

/* COHORT_SOCKET_IFNAME: the first IPv4 address (else IPv6) of that interface, for hosts where the route towards
 * the master is not the network the job should use (a fast fabric beside the management network). */
static cohort_status ifname_addr(const char *ifname, char *addr, size_t len) {
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "COHORT_SOCKET_IFNAME: getifaddrs");
  int found = 0, exists = 0;
  for (int want = AF_INET; want && !found; want = want == AF_INET ? AF_INET6 : 0)
    for (struct ifaddrs *a = list; a && !found; a = a->ifa_next) {
      if (strcmp(a->ifa_name, ifname) != 0) continue;
      exists = 1;
      if (!a->ifa_addr || a->ifa_addr->sa_family != want) continue;
      socklen_t sl = want == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
      found = getnameinfo(a->ifa_addr, sl, addr, (socklen_t)len, NULL, 0, NI_NUMERICHOST) == 0;
    }
  freeifaddrs(list);
  if (found) return COHORT_OK;
  if (exists)
    return cohort__error(COHORT_ERR_INVALID, "COHORT_SOCKET_IFNAME=%s: the interface has no IP address", ifname);
  return cohort__error(COHORT_ERR_INVALID, "COHORT_SOCKET_IFNAME=%s: no such network interface (see ip addr)", ifname);
}

/* The TCP store is at COHORT_STORE_ADDR:COHORT_STORE_PORT, each defaulting to MASTER_ADDR and MASTER_PORT. A
 * launcher that serves the store itself (cohortrun) sets both, and leaves MASTER_ADDR:MASTER_PORT to the program, as
 * torchrun does: that is where a torch program's rank 0 serves its own (c10d) store. Under torchrun's static
 * rendezvous its agent already serves a store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), which speaks
 * torch's protocol, not ours; rank 0 then serves cohort's on the next port, MASTER_PORT+1, which every rank derives
 * alike from the same variables. */
static cohort_status open_store(rdv *r, int rank, const char *secret, cohort__store **store,
                                cohort__store_server **server) {
  const char *port_from = r->env->port_why[0] ? r->env->port_why : "MASTER_PORT";
  r->master_port = r->env->master_port;
  if (r->cfg->store_port) {
    r->master_port = r->cfg->store_port;
    port_from = "COHORT_STORE_PORT";
  } else if (r->env->agent_store && r->master_port > 0) {
    if (r->master_port == 65535)
      return cohort__error(COHORT_ERR_INVALID, "MASTER_PORT=65535 is torchrun's agent store, and cohort's goes on "
                                               "MASTER_PORT+1, which does not exist: set COHORT_STORE_PORT to a free "
                                               "port, the same on every rank");
    r->master_port++;
    port_from = "MASTER_PORT+1, beside torchrun's agent store on MASTER_PORT";
  }
  if (r->cfg->store_addr[0]) r->master_addr = r->cfg->store_addr;
  const char *kind = r->cfg->store;
  if (strncmp(kind, "file:", 5) == 0) {
    snprintf(r->where, sizeof r->where, "the file store in %s", kind + 5);
    return cohort__store_open_file(kind + 5, store);
  }
  if (strcmp(kind, "tcp") != 0)
    return cohort__error(COHORT_ERR_INVALID, "COHORT_STORE='%s' is not 'tcp' or 'file:DIR'", kind);
  if (r->master_port == 0)
    return cohort__error(COHORT_ERR_INVALID, "MASTER_PORT is not set: run under cohortrun, or set MASTER_ADDR and "
                                             "MASTER_PORT to where rank 0 (or the launcher) serves the store");
  snprintf(r->where, sizeof r->where, "the store at %s:%ld (%s)", r->master_addr, r->master_port, port_from);
  if (rank == 0 && !r->cfg->launcher_store) {
    cohort_status st = cohort__store_server_start(r->master_addr, (int)r->master_port, secret, server);
    if (st != COHORT_OK && r->env->agent_store && !r->cfg->store_port)
      return cohort__error_prefix(st,
                                  "rank 0 cannot serve the rendezvous store on %s:%ld (MASTER_PORT+1, beside "
                                  "torchrun's agent store on MASTER_PORT): set COHORT_STORE_PORT to a free port, "
                                  "the same on every rank, or run torchrun with --standalone",
                                  r->master_addr, r->master_port);
    if (st != COHORT_OK) return cohort__error_prefix(st, "rank 0 cannot serve %s", r->where);
  }
  cohort_status st =
      cohort__store_connect_tcp(r->master_addr, (int)r->master_port, secret, (double)r->timeout_s, store);
  if (st != COHORT_OK) return cohort__error_prefix(st, "rendezvous");
  return COHORT_OK;
}

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

/* The run id scoping every key: COHORT_RUN_ID, else a tag derived from the secret (an HMAC, so the store never
 * holds the secret itself) and one derived from the launcher's job identity (mpirun's, Slurm's: a hash, as it may be
 * long), joined by '-', else "default". Jobs that share a secret (an exported one) but not a launch stay apart. */
static void run_id_of(const cohort__config *cfg, const cohort__launch_env *env, char *out, size_t len) {
  const char *secret = cfg->secret, *forced = cfg->run_id;
  if (forced[0]) {
    snprintf(out, len, "%.*s", (int)len - 1, forced); /* truncated as before */
    return;
  }
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  size_t n = 0;
  out[0] = '\0';
  if (secret[0]) {
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)"cohort-run-id", 13, mac, &mac_len);
    for (unsigned i = 0; i < 8 && n + 3 <= len; i++)
      n += (size_t)snprintf(out + n, len - n, "%02x", mac[i]);
  }
  if (env->job_id[0] && EVP_Digest(env->job_id, strlen(env->job_id), mac, &mac_len, EVP_sha256(), NULL) == 1) {
    n += (size_t)snprintf(out + n, len - n, "%sjob", n ? "-" : "");
    for (unsigned i = 0; i < 8 && n + 3 <= len; i++)
      n += (size_t)snprintf(out + n, len - n, "%02x", mac[i]);
  }
  if (n == 0) snprintf(out, len, "default");
}

/* What a message calls this job: the launcher's identity when there is one. */
static void job_name(const cohort__config *cfg, const cohort__launch_env *env, const char *run_id, char *out,
                     size_t len) {
  if (env->job_var)
    snprintf(out, len, "%s=%s", env->job_var, env->job_id);
  else if (cfg->run_id[0])
    snprintf(out, len, "COHORT_RUN_ID=%.200s", cfg->run_id);
  else
    snprintf(out, len, "run id %s", run_id);
}

/* Whose store is this? A store served by rank 0 (not the launcher's, not a file) says which job it belongs to
 * ("cohort/job" = "<run id> <name>"), and every other rank checks it before it publishes anything: a rank of another
 * job that reached it (two mpirun jobs on one port) is refused, naming both jobs, instead of joining this job's
 * collectives with its data. */
static cohort_status check_owner(rdv *r, cohort__store *store, int rank, const char *run_id, int64_t deadline) {
  if (r->cfg->launcher_store || strncmp(r->cfg->store, "file:", 5) == 0) return COHORT_OK;
  char mine[400];
  job_name(r->cfg, r->env, run_id, mine, sizeof mine);
  if (rank == 0) {
    char value[500];
    int n = snprintf(value, sizeof value, "%s %s", run_id, mine);
    return cohort__store_set(store, "cohort/job", value, (size_t)n);
  }
  char *got = NULL;
  size_t len = 0;
  double wait_s = (double)(deadline - cohort__now_ns()) / 1e9;
  cohort_status st = cohort__store_get(store, "cohort/job", wait_s > 0.001 ? wait_s : 0.001, (void **)&got, &len);
  if (st == COHORT_ERR_TIMEOUT)
    return cohort__error(st,
                         "rendezvous timed out after %ld s: rank 0 never said which job %s belongs to (is it a "
                         "cohort job?)",
                         r->timeout_s, r->where);
  if (st != COHORT_OK) return cohort__error_prefix(st, "rendezvous: reading the owner of %s", r->where);
  size_t id_len = strlen(run_id);
  int same = len > id_len && memcmp(got, run_id, id_len) == 0 && got[id_len] == ' ';
  if (!same) {
    const char *sp = memchr(got, ' ', len);
    size_t off = sp ? (size_t)(sp - got) + 1 : 0;
    st = cohort__error(COHORT_ERR_MISMATCH,
                       "rank %d of the job with %s reached %s, which rank 0 of another job serves (%.*s): two jobs "
                       "meet on one port; give each job its own MASTER_PORT (or COHORT_STORE_PORT)",
                       rank, mine, r->where, (int)(len - off < 300 ? len - off : 300), got + off);
  }
  free(got);
  return st;
}

/* The job's key space: a view of the store under "cohort/<run id>/<generation>/" that owns it. The one place that
 * names the prefix: the rendezvous, the transports' setup and the DDP engine's stall inspector see only this view. */
static cohort_status job_store(const char *run_id, const cohort__config *cfg, cohort__store *store, cohort__store **out,
                               cohort__store_place *place) {
  snprintf(place->prefix, sizeof place->prefix, "cohort/%s/%ld/", run_id, cfg->restart_count);
  return cohort__store_prefixed_owner(store, place->prefix, out);
}

/* The key each COHORT_TRANSPORT publishes first for rank p: auto its host identity, tcp its address, shm its
 * arrival (shm.c). */
static const char *const first_key_of[][2] = {{"auto", "host"}, {"tcp", "peer"}, {"shm", "shm/arrived"}};

/* GETs "<what>/<p>" (what this rank's own transport needs from p) within the deadline (COHORT_ERR_TIMEOUT
 * then, for the caller to name who is missing). Meanwhile, a rank that runs another COHORT_TRANSPORT never publishes
 * that key: when the first key of another transport shows up for p instead, every rank would otherwise wait for
 * COHORT_TIMEOUT and blame a rank that did arrive, so that is COHORT_ERR_INVALID at once. */
static cohort_status await_rank_key(rdv *r, cohort__store *store, int rank, const char *transport, const char *what,
                                    int p, int64_t deadline, void **value, size_t *len) {
  char key[COHORT_STORE_KEY_MAX], sign[COHORT_STORE_KEY_MAX];
  snprintf(key, sizeof key, "%s/%d", what, p);
  for (;;) {
    double left = (double)(deadline - cohort__now_ns()) * 1e-9;
    cohort_status st = cohort__store_get(store, key, left > 0.05 ? 0.05 : left > 0 ? left : 0.001, value, len);
    if (st != COHORT_ERR_TIMEOUT) return st;
    if (left <= 0) return st;
    for (size_t i = 0; i < sizeof first_key_of / sizeof first_key_of[0]; i++) {
      if (strcmp(first_key_of[i][0], transport) == 0) continue;
      int there = 0, exists = 0;
      snprintf(sign, sizeof sign, "%s/%d", first_key_of[i][1], p);
      COHORT_CHECK(cohort__store_check(store, sign, &there));
      if (!there) continue;
      /* An auto rank publishes its host first and then, past the layout, a shm segment or a TCP address as well:
       * with ours there too, p runs what we run. */
      COHORT_CHECK(cohort__store_check(store, key, &exists));
      if (exists) break;
      return cohort__error(COHORT_ERR_INVALID,
                           "rank %d runs with COHORT_TRANSPORT=%s but rank %d with %s: set it alike on every rank", p,
                           first_key_of[i][0], rank, transport);
    }
  }
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
    st = await_rank_key(r, store, rank, "auto", "host", p, deadline, (void **)&ids[p], &len);
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

/* The shm transport's options, from the knobs. */
static cohort__shm_options shm_options(const rdv *r) {
  return (cohort__shm_options){.ring_bytes = r->cfg->shm_ring_bytes,
                               .chunk_bytes = r->cfg->shm_chunk_bytes,
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

/* COHORT_TRANSPORT=shm: a rank that runs auto or tcp publishes its host or its address and never a segment, and
 * waiting for it would last until COHORT_TIMEOUT; this says so at once. */
typedef struct shm_job {
  rdv *r;
  cohort__store *store;
  int rank;
} shm_job;

static cohort_status shm_peer_elsewhere(void *arg, int p) {
  shm_job *j = arg;
  for (size_t i = 0; i < sizeof first_key_of / sizeof first_key_of[0]; i++) {
    if (strcmp(first_key_of[i][0], "shm") == 0) continue;
    char key[COHORT_STORE_KEY_MAX];
    int there = 0;
    snprintf(key, sizeof key, "%s/%d", first_key_of[i][1], p);
    COHORT_CHECK(cohort__store_check(j->store, key, &there));
    if (there)
      return cohort__error(COHORT_ERR_INVALID,
                           "rank %d runs with COHORT_TRANSPORT=%s but rank %d with shm: set it alike on every rank", p,
                           first_key_of[i][0], j->rank);
  }
  return COHORT_OK;
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

/* Everything after the store: the choice of transport and its setup, over `store` (a key space of its own: the
 * job's, or a sub-communicator's) among r->env->size ranks. On failure nothing is left open but the store. */
static cohort_status connect_transport(rdv *r, cohort__store *store, int64_t deadline, cohort__transport **out) {
  const cohort__config *cfg = r->cfg;
  int rank = r->env->rank, size = r->env->size;
  char **addrs = NULL;
  int *node_of = NULL; /* COHORT_TRANSPORT=auto: each rank's node */
  int listen_fd = -1;
  cohort_status st;
  *out = NULL;
  const char *transport = cfg->transport;
  int use_shm = strcmp(transport, "shm") == 0, per_node = 0;
  if (strcmp(transport, "auto") == 0) {
    if (!(node_of = calloc((size_t)size, sizeof *node_of))) {
      st = cohort__error(COHORT_ERR_SYSTEM, "out of memory");
      goto fail;
    }
    int nodes = 0;
    if ((st = host_layout(r, store, rank, size, deadline, node_of, &nodes)) != COHORT_OK) goto fail;
    use_shm = nodes == 1;
    per_node = regular_per_node(node_of, size, nodes);
    if (use_shm)
      COHORT_LOG_DEBUG("COHORT_TRANSPORT=auto: every rank is on this host: shm");
    else if (per_node)
      COHORT_LOG_DEBUG("COHORT_TRANSPORT=auto: %d nodes x %d ranks: tcp, and shm within the node", nodes, per_node);
    else
      COHORT_LOG_DEBUG("COHORT_TRANSPORT=auto: %d hosts, not %s: tcp only (flat allreduce)", nodes,
                       nodes == size ? "several ranks on each" : "the same number of ranks on each, node by node");
  }
  if (use_shm) { /* one host: rings and staging buffers in shared memory (shm.h) */
    shm_job job = {.r = r, .store = store, .rank = rank};
    cohort__shm_options opt = shm_options(r);
    if (strcmp(transport, "shm") == 0) opt.peer_elsewhere = shm_peer_elsewhere, opt.arg = &job;
    if ((st = shm_rendezvous(store, rank, size, 0, deadline, &opt, out)) != COHORT_OK) goto fail;
    free(node_of);
    return COHORT_OK; /* shm's own barrier already keeps everyone until all are done with the store */
  }

  /* Listen where peers can reach us: the address that routes to the store's host, unless told otherwise. */
  char bind_addr[128];
  const char *forced = cfg->bind_addr;
  const char *ifname = cfg->socket_ifname;
  if (forced[0])
    snprintf(bind_addr, sizeof bind_addr, "%.*s", (int)sizeof bind_addr - 1, forced);
  else if (ifname[0]) {
    if ((st = ifname_addr(ifname, bind_addr, sizeof bind_addr)) != COHORT_OK) goto fail;
  } else if ((st = cohort__sock_local_addr_towards(r->master_addr, bind_addr, sizeof bind_addr)) != COHORT_OK)
    goto fail;
  char my_addr[192], key[COHORT_STORE_KEY_MAX];
  if ((st = cohort__tcp_listen(bind_addr, &listen_fd, my_addr, sizeof my_addr)) != COHORT_OK) goto fail;
  snprintf(key, sizeof key, "peer/%d", rank);
  if ((st = cohort__store_set(store, key, my_addr, strlen(my_addr))) != COHORT_OK) goto fail;
  COHORT_LOG_DEBUG("rank %d listens on %s", rank, my_addr);

  addrs = calloc((size_t)size, sizeof *addrs);
  if (!addrs) {
    st = cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    goto fail;
  }
  for (int p = 0; p < size; p++) {
    size_t len = 0;
    st = await_rank_key(r, store, rank, transport, "peer", p, deadline, (void **)&addrs[p], &len);
    if (st == COHORT_ERR_TIMEOUT) st = name_missing(r, store, size, "peer");
    if (st != COHORT_OK) goto fail;
  }

  cohort__tcp_options opt = {.secret = cfg->secret,
                             .sockets_per_peer = (int)cfg->sockets_per_peer,
                             .socket_buffer = (int)cfg->socket_buffer,
                             .spin_us = (int)spin_us(r),
                             .op_timeout_s = (double)cfg->op_timeout_s,
                             .connect_deadline_ns = deadline};
  st = cohort__tcp_create(rank, size, listen_fd, addrs, &opt, out);
  listen_fd = -1;
  if (st != COHORT_OK) goto fail;

  /* Everyone is connected once everyone has counted in; until then the store (maybe served by us) must stay. */
  int64_t joined = 0;
  st = cohort__store_count_in(store, "connected", size, deadline, NULL, NULL, &joined);
  if (st == COHORT_ERR_TIMEOUT)
    st = cohort__error(st, "rendezvous: only %lld of %d ranks finished connecting within %ld s", (long long)joined,
                       size, r->timeout_s);
  if (st != COHORT_OK) goto fail_transport;
  for (int p = 0; p < size; p++)
    free(addrs[p]);
  free(addrs);
  addrs = NULL;
  if (per_node) {
    if (rank == 0 && (st = publish_knobs(r, store)) != COHORT_OK) goto fail_transport;
    st = add_node_layer(r, store, rank, per_node, deadline, out);
    if (st == COHORT_OK && rank != 0) st = check_knobs(r, store, rank, deadline);
    if ((st = agree_on_node_layer(r, store, rank, size, deadline, st)) != COHORT_OK) {
      if (*out) (*out)->ops->destroy(*out);
      *out = NULL;
      goto fail;
    }
  }
  free(node_of);
  return COHORT_OK;

fail_transport:
  (*out)->ops->destroy(*out);
  *out = NULL;
fail:
  if (listen_fd >= 0) close(listen_fd);
  free(node_of);
  for (int p = 0; addrs && p < size; p++)
    free(addrs[p]);
  free(addrs);
  return st;
}

cohort_status cohort__rendezvous_connect(const cohort__launch_env *env, const cohort__config *cfg,
                                         cohort__transport **out, cohort__store **store_out,
                                         cohort__store_server **server_out, cohort__store_place *place) {
  int rank = env->rank;
  /* Under MPI, MPI already knows every rank: no store, no rendezvous. */
  if (strcmp(cfg->transport, "mpi") == 0 ||
      (strcmp(cfg->transport, "auto") == 0 && cohort__mpi_available() &&
       (strcmp(env->source, "openmpi") == 0 || strcmp(env->source, "pmi") == 0))) {
    *store_out = NULL;
    *server_out = NULL;
    return cohort__mpi_create(rank, env->size, (double)cfg->op_timeout_s, out);
  }
  rdv r = {.env = env, .cfg = cfg};
  cohort__store *store = NULL;
  cohort__store_server *server = NULL;
  cohort_status st;
  r.master_addr = env->master_addr;
  r.timeout_s = cfg->timeout_s;
  int64_t deadline = cohort__now_ns() + (int64_t)r.timeout_s * 1000000000;
  char run_id[64];
  run_id_of(cfg, env, run_id, sizeof run_id);

  cohort__store *whole = NULL;
  if ((st = open_store(&r, rank, cfg->secret, &whole, &server)) != COHORT_OK ||
      (st = check_owner(&r, whole, rank, run_id, deadline)) != COHORT_OK) {
    if (whole) cohort__store_close(whole);
    goto fail;
  }
  if ((st = job_store(run_id, cfg, whole, &store, place)) != COHORT_OK) goto fail; /* every key is the job's now */
  if ((st = connect_transport(&r, store, deadline, out)) != COHORT_OK) goto fail;
  /* Where a sub-communicator reconnects to the same store (cohort__rendezvous_sub). */
  snprintf(place->addr, sizeof place->addr, "%s", r.master_addr);
  place->port = r.master_port;
  place->env = *env;
  *store_out = store;
  *server_out = server;
  return COHORT_OK;

fail:
  if (store) cohort__store_close(store);
  cohort__store_server_stop(server);
  return st;
}

cohort_status cohort__store_place_open(const cohort__store_place *place, const cohort__config *cfg, const char *suffix,
                                       cohort__store **out) {
  cohort__store *conn = NULL;
  cohort_status st =
      strncmp(cfg->store, "file:", 5) == 0
          ? cohort__store_open_file(cfg->store + 5, &conn)
          : cohort__store_connect_tcp(place->addr, (int)place->port, cfg->secret, (double)cfg->timeout_s, &conn);
  if (st != COHORT_OK) return cohort__error_prefix(st, "reconnecting to the store of the job");
  char prefix[sizeof place->prefix + 64];
  snprintf(prefix, sizeof prefix, "%s%s", place->prefix, suffix);
  return cohort__store_prefixed_owner(conn, prefix, out);
}

cohort_status cohort__rendezvous_sub(const cohort__store_place *place, const cohort__config *cfg, int rank, int size,
                                     int local_rank, int local_size, cohort__store *store, cohort__transport **out) {
  cohort__launch_env env = place->env;
  env.rank = rank, env.size = size, env.local_rank = local_rank, env.local_size = local_size;
  rdv r = {
      .env = &env, .cfg = cfg, .master_addr = place->addr, .master_port = place->port, .timeout_s = cfg->timeout_s};
  snprintf(r.where, sizeof r.where, "the store of the job (keys %.500s)", place->prefix);
  return connect_transport(&r, store, cohort__now_ns() + (int64_t)r.timeout_s * 1000000000, out);
}
