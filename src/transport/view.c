/*
 * view.c: a transport that is a subset of another one's ranks, renumbered 0..size-1 (view.h). The hierarchical
 * allreduce runs the ordinary ring and recursive-doubling code (src/coll/) over such a view of the TCP mesh: the
 * ranks that hold the same local index on every node. Frames go through the underlying transport unchanged, so
 * they carry the same call and are checked the same way; a failure of the view is a failure of the whole mesh.
 *
 * Thread-safety: as transport.h says; the view and its underlying transport are driven by the same thread.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "transport/view.h"

typedef struct view {
  cohort__transport base;
  cohort__transport *under;
  int *members; /* [size]: the underlying rank of each rank of the view */
} view;

static cohort__transport *under(cohort__transport *t) { return ((view *)t)->under; }

static void view_set_call(cohort__transport *t, const cohort__call *call) { under(t)->ops->set_call(under(t), call); }

static cohort_status view_isend(cohort__transport *t, int peer, const void *buf, size_t bytes, cohort__req *req) {
  view *v = (view *)t;
  return v->under->ops->isend(v->under, v->members[peer], buf, bytes, req);
}

static cohort_status view_irecv(cohort__transport *t, int peer, void *buf, size_t bytes, cohort__req *req) {
  view *v = (view *)t;
  return v->under->ops->irecv(v->under, v->members[peer], buf, bytes, req);
}

static cohort_status view_wait(cohort__transport *t, cohort__req *req) { return under(t)->ops->wait(under(t), req); }

static void view_abort(cohort__transport *t, cohort_status status, const char *message) {
  under(t)->ops->abort(under(t), status, message);
}

static void view_interrupt(cohort__transport *t, cohort_status status, const char *message) {
  under(t)->ops->interrupt(under(t), status, message);
}

static void view_destroy(cohort__transport *t) { /* the underlying transport has its own owner */
  view *v = (view *)t;
  if (!v) return;
  free(v->members);
  free(v);
}

static const cohort__transport_ops view_ops = {
    .name = "view",
    .set_call = view_set_call,
    .isend = view_isend,
    .irecv = view_irecv,
    .wait = view_wait,
    .abort = view_abort,
    .interrupt = view_interrupt,
    .destroy = view_destroy,
};

cohort_status cohort__view_create(cohort__transport *under, int size, const int *members, cohort__transport **out) {
  *out = NULL;
  int rank = -1;
  for (int i = 0; i < size; i++) {
    if (members[i] < 0 || members[i] >= under->size)
      return cohort__error(COHORT_ERR_INTERNAL, "view: member %d is rank %d, not one of the %d ranks", i, members[i],
                           under->size);
    if (members[i] == under->rank) rank = i;
  }
  if (rank < 0) return cohort__error(COHORT_ERR_INTERNAL, "view: rank %d is not one of its members", under->rank);
  view *v = calloc(1, sizeof *v);
  int *m = malloc((size_t)size * sizeof *m);
  if (!v || !m) {
    free(v);
    free(m);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  memcpy(m, members, (size_t)size * sizeof *m);
  v->base = (cohort__transport){.ops = &view_ops, .rank = rank, .size = size};
  v->under = under;
  v->members = m;
  *out = &v->base;
  return COHORT_OK;
}
