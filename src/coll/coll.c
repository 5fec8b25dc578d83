/* coll.c: argument checks, algorithm choice and dispatch of one collective. */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/error.h"
#include "core/log.h"

cohort_status cohort__coll_ctx_init(cohort__coll_ctx *ctx, cohort__transport *t, const cohort__config *cfg) {
  memset(ctx, 0, sizeof *ctx);
  ctx->t = t;
  ctx->rank = t->rank;
  ctx->size = t->size;
  /* The algorithms that COHORT_ALGO may force on allreduce. */
  static const cohort__algo forcible[] = {COHORT__ALGO_AUTO, COHORT__ALGO_RING, COHORT__ALGO_RD, COHORT__ALGO_HIER};
  const char *algo = cfg->algo;
  size_t i = 0, n = sizeof forcible / sizeof forcible[0];
  while (i < n && strcmp(algo, cohort__algo_name(forcible[i])) != 0)
    i++;
  if (i == n) return cohort__error(COHORT_ERR_INVALID, "COHORT_ALGO='%s' is not one of auto, ring, rd, hier", algo);
  ctx->forced_algo = forcible[i];
  ctx->call_check = strcmp(cfg->call_check, "off") != 0;
  ctx->small_bytes = (size_t)cfg->small_bytes;
  ctx->segment_bytes = (size_t)cfg->segment_bytes;
  ctx->layers = cohort__layers_of(t);
  if (ctx->forced_algo == COHORT__ALGO_HIER && !ctx->layers)
    return cohort__error(COHORT_ERR_INVALID,
                         "COHORT_ALGO=hier: this %d-rank communicator (transport %s) is not layered; hier needs "
                         "COHORT_TRANSPORT=auto and several nodes with the same number (> 1) of ranks each, numbered "
                         "node by node",
                         t->size, t->ops->name);
  if (ctx->layers) { /* the flat algorithms across nodes: auto by size, whatever COHORT_ALGO says for the job */
    if (!(ctx->across = calloc(1, sizeof *ctx->across))) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    cohort__transport *across = ctx->layers->across;
    *ctx->across = (cohort__coll_ctx){.t = across,
                                      .rank = across->rank,
                                      .size = across->size,
                                      .small_bytes = ctx->small_bytes,
                                      .segment_bytes = ctx->segment_bytes};
    COHORT_LOG_DEBUG("allreduce: hierarchical over %d nodes x %d ranks (COHORT_ALGO=%s)", ctx->layers->nodes,
                     ctx->layers->per_node, algo);
  }
  return COHORT_OK;
}

void cohort__coll_ctx_free(cohort__coll_ctx *ctx) {
  for (int i = 0; i < 2; i++)
    free(ctx->scratch[i]);
  memset(ctx->scratch, 0, sizeof ctx->scratch);
  if (ctx->across) cohort__coll_ctx_free(ctx->across);
  free(ctx->across);
  ctx->across = NULL;
}

void *cohort__coll_scratch(cohort__coll_ctx *ctx, int slot, size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (ctx->scratch_len[slot] < bytes) {
    free(ctx->scratch[slot]);
    ctx->scratch[slot] = malloc(bytes);
    ctx->scratch_len[slot] = ctx->scratch[slot] ? bytes : 0;
  }
  return ctx->scratch[slot];
}

cohort_status cohort__coll_check(const cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  const char *fn = cohort__coll_api_name(a->coll);
  unsigned f = cohort__coll_flags(a->coll);
  if (!fn) return cohort__error(COHORT_ERR_INVALID, "unknown collective %d", (int)a->coll);
  if (f & COHORT__CALL_NO_DATA) return COHORT_OK;
  if ((unsigned)a->dtype >= COHORT_DTYPE_COUNT)
    return cohort__error(COHORT_ERR_INVALID, "%s: unknown dtype %d", fn, (int)a->dtype);
  if ((f & COHORT__CALL_OP) && (unsigned)a->op >= COHORT_OP_COUNT)
    return cohort__error(COHORT_ERR_INVALID, "%s: unknown op %d", fn, (int)a->op);
  if ((f & COHORT__CALL_ROOT) && (a->root < 0 || a->root >= ctx->size))
    return cohort__error(COHORT_ERR_INVALID, "%s: root %d is not a rank of this %d-rank communicator", fn, a->root,
                         ctx->size);
  size_t es = cohort_dtype_size(a->dtype);
  size_t total = a->count;
  if (f & (COHORT__CALL_SEND_PER_RANK | COHORT__CALL_RECV_PER_RANK)) total *= (size_t)ctx->size;
  if (a->count > ((size_t)1 << 62) / es / (size_t)ctx->size)
    return cohort__error(COHORT_ERR_INVALID, "%s: count %zu is too large", fn, a->count);
  if (a->count > 0) {
    if (!a->recvbuf)
      return cohort__error(COHORT_ERR_INVALID, "%s: %s is NULL", fn, f & COHORT__CALL_ONE_BUFFER ? "buf" : "recvbuf");
    if (!a->sendbuf && !(f & COHORT__CALL_ONE_BUFFER))
      return cohort__error(COHORT_ERR_INVALID, "%s: sendbuf is NULL", fn);
  }
  /* Each rank's block of the send buffer is read while the result is written. */
  if ((f & COHORT__CALL_SEND_PER_RANK) && a->count && ctx->size > 1) {
    const char *s = a->sendbuf, *r = a->recvbuf;
    if (r < s + total * es && s < r + a->count * es)
      return cohort__error(COHORT_ERR_INVALID, "%s: recvbuf overlaps sendbuf (use separate buffers)", fn);
  }
  return COHORT_OK;
}

