/*
 * barrier.c: the dissemination barrier. In round k every rank signals rank + 2^k and waits for rank - 2^k; after
 * ceil(log2 n) rounds every rank has heard, directly or through others, from every rank. The frames carry no
 * payload, only the header that says which call they belong to.
 */
#include "coll/coll.h"
#include "core/error.h"

cohort_status cohort__dissemination_barrier(cohort__coll_ctx *ctx) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, r = ctx->rank;
  for (int dist = 1; dist < n; dist <<= 1) {
    cohort__req s, q;
    COHORT_CHECK(t->ops->irecv(t, (r - dist + n) % n, NULL, 0, &q));
    COHORT_CHECK(t->ops->isend(t, (r + dist) % n, NULL, 0, &s));
    COHORT_CHECK(t->ops->wait(t, &q));
    COHORT_CHECK(t->ops->wait(t, &s));
  }
  return COHORT_OK;
}
