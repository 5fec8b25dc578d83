/* call.c: naming calls in error messages. */
#include <stdio.h>

#include "transport/transport.h"

static const char *coll_name(int coll) {
  const char *name = cohort__coll_name((uint32_t)coll);
  return name ? name : "unknown-collective";
}

static const char *algo_name(int algo) {
  static const char *const names[] = {"auto", "ring", "rd", "hd", "tree", "chain", "dissemination", "hier", "device"};
  return algo >= 0 && algo < (int)(sizeof names / sizeof names[0]) ? names[algo] : "unknown-algo";
}

void cohort__call_describe(const cohort__call *c, char *buf, size_t len) {
  switch (c->coll) {
  case COHORT__COLL_BARRIER:
    snprintf(buf, len, "barrier() [call #%u]", c->seq);
    break;
  case COHORT__COLL_BROADCAST:
    snprintf(buf, len, "broadcast(count=%llu, %s, root=%d, %s) [call #%u]", (unsigned long long)c->count,
             cohort_dtype_name((cohort_dtype)c->dtype), c->root, algo_name(c->algo), c->seq);
    break;
  case COHORT__COLL_ALLGATHER:
    snprintf(buf, len, "allgather(count=%llu, %s, %s) [call #%u]", (unsigned long long)c->count,
             cohort_dtype_name((cohort_dtype)c->dtype), algo_name(c->algo), c->seq);
    break;
  default:
    snprintf(buf, len, "%s(count=%llu, %s, %s, %s) [call #%u]", coll_name(c->coll), (unsigned long long)c->count,
             cohort_dtype_name((cohort_dtype)c->dtype), cohort_op_name((cohort_op)c->op), algo_name(c->algo), c->seq);
  }
}
