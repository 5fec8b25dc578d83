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
 * all carry one call (src/comm/p2p.c).
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
};

/* X(NAME, number, "name", flags): every collective a call can be. */
#define COHORT__COLLECTIVES(X)                                                                                         \
  X(ALLREDUCE, 1, "allreduce", COHORT__CALL_OP)                                                                        \
  X(BROADCAST, 2, "broadcast", COHORT__CALL_ROOT | COHORT__CALL_ONE_BUFFER)                                            \
  X(ALLGATHER, 3, "allgather", COHORT__CALL_RECV_PER_RANK)                                                             \
  X(REDUCE_SCATTER, 4, "reduce_scatter", COHORT__CALL_OP | COHORT__CALL_SEND_PER_RANK)                                 \
  X(BARRIER, 5, "barrier", COHORT__CALL_NO_DATA)                                                                       \
  X(INTERNAL, 6, "internal", COHORT__CALL_OP) /* setup traffic of the library itself */                                \
  X(P2P, 7, "p2p", COHORT__CALL_PEER)         /* point-to-point messages, on their own transport (src/comm/p2p.c) */

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
  X(DEVICE, 8, "device")               /* device buffers: one of the GPU paths (src/gpu/) */

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
  uint64_t count;
} cohort__call;

/* The call of collective number seq, with the fields the collective does not take zeroed (root -1), so that ranks
 * that pass different values there still agree. */
static inline cohort__call cohort__call_make(uint32_t seq, cohort__coll coll, cohort_dtype dtype, cohort_op op,
                                             cohort__algo algo, int root, uint64_t count) {
  unsigned f = cohort__coll_flags(coll);
  int has_data = !(f & COHORT__CALL_NO_DATA);
  return (cohort__call){.seq = seq,
                        .coll = (uint8_t)coll,
                        .dtype = (uint8_t)(has_data ? dtype : 0),
                        .op = (uint8_t)(f & COHORT__CALL_OP ? op : 0),
                        .algo = (uint8_t)algo,
                        .root = f & (COHORT__CALL_ROOT | COHORT__CALL_PEER) ? root : -1,
                        .count = has_data ? count : 0};
}

static inline int cohort__call_equal(const cohort__call *a, const cohort__call *b) {
  return a->seq == b->seq && a->coll == b->coll && a->dtype == b->dtype && a->op == b->op && a->algo == b->algo &&
         a->root == b->root && a->count == b->count;
}

/* "allreduce(count=10, f32, sum, ring) [call #3]" into buf: the fields the collective takes, for messages. */
void cohort__call_describe(const cohort__call *call, char *buf, size_t len);

#endif
