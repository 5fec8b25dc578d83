/*
 * call.h: the vocabulary of a collective call, the one place that names it: the collectives, the algorithms, what
 * each collective takes, and cohort__call, the call that every frame carries.
 *
 * Frames carry a call (transport.h), so the vocabulary lives with the transport; the layers above name their calls
 * with it: coll/ chooses and runs the algorithms, gpu/ runs the "device" one, comm/ counts collectives in the
 * heartbeat page, and cohortrun and cohort-bench name them. Everything but cohort__call_describe (call.c) is in this
 * header, so that the tools use the names without linking the transports.
 *
 * The numbers travel in every frame header and in the heartbeat page: a value, once given, never changes meaning.
 * A new collective is one line in COHORT__COLLECTIVES with the flags that say what it takes (an op, a root, buffers
 * of count elements per rank); the argument checks (coll.c), the normalized call (cohort__call_make) and the
 * descriptions in messages follow from them. Point-to-point messages (P2P) run on a transport of their own whose frames
 * all carry one call (src/comm/p2p.c). The per-rank-count forms carry their counts as a total and a hash
 * (COHORT__CALL_COUNTS, COHORT__CALL_PEER_COUNTS).
 */
#ifndef COHORT_TRANSPORT_CALL_H
#define COHORT_TRANSPORT_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

/* What a collective takes, beyond count elements of one dtype in sendbuf and out in recvbuf. */
enum {
  COHORT__CALL_OP = 1 << 0,            /* a reduction op */
  COHORT__CALL_ROOT = 1 << 1,          /* a root rank (carried in `root`) */
  COHORT__CALL_PEER = 1 << 2,          /* a peer rank (carried in `root`): point to point */
  COHORT__CALL_ONE_BUFFER = 1 << 3,    /* one buffer, read and written in place (broadcast's `buf`) */
  COHORT__CALL_SEND_PER_RANK = 1 << 4, /* sendbuf holds count elements per rank (reduce_scatter) */
  COHORT__CALL_RECV_PER_RANK = 1 << 5, /* recvbuf holds count elements per rank (allgather) */
  COHORT__CALL_NO_DATA = 1 << 6,       /* no buffers, no count (barrier) */
  /* The per-rank-count forms (gatherv, scatterv, allgatherv): every rank passes the same array of counts, one per
   * rank. The call's `count` is their sum, the elements of the whole call (so frame.c's size check, bytes <= count x
   * dtype size, holds for every frame), and `sig` a hash of the array (cohort__counts_sig): ranks that pass different
   * arrays disagree on the call, and their first frame says so, before any data lands. */
  COHORT__CALL_COUNTS = 1 << 7,
  /* alltoallv: each rank passes only its own send and receive counts, so no count is the same on every rank: the
   * call's `count` is COHORT__COUNT_PER_PEER and every frame is checked against the receive posted for it instead
   * (the sender's send count for a peer must be that peer's receive count for it, or COHORT_ERR_MISMATCH names the
   * two ranks and sizes before any payload is accepted). */
  COHORT__CALL_PEER_COUNTS = 1 << 8,
};

/* The `count` of a COHORT__CALL_PEER_COUNTS call. */
#define COHORT__COUNT_PER_PEER UINT64_MAX

