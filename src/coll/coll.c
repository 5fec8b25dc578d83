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
  for (int i = 0; i < 3; i++)
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

static int is_float(cohort_dtype d) {
  return d == COHORT_F32 || d == COHORT_F64 || d == COHORT_F16 || d == COHORT_BF16;
}

/* The v-forms' arrays: every count and displacement bounded, their sum too. */
static cohort_status check_counts(const char *fn, const char *what, const size_t *counts, const size_t *displs, int n,
                                  size_t es, size_t *total) {
  const size_t limit = ((size_t)1 << 62) / es;
  if (!counts) return cohort__error(COHORT_ERR_INVALID, "%s: %s is NULL", fn, what);
  size_t sum = 0;
  for (int i = 0; i < n; i++) {
    if (counts[i] > limit || sum + counts[i] > limit)
      return cohort__error(COHORT_ERR_INVALID, "%s: %s[%d] = %zu makes the call too large", fn, what, i, counts[i]);
    if (displs && (displs[i] > limit || displs[i] + counts[i] > limit))
      return cohort__error(COHORT_ERR_INVALID, "%s: displacement %zu of rank %d is too large", fn, displs[i], i);
    sum += counts[i];
  }
  *total = sum;
  return COHORT_OK;
}

/* Elements from the buffer's start to the end of its last block: the blocks' sum when packed (displs NULL). */
static size_t counts_extent(const size_t *counts, const size_t *displs, int n, size_t total) {
  if (!displs) return total;
  size_t end = 0;
  for (int i = 0; i < n; i++)
    if (counts[i] && displs[i] + counts[i] > end) end = displs[i] + counts[i];
  return end;
}

