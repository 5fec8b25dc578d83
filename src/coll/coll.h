/*
 * coll.h: collective algorithms, written against the transport interface (transport/transport.h) and knowing
 * nothing of sockets or training. The collectives and algorithms they are named by (cohort__coll, cohort__algo) are
 * the call's vocabulary, in transport/call.h: frames carry them.
 *
 *   ring.c       bandwidth-optimal pipelined ring: allreduce (reduce-scatter + allgather), reduce-scatter, allgather
 *   rd.c         recursive doubling allreduce for small messages (any world size: extra ranks fold in and out)
 *   broadcast.c  binomial tree for small messages, pipelined chain for large ones
 *   barrier.c    dissemination barrier
 *   hier.c       hierarchical allreduce for jobs on several nodes: shm within the node, ring/rd across nodes
 *   rooted.c     reduce (binomial tree, or ring reduce-scatter + gather), gather(v) and scatter(v) (linear)
 *   alltoall.c   alltoall(v) (pairwise exchange), allgatherv (ring of variable blocks)
 *   agree.c      before data moves, the ranks compare their calls' signatures: a mismatch is refused on every rank
 *                (a small rd allreduce over frames, and shm's small node allreduce, ride on that exchange)
 *   coll.c       argument checks, algorithm selection (COHORT_ALGO, size thresholds) and dispatch
 *
 * Every algorithm gives every rank bitwise the same result: a reduced element is computed once and then copied
 * (ring), or combined pairwise with commutative operations in the same order on both sides (recursive doubling).
 * Every algorithm exchanges at least one frame with a neighbour even for count 0, so that a rank calling something
 * else is always detected as a mismatch instead of hanging.
 */
#ifndef COHORT_COLL_COLL_H
#define COHORT_COLL_COLL_H

#include <stddef.h>

#include "cohort/cohort.h"
#include "core/config.h"
#include "transport/transport.h"

typedef struct cohort__coll_args {
  cohort__coll coll;
  const void *sendbuf;
  void *recvbuf;
  size_t count;
  cohort_dtype dtype;
  cohort_op op;
  int root;
  /* The v-forms, in elements. gatherv, scatterv, allgatherv: counts[i] elements of rank i, at displs[i] in the
   * buffer that holds every rank's block (gatherv and allgatherv: recvbuf; scatterv: sendbuf), displs NULL for
   * packed blocks; cohort__coll_check sets count to the sum of counts and sig to their hash. alltoallv: counts and
   * displs describe recvbuf, send_counts and send_displs sendbuf, one block per peer. */
  const size_t *counts, *displs;
  const size_t *send_counts, *send_displs;
  uint32_t sig;
  /* cohort_tag_next_call: what the caller adds to the call for the ranks to compare (a tensor's shape), else 0. */
  uint64_t tag;
  /* Device buffers (src/gpu/gpu.h): on_device and the device's ordinal, the caller's stream, the event after which
   * the input is ready (asynchronous calls), and whether a _stream call may return once the work is queued. */
  int on_device, device;
  void *stream, *ready;
  int stream_ordered;
} cohort__coll_args;

/* Per-communicator state the algorithms use: the transport, tuning, and reusable scratch memory. */
struct cohort__layers;

typedef struct cohort__coll_ctx {
  cohort__transport *t;
  int rank, size;
  cohort__algo forced_algo; /* COHORT_ALGO; AUTO picks by size (and hier.c whenever the job has layers) */
  size_t small_bytes;       /* allreduce up to this: recursive doubling */
  size_t segment_bytes;     /* pipeline segment of ring and chain */
  void *scratch[3];
  size_t scratch_len[3];
  /* Several nodes with several ranks each (cohort__layers_of), else NULL; then `across` is the context of the
   * algorithms over the ranks with our local index on every node. */
  const struct cohort__layers *layers;
  struct cohort__coll_ctx *across;
  int call_check; /* COHORT_CALL_CHECK: the ranks compare their calls before data moves (agree.c) */
  /* The last call was refused by cohort__coll_agree (the ranks' calls differ): its COHORT_ERR_MISMATCH left the
   * transport usable, unlike a failure while data moves. */
  int refused;
  /* cohort_join (agree.c, coll.c): how many ranks were joined at the last agreement, and on a joined rank its
   * verdict (COHORT__JOIN_*, cohort__join_round): the rank that joined last, or the others' call to run with zeros. */
  int joined;
  /* alltoallv: the ranks' balances (cohort__peer_counts_balance) at the last agreement did not sum to 0 */
  int unbalanced;
  /* the v-forms: the last call was refused because rank counts_differ's calls differed from rank 0's only in the
   * counts array (cohort__coll_explain_counts says where); 0 otherwise */
  int counts_differ;
  int join_state, join_last;
  cohort__call join_call;
} cohort__coll_ctx;

