/*
 * alltoall.c: the personalized exchanges, and allgather with a block size per rank.
 *
 *   alltoall, alltoallv  pairwise exchange: in step k (1 <= k < n) every rank sends its block for rank + k and
 *                        receives rank - k's block for it, so that every rank sends and receives one block per step
 *                        and no rank is sent to by many at once (an incast, with linear posting, at large worlds).
 *                        WINDOW steps are in flight at a time, so that the links stay busy between steps. The own
 *                        block is copied.
 *   allgatherv           the ring: in step t rank r sends block r - t to rank r + 1 and receives block r - t - 1
 *                        from rank r - 1, straight into its place in recvbuf, and forwards it in the next step.
 *
 * alltoallv's counts were compared before it started (agree.c: cohort__coll_agree_peer_counts), unless
 * COHORT_CALL_CHECK=off; then it ends with a barrier (below). Both send and receive a frame with a neighbour in their
 * first step even when every block is empty, so that a rank that calls something else is found by that frame's header.
 * Results are copies: bitwise what the senders sent.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/error.h"

#define WINDOW 4

cohort_status cohort__pairwise_alltoall(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, r = ctx->rank;
  size_t es = cohort_dtype_size(a->dtype), soff, slen, roff, rlen;
  cohort__coll_block(a, 1, r, &soff, &slen);
  cohort__coll_block(a, 0, r, &roff, &rlen); /* coll.c made sure that slen == rlen */
  if (rlen && (const char *)a->sendbuf + soff * es != (char *)a->recvbuf + roff * es)
    memmove((char *)a->recvbuf + roff * es, (const char *)a->sendbuf + soff * es, rlen * es);
  cohort__req *sends = calloc((size_t)n, sizeof *sends), recvs[WINDOW];
  if (!sends) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort_status st = COHORT_OK;
  int posted = 1; /* steps posted: 1 .. posted-1 */
  for (int k = 1; k < n && st == COHORT_OK; k++) {
    for (; posted < n && posted < k + WINDOW && st == COHORT_OK; posted++) {
      int to = (r + posted) % n, from = (r - posted + n) % n;
      cohort__coll_block(a, 0, from, &roff, &rlen);
      st = t->ops->irecv(t, from, (char *)a->recvbuf + roff * es, rlen * es, &recvs[posted % WINDOW]);
      cohort__coll_block(a, 1, to, &soff, &slen);
      if (st == COHORT_OK) st = t->ops->isend(t, to, (const char *)a->sendbuf + soff * es, slen * es, &sends[posted]);
    }
    if (st == COHORT_OK) st = t->ops->wait(t, &recvs[k % WINDOW]);
  }
  if (st == COHORT_OK) st = t->ops->wait(t, NULL);
  free(sends);
  /* alltoallv without the comparison before it (COHORT_CALL_CHECK=off): a send count that differs from its
   * receiver's receive count is found by the receiver alone (frame.c compares the frame's size with the receive
   * posted for it), so every rank waits at a barrier, whose frames a rank sends only once it has received (and
   * compared) everything: the rank that found it fails every rank's call. */
  if (st == COHORT_OK && a->coll == COHORT__COLL_ALLTOALLV && !ctx->call_check) st = cohort__dissemination_barrier(ctx);
  return st;
}

cohort_status cohort__ring_allgatherv(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, r = ctx->rank, right = (r + 1) % n, left = (r - 1 + n) % n;
  size_t es = cohort_dtype_size(a->dtype), off, len;
  char *out = a->recvbuf;
  cohort__coll_block(a, 0, r, &off, &len);
  if (len && out + off * es != (const char *)a->sendbuf) memmove(out + off * es, a->sendbuf, len * es);
  cohort__req *sends = calloc((size_t)n, sizeof *sends), recvs[2];
  if (!sends) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort_status st = COHORT_OK;
#define BLOCK(b) (cohort__coll_block(a, 0, ((b) % n + n) % n, &off, &len), out + off * es)
  char *p = BLOCK(r - 1);
  st = t->ops->irecv(t, left, p, len * es, &recvs[0]);
  p = BLOCK(r);
  if (st == COHORT_OK) st = t->ops->isend(t, right, p, len * es, &sends[0]);
  for (int s = 0; s < n - 1 && st == COHORT_OK; s++) {
    st = t->ops->wait(t, &recvs[s % 2]);
    if (st != COHORT_OK || s + 1 == n - 1) break;
    p = BLOCK(r - s - 2);
    st = t->ops->irecv(t, left, p, len * es, &recvs[(s + 1) % 2]);
    p = BLOCK(r - s - 1); /* what we just received goes on */
    if (st == COHORT_OK) st = t->ops->isend(t, right, p, len * es, &sends[s + 1]);
  }
#undef BLOCK
  if (st == COHORT_OK) st = t->ops->wait(t, NULL);
  free(sends);
  return st;
}
