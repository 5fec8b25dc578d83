/*
 * agree.c: before a collective's data moves, the ranks compare their calls.
 *
 * Every rank gathers every rank's signature (cohort__signature: the call's sequence number, collective, dtype, op,
 * root, count and algorithm, and a hash of the per-rank counts for the v-forms), and then compares them the same way
 * (each against rank 0's, the first that differs is named), so every rank reaches the same verdict with the same
 * message: either all run the call, or all refuse it with COHORT_ERR_MISMATCH, before a byte of anyone's buffers has
 * moved. A refused call leaves the transport as it was (every frame of the exchange was received, nothing else was
 * sent), so the communicator stays usable and its next call works; ctx->refused tells the engine (work.c) that this
 * failure is no failure of the transport.
 *
 * How the signatures travel, the same way for every call of a communicator (it depends on the transport and the
 * world size only, so ranks in different calls still run the same exchange):
 *  - a transport with memory shared by all ranks (shm: its agree operation) publishes each rank's signature in its
 *    own segment and reads the peers': one round of flags; a small node allreduce stages its input in that same
 *    round (the transport's node allreduce then reduces at once);
 *  - frames at a power-of-two world: recursive doubling, in round k (mask m = 2^k) rank r and r ^ m swap the m
 *    signatures they hold. A recursive-doubling allreduce (algorithm rd, at most FUSE_MAX bytes) rides on it: a
 *    rank whose signatures held so far all equal its own also sends its partial sum in a second frame, and adds
 *    the partner's when the partner's block equals its own; the result goes into recvbuf only after the last round,
 *    once every signature has been compared. So the agreement costs such an allreduce no round at all. Whether a
 *    partner sent a data frame follows from the block it sent just before (its signatures: all equal, and an rd
 *    allreduce of so many bytes), so every frame is received, also when the call is refused. The data frames carry
 *    the sender's own call (the receiver expects the call the sender's signature names), so the frame checks hold
 *    for them as for any algorithm's;
 *  - frames at any other world size: Bruck's allgather, in round k, with d = 2^k, rank r sends the signatures it
 *    holds, of ranks r .. r+d-1, to rank r - d and receives those of ranks r+d .. r+2d-1 from rank r + d.
 *
 * The signatures' frames carry the call "internal" with the real call's sequence number, the same on every rank:
 * the frame checks of the transports never see a disagreement in it. A rank still in the
 * exchange may meanwhile hold frames of the real call (same number) from a peer that finished it first; the
 * transports' idle checks (frame.c, shm.c) know that these are no disagreement. A transport failure while the
 * signatures move (a peer died) is fatal, as any other.
 *
 * Cost: shm, one round of flags; frames, ceil(log2 n) rounds of at most n/2 signatures, nothing more for a fused
 * rd allreduce (docs/performance.md has the measurements).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/error.h"
#include "core/reduce.h"

/* Signatures of up to this many ranks live on the stack; larger worlds use scratch slot 1 (free before any
 * algorithm runs). */
#define STACK_RANKS 64
/* A recursive-doubling allreduce of up to this many bytes rides on the exchange (frames, power-of-two worlds). */
#define FUSE_MAX ((uint64_t)256 << 10)

static int same(const cohort__signature *a, const cohort__signature *b) {
  return cohort__call_equal(&a->call, &b->call) && a->counts_hash == b->counts_hash;
}

static int pow2(int n) { return (n & (n - 1)) == 0; }

/* The bytes of the data frames a rank with this signature sends along the exchange, or -1 when it sends none. The
 * same function on every rank: a receiver decides from the sender's signature. */
static int64_t fused_bytes(const cohort__coll_ctx *ctx, const cohort__call *c) {
  if (!pow2(ctx->size) || ctx->t->ops->agree || c->coll != COHORT__COLL_ALLREDUCE || c->algo != COHORT__ALGO_RD ||
      c->dtype >= COHORT_DTYPE_COUNT)
    return -1;
  uint64_t es = cohort_dtype_size((cohort_dtype)c->dtype);
  return c->count <= FUSE_MAX / es ? (int64_t)(c->count * es) : -1;
}

