/* call.c: naming calls in error messages (call.h). */
#include <stdio.h>

#include "transport/call.h"

void cohort__call_describe(const cohort__call *c, char *buf, size_t len) {
  const char *name = cohort__coll_name(c->coll), *algo = cohort__algo_name(c->algo);
  unsigned f = cohort__coll_flags(c->coll);
  if (c->coll == COHORT__COLL_P2P) { /* every frame of the point-to-point transport carries the same call */
    snprintf(buf, len, "point-to-point messages");
    return;
  }
  if (c->coll == COHORT__COLL_INTERNAL) { /* the ranks comparing their calls (src/coll/agree.c) under its number */
    snprintf(buf, len, "the comparison of the ranks' calls [call #%u]", c->seq);
    return;
  }
  if (f & COHORT__CALL_NO_DATA) {
    snprintf(buf, len, "%s() [call #%u]", name, c->seq);
    return;
  }
  char op[32] = "", root[32] = "";
  if (f & COHORT__CALL_OP) snprintf(op, sizeof op, ", %s", cohort_op_name((cohort_op)c->op));
  if (f & (COHORT__CALL_ROOT | COHORT__CALL_PEER))
    snprintf(root, sizeof root, ", %s=%d", f & COHORT__CALL_ROOT ? "root" : "peer", (int)c->root);
  char count[64];
  if (f & COHORT__CALL_PEER_COUNTS)
    snprintf(count, sizeof count, "counts per peer");
  else if (f & COHORT__CALL_COUNTS) /* the total, and the hash of the counts array that says which one */
    snprintf(count, sizeof count, "count=%llu, counts#%014llx", (unsigned long long)c->count,
             (unsigned long long)c->sig);
  else
    snprintf(count, sizeof count, "count=%llu", (unsigned long long)c->count);
  snprintf(buf, len, "%s(%s, %s%s%s, %s) [call #%u]", name ? name : "unknown-collective", count,
           cohort_dtype_name((cohort_dtype)c->dtype), op, root, algo ? algo : "unknown-algo", c->seq);
}