cohort_status cohort__coll_check(const cohort__coll_ctx *ctx, cohort__coll_args *a) {
  const char *fn = cohort__coll_api_name(a->coll);
  unsigned f = cohort__coll_flags(a->coll);
  if (!fn) return cohort__error(COHORT_ERR_INVALID, "unknown collective %d", (int)a->coll);
  if (f & COHORT__CALL_NO_DATA) return COHORT_OK;
  if ((unsigned)a->dtype >= COHORT_DTYPE_COUNT)
    return cohort__error(COHORT_ERR_INVALID, "%s: unknown dtype %d", fn, (int)a->dtype);
  if ((f & COHORT__CALL_OP) && (unsigned)a->op >= COHORT_OP_COUNT)
    return cohort__error(COHORT_ERR_INVALID, "%s: unknown op %d", fn, (int)a->op);
  if ((f & COHORT__CALL_OP) && a->op >= COHORT_BAND && is_float(a->dtype))
    return cohort__error(COHORT_ERR_INVALID, "%s: op %s is for integer dtypes (and bool), not %s", fn,
                         cohort_op_name(a->op), cohort_dtype_name(a->dtype));
  if ((f & COHORT__CALL_OP) && a->op == COHORT_AVG && a->dtype == COHORT_BOOL)
    return cohort__error(COHORT_ERR_INVALID, "%s: op avg has no meaning on bool (use sum for any, prod for all)", fn);
  if ((f & COHORT__CALL_ROOT) && (a->root < 0 || a->root >= ctx->size))
    return cohort__error(COHORT_ERR_INVALID, "%s: root %d is not a rank of this %d-rank communicator", fn, a->root,
                         ctx->size);
  size_t es = cohort_dtype_size(a->dtype);
  int n = ctx->size, me = ctx->rank;
  int is_root = !(f & COHORT__CALL_ROOT) || a->root == me;
  if (f & COHORT__CALL_COUNTS) { /* the whole call's elements, and the counts' hash, which every rank compares */
    COHORT_CHECK(check_counts(fn, "counts", a->counts, is_root ? a->displs : NULL, n, es, &a->count));
    a->sig = cohort__counts_sig(a->counts, n);
    size_t mine = a->counts[me];
    int gathers = a->coll != COHORT__COLL_SCATTERV; /* gatherv, allgatherv: rank's block in sendbuf, all in recvbuf */
    const void *mine_buf = gathers ? a->sendbuf : a->recvbuf, *all_buf = gathers ? a->recvbuf : a->sendbuf;
    if (mine && !mine_buf)
      return cohort__error(COHORT_ERR_INVALID, "%s: %s is NULL (counts[%d] = %zu)", fn, gathers ? "sendbuf" : "recvbuf",
                           me, mine);
    if (is_root && a->count && !all_buf)
      return cohort__error(COHORT_ERR_INVALID, "%s: %s is NULL on %s", fn, gathers ? "recvbuf" : "sendbuf",
                           f & COHORT__CALL_ROOT ? "the root" : "a rank");
    return COHORT_OK;
  }
  if (f & COHORT__CALL_PEER_COUNTS) { /* alltoallv: this rank's row and column of the exchange */
    size_t stotal, rtotal;
    COHORT_CHECK(check_counts(fn, "send_counts", a->send_counts, a->send_displs, n, es, &stotal));
    COHORT_CHECK(check_counts(fn, "recv_counts", a->counts, a->displs, n, es, &rtotal));
    if (a->send_counts[me] != a->counts[me])
      return cohort__error(COHORT_ERR_INVALID, "%s: rank %d sends %zu elements to itself but receives %zu", fn, me,
                           a->send_counts[me], a->counts[me]);
    if (stotal && !a->sendbuf) return cohort__error(COHORT_ERR_INVALID, "%s: sendbuf is NULL", fn);
    if (rtotal && !a->recvbuf) return cohort__error(COHORT_ERR_INVALID, "%s: recvbuf is NULL", fn);
    size_t sbytes = counts_extent(a->send_counts, a->send_displs, n, stotal) * es;
    size_t rbytes = counts_extent(a->counts, a->displs, n, rtotal) * es;
    const char *sb = a->sendbuf, *rb = a->recvbuf;
    if (sbytes && rbytes && n > 1 && rb < sb + sbytes && sb < rb + rbytes)
      return cohort__error(COHORT_ERR_INVALID, "%s: recvbuf overlaps sendbuf (use separate buffers)", fn);
    a->count = COHORT__COUNT_PER_PEER;
    return COHORT_OK;
  }
  size_t total = a->count;
  if (f & (COHORT__CALL_SEND_PER_RANK | COHORT__CALL_RECV_PER_RANK)) total *= (size_t)n;
  if (a->count > ((size_t)1 << 62) / es / (size_t)n)
    return cohort__error(COHORT_ERR_INVALID, "%s: count %zu is too large", fn, a->count);
  if (a->count > 0) {
    /* The rooted calls: the root's buffer of every rank's blocks (gather: recvbuf, scatter: sendbuf, reduce:
     * recvbuf) is read only at the root, and may be NULL elsewhere. */
    int recv_needed = is_root || a->coll == COHORT__COLL_SCATTER || (f & COHORT__CALL_ONE_BUFFER); /* broadcast */
    int send_needed = is_root || a->coll != COHORT__COLL_SCATTER;
    if (!a->recvbuf && recv_needed)
      return cohort__error(COHORT_ERR_INVALID, "%s: %s is NULL", fn, f & COHORT__CALL_ONE_BUFFER ? "buf" : "recvbuf");
    if (!a->sendbuf && send_needed && !(f & COHORT__CALL_ONE_BUFFER))
      return cohort__error(COHORT_ERR_INVALID, "%s: sendbuf is NULL", fn);
  }
  /* Each rank's block of the send buffer is read while the result is written. */
  if ((f & COHORT__CALL_SEND_PER_RANK) && a->count && n > 1 && is_root) {
    size_t rbytes = (f & COHORT__CALL_RECV_PER_RANK ? total : a->count) * es;
    const char *s = a->sendbuf, *r = a->recvbuf;
    if (a->coll == COHORT__COLL_SCATTER && r == s + (size_t)me * a->count * es) return COHORT_OK; /* in place */
    if (r && r < s + total * es && s < r + rbytes)
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
  case COHORT__COLL_REDUCE: /* as allreduce: the tree's rounds for latency, the ring's bandwidth for size */
    return bytes <= ctx->small_bytes ? COHORT__ALGO_TREE : COHORT__ALGO_RING;
  case COHORT__COLL_GATHER:
  case COHORT__COLL_GATHERV:
  case COHORT__COLL_SCATTER:
  case COHORT__COLL_SCATTERV:
    return COHORT__ALGO_LINEAR;
  case COHORT__COLL_ALLTOALL:
  case COHORT__COLL_ALLTOALLV:
    return COHORT__ALGO_PAIRWISE;
  default:
    return COHORT__ALGO_RING;
  }
}