/* "broadcast(count=4, f32, root=1, tree)": the call without its number (named once, in the first call). */
static void describe_unnumbered(const cohort__call *c, char *buf, size_t len) {
  cohort__call_describe(c, buf, len);
  char *num = strstr(buf, " [call #");
  if (num) *num = '\0';
}

/* Bruck's allgather of the signatures into rel (rel[i]: the signature of rank (r + i) % n, rel[0] ours). */
static cohort_status bruck(cohort__transport *t, int r, int n, cohort__signature *rel) {
  const size_t sig = sizeof *rel;
  for (int d = 1; d < n; d <<= 1) {
    int cnt = d < n - d ? d : n - d;
    cohort__req s, q;
    COHORT_CHECK(t->ops->irecv(t, (r + d) % n, rel + d, (size_t)cnt * sig, &q));
    COHORT_CHECK(t->ops->isend(t, (r - d + n) % n, rel, (size_t)cnt * sig, &s));
    COHORT_CHECK(t->ops->wait(t, &q));
    COHORT_CHECK(t->ops->wait(t, &s));
  }
  return COHORT_OK;
}

/* The rd allreduce that rides on the exchange: acc holds the partial sum (recvbuf untouched until the verdict), tmp
 * a partner's; live while every signature held so far equals ours. */
typedef struct fused {
  const cohort__coll_args *a;
  char *acc, *tmp;
  int live;
} fused;

static int block_equal(const cohort__signature *all, int lo, int m, const cohort__signature *ref) {
  for (int i = lo; i < lo + m; i++)
    if (!same(&all[i], ref)) return 0;
  return 1;
}

/* Recursive doubling of the signatures at a power-of-two world, all[q] rank q's; f, when set, carries the data. */
static cohort_status doubling(cohort__coll_ctx *ctx, const cohort__call *wire, cohort__signature *all, fused *f) {
  cohort__transport *t = ctx->t;
  const int r = ctx->rank, n = ctx->size;
  const size_t sig = sizeof *all;
  const cohort__signature *me = &all[r];
  int64_t my_bytes = fused_bytes(ctx, &me->call);
  if (my_bytes >= 0 && !f)
    return cohort__error(COHORT_ERR_INTERNAL, "an rd allreduce came to the agreement without its arguments");
  int live = my_bytes >= 0; /* we send our partial sum this round */
  for (int m = 1; m < n; m <<= 1) {
    int p = r ^ m, mine_lo = r & ~(m - 1), theirs_lo = p & ~(m - 1);
    cohort__req s, d, q;
    COHORT_CHECK(t->ops->irecv(t, p, all + theirs_lo, (size_t)m * sig, &q));
    COHORT_CHECK(t->ops->isend(t, p, all + mine_lo, (size_t)m * sig, &s));
    if (live) { /* our partial sum, in a frame of our call */
      t->ops->set_call(t, &me->call);
      COHORT_CHECK(t->ops->isend(t, p, f->acc, (size_t)my_bytes, &d));
      t->ops->set_call(t, wire);
    }
    COHORT_CHECK(t->ops->wait(t, &q));
    /* The partner sent its partial sum iff its block is uniform and its call rides on the exchange. */
    const cohort__signature *head = &all[p];
    int64_t their_bytes = fused_bytes(ctx, &head->call);
    int theirs_live = their_bytes >= 0 && block_equal(all, theirs_lo, m, head);
    int agree = live && theirs_live && same(head, me);
    if (theirs_live) {
      char *into = agree ? f->tmp : cohort__coll_scratch(ctx, 2, (size_t)their_bytes); /* read and dropped */
      if (!into) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
      cohort__req g; /* a frame of the partner's call (its signature says which): the frame checks still hold */
      t->ops->set_call(t, &head->call);
      COHORT_CHECK(t->ops->irecv(t, p, into, (size_t)their_bytes, &g));
      COHORT_CHECK(t->ops->wait(t, &g));
      t->ops->set_call(t, wire);
    }
    if (live) COHORT_CHECK(t->ops->wait(t, &d)); /* acc is rewritten next */
    COHORT_CHECK(t->ops->wait(t, &s));
    if (agree) cohort__reduce(f->acc, f->acc, f->tmp, f->a->count, f->a->dtype, f->a->op);
    live = agree;
  }
  if (f) f->live = live;
  return COHORT_OK;
}