/* X(NAME, number, "name", flags): every collective a call can be. */
#define COHORT__COLLECTIVES(X)                                                                                         \
  X(ALLREDUCE, 1, "allreduce", COHORT__CALL_OP)                                                                        \
  X(BROADCAST, 2, "broadcast", COHORT__CALL_ROOT | COHORT__CALL_ONE_BUFFER)                                            \
  X(ALLGATHER, 3, "allgather", COHORT__CALL_RECV_PER_RANK)                                                             \
  X(REDUCE_SCATTER, 4, "reduce_scatter", COHORT__CALL_OP | COHORT__CALL_SEND_PER_RANK)                                 \
  X(BARRIER, 5, "barrier", COHORT__CALL_NO_DATA)                                                                       \
  X(INTERNAL, 6, "internal", COHORT__CALL_OP) /* setup traffic of the library itself */                                \
  X(P2P, 7, "p2p", COHORT__CALL_PEER)         /* point-to-point messages, on their own transport (src/comm/p2p.c) */   \
  /* A rank in cohort_join: no call of its own, it takes part in the others' (coll/join.c) */                          \
  X(JOIN, 8, "join", COHORT__CALL_NO_DATA)                                                                             \
  /* 9 to 15: free */                                                                                                  \
  /* Rooted and personalized collectives (src/coll/rooted.c, alltoall.c); count is per rank, or (v-forms) the */       \
  /* sum of the counts, see COHORT__CALL_COUNTS. */                                                                    \
  X(REDUCE, 16, "reduce", COHORT__CALL_OP | COHORT__CALL_ROOT)                                                         \
  X(GATHER, 17, "gather", COHORT__CALL_ROOT | COHORT__CALL_RECV_PER_RANK)                                              \
  X(SCATTER, 18, "scatter", COHORT__CALL_ROOT | COHORT__CALL_SEND_PER_RANK)                                            \
  X(GATHERV, 19, "gatherv", COHORT__CALL_ROOT | COHORT__CALL_COUNTS)                                                   \
  X(SCATTERV, 20, "scatterv", COHORT__CALL_ROOT | COHORT__CALL_COUNTS)                                                 \
  X(ALLGATHERV, 21, "allgatherv", COHORT__CALL_COUNTS)                                                                 \
  X(ALLTOALL, 22, "alltoall", COHORT__CALL_SEND_PER_RANK | COHORT__CALL_RECV_PER_RANK)                                 \
  X(ALLTOALLV, 23, "alltoallv", COHORT__CALL_PEER_COUNTS)

typedef enum cohort__coll {
  COHORT__COLL_NONE = 0,
#define COHORT__X(NAME, number, name, flags) COHORT__COLL_##NAME = number,
  COHORT__COLLECTIVES(COHORT__X)
#undef COHORT__X
} cohort__coll;

/* X(NAME, number, "name"): every algorithm a call can run; the number is the frame's `algo`. */
#define COHORT__ALGORITHMS(X)                                                                                          \
  X(AUTO, 0, "auto")                   /* chosen by the call's size (and the transport's node allreduce) */            \
  X(RING, 1, "ring")                   /* ring.c: allreduce, reduce-scatter, allgather */                              \
  X(RD, 2, "rd")                       /* rd.c: recursive doubling allreduce */                                        \
  X(HD, 3, "hd")                       /* halving-doubling: reserved, never chosen */                                  \
  X(TREE, 4, "tree")                   /* broadcast.c: binomial tree */                                                \
  X(CHAIN, 5, "chain")                 /* broadcast.c: pipelined chain */                                              \
  X(DISSEMINATION, 6, "dissemination") /* barrier.c */                                                                 \
  X(HIER, 7, "hier")                   /* hier.c: shm within the node, ring or rd across */                            \
  X(DEVICE, 8, "device")               /* device buffers: one of the GPU paths (src/gpu/) */                           \
  X(LINEAR, 9, "linear")               /* rooted.c: the root exchanges with every rank directly */                     \
  X(PAIRWISE, 10, "pairwise")          /* alltoall.c: step k sends to rank + k and receives from rank - k */

typedef enum cohort__algo {
#define COHORT__X(NAME, number, name) COHORT__ALGO_##NAME = number,
  COHORT__ALGORITHMS(COHORT__X)
#undef COHORT__X
} cohort__algo;

/* What the tables below say of a collective. */
typedef struct cohort__coll_info {
  const char *name;     /* "allreduce" */
  const char *api_name; /* "cohort_allreduce": its public function, for messages about its arguments */
  unsigned flags;       /* COHORT__CALL_* */
} cohort__coll_info;

static const cohort__coll_info cohort__coll_infos[] = {
#define COHORT__X(NAME, number, name, flags) [number] = {name, "cohort_" name, flags},
    COHORT__COLLECTIVES(COHORT__X)
#undef COHORT__X
};

static const char *const cohort__algo_names[] = {
#define COHORT__X(NAME, number, name) [number] = name,
    COHORT__ALGORITHMS(COHORT__X)
#undef COHORT__X
};

