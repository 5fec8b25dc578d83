/*
 * layered.c: a TCP mesh over all ranks and a shm transport within the node, as one transport (layered.h).
 *
 * Thread-safety: as transport.h says (one driving thread; interrupt from any thread).
 */
#include <stdlib.h>

#include "core/error.h"
#include "transport/layered.h"
#include "transport/shm.h"
#include "transport/tcp.h"
#include "transport/view.h"

typedef struct layered {
  cohort__transport base;
  cohort__layers layers;
} layered;

static cohort__layers *layers(cohort__transport *t) { return &((layered *)t)->layers; }

static void layered_set_call(cohort__transport *t, const cohort__call *call) {
  cohort__layers *l = layers(t);
  l->wide->ops->set_call(l->wide, call);
  l->node->ops->set_call(l->node, call);
}

static cohort_status layered_isend(cohort__transport *t, int peer, const void *buf, size_t bytes, cohort__req *req) {
  return layers(t)->wide->ops->isend(layers(t)->wide, peer, buf, bytes, req);
}

static cohort_status layered_irecv(cohort__transport *t, int peer, void *buf, size_t bytes, cohort__req *req) {
  return layers(t)->wide->ops->irecv(layers(t)->wide, peer, buf, bytes, req);
}

static cohort_status layered_wait(cohort__transport *t, cohort__req *req) {
  return layers(t)->wide->ops->wait(layers(t)->wide, req);
}

static cohort_status layered_progress(cohort__transport *t, int *progressed) {
  return cohort__tcp_progress(layers(t)->wide, progressed); /* isend and irecv go over the mesh alone */
}

/* A rank in another collective over the mesh (a broadcast, say) while its node peers run the hierarchical
 * allreduce over shm would wait for frames that never come, and they for its flags: its mesh waits look at the
 * calls the node peers publish, so the disagreement is seen (and the abort reaches everyone). */
static cohort_status check_node_calls(void *node) { return cohort__shm_check_node_calls(node); }

/* The other way round: a rank waiting on a node peer's flag reads the mesh too, so that an ABORT from another node
 * reaches it even when that node peer never comes (it left: its links closed, which its peers across saw). */
static cohort_status poll_wide(void *wide) { return cohort__tcp_poll(wide); }

/* Both parts: a node peer may be waiting on a shm flag, a remote one on a frame. The node part first: its abort is
 * a few stores, while the mesh's ABORT frames may wait up to half a second on full socket buffers. */
static void layered_abort(cohort__transport *t, cohort_status status, const char *message) {
  cohort__layers *l = layers(t);
  l->node->ops->abort(l->node, status, message);
  l->wide->ops->abort(l->wide, status, message);
}

static void layered_interrupt(cohort__transport *t, cohort_status status, const char *message) {
  cohort__layers *l = layers(t);
  l->node->ops->interrupt(l->node, status, message);
  l->wide->ops->interrupt(l->wide, status, message);
}

/* Zero copy (cohort_alloc): the node part's arena. Node peers map it, so the hierarchical allreduce reads their
 * inputs and copies their slices' results where they lie (shm_coll.c: no staging for such buffers); the mesh and the
 * exchange across nodes see it as ordinary memory. The DDP engine keeps its buckets there on every node. */
static void *layered_alloc(cohort__transport *t, size_t bytes) {
  cohort__transport *node = layers(t)->node;
  return node->ops->alloc(node, bytes);
}

static int layered_release(cohort__transport *t, void *ptr) {
  cohort__transport *node = layers(t)->node;
  return node->ops->release(node, ptr);
}

static int layered_in_arena(cohort__transport *t, const void *ptr, size_t bytes) {
  cohort__transport *node = layers(t)->node;
  return node->ops->in_arena(node, ptr, bytes);
}

static int layered_arena_range(cohort__transport *t, void **base, size_t *bytes) {
  cohort__transport *node = layers(t)->node;
  return node->ops->arena_range(node, base, bytes);
}

static void layered_destroy(cohort__transport *t) {
  if (!t) return;
  cohort__layers *l = layers(t);
  if (l->across) l->across->ops->destroy(l->across);
  l->node->ops->destroy(l->node);
  l->wide->ops->destroy(l->wide);
  free(t);
}

static const cohort__layers *layered_layers(const cohort__transport *t) { return &((const layered *)t)->layers; }

static const cohort__transport_ops layered_ops = {
    .name = "tcp+shm",
    .set_call = layered_set_call,
    .isend = layered_isend,
    .irecv = layered_irecv,
    .wait = layered_wait,
    .abort = layered_abort,
    .interrupt = layered_interrupt,
    .destroy = layered_destroy,
    .alloc = layered_alloc,
    .release = layered_release,
    .in_arena = layered_in_arena,
    .arena_range = layered_arena_range,
    .layers = layered_layers,
    .progress = layered_progress,
};

cohort_status cohort__layered_create(cohort__transport *wide, cohort__transport *node, int per_node,
                                     cohort__transport **out) {
  *out = NULL;
  int nodes = per_node > 0 ? wide->size / per_node : 0;
  layered *t = calloc(1, sizeof *t);
  int *members = malloc((size_t)(nodes > 0 ? nodes : 1) * sizeof *members);
  cohort_status st = COHORT_OK;
  if (!t || !members)
    st = cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  else if (nodes < 1 || nodes * per_node != wide->size || node->size != per_node || node->rank != wide->rank % per_node)
    st = cohort__error(COHORT_ERR_INTERNAL,
                       "layered transport: rank %d of %d with %d per node, node transport rank %d of %d", wide->rank,
                       wide->size, per_node, node->rank, node->size);
  if (st == COHORT_OK) {
    for (int j = 0; j < nodes; j++)
      members[j] = j * per_node + wide->rank % per_node;
    t->base = (cohort__transport){.ops = &layered_ops, .rank = wide->rank, .size = wide->size};
    t->layers = (cohort__layers){.wide = wide, .node = node, .nodes = nodes, .per_node = per_node};
    st = cohort__view_create(wide, nodes, members, &t->layers.across);
  }
  free(members);
  if (st != COHORT_OK) {
    free(t);
    node->ops->destroy(node);
    wide->ops->destroy(wide);
    return st;
  }
  cohort__shm_set_world_offset(node, wide->rank - node->rank);
  cohort__tcp_set_idle_check(wide, check_node_calls, node);
  cohort__shm_set_idle_check(node, poll_wide, wide);
  *out = &t->base;
  return COHORT_OK;
}