enum { COHORT__JOIN_WAIT = 0, COHORT__JOIN_RUN = 1, COHORT__JOIN_DONE = 2 };

/* What the ranks compare before a call's data moves (agree.c). */
typedef struct cohort__signature {
  cohort__call call;    /* sequence number, collective, dtype, op, algorithm, root, count */
  uint64_t counts_hash; /* v-forms: a hash of the per-rank counts as this rank was given them; 0 for the others */
  /* alltoallv: this rank's share of a sum over all ranks that is 0 when every rank's send counts equal their
   * receivers' receive counts (cohort__peer_counts_balance); not compared, summed. 0 for the others. */
  uint64_t balance;
} cohort__signature;

/* alltoallv's balance: sum over peers j of H(me, j, send_counts[j]) - H(j, me, recv_counts[j]), H a 64-bit hash of
 * (sender, receiver, count). Summed over all ranks, every pair (s, r) adds H(s, r, what s sends r) - H(s, r, what r
 * expects from s): 0 when they agree, and otherwise not 0 except with probability about 2^-64. So the agreement
 * finds any disagreement in the counts without another round; only then do the ranks exchange the counts to name
 * it (cohort__coll_agree_peer_counts). */
uint64_t cohort__peer_counts_balance(int me, int n, const size_t *send_counts, const size_t *recv_counts);

/* Takes COHORT_ALGO, COHORT_SMALL_BYTES, COHORT_SEGMENT_BYTES and COHORT_CALL_CHECK from cfg; COHORT_ALGO=hier needs a
 * layered transport. */
cohort_status cohort__coll_ctx_init(cohort__coll_ctx *ctx, cohort__transport *t, const cohort__config *cfg);
void cohort__coll_ctx_free(cohort__coll_ctx *ctx);
/* Checks arguments (COHORT_ERR_INVALID names the bad one); for the v-forms, sets a->count and a->sig from the
 * counts (COHORT__CALL_COUNTS in transport/call.h). */
cohort_status cohort__coll_check(const cohort__coll_ctx *ctx, cohort__coll_args *a);
/* Every rank's signature to every rank: COHORT_OK when all equal mine, else COHORT_ERR_MISMATCH on every rank,
 * naming rank 0's call and the first that differs, with ctx->refused set (the transport is left usable; any other
 * failure is one of the transport's and fatal). Leaves the transport's call set to the exchange's own: the caller
 * sets its call next. Collective over ctx->t; nothing on a 1-rank communicator or with COHORT_CALL_CHECK=off. */
cohort_status cohort__coll_agree(cohort__coll_ctx *ctx, const cohort__signature *mine);
/* alltoallv whose balances did not sum to 0 at the agreement (ctx->unbalanced): which peer's count differs. Each rank
 * tells each peer its send count (one 8-byte frame per peer, pairwise), then every rank's first disagreement goes to
 * every rank the way the signatures travel, so all refuse the call with the same message naming the pair
 * (COHORT_ERR_MISMATCH, ctx->refused: the communicator stays usable), before any data moved. Without COHORT_CALL_CHECK
 * the receiver of a frame of the wrong size finds it while data moves, and that is fatal. */
cohort_status cohort__coll_agree_peer_counts(cohort__coll_ctx *ctx, const cohort__coll_args *a,
                                             const cohort__call *real);
/* A v-form refused for its counts arrays alone (ctx->counts_differ): rank 0 sends its counts to every rank (one frame
 * of n counts each), every rank finds its first count that differs from rank 0's, and those go to every rank the
 * way the signatures travel, so that all refuse the call with the same message naming the rank, the index and both
 * values (COHORT_ERR_MISMATCH, ctx->refused). A failure of the exchange itself is fatal, as any while frames move. */