/* A transport failure during the exchange (a peer died, timed out, aborted) names the call the transport was in,
 * the exchange's own: name the collective instead, as a failure while its data moves would. */
static cohort_status name_the_call(cohort_status st, const cohort__call *wire, const cohort__call *real) {
  char w[256], c[256], text[2048];
  cohort__call_describe(wire, w, sizeof w);
  cohort__call_describe(real, c, sizeof c);
  const char *msg = cohort_last_error(), *at = strstr(msg, w);
  if (!at) return st;
  snprintf(text, sizeof text, "%.*s%s (while the ranks compared their calls)%s", (int)(at - msg), msg, c,
           at + strlen(w));
  cohort__error_set_text(text);
  return st;
}

/* Two calls alike but for what only the signature holds: the v-forms' per-rank counts, or the callers' tags. */
static const char *other_counts_or_tag(const cohort__call *theirs, const cohort__call *ref) {
  if (!cohort__call_equal(theirs, ref)) return "";
  return cohort__coll_flags(ref->coll) & (COHORT__CALL_COUNTS | COHORT__CALL_PEER_COUNTS)
             ? " with other per-rank counts (or another tag: cohort_tag_next_call)"
             : " with another tag (cohort_tag_next_call: e.g. another tensor shape)";
}

/* The verdict, the same on every rank: all[q] is rank q's signature. */
static cohort_status verdict(cohort__coll_ctx *ctx, const cohort__signature *all) {
  const cohort__signature *first = &all[0];
  for (int q = 1; q < ctx->size; q++) {
    const cohort__signature *theirs = &all[q];
    if (same(theirs, first)) continue;
    char a[256], b[256];
    cohort__call_describe(&first->call, a, sizeof a);
    if (theirs->call.seq == first->call.seq)
      describe_unnumbered(&theirs->call, b, sizeof b);
    else
      cohort__call_describe(&theirs->call, b, sizeof b);
    ctx->refused = 1;
    /* The same call but for the counts array (its hash, the total, the algorithm the total chose): the caller asks
     * where the arrays differ. */
    cohort__call same_counts = theirs->call;
    same_counts.sig = first->call.sig;
    same_counts.count = first->call.count;
    same_counts.algo = first->call.algo;
    if ((cohort__coll_flags(first->call.coll) & COHORT__CALL_COUNTS) && theirs->call.sig != first->call.sig &&
        cohort__call_equal(&same_counts, &first->call))
      ctx->counts_differ = q;
    return cohort__error(COHORT_ERR_MISMATCH,
                         "ranks disagree: rank 0 called %s but rank %d called %s%s; refused on every rank before any "
                         "data moved (the communicator stays usable)",
                         a, q, b, other_counts_or_tag(&theirs->call, &first->call));
  }
  return COHORT_OK;
}

/* Joined ranks (cohort_join) signed COHORT__COLL_JOIN: with all joined, the join ends; else the others must agree
 * among themselves on a call that zeros can take part in (see cohort__join_round in coll.h). */