/* A 1-rank communicator: the result is the input (AVG of one value is the value; bool reduces to 0 or 1). */
static void run_alone(const cohort__coll_args *a) {
  size_t es = cohort_dtype_size(a->dtype), soff = 0, roff = 0, len = a->count;
  unsigned f = cohort__coll_flags(a->coll);
  if (f & (COHORT__CALL_ONE_BUFFER | COHORT__CALL_NO_DATA)) return;
  if (f & (COHORT__CALL_COUNTS | COHORT__CALL_PEER_COUNTS)) {
    int scatters = a->coll == COHORT__COLL_SCATTERV;
    cohort__coll_block(a, 0, 0, scatters ? &soff : &roff, &len);
    if (a->coll == COHORT__COLL_ALLTOALLV) cohort__coll_block(a, 1, 0, &soff, &len);
  }
  const char *src = (const char *)a->sendbuf + soff * es;
  char *dst = (char *)a->recvbuf + roff * es;
  if (len && dst != src) memmove(dst, src, len * es);
  if ((f & COHORT__CALL_OP) && a->dtype == COHORT_BOOL)
    for (size_t i = 0; i < len; i++)
      dst[i] = dst[i] != 0;
}

/* How a call runs: the transport's node allreduce, the hierarchical one, or an algorithm by size; and its call. */
typedef struct plan {
  int node, hier;
  cohort__algo algo;
  cohort__call call;
} plan;

static plan plan_of(const cohort__coll_ctx *ctx, const cohort__coll_args *a, uint32_t seq) {
  plan p;
  /* A transport that shares memory between all ranks reduces in place (shm_coll.c); COHORT_ALGO=ring or rd forces
   * the frame-based algorithms over it, for comparison. */
  p.node = a->coll == COHORT__COLL_ALLREDUCE && ctx->forced_algo == COHORT__ALGO_AUTO && ctx->t->ops->node_allreduce;
  /* Several nodes with several ranks each: shm within the node, the flat algorithms across (hier.c), unless
   * COHORT_ALGO forces a flat one over the whole mesh. */
  p.hier = a->coll == COHORT__COLL_ALLREDUCE && ctx->across &&
           (ctx->forced_algo == COHORT__ALGO_AUTO || ctx->forced_algo == COHORT__ALGO_HIER);
  p.algo = p.node ? COHORT__ALGO_AUTO : p.hier ? COHORT__ALGO_HIER : choose(ctx, a);
  p.call = cohort__call_make(seq, a->coll, a->dtype, a->op, p.algo, a->root, a->count, a->sig);
  return p;
}

/* Runs the call as planned, once the ranks agree on it; its call is set on the transport. */
static cohort_status execute(cohort__coll_ctx *ctx, const cohort__coll_args *a, const plan *p) {
  switch (a->coll) {
  case COHORT__COLL_ALLREDUCE:
    if (p->node)
      return ctx->t->ops->node_allreduce(ctx->t, a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, NULL, NULL);
    if (p->hier) return cohort__hier_allreduce(ctx, a);
    return p->algo == COHORT__ALGO_RD ? cohort__rd_allreduce(ctx, a) : cohort__ring_allreduce(ctx, a);
  case COHORT__COLL_BROADCAST:
    return p->algo == COHORT__ALGO_TREE ? cohort__tree_broadcast(ctx, a) : cohort__chain_broadcast(ctx, a);
  case COHORT__COLL_ALLGATHER:
    return cohort__ring_allgather(ctx, a);
  case COHORT__COLL_REDUCE_SCATTER:
    return cohort__ring_reduce_scatter(ctx, a);
  case COHORT__COLL_BARRIER:
    return cohort__dissemination_barrier(ctx);
  case COHORT__COLL_REDUCE:
    return p->algo == COHORT__ALGO_TREE ? cohort__tree_reduce(ctx, a) : cohort__ring_reduce(ctx, a);
  case COHORT__COLL_GATHER:
  case COHORT__COLL_GATHERV:
    return cohort__linear_gather(ctx, a);
  case COHORT__COLL_SCATTER:
  case COHORT__COLL_SCATTERV:
    return cohort__linear_scatter(ctx, a);
  case COHORT__COLL_ALLGATHERV:
    return cohort__ring_allgatherv(ctx, a);
  case COHORT__COLL_ALLTOALL:
  case COHORT__COLL_ALLTOALLV:
    return cohort__pairwise_alltoall(ctx, a);
  default:
    return cohort__error(COHORT_ERR_INTERNAL, "unknown collective %d", (int)a->coll);
  }
}