static cohort__algo choose(const cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  size_t bytes = a->count * cohort_dtype_size(a->dtype);
  switch (a->coll) {
  case COHORT__COLL_ALLREDUCE:
    if (ctx->forced_algo != COHORT__ALGO_AUTO) return ctx->forced_algo;
    return bytes <= ctx->small_bytes ? COHORT__ALGO_RD : COHORT__ALGO_RING;
  case COHORT__COLL_BROADCAST:
    return bytes <= ctx->small_bytes ? COHORT__ALGO_TREE : COHORT__ALGO_CHAIN;
  case COHORT__COLL_BARRIER:
    return COHORT__ALGO_DISSEMINATION;
  default:
    return COHORT__ALGO_RING;
  }
}

/* A 1-rank communicator: the result is the input (AVG of one value is the value). */
static void run_alone(const cohort__coll_args *a) {
  size_t bytes = a->count * cohort_dtype_size(a->dtype);
  unsigned f = cohort__coll_flags(a->coll);
  if (!(f & (COHORT__CALL_ONE_BUFFER | COHORT__CALL_NO_DATA)) && bytes && a->recvbuf != a->sendbuf)
    memmove(a->recvbuf, a->sendbuf, bytes);
}

cohort_status cohort__coll_run(cohort__coll_ctx *ctx, const cohort__coll_args *a, uint32_t seq) {
  if (ctx->size == 1) {
    run_alone(a);
    return COHORT_OK;
  }
  /* A transport that shares memory between all ranks reduces in place (shm_coll.c); COHORT_ALGO=ring or rd forces
   * the frame-based algorithms over it, for comparison. */
  int node = a->coll == COHORT__COLL_ALLREDUCE && ctx->forced_algo == COHORT__ALGO_AUTO && ctx->t->ops->node_allreduce;
  /* Several nodes with several ranks each: shm within the node, the flat algorithms across (hier.c), unless
   * COHORT_ALGO forces a flat one over the whole mesh. */
  int hier = a->coll == COHORT__COLL_ALLREDUCE && ctx->across &&
             (ctx->forced_algo == COHORT__ALGO_AUTO || ctx->forced_algo == COHORT__ALGO_HIER);
  cohort__algo algo = node ? COHORT__ALGO_AUTO : hier ? COHORT__ALGO_HIER : choose(ctx, a);
  cohort__call call = cohort__call_make(seq, a->coll, a->dtype, a->op, algo, a->root, a->count);
  cohort__signature sig = {.call = call}; /* counts_hash: the v-forms' per-rank counts, when there are any */
  COHORT_CHECK(cohort__coll_agree(ctx, &sig));
  ctx->t->ops->set_call(ctx->t, &call);
  switch (a->coll) {
  case COHORT__COLL_ALLREDUCE:
    if (node) return ctx->t->ops->node_allreduce(ctx->t, a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, NULL, NULL);
    if (hier) return cohort__hier_allreduce(ctx, a);
    return algo == COHORT__ALGO_RD ? cohort__rd_allreduce(ctx, a) : cohort__ring_allreduce(ctx, a);
  case COHORT__COLL_BROADCAST:
    return algo == COHORT__ALGO_TREE ? cohort__tree_broadcast(ctx, a) : cohort__chain_broadcast(ctx, a);
  case COHORT__COLL_ALLGATHER:
    return cohort__ring_allgather(ctx, a);
  case COHORT__COLL_REDUCE_SCATTER:
    return cohort__ring_reduce_scatter(ctx, a);
  case COHORT__COLL_BARRIER:
    return cohort__dissemination_barrier(ctx);
  default:
    return cohort__error(COHORT_ERR_INTERNAL, "unknown collective %d", (int)a->coll);
  }
}