static cohort_status join_verdict(cohort__coll_ctx *ctx, const cohort__signature *all) {
  const int n = ctx->size;
  int first = -1, last = -1, shown = 0;
  char joined[160] = "";
  for (int q = 0; q < n; q++) {
    if (all[q].call.coll != COHORT__COLL_JOIN) {
      if (first < 0) first = q;
      continue;
    }
    if (last < 0 || all[q].counts_hash <= all[last].counts_hash) last = q; /* fewest rounds joined; ties: highest */
    if (shown < 8) {
      size_t at = strlen(joined);
      snprintf(joined + at, sizeof joined - at, "%s%d", shown ? ", " : "", q);
    } else if (shown == 8) {
      size_t at = strlen(joined);
      snprintf(joined + at, sizeof joined - at, ", ...");
    }
    shown++;
  }
  ctx->join_state = COHORT__JOIN_WAIT;
  if (first < 0) {
    ctx->join_state = COHORT__JOIN_DONE;
    ctx->join_last = last;
    return COHORT_OK;
  }
  const cohort__signature *ref = &all[first];
  char a[256], b[256];
  cohort__call_describe(&ref->call, a, sizeof a);
  for (int q = first + 1; q < n; q++) {
    const cohort__signature *theirs = &all[q];
    if (theirs->call.coll == COHORT__COLL_JOIN || same(theirs, ref)) continue;
    describe_unnumbered(&theirs->call, b, sizeof b);
    ctx->refused = 1;
    return cohort__error(COHORT_ERR_MISMATCH,
                         "ranks disagree: rank %d called %s but rank %d called %s%s (rank%s %s joined); refused on "
                         "every rank before any data moved (the communicator stays usable)",
                         first, a, q, b, other_counts_or_tag(&theirs->call, &ref->call), shown > 1 ? "s" : "", joined);
  }
  const cohort__call *c = &ref->call;
  int zeros_add_nothing = (c->coll == COHORT__COLL_ALLREDUCE || c->coll == COHORT__COLL_REDUCE_SCATTER) &&
                          (c->op == COHORT_SUM || c->op == COHORT_AVG) && c->algo != COHORT__ALGO_DEVICE;
  if (!zeros_add_nothing) {
    ctx->refused = 1;
    return cohort__error(COHORT_ERR_MISMATCH,
                         "rank%s %s joined (cohort_join: no more data) while rank %d called %s: until every rank has "
                         "joined, the others may only allreduce or reduce_scatter (sum or average, host memory), to "
                         "which the joined ranks add zeros; refused on every rank before any data moved",
                         shown > 1 ? "s" : "", joined, first, a);
  }
  ctx->join_state = COHORT__JOIN_RUN;
  ctx->join_call = *c;
  return COHORT_OK;
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
  x ^= x >> 30;
  x *= UINT64_C(0xbf58476d1ce4e5b9);
  x ^= x >> 27;
  x *= UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

static uint64_t pair_hash(int sender, int receiver, size_t count) {
  return mix64(mix64(mix64(UINT64_C(0x9e3779b97f4a7c15) + (uint64_t)(uint32_t)sender) ^ (uint64_t)(uint32_t)receiver) ^
               (uint64_t)count);
}

uint64_t cohort__peer_counts_balance(int me, int n, const size_t *send_counts, const size_t *recv_counts) {
  uint64_t b = 0;
  for (int j = 0; j < n; j++)
    if (j != me) b += pair_hash(me, j, send_counts[j]) - pair_hash(j, me, recv_counts[j]);
  return b;
}

/* The call the exchanges' frames carry: "internal", under the real call's number, the same on every rank. */
static cohort__call wire_of(const cohort__coll_ctx *ctx, uint32_t seq) {
  return cohort__call_make(seq, COHORT__COLL_INTERNAL, COHORT_U8, COHORT_SUM, COHORT__ALGO_DISSEMINATION, -1,
                           (uint64_t)ctx->size * sizeof(cohort__signature), 0);
}

/* Every rank's record (one signature's size) to every rank, the way the signatures travel; nothing rides on it. */
static cohort_status allgather_records(cohort__coll_ctx *ctx, const cohort__call *wire, const cohort__signature *mine,
                                       cohort__signature *all) {
  cohort__transport *t = ctx->t;
  int n = ctx->size, r = ctx->rank;
  if (t->ops->agree) return t->ops->agree(t, mine, sizeof *mine, all, NULL, 0);
  all[r] = *mine;
  if (pow2(n)) return doubling(ctx, wire, all, NULL);
  cohort__signature rstack[STACK_RANKS], *rel = rstack;
  if (n > STACK_RANKS && !(rel = cohort__coll_scratch(ctx, 0, (size_t)n * sizeof *rel)))
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  rel[0] = *mine;
  COHORT_CHECK(bruck(t, r, n, rel));
  for (int q = 0; q < n; q++)
    all[q] = rel[(q - r + n) % n];
  return COHORT_OK;
}

const char cohort__agree_zeros[COHORT__AGREE_STAGE_MAX];

cohort_status cohort__coll_agree_with(cohort__coll_ctx *ctx, const cohort__signature *mine,
                                      const cohort__coll_args *ride, int *done) {
  ctx->refused = 0;
  ctx->joined = 0;
  ctx->unbalanced = 0;
  ctx->counts_differ = 0;
  *done = 0;
  int n = ctx->size, r = ctx->rank;
  if (n == 1 || !ctx->call_check) return COHORT_OK;
  cohort__signature stack[STACK_RANKS], *all = stack;
  if (n > STACK_RANKS && !(all = cohort__coll_scratch(ctx, 1, (size_t)n * sizeof *all)))
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort__transport *t = ctx->t;
  cohort__call wire = wire_of(ctx, mine->call.seq);
  t->ops->set_call(t, &wire);
  cohort_status st = COHORT_OK;
  const cohort__coll_args *a = NULL; /* the allreduce that rides on the frames */
  fused f = {0};
  if (t->ops->agree) { /* shared memory: one round of flags (the node allreduce may stage its input in it) */
    const void *stage = NULL;
    size_t stage_bytes = 0;
    if (ride) stage = ride->sendbuf, stage_bytes = ride->count * cohort_dtype_size(ride->dtype);
    if (mine->call.coll == COHORT__COLL_JOIN) { /* whichever small node allreduce the others stage, ours is zeros */
      stage = cohort__agree_zeros, stage_bytes = sizeof cohort__agree_zeros;
    }
    st = t->ops->agree(t, mine, sizeof *mine, all, stage, stage_bytes);
  } else if (pow2(n)) {
    if (ride && fused_bytes(ctx, &mine->call) >= 0) f.a = a = ride;
    all[r] = *mine;
    if (a) {
      size_t bytes = a->count * cohort_dtype_size(a->dtype);
      f.acc = cohort__coll_scratch(ctx, 0, 2 * bytes);
      if (!f.acc) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
      f.tmp = f.acc + bytes;
      if (bytes) memcpy(f.acc, a->sendbuf, bytes);
    }
    st = doubling(ctx, &wire, all, a ? &f : NULL);
  } else { /* Bruck's order (nothing rides on it) */
    st = allgather_records(ctx, &wire, mine, all);
  }
  if (st != COHORT_OK) return name_the_call(st, &wire, &mine->call);
  uint64_t balance = 0;
  for (int q = 0; q < n; q++) {
    ctx->joined += all[q].call.coll == COHORT__COLL_JOIN;
    balance += all[q].balance;
  }
  COHORT_CHECK(ctx->joined ? join_verdict(ctx, all) : verdict(ctx, all));
  ctx->unbalanced = balance != 0;
  if (a && !ctx->joined) { /* agreed: the fused allreduce's result, into recvbuf only now */
    if (!f.live) return cohort__error(COHORT_ERR_INTERNAL, "the fused allreduce stopped though the ranks agree");
    size_t bytes = a->count * cohort_dtype_size(a->dtype);
    if (bytes) memcpy(a->recvbuf, f.acc, bytes);
    if (a->op == COHORT_AVG) cohort__reduce_avg(a->recvbuf, a->count, a->dtype, n);
    *done = 1;
  }
  return COHORT_OK;
}

cohort_status cohort__coll_agree(cohort__coll_ctx *ctx, const cohort__signature *mine) {
  int done;
  return cohort__coll_agree_with(ctx, mine, NULL, &done);
}

/* A round of counts after the verdict (the two below): n records to gather (on the stack when they fit), `words`
 * 64-bit words of scratch, `nreqs` requests, and the transport set to the agreement's own call. */
typedef struct counts_round {
  cohort__signature stack[STACK_RANKS], *all;
  uint64_t *words;
  cohort__req *reqs; /* the caller frees it */
  cohort__call wire;
} counts_round;

static cohort_status counts_round_open(cohort__coll_ctx *ctx, counts_round *cr, size_t words, size_t nreqs,
                                       uint32_t seq) {
  ctx->refused = 0;
  int n = ctx->size;
  cr->all = cr->stack;
  if (n > STACK_RANKS && !(cr->all = cohort__coll_scratch(ctx, 1, (size_t)n * sizeof *cr->all)))
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cr->words = cohort__coll_scratch(ctx, 2, words * sizeof *cr->words);
  cr->reqs = calloc(nreqs, sizeof *cr->reqs);
  if (!cr->words || !cr->reqs) {
    free(cr->reqs);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  cr->wire = wire_of(ctx, seq);
  ctx->t->ops->set_call(ctx->t, &cr->wire);
  return COHORT_OK;
}

cohort_status cohort__coll_agree_peer_counts(cohort__coll_ctx *ctx, const cohort__coll_args *a,
                                             const cohort__call *real) {
  int n = ctx->size, r = ctx->rank;
  counts_round cr;
  COHORT_CHECK(counts_round_open(ctx, &cr, 2 * (size_t)n, 2 * (size_t)n, real->seq));
  cohort__signature *all = cr.all;
  uint64_t *sent = cr.words, *told = sent + n;
  cohort__req *reqs = cr.reqs;
  cohort__transport *t = ctx->t;
  cohort__call wire = cr.wire;
  /* 1. Each rank tells each peer how many elements it will send it (pairwise, as the data will go). */
  cohort_status st = COHORT_OK;
  for (int k = 1; k < n && st == COHORT_OK; k++) {
    int to = (r + k) % n, from = (r - k + n) % n;
    sent[to] = (uint64_t)a->send_counts[to];
    st = t->ops->irecv(t, from, &told[from], sizeof *told, &reqs[2 * k]);
    if (st == COHORT_OK) st = t->ops->isend(t, to, &sent[to], sizeof *sent, &reqs[2 * k + 1]);
  }
  for (int k = 1; k < n && st == COHORT_OK; k++)
    st = t->ops->wait(t, &reqs[2 * k]);
  if (st == COHORT_OK) st = t->ops->wait(t, NULL);
  free(reqs);
  if (st != COHORT_OK) return name_the_call(st, &wire, real);
  /* 2. Each rank's first disagreement (the sender as root, what it sends as count, what we expect as the hash), or
   * root -1, to every rank: all find the same first one and refuse the call with the same words. */
  cohort__signature mine = {.call = wire};
  for (int p = 0; p < n; p++) {
    if (p == r || told[p] == (uint64_t)a->counts[p]) continue;
    mine.call.root = p;
    mine.call.count = told[p];
    mine.counts_hash = (uint64_t)a->counts[p];
    break;
  }
  if ((st = allgather_records(ctx, &wire, &mine, all)) != COHORT_OK) return name_the_call(st, &wire, real);
  for (int q = 0; q < n; q++) {
    const cohort__signature *v = &all[q];
    if (v->call.root < 0) continue;
    int p = v->call.root;
    ctx->refused = 1;
    return cohort__error(COHORT_ERR_MISMATCH,
                         "ranks disagree on the counts of %s: rank %d sends %llu elements to rank %d, which expects "
                         "%llu from it (its recv_counts[%d] against rank %d's send_counts[%d]) [call #%u]; refused on "
                         "every rank before any data moved (the communicator stays usable)",
                         cohort__coll_api_name(real->coll), p, (unsigned long long)v->call.count, q,
                         (unsigned long long)v->counts_hash, p, p, q, real->seq);
  }
  return cohort__error(COHORT_ERR_INTERNAL,
                       "%s [call #%u]: the ranks' count balances disagreed, but every rank's receive counts equal "
                       "what its peers send",
                       cohort__coll_api_name(real->coll), real->seq);
}

cohort_status cohort__coll_explain_counts(cohort__coll_ctx *ctx, const cohort__coll_args *a, const cohort__call *real) {
  int n = ctx->size, r = ctx->rank;
  counts_round cr;
  COHORT_CHECK(counts_round_open(ctx, &cr, (size_t)n, (size_t)n, real->seq));
  cohort__signature *all = cr.all;
  uint64_t *ref = cr.words;
  cohort__req *reqs = cr.reqs;
  cohort__transport *t = ctx->t;
  cohort__call wire = cr.wire;
  /* 1. Rank 0's counts to every rank. */
  cohort_status st = COHORT_OK;
  if (r == 0) {
    for (int p = 0; p < n; p++)
      ref[p] = (uint64_t)a->counts[p];
    for (int p = 1; p < n && st == COHORT_OK; p++)
      st = t->ops->isend(t, p, ref, (size_t)n * sizeof *ref, &reqs[p]);
    if (st == COHORT_OK) st = t->ops->wait(t, NULL);
  } else {
    st = t->ops->irecv(t, 0, ref, (size_t)n * sizeof *ref, &reqs[0]);
    if (st == COHORT_OK) st = t->ops->wait(t, &reqs[0]);
  }
  free(reqs);
  if (st != COHORT_OK) return name_the_call(st, &wire, real);
  /* 2. Each rank's first count that differs from rank 0's (its index as root, its count, rank 0's as the hash), or
   * root -1, to every rank: all name the same first one. */
  cohort__signature mine = {.call = wire};
  mine.call.root = -1;
  for (int p = 0; p < n && r != 0; p++) {
    if ((uint64_t)a->counts[p] == ref[p]) continue;
    mine.call.root = p;
    mine.call.count = (uint64_t)a->counts[p];
    mine.counts_hash = ref[p];
    break;
  }
  if ((st = allgather_records(ctx, &wire, &mine, all)) != COHORT_OK) return name_the_call(st, &wire, real);
  ctx->refused = 1;
  for (int q = 1; q < n; q++) {
    const cohort__signature *v = &all[q];
    if (v->call.root < 0) continue;
    return cohort__error(COHORT_ERR_MISMATCH,
                         "ranks disagree on the counts of %s (%s) [call #%u]: rank %d passes counts[%d] = %llu where "
                         "rank 0 passes %llu; refused on every rank before any data moved (the communicator stays "
                         "usable)",
                         cohort__coll_api_name(real->coll), cohort_dtype_name((cohort_dtype)real->dtype), real->seq, q,
                         (int)v->call.root, (unsigned long long)v->call.count, (unsigned long long)v->counts_hash);
  }
  /* The arrays agree, so the hashes differed for the tag (cohort_tag_next_call): the first verdict's words. */
  return cohort__error(COHORT_ERR_MISMATCH,
                       "ranks disagree on %s [call #%u]: the same counts on every rank, but another tag "
                       "(cohort_tag_next_call) on rank %d; refused on every rank before any data moved (the "
                       "communicator stays usable)",
                       cohort__coll_api_name(real->coll), real->seq, ctx->counts_differ);
}