/* A collective's entry, or NULL for a number that is no collective. */
static inline const cohort__coll_info *cohort__coll_info_of(uint32_t coll) {
  const size_t n = sizeof cohort__coll_infos / sizeof cohort__coll_infos[0];
  return coll < n && cohort__coll_infos[coll].name ? &cohort__coll_infos[coll] : NULL;
}

/* "allreduce", "broadcast", ... or NULL for a number that is no collective. */
static inline const char *cohort__coll_name(uint32_t coll) {
  const cohort__coll_info *i = cohort__coll_info_of(coll);
  return i ? i->name : NULL;
}

/* "cohort_allreduce", ... or NULL, as above. */
static inline const char *cohort__coll_api_name(uint32_t coll) {
  const cohort__coll_info *i = cohort__coll_info_of(coll);
  return i ? i->api_name : NULL;
}

/* The COHORT__CALL_* flags of a collective; a number that is no collective is taken as one that reduces. */
static inline unsigned cohort__coll_flags(uint32_t coll) {
  const cohort__coll_info *i = cohort__coll_info_of(coll);
  return i ? i->flags : COHORT__CALL_OP;
}

/* "ring", "tree", ... or NULL for a number that is no algorithm. */
static inline const char *cohort__algo_name(uint32_t algo) {
  const size_t n = sizeof cohort__algo_names / sizeof cohort__algo_names[0];
  return algo < n ? cohort__algo_names[algo] : NULL;
}

/* What a frame belongs to; all ranks must agree on every field for the same seq. */
typedef struct cohort__call {
  uint32_t seq;
  uint8_t coll;  /* cohort__coll */
  uint8_t dtype; /* cohort_dtype */
  uint8_t op;    /* cohort_op */
  uint8_t algo;  /* cohort__algo */
  int32_t root;  /* the root (or peer) rank; -1 for a collective that has none */
  uint32_t sig;  /* COHORT__CALL_COUNTS: the hash of the counts array (it travels in the frame header's once
                  * reserved bytes); 0 for every other collective. 32 bits: the call fits the padding before count,
                  * and two calls fit the cache line of shm's node flags (shm_impl.h) */
  uint64_t count;
} cohort__call;

/* The signature of a counts array as every rank passes it: FNV-1a 64 over the counts as 64-bit little-endian
 * values, folded to 32 bits. Two ranks whose arrays differ get different signatures except with probability about
 * 2^-32. */
static inline uint32_t cohort__counts_sig(const size_t *counts, int n) {
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (int i = 0; i < n; i++) {
    uint64_t v = (uint64_t)counts[i];
    for (int b = 0; b < 8; b++) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= UINT64_C(0x100000001b3);
    }
  }
  return (uint32_t)(h ^ (h >> 32));
}

/* The call of collective number seq, with the fields the collective does not take zeroed (root -1), so that ranks
 * that pass different values there still agree. */
static inline cohort__call cohort__call_make(uint32_t seq, cohort__coll coll, cohort_dtype dtype, cohort_op op,
                                             cohort__algo algo, int root, uint64_t count, uint32_t sig) {
  unsigned f = cohort__coll_flags(coll);
  int has_data = !(f & COHORT__CALL_NO_DATA);
  return (cohort__call){.seq = seq,
                        .coll = (uint8_t)coll,
                        .dtype = (uint8_t)(has_data ? dtype : 0),
                        .op = (uint8_t)(f & COHORT__CALL_OP ? op : 0),
                        .algo = (uint8_t)algo,
                        .root = f & (COHORT__CALL_ROOT | COHORT__CALL_PEER) ? root : -1,
                        .count = has_data ? count : 0,
                        .sig = f & COHORT__CALL_COUNTS ? sig : 0};
}

static inline int cohort__call_equal(const cohort__call *a, const cohort__call *b) {
  return a->seq == b->seq && a->coll == b->coll && a->dtype == b->dtype && a->op == b->op && a->algo == b->algo &&
         a->root == b->root && a->count == b->count && a->sig == b->sig;
}

/* "allreduce(count=10, f32, sum, ring) [call #3]" into buf: the fields the collective takes, for messages. */
void cohort__call_describe(const cohort__call *call, char *buf, size_t len);

#endif
