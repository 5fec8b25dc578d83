/*
 * rd.c: recursive doubling allreduce, for small messages where latency (log2 n rounds instead of 2(n-1) steps)
 * matters more than bandwidth. Every round exchanges the whole vector with a partner and combines
 * result = result op theirs; both partners combine the same two values with a commutative op, so every rank ends
 * with bitwise the same result.
 *
 * A world size that is not a power of two: with p the largest power of two <= n and rem = n - p, the first 2*rem
 * ranks pair up; each even one hands its vector to its odd neighbour and sits out the doubling, then receives the
 * final result back.
 */
#include <string.h>

#include "coll/coll.h"
#include "core/error.h"
#include "core/reduce.h"

static cohort_status exchange(cohort__transport *t, int peer, void *buf, void *tmp, size_t bytes) {
  cohort__req s, r;
  COHORT_CHECK(t->ops->irecv(t, peer, tmp, bytes, &r));
  COHORT_CHECK(t->ops->isend(t, peer, buf, bytes, &s));
  COHORT_CHECK(t->ops->wait(t, &r));
  return t->ops->wait(t, &s); /* buf is rewritten next: the send must be done with it */
}

static cohort_status send_to(cohort__transport *t, int peer, const void *buf, size_t bytes) {
  cohort__req s;
  COHORT_CHECK(t->ops->isend(t, peer, buf, bytes, &s));
  return t->ops->wait(t, &s);
}

static cohort_status recv_from(cohort__transport *t, int peer, void *buf, size_t bytes) {
  cohort__req r;
  COHORT_CHECK(t->ops->irecv(t, peer, buf, bytes, &r));
  return t->ops->wait(t, &r);
}

cohort_status cohort__rd_allreduce(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, r = ctx->rank;
  size_t bytes = a->count * cohort_dtype_size(a->dtype);
  if (a->recvbuf != a->sendbuf && bytes) memcpy(a->recvbuf, a->sendbuf, bytes);
  void *tmp = cohort__coll_scratch(ctx, 0, bytes);
  if (!tmp && bytes) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");

  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  int rem = n - p, vrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      COHORT_CHECK(send_to(t, r + 1, a->recvbuf, bytes));
      vrank = -1;
    } else {
      COHORT_CHECK(recv_from(t, r - 1, tmp, bytes));
      cohort__reduce(a->recvbuf, a->recvbuf, tmp, a->count, a->dtype, a->op);
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      int vpeer = vrank ^ mask;
      int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
      COHORT_CHECK(exchange(t, peer, a->recvbuf, tmp, bytes));
      cohort__reduce(a->recvbuf, a->recvbuf, tmp, a->count, a->dtype, a->op);
    }
    if (a->op == COHORT_AVG) cohort__reduce_avg(a->recvbuf, a->count, a->dtype, n);
  }
  if (r < 2 * rem) {
    if (r % 2 == 0)
      COHORT_CHECK(recv_from(t, r + 1, a->recvbuf, bytes));
    else
      COHORT_CHECK(send_to(t, r - 1, a->recvbuf, bytes));
  }
  return COHORT_OK;
}
