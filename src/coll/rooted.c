/*
 * rooted.c: the collectives with a root: reduce, gather(v) and scatter(v).
 *
 *   reduce   small (up to COHORT_SMALL_BYTES, as allreduce): a binomial tree toward the root, log2 n rounds, each
 *            rank combining what its children send into its own partial result. Large: the ring's reduce-scatter
 *            (ring.c, every rank sends and receives (n-1)/n of the vector, pipelined), then every rank sends the
 *            chunk it completed to the root, which receives them all at once: the root's link carries each byte of
 *            the result once, as it must.
 *   gather, scatter (and the v-forms): linear, the root posts one receive (send) per rank at once and the transport
 *            moves them concurrently. The root's link must carry (n-1)/n of the data whatever the algorithm, so a tree
 *            would only save message start-ups, which overlap here; at the worlds where this runs (a node, or a few:
 *            up to 8 ranks is the common case, and 64 still only means 63 posted requests) the root's link, not the
 *            start-ups, bounds the time. A binomial tree would also copy every block through the inner ranks.
 *
 * Every rooted call agrees on the call before data moves: by default agree.c has compared every rank's call before
 * (COHORT_CALL_CHECK), and a mismatch is refused on every rank; with the check off, by its own exchange (fatal): each
 * rank sends an empty frame to rank + 1 and receives one from rank - 1, whose header its transport compares with its
 * own call; then a dissemination barrier, whose frames a rank sends only once it has compared. Without the first, two
 * ranks that each think they are the root would both wait to receive (a hang), and ranks that each think another is
 * would both send and return; since the frames go round the ring, all ranks agree when every rank agrees with its
 * neighbour. Without the barrier, a rank that agrees with its neighbours could finish before another rank finds the
 * disagreement, and return success while the others fail: after it, every rank has heard (through others) from every
 * rank after that rank compared, so a rank that found a mismatch (and aborted, telling everyone) fails every rank's
 * call. It costs 1 + ceil(log2 n) empty messages of latency before the data moves: the price of a mismatch never being
 * a hang nor a half success.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/error.h"
#include "core/reduce.h"

void cohort__coll_block(const cohort__coll_args *a, int send, int p, size_t *off, size_t *len) {
  const size_t *counts = send ? a->send_counts : a->counts, *displs = send ? a->send_displs : a->displs;
  if (!counts) { /* fixed count per rank */
    *off = (size_t)p * a->count;
    *len = a->count;
    return;
  }
  *len = counts[p];
  if (displs) {
    *off = displs[p];
    return;
  }
  size_t o = 0;
  for (int i = 0; i < p; i++)
    o += counts[i];
  *off = o;
}

cohort_status cohort__rooted_agree(cohort__coll_ctx *ctx) {
  if (ctx->call_check) return COHORT_OK; /* agree.c compared every rank's call already, before this one started */
  cohort__transport *t = ctx->t;
  int n = ctx->size, r = ctx->rank;
  cohort__req s, q;
  COHORT_CHECK(t->ops->irecv(t, (r - 1 + n) % n, NULL, 0, &q));
  COHORT_CHECK(t->ops->isend(t, (r + 1) % n, NULL, 0, &s));
  COHORT_CHECK(t->ops->wait(t, NULL));
  return cohort__dissemination_barrier(ctx);
}

cohort_status cohort__tree_reduce(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, vr = (ctx->rank - a->root + n) % n;
  size_t es = cohort_dtype_size(a->dtype), bytes = a->count * es;
  COHORT_CHECK(cohort__rooted_agree(ctx));
  /* The partial result: recvbuf at the root, scratch elsewhere; received partials land in the other slot. A root
   * with nothing to receive (count 0) may pass recvbuf NULL: scratch stands in for it. */
  char *acc = vr == 0 && a->recvbuf ? a->recvbuf : cohort__coll_scratch(ctx, 1, bytes);
  char *tmp = cohort__coll_scratch(ctx, 0, bytes);
  if (!acc || !tmp) return cohort__error(COHORT_ERR_SYSTEM, "out of memory for reduce scratch");
  if (bytes && acc != (const char *)a->sendbuf) memcpy(acc, a->sendbuf, bytes);
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if (vr & mask) { /* our subtree is complete: hand it to the parent */
      cohort__req s;
      COHORT_CHECK(t->ops->isend(t, (vr - mask + a->root) % n, acc, bytes, &s));
      COHORT_CHECK(t->ops->wait(t, &s));
      break;
    }
    if (vr + mask < n) {
      cohort__req r;
      COHORT_CHECK(t->ops->irecv(t, (vr + mask + a->root) % n, tmp, bytes, &r));
      COHORT_CHECK(t->ops->wait(t, &r));
      cohort__reduce(acc, acc, tmp, a->count, a->dtype, a->op);
    }
  }
  if (vr == 0 && a->op == COHORT_AVG) cohort__reduce_avg(acc, a->count, a->dtype, n);
  return t->ops->wait(t, NULL);
}