cohort_status cohort__coll_explain_counts(cohort__coll_ctx *ctx, const cohort__coll_args *a, const cohort__call *real);
/* The same, with the call's arguments when its data may ride on the exchange (ride: an allreduce that runs as the
 * transport's node allreduce or as recursive doubling, else NULL). *done: the exchange ran the whole call (frames
 * at a power-of-two world, rd allreduce: recvbuf holds the result); else the caller runs it next, as after
 * cohort__coll_agree (shm may have staged the node allreduce's input already: the transport knows). Whatever rides
 * along, nothing is written to recvbuf before every rank's signature is compared. */
cohort_status cohort__coll_agree_with(cohort__coll_ctx *ctx, const cohort__signature *mine,
                                      const cohort__coll_args *ride, int *done);
/* Runs one collective as call number seq, once the ranks agree on it (cohort__coll_agree). */
cohort_status cohort__coll_run(cohort__coll_ctx *ctx, const cohort__coll_args *a, uint32_t seq);

/* cohort_join (include/cohort/cohort.h): one round on a joined rank, as call number seq. Its signature (a
 * COHORT__COLL_JOIN call; rounds, the rounds it has been joined, in counts_hash) takes part in the agreement, whose
 * verdict (agree.c) sets ctx->join_state: COHORT__JOIN_DONE, every rank has joined (ctx->join_last: the one that
 * joined last, the fewest rounds, ties to the highest rank); COHORT__JOIN_RUN, the ranks still running agree on an
 * allreduce or reduce-scatter that sums or averages, which this rank then runs with zeros (they add nothing: an
 * average divides by the whole world, as Horovod's join does); COHORT__JOIN_WAIT, their call was refused (another
 * collective: they raise COHORT_ERR_MISMATCH naming the joined ranks, and go on). */
cohort_status cohort__join_round(cohort__coll_ctx *ctx, uint32_t seq, uint64_t rounds);

/* Scratch slot `slot` of at least bytes (reused across calls, freed with the context). */
void *cohort__coll_scratch(cohort__coll_ctx *ctx, int slot, size_t bytes);

/* The algorithms. The call has been set on the transport already. */
cohort_status cohort__ring_allreduce(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__ring_reduce_scatter(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__ring_allgather(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__rd_allreduce(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__tree_broadcast(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__chain_broadcast(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__dissemination_barrier(cohort__coll_ctx *ctx);
/* rooted.c and alltoall.c. The v-forms' blocks: rank (or peer) p's block of a's counts (send: its send_counts) in
 * elements, at its displacement (displs NULL: packed), for every collective of rooted.c and alltoall.c (the fixed-count
 * ones have count elements per rank). */
void cohort__coll_block(const cohort__coll_args *a, int send, int p, size_t *off, size_t *len);
/* With COHORT_CALL_CHECK=off (no cohort__coll_agree before the call), the rooted calls' own agreement: every rank
 * agrees on the call before data moves, or every rank fails with the mismatch, fatally (rooted.c). */
cohort_status cohort__rooted_agree(cohort__coll_ctx *ctx);
cohort_status cohort__tree_reduce(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__ring_reduce(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__linear_gather(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__linear_scatter(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__ring_allgatherv(cohort__coll_ctx *ctx, const cohort__coll_args *a);
cohort_status cohort__pairwise_alltoall(cohort__coll_ctx *ctx, const cohort__coll_args *a);
/* ring.c: the reduce-scatter half of the ring allreduce on a's count (chunks split as evenly as possible), into
 * out (count elements; it may be a's sendbuf): after it, chunk cohort__ring_reduced_chunk(rank, size) of out holds
 * the reduction (AVG divided) and the other chunks partial sums. */
cohort_status cohort__ring_reduce_chunks(cohort__coll_ctx *ctx, const cohort__coll_args *a, void *out);
int cohort__ring_reduced_chunk(int rank, int size);
void cohort__ring_chunk(size_t count, int size, int c, size_t *off, size_t *len);
/* Needs ctx->layers; the call has been set on the layered transport (so on both of its parts). */
cohort_status cohort__hier_allreduce(cohort__coll_ctx *ctx, const cohort__coll_args *a);

#endif
