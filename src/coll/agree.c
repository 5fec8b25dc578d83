/*
 * agree.c: before a collective's data moves, the ranks compare their calls.
 *
 * Every rank gathers every rank's signature (cohort__signature: the call's sequence number, collective, dtype, op,
 * root, count and algorithm, and a hash of the per-rank counts for the v-forms) with Bruck's allgather: in round
 * k, with d = 2^k, rank r sends the signatures it holds, of ranks r .. r+d-1, to rank r - d and receives those of
 * ranks r+d .. r+2d-1 from rank r + d; after ceil(log2 n) rounds every rank holds all n. Every rank then compares
 * them the same way (each against rank 0's, the first that differs is named), so every rank reaches the same
 * verdict with the same message: either all run the call, or all refuse it with COHORT_ERR_MISMATCH, before a
 * byte of anyone's buffers has moved. A refused call leaves the transport as it was (every frame of the exchange
 * was received, nothing else was sent), so the communicator stays usable and its next call works; ctx->refused
 * tells the engine (work.c) that this failure is no failure of the transport.
 *
 * The exchange's frames carry the call "internal" with the real call's sequence number, the same on every rank:
 * the frame checks of the transports never see a disagreement in it. A rank still in the exchange may meanwhile
 * hold frames of the real call (same number) from a peer that finished it first; the transports' idle checks
 * (frame.c, shm.c) know that these are no disagreement. A transport failure while the signatures move (a peer
 * died) is fatal, as any other.
 *
 * Cost: ceil(log2 n) rounds of frames of at most n/2 signatures (docs/performance.md has the measurements).
 */
#include <stdio.h>
#include <string.h>

#include "coll/coll.h"
#include "core/error.h"

/* Signatures of up to this many ranks live on the stack; larger worlds use scratch slot 1 (free before any
 * algorithm runs). */
#define STACK_RANKS 64

static int same(const cohort__signature *a, const cohort__signature *b) {
  return cohort__call_equal(&a->call, &b->call) && a->counts_hash == b->counts_hash;
}

/* "broadcast(count=4, f32, root=1, tree)": the call without its number (named once, in the first call). */
static void describe_unnumbered(const cohort__call *c, char *buf, size_t len) {
  cohort__call_describe(c, buf, len);
  char *num = strstr(buf, " [call #");
  if (num) *num = '\0';
}

/* Bruck's allgather of the signatures into rel (rel[i]: the signature of rank (r + i) % n, rel[0] ours). */
static cohort_status gather(cohort__transport *t, int r, int n, cohort__signature *rel) {
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

cohort_status cohort__coll_agree(cohort__coll_ctx *ctx, const cohort__signature *mine) {
  ctx->refused = 0;
  int n = ctx->size, r = ctx->rank;
  if (n == 1 || !ctx->call_check) return COHORT_OK;
  cohort__signature stack[STACK_RANKS], *rel = stack;
  if (n > STACK_RANKS && !(rel = cohort__coll_scratch(ctx, 1, (size_t)n * sizeof *rel)))
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  cohort__transport *t = ctx->t;
  cohort__call wire = cohort__call_make(mine->call.seq, COHORT__COLL_INTERNAL, COHORT_U8, COHORT_SUM,
                                        COHORT__ALGO_DISSEMINATION, -1, (uint64_t)n * sizeof *rel, 0);
  t->ops->set_call(t, &wire);
  rel[0] = *mine;
  cohort_status st = gather(t, r, n, rel);
  if (st != COHORT_OK) return name_the_call(st, &wire, &mine->call);
  const cohort__signature *first = &rel[(n - r) % n];
  for (int q = 1; q < n; q++) {
    const cohort__signature *theirs = &rel[(q - r + n) % n];
    if (same(theirs, first)) continue;
    char a[256], b[256];
    cohort__call_describe(&first->call, a, sizeof a);
    if (theirs->call.seq == first->call.seq)
      describe_unnumbered(&theirs->call, b, sizeof b);
    else
      cohort__call_describe(&theirs->call, b, sizeof b);
    ctx->refused = 1;
    return cohort__error(COHORT_ERR_MISMATCH,
                         "ranks disagree: rank 0 called %s but rank %d called %s%s; refused on every rank before any "
                         "data moved (the communicator stays usable)",
                         a, q, b, cohort__call_equal(&theirs->call, &first->call) ? " with other per-rank counts" : "");
  }
  return COHORT_OK;
}
