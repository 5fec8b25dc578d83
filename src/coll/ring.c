/*
 * ring.c: the pipelined ring. The data is cut into n chunks (one per rank) and every chunk into segments. Each step
 * of the ring sends one chunk to the right neighbour and receives one from the left; segments let a rank forward
 * segment j of step t+1 as soon as it has received (and reduced) segment j of step t, so that sending, receiving
 * and reducing overlap and the link never waits for a whole chunk.
 *
 *   allreduce:      n-1 reduce-scatter steps, then n-1 allgather steps; every rank sends and receives
 *                   2(n-1)/n of the data, which is optimal.
 *   reduce_scatter: the first half only, indexed so that rank r ends with block r.
 *   allgather:      the second half only, starting from each rank's own block.
 *   reduce chunks:  allreduce's first half only (cohort_reduce's large path: the root then gathers the chunks).
 *
 * Receives are posted a window ahead; reduce-scatter segments land in scratch slots and are reduced from there
 * (one pass: dst = received op local), allgather segments land directly in the output.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/error.h"
#include "core/reduce.h"

#define WINDOW 4

/* RING_REDUCE: allreduce's reduce-scatter half alone (for cohort_reduce: rooted.c gathers the chunks). */
typedef enum { RING_ALLREDUCE, RING_REDUCE_SCATTER, RING_ALLGATHER, RING_REDUCE } ring_kind;

typedef struct ring {
  cohort__coll_ctx *ctx;
  const cohort__coll_args *a;
  ring_kind kind;
  int n, r;
  int rs_steps, steps;
  size_t es;          /* element size */
  size_t seg;         /* elements per segment */
  int nseg;           /* segments per chunk */
  size_t chunk_count; /* elements of the largest chunk */
  const char *src;    /* this rank's contribution */
  char *out;          /* recvbuf */
  char *partials;     /* reduce_scatter: chunks other than ours */
  char *tmp;          /* WINDOW receive slots for reduce-scatter segments */
} ring;

static int mod(int x, int n) { return ((x % n) + n) % n; }

/* Chunk c covers [chunk_off(c), chunk_off(c) + chunk_len(c)) in elements. allreduce splits count as evenly as
 * possible; reduce_scatter and allgather have exactly count per rank. */
static int even_chunks(const ring *g) { return g->kind == RING_ALLREDUCE || g->kind == RING_REDUCE; }

static size_t chunk_off(const ring *g, int c) {
  if (!even_chunks(g)) return (size_t)c * g->a->count;
  size_t q = g->a->count / (size_t)g->n, rem = g->a->count % (size_t)g->n;
  return (size_t)c * q + ((size_t)c < rem ? (size_t)c : rem);
}

static size_t chunk_len(const ring *g, int c) {
  if (!even_chunks(g)) return g->a->count;
  size_t q = g->a->count / (size_t)g->n, rem = g->a->count % (size_t)g->n;
  return q + ((size_t)c < rem ? 1 : 0);
}

static int send_chunk(const ring *g, int t) {
  switch (g->kind) {
  case RING_ALLREDUCE:
  case RING_REDUCE:
    return t < g->rs_steps ? mod(g->r - t, g->n) : mod(g->r + 1 - (t - g->rs_steps), g->n);
  case RING_REDUCE_SCATTER:
    return mod(g->r - t - 1, g->n);
  default:
    return mod(g->r - t, g->n);
  }
}

static int recv_chunk(const ring *g, int t) {
  switch (g->kind) {
  case RING_ALLREDUCE:
  case RING_REDUCE:
    return t < g->rs_steps ? mod(g->r - t - 1, g->n) : mod(g->r - (t - g->rs_steps), g->n);
  case RING_REDUCE_SCATTER:
    return mod(g->r - t - 2, g->n);
  default:
    return mod(g->r - t - 1, g->n);
  }
}

/* Where chunk c's running result lives. */
static char *chunk_ptr(const ring *g, int c) {
  if (g->kind == RING_REDUCE_SCATTER) return c == g->r ? g->out : g->partials + chunk_off(g, c) * g->es;
  return g->out + chunk_off(g, c) * g->es;
}

static void segment(const ring *g, int c, int j, size_t *off, size_t *len) {
  size_t start = (size_t)j * g->seg, clen = chunk_len(g, c);
  *off = start;
  *len = start >= clen ? 0 : (clen - start < g->seg ? clen - start : g->seg);
}

static cohort_status post_send(ring *g, int t, int j, cohort__req *req) {
  int c = send_chunk(g, t);
  size_t off, len;
  segment(g, c, j, &off, &len);
  /* The first reduce-scatter step sends the rank's own data; every later step forwards what it just received. */
  const char *base = (t == 0 && g->kind != RING_ALLGATHER) ? g->src + chunk_off(g, c) * g->es : chunk_ptr(g, c);
  cohort__transport *tr = g->ctx->t;
  return tr->ops->isend(tr, mod(g->r + 1, g->n), base + off * g->es, len * g->es, req);
}