cohort_status cohort__coll_run(cohort__coll_ctx *ctx, const cohort__coll_args *a, uint32_t seq) {
  if (ctx->size == 1) {
    run_alone(a);
    return COHORT_OK;
  }
  if (a->coll == COHORT__COLL_JOIN) return cohort__join_round(ctx, seq, a->count);
  plan p = plan_of(ctx, a, seq);
  /* The v-forms' per-rank counts, hashed, and the caller's tag (cohort_tag_next_call): compared, never sent. */
  cohort__signature sig = {.call = p.call, .counts_hash = a->sig ^ a->tag};
  if (a->coll == COHORT__COLL_ALLTOALLV)
    sig.balance = cohort__peer_counts_balance(ctx->rank, ctx->size, a->send_counts, a->counts);
  /* The node allreduce's input, or the whole rd allreduce, rides on the agreement (agree.c). */
  int rides = a->coll == COHORT__COLL_ALLREDUCE && (p.node || (p.algo == COHORT__ALGO_RD && !ctx->t->ops->agree));
  int done;
  cohort_status st = cohort__coll_agree_with(ctx, &sig, rides ? a : NULL, &done);
  if (st != COHORT_OK && ctx->refused && ctx->counts_differ) {
    int q = ctx->counts_differ;
    st = cohort__coll_explain_counts(ctx, a, &p.call); /* refuses the call, saying where the counts differ */
    ctx->counts_differ = q;
  }
  if (st != COHORT_OK) return st;
  if (ctx->unbalanced) return cohort__coll_agree_peer_counts(ctx, a, &p.call); /* refuses the call */
  ctx->t->ops->set_call(ctx->t, &p.call);
  if (done) return COHORT_OK;
  return execute(ctx, a, &p);
}

cohort_status cohort__join_round(cohort__coll_ctx *ctx, uint32_t seq, uint64_t rounds) {
  cohort__signature sig = {
      .call = cohort__call_make(seq, COHORT__COLL_JOIN, COHORT_U8, COHORT_SUM, COHORT__ALGO_AUTO, -1, 0, 0),
      .counts_hash = rounds};
  int done;
  ctx->join_state = COHORT__JOIN_WAIT;
  cohort_status st = cohort__coll_agree_with(ctx, &sig, NULL, &done);
  if (st != COHORT_OK) return ctx->refused ? COHORT_OK : st; /* refused: the others raise, we wait for their next */
  if (ctx->join_state != COHORT__JOIN_RUN) return COHORT_OK;
  /* The others' call with zeros in, and a result nobody reads. */
  const cohort__call *theirs = &ctx->join_call;
  cohort__coll_args a = {.coll = (cohort__coll)theirs->coll,
                         .count = theirs->count,
                         .dtype = (cohort_dtype)theirs->dtype,
                         .op = (cohort_op)theirs->op,
                         .root = -1};
  size_t es = cohort_dtype_size(a.dtype), in = a.count * (a.coll == COHORT__COLL_REDUCE_SCATTER ? ctx->size : 1);
  void *zeros = calloc(in ? in : 1, es), *sink = malloc(a.count ? a.count * es : 1);
  if (!zeros || !sink) {
    free(zeros);
    free(sink);
    return cohort__error(COHORT_ERR_SYSTEM, "cohort_join: out of memory for %zu zeros", in);
  }
  a.sendbuf = zeros;
  a.recvbuf = sink;
  plan p = plan_of(ctx, &a, seq);
  if (!cohort__call_equal(&p.call, theirs)) {
    char want[256], got[256];
    cohort__call_describe(theirs, want, sizeof want);
    cohort__call_describe(&p.call, got, sizeof got);
    st = cohort__error(COHORT_ERR_INTERNAL,
                       "cohort_join: the others run %s, this rank would run %s (COHORT_ALGO or "
                       "COHORT_SMALL_BYTES differ between ranks?)",
                       want, got);
  } else {
    ctx->t->ops->set_call(ctx->t, &p.call);
    st = execute(ctx, &a, &p);
  }
  free(zeros);
  free(sink);
  return st;
}
