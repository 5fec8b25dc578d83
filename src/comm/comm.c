/*
 * comm.c: making and destroying communicators: from the torchrun environment (cohort_init) or as threads of one
 * process (cohort_init_inproc); the accessors; and abort.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/board.h"
#include "comm/comm.h"
#include "comm/heartbeat.h"
#include "comm/launch_env.h"
#include "comm/p2p.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "transport/inproc.h"

void *cohort__progress_main(void *arg); /* work.c */

static _Atomic uint64_t fork_generation;

static void count_fork_in_child(void) { atomic_fetch_add(&fork_generation, 1); }

__attribute__((constructor)) static void watch_forks(void) { pthread_atfork(NULL, NULL, count_fork_in_child); }

uint64_t cohort__fork_generation(void) { return atomic_load_explicit(&fork_generation, memory_order_relaxed); }

cohort_status cohort__comm_create(cohort__transport *transport, int local_rank, int local_size,
                                  const cohort__config *config, cohort_comm **out) {
  cohort_comm *c = calloc(1, sizeof *c);
  if (!c) {
    transport->ops->destroy(transport);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  c->rank = transport->rank;
  c->size = transport->size;
  c->local_rank = local_rank;
  c->local_size = local_size;
  c->transport = transport;
  c->fork_generation = cohort__fork_generation();
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->store_mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->config = *config;
  cohort__heartbeat_attach(config->heartbeat_fd); /* before the progress thread, which counts collectives in it */
  cohort_status st = cohort__coll_ctx_init(&c->coll, transport, config);
  if (st == COHORT_OK && pthread_create(&c->thread, NULL, cohort__progress_main, c) != 0)
    st = cohort__error(COHORT_ERR_SYSTEM, "cannot start the progress thread");
  if (st != COHORT_OK) {
    cohort_comm_destroy(c);
    return st;
  }
  c->thread_started = 1;
  *out = c;
  return COHORT_OK;
}

/* cohort_init once the knobs are parsed. */
static cohort_status init_with(const cohort__launch_env *env, const cohort__config *cfg, cohort_comm **out) {
  int rank = env->rank, size = env->size, local_rank = env->local_rank, local_size = env->local_size;

  cohort__transport *t = NULL;
  cohort__store *store = NULL;
  cohort__store_server *server = NULL;
  cohort__store_place *place = NULL;
  if (size == 1) { /* nothing to meet: a one-rank hub keeps the code paths the same */
    cohort__inproc_hub *hub;
    COHORT_CHECK(cohort__inproc_hub_create(1, &hub));
    cohort_status st = cohort__inproc_create(hub, 0, (double)cfg->op_timeout_s, &t);
    cohort__inproc_hub_release(hub);
    COHORT_CHECK(st);
  } else {
    if (!(place = calloc(1, sizeof *place))) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    cohort_status st = cohort__rendezvous_connect(env, cfg, &t, &store, &server, place);
    if (st != COHORT_OK) {
      free(place);
      return st;
    }
    if (!store) { /* MPI's world, met without a store: no key space for sub-communicators to meet in */
      free(place);
      place = NULL;
    }
  }
  cohort_comm *c;
  cohort_status st = cohort__comm_create(t, local_rank, local_size, cfg, &c);
  if (st != COHORT_OK) {
    if (store) cohort__store_close(store);
    cohort__store_server_stop(server);
    free(place);
    return st;
  }
  c->store = store;
  c->store_server = server;
  c->place = place;
  if ((st = cohort__comm_start_p2p(c)) != COHORT_OK) {
    cohort_comm_destroy(c);
    return st;
  }
  COHORT_LOG_INFO("rank %d of %d joined (layout from %s, transport %s)", rank, size, env->source, t->ops->name);
  *out = c;
  return COHORT_OK;
}

cohort_status cohort_init(cohort_comm **out) {
  if (!out) return cohort__error(COHORT_ERR_INVALID, "cohort_init: comm is NULL");
  *out = NULL;
  cohort__launch_env env;
  COHORT_CHECK(cohort__launch_env_read(&env));
  cohort__log_set_rank(env.rank);
  cohort__env_warn_unknown();
  /* Every knob, once: a bad value fails here, naming the variable, before anything is started. */
  cohort__config *cfg = malloc(sizeof *cfg);
  if (!cfg) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort_status st = cohort__config_load(cfg);
  if (st == COHORT_OK) cohort__log_set_stall_s(cfg->stall_s);
  /* Before the rendezvous: cohortrun then knows this for a cohort program, whose silence before its first
   * collective (setting up, waiting for the others) is no hang. */
  if (st == COHORT_OK) cohort__heartbeat_attach(cfg->heartbeat_fd);
  if (st == COHORT_OK) st = init_with(&env, cfg, out);
  free(cfg);
  return st;
}

void cohort_comm_destroy(cohort_comm *c) {
  if (!c) return;
  /* A forked child's copy: its links and threads are the parent's (comm.h). Left as it is; the child's memory goes
   * with the child. */
  if (cohort__comm_inherited(c)) return;
  cohort__p2p_destroy(c->p2p); /* first: it tells the peers that this rank leaves */
  if (c->thread_started) {
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    if (c->busy || c->queue_head)
      c->transport->ops->interrupt(c->transport, COHORT_ERR_REMOTE, "communicator destroyed");
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
  }
  cohort__work_detach_all(c); /* handles the caller frees later must not reach into c */
  cohort__coll_ctx_free(&c->coll);
  cohort__gpu_destroy(c->gpu);
  if (c->transport) c->transport->ops->destroy(c->transport);
  if (c->store) cohort__store_close(c->store);
  cohort__store_server_stop(c->store_server);
  cohort__board_release(c->board);
  cohort__split_registry_release(c->hubs);
  free(c->place);
  free(c->parent_ranks);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->store_mu);
  free(c);
}