cohort_status cohort__ring_reduce(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, r = ctx->rank, root = a->root;
  size_t es = cohort_dtype_size(a->dtype);
  COHORT_CHECK(cohort__rooted_agree(ctx));
  /* The ring reduces in place into out: the root's recvbuf, a full-size scratch vector elsewhere (slot 1: the ring
   * uses slot 0 for its receive window). */
  char *out = r == root && a->recvbuf ? a->recvbuf : cohort__coll_scratch(ctx, 1, a->count * es);
  if (!out) return cohort__error(COHORT_ERR_SYSTEM, "out of memory for reduce scratch");
  COHORT_CHECK(cohort__ring_reduce_chunks(ctx, a, out));
  size_t off, len;
  if (r != root) {
    cohort__ring_chunk(a->count, n, cohort__ring_reduced_chunk(r, n), &off, &len);
    cohort__req s;
    COHORT_CHECK(t->ops->isend(t, root, out + off * es, len * es, &s));
    return t->ops->wait(t, NULL);
  }
  /* The root's own chunk is in place; every other rank's lands at its offset. */
  cohort__req *reqs = calloc((size_t)n, sizeof *reqs);
  if (!reqs) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort_status st = COHORT_OK;
  for (int p = 0; p < n && st == COHORT_OK; p++) {
    if (p == root) continue;
    cohort__ring_chunk(a->count, n, cohort__ring_reduced_chunk(p, n), &off, &len);
    st = t->ops->irecv(t, p, out + off * es, len * es, &reqs[p]);
  }
  if (st == COHORT_OK) st = t->ops->wait(t, NULL);
  free(reqs);
  return st;
}

/* gather and gatherv. */
cohort_status cohort__linear_gather(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, r = ctx->rank, root = a->root;
  size_t es = cohort_dtype_size(a->dtype), off, len;
  COHORT_CHECK(cohort__rooted_agree(ctx));
  if (r != root) {
    cohort__coll_block(a, 0, r, &off, &len);
    cohort__req s;
    COHORT_CHECK(t->ops->isend(t, root, a->sendbuf, len * es, &s));
    return t->ops->wait(t, NULL);
  }
  cohort__req *reqs = calloc((size_t)n, sizeof *reqs);
  if (!reqs) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort_status st = COHORT_OK;
  for (int p = 0; p < n && st == COHORT_OK; p++) {
    cohort__coll_block(a, 0, p, &off, &len);
    char *dst = (char *)a->recvbuf + off * es;
    if (p == root) {
      if (len && dst != (const char *)a->sendbuf) memmove(dst, a->sendbuf, len * es);
      continue;
    }
    st = t->ops->irecv(t, p, dst, len * es, &reqs[p]);
  }
  if (st == COHORT_OK) st = t->ops->wait(t, NULL);
  free(reqs);
  return st;
}

/* scatter and scatterv. */
cohort_status cohort__linear_scatter(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, r = ctx->rank, root = a->root;
  size_t es = cohort_dtype_size(a->dtype), off, len;
  COHORT_CHECK(cohort__rooted_agree(ctx));
  if (r != root) {
    cohort__coll_block(a, 0, r, &off, &len);
    cohort__req q;
    COHORT_CHECK(t->ops->irecv(t, root, a->recvbuf, len * es, &q));
    return t->ops->wait(t, NULL);
  }
  cohort__req *reqs = calloc((size_t)n, sizeof *reqs);
  if (!reqs) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort_status st = COHORT_OK;
  for (int p = 0; p < n && st == COHORT_OK; p++) {
    cohort__coll_block(a, 0, p, &off, &len);
    const char *src = (const char *)a->sendbuf + off * es;
    if (p == root) {
      if (len && src != (const char *)a->recvbuf) memmove(a->recvbuf, src, len * es);
      continue;
    }
    st = t->ops->isend(t, p, src, len * es, &reqs[p]);
  }
  if (st == COHORT_OK) st = t->ops->wait(t, NULL);
  free(reqs);
  return st;
}
