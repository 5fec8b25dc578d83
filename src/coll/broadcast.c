/*
 * broadcast.c: two broadcasts. A binomial tree (log2 n rounds) for small messages; a pipelined chain for large
 * ones, where the root streams segments to rank root+1, which forwards each segment as soon as it has it, and so
 * on: every link carries the data once, so the time approaches one transfer of the message however many ranks.
 */
#include <stdlib.h>

#include "coll/coll.h"
#include "core/error.h"

cohort_status cohort__tree_broadcast(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, vr = (ctx->rank - a->root + n) % n;
  size_t bytes = a->count * cohort_dtype_size(a->dtype);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      cohort__req r;
      COHORT_CHECK(t->ops->irecv(t, (vr - mask + a->root) % n, a->recvbuf, bytes, &r));
      COHORT_CHECK(t->ops->wait(t, &r));
      break;
    }
    mask <<= 1;
  }
  cohort__req sends[32];
  int nsend = 0;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n) COHORT_CHECK(t->ops->isend(t, (vr + mask + a->root) % n, a->recvbuf, bytes, &sends[nsend++]));
  return t->ops->wait(t, NULL);
}

cohort_status cohort__chain_broadcast(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, vr = (ctx->rank - a->root + n) % n;
  int prev = (ctx->rank - 1 + n) % n, next = (ctx->rank + 1) % n;
  size_t es = cohort_dtype_size(a->dtype), seg = ctx->segment_bytes / es;
  if (seg == 0) seg = 1;
  size_t nseg = a->count == 0 ? 1 : (a->count + seg - 1) / seg;
  char *buf = a->recvbuf;
  cohort__req *sends = calloc(nseg, sizeof *sends), recvs[2];
  if (!sends) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort_status st = COHORT_OK;
#define SEG_OFF(j) ((j)*seg)
#define SEG_LEN(j) (a->count - SEG_OFF(j) < seg ? a->count - SEG_OFF(j) : seg)
  /* Relays keep the next receive posted, so a segment lands in place the moment it arrives. */
  for (size_t j = 0; vr > 0 && j < 2 && j < nseg && st == COHORT_OK; j++)
    st = t->ops->irecv(t, prev, buf + SEG_OFF(j) * es, SEG_LEN(j) * es, &recvs[j]);
  for (size_t j = 0; j < nseg && st == COHORT_OK; j++) {
    if (vr > 0) {
      st = t->ops->wait(t, &recvs[j % 2]);
      if (st == COHORT_OK && j + 2 < nseg)
        st = t->ops->irecv(t, prev, buf + SEG_OFF(j + 2) * es, SEG_LEN(j + 2) * es, &recvs[j % 2]);
    }
    if (st == COHORT_OK && vr < n - 1) st = t->ops->isend(t, next, buf + SEG_OFF(j) * es, SEG_LEN(j) * es, &sends[j]);
  }
#undef SEG_OFF
#undef SEG_LEN
  if (st == COHORT_OK) st = t->ops->wait(t, NULL);
  free(sends);
  return st;
}