int cohort_rank(const cohort_comm *c) { return c ? c->rank : -1; }
int cohort_size(const cohort_comm *c) { return c ? c->size : -1; }
int cohort_local_rank(const cohort_comm *c) { return c ? c->local_rank : -1; }
int cohort_local_size(const cohort_comm *c) { return c ? c->local_size : -1; }
const char *cohort_transport_name(const cohort_comm *c) {
  if (!c) return "none";
  return c->label[0] ? c->label : c->transport->ops->name;
}

const char *cohort_device_path(const cohort_comm *c) { return c ? cohort__gpu_path_name(c->gpu) : NULL; }

int cohort_cuda_available(void) { return cohort__gpu_available(); }

void *cohort_alloc(cohort_comm *c, size_t bytes) {
  void *p = c && c->transport->ops->alloc ? c->transport->ops->alloc(c->transport, bytes) : NULL;
  return p ? p : malloc(bytes ? bytes : 1);
}

void cohort_free(cohort_comm *c, void *ptr) {
  if (!ptr) return;
  if (c && c->transport->ops->release && c->transport->ops->release(c->transport, ptr)) return;
  free(ptr);
}

int cohort_in_arena(const cohort_comm *c, const void *ptr, size_t bytes) {
  return c && ptr && c->transport->ops->in_arena && c->transport->ops->in_arena(c->transport, ptr, bytes);
}

int cohort_arena_range(const cohort_comm *c, void **base, size_t *bytes) {
  void *b = NULL;
  size_t n = 0;
  int ok = c && c->transport->ops->arena_range && c->transport->ops->arena_range(c->transport, &b, &n);
  if (base) *base = ok ? b : NULL;
  if (bytes) *bytes = ok ? n : 0;
  return ok;
}

/* ---- in-process groups ---- */

struct cohort_inproc_group {
  cohort__inproc_hub *hub;
  int size;
  struct cohort__board *board;         /* the notice board its communicators share (board.h) */
  struct cohort__split_registry *hubs; /* where the members of a split of the group meet (split.c) */
};

cohort_status cohort_inproc_group_create(int size, cohort_inproc_group **out) {
  if (size < 1 || !out)
    return cohort__error(COHORT_ERR_INVALID, "cohort_inproc_group_create: size %d must be >= 1", size);
  cohort_inproc_group *g = calloc(1, sizeof *g);
  if (!g) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  g->size = size;
  if (!(g->board = cohort__board_create(size)) || !(g->hubs = cohort__split_registry_create())) {
    cohort__board_release(g->board);
    free(g);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  cohort_status st = cohort__inproc_hub_create(size, &g->hub);
  if (st != COHORT_OK) {
    cohort__board_release(g->board);
    cohort__split_registry_release(g->hubs);
    free(g);
    return st;
  }
  *out = g;
  return COHORT_OK;
}

void cohort_inproc_group_destroy(cohort_inproc_group *g) {
  if (!g) return;
  cohort__inproc_hub_release(g->hub);
  cohort__board_release(g->board);
  cohort__split_registry_release(g->hubs);
  free(g);
}

/* A thread that cannot join must not leave the others waiting for it until the op timeout: fail the group. */
static cohort_status fail_group(cohort_inproc_group *g, int rank, cohort_status st) {
  char message[COHORT__MESSAGE_MAX];
  snprintf(message, sizeof message, "rank %d could not join the in-process group: %s", rank, cohort_last_error());
  cohort__inproc_hub_abort(g->hub, COHORT_ERR_REMOTE, message);
  return cohort__error(st, "%s", message);
}

cohort_status cohort_init_inproc(cohort_inproc_group *g, int rank, cohort_comm **out) {
  if (!g || !out) return cohort__error(COHORT_ERR_INVALID, "cohort_init_inproc: group or comm pointer is NULL");
  *out = NULL;
  if (rank < 0 || rank >= g->size)
    return fail_group(g, rank, cohort__error(COHORT_ERR_INVALID, "rank %d is not in [0, %d)", rank, g->size));
  cohort__config *cfg = malloc(sizeof *cfg);
  if (!cfg) return fail_group(g, rank, cohort__error(COHORT_ERR_SYSTEM, "out of memory"));
  cohort__transport *t = NULL;
  cohort_status st = cohort__config_load(cfg);
  if (st == COHORT_OK) cohort__log_set_stall_s(cfg->stall_s);
  if (st == COHORT_OK) st = cohort__inproc_create(g->hub, rank, (double)cfg->op_timeout_s, &t);
  cohort_comm *c = NULL;
  if (st == COHORT_OK) st = cohort__comm_create(t, rank, g->size, cfg, &c);
  free(cfg);
  if (st != COHORT_OK) return fail_group(g, rank, st);
  cohort__board_retain(g->board);
  c->board = g->board;
  cohort__split_registry_retain(g->hubs);
  c->hubs = g->hubs;
  st = cohort__comm_start_p2p(c);
  if (st == COHORT_OK) st = cohort_barrier(c); /* returns once all ranks have joined */
  if (st != COHORT_OK) {
    cohort_comm_destroy(c);
    return st;
  }
  *out = c;
  return COHORT_OK;
}