static cohort_status post_recv(ring *g, int u, cohort__req *req) {
  int t = u / g->nseg, j = u % g->nseg, c = recv_chunk(g, t);
  size_t off, len;
  segment(g, c, j, &off, &len);
  char *dst = t < g->rs_steps ? g->tmp + (size_t)(u % WINDOW) * g->seg * g->es : chunk_ptr(g, c) + off * g->es;
  cohort__transport *tr = g->ctx->t;
  return tr->ops->irecv(tr, mod(g->r - 1, g->n), dst, len * g->es, req);
}

static void reduce_unit(ring *g, int u) {
  int t = u / g->nseg, j = u % g->nseg, c = recv_chunk(g, t);
  size_t off, len;
  segment(g, c, j, &off, &len);
  char *dst = chunk_ptr(g, c) + off * g->es;
  const char *mine = g->src + (chunk_off(g, c) + off) * g->es;
  const char *got = g->tmp + (size_t)(u % WINDOW) * g->seg * g->es;
  cohort__reduce(dst, got, mine, len, g->a->dtype, g->a->op);
  if (t == g->rs_steps - 1 && g->a->op == COHORT_AVG) cohort__reduce_avg(dst, len, g->a->dtype, g->n);
}

static cohort_status ring_run(cohort__coll_ctx *ctx, const cohort__coll_args *a, ring_kind kind, char *out) {
  ring g = {.ctx = ctx, .a = a, .kind = kind, .n = ctx->size, .r = ctx->rank, .es = cohort_dtype_size(a->dtype)};
  g.rs_steps = kind == RING_ALLGATHER ? 0 : g.n - 1;
  g.steps = g.rs_steps + (kind == RING_REDUCE_SCATTER || kind == RING_REDUCE ? 0 : g.n - 1);
  g.seg = ctx->segment_bytes / g.es;
  if (g.seg == 0) g.seg = 1;
  g.chunk_count = chunk_len(&g, 0);
  g.nseg = g.chunk_count == 0 ? 1 : (int)((g.chunk_count + g.seg - 1) / g.seg);
  g.src = a->sendbuf;
  g.out = out;
  if (g.rs_steps > 0) {
    g.tmp = cohort__coll_scratch(ctx, 0, WINDOW * g.seg * g.es);
    if (!g.tmp) return cohort__error(COHORT_ERR_SYSTEM, "out of memory for ring scratch");
  }
  if (kind == RING_REDUCE_SCATTER) {
    g.partials = cohort__coll_scratch(ctx, 1, (size_t)g.n * a->count * g.es);
    if (!g.partials && a->count) return cohort__error(COHORT_ERR_SYSTEM, "out of memory for reduce-scatter scratch");
  }
  if (kind == RING_ALLGATHER) { /* start from our own block in place */
    char *mine = g.out + (size_t)g.r * a->count * g.es;
    if (a->count && mine != (const char *)a->sendbuf) memmove(mine, a->sendbuf, a->count * g.es);
  }

  int units = g.steps * g.nseg;
  cohort__req *sends = calloc((size_t)units, sizeof *sends);
  cohort__req recvs[WINDOW];
  if (!sends) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort__transport *tr = ctx->t;
  cohort_status st = COHORT_OK;
  for (int j = 0; j < g.nseg && st == COHORT_OK; j++)
    st = post_send(&g, 0, j, &sends[j]);
  int posted = 0;
  for (; posted < units && posted < WINDOW && st == COHORT_OK; posted++)
    st = post_recv(&g, posted, &recvs[posted]);
  for (int u = 0; u < units && st == COHORT_OK; u++) {
    int t = u / g.nseg, j = u % g.nseg;
    st = tr->ops->wait(tr, &recvs[u % WINDOW]);
    if (st != COHORT_OK) break;
    if (t < g.rs_steps) reduce_unit(&g, u);
    if (t + 1 < g.steps) st = post_send(&g, t + 1, j, &sends[(t + 1) * g.nseg + j]);
    if (st == COHORT_OK && posted < units) {
      st = post_recv(&g, posted, &recvs[posted % WINDOW]);
      posted++;
    }
  }
  if (st == COHORT_OK) st = tr->ops->wait(tr, NULL); /* the last sends */
  free(sends);
  return st;
}

cohort_status cohort__ring_allreduce(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  return ring_run(ctx, a, RING_ALLREDUCE, a->recvbuf);
}

cohort_status cohort__ring_reduce_scatter(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  return ring_run(ctx, a, RING_REDUCE_SCATTER, a->recvbuf);
}

cohort_status cohort__ring_allgather(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  return ring_run(ctx, a, RING_ALLGATHER, a->recvbuf);
}

cohort_status cohort__ring_reduce_chunks(cohort__coll_ctx *ctx, const cohort__coll_args *a, void *out) {
  return ring_run(ctx, a, RING_REDUCE, out);
}

/* The last reduce-scatter step of rank r receives chunk r - (n - 2) - 1 = r + 1 (mod n). */
int cohort__ring_reduced_chunk(int rank, int size) { return (rank + 1) % size; }

void cohort__ring_chunk(size_t count, int size, int c, size_t *off, size_t *len) {
  size_t q = count / (size_t)size, rem = count % (size_t)size;
  *off = (size_t)c * q + ((size_t)c < rem ? (size_t)c : rem);
  *len = q + ((size_t)c < rem ? 1 : 0);
}
