/*
 * transport.h: the one interface every transport implements (a table of functions), and what the collective
 * algorithms in src/coll/ are written against.
 *
 * The model: point-to-point frames between ranks. isend/irecv post a frame to or from a peer and return at once;
 * wait() drives progress (on the calling thread) until the given request completes. Frames between two ranks are
 * delivered in the order they were posted, and a rank posts its receives from a peer in the order that peer posted
 * its sends, so frames are matched by position, not by tag.
 *
 * Every frame carries the collective it belongs to (cohort__call: sequence number, collective, count, dtype, op,
 * root, algorithm). A receiver compares it with its own current call: a difference is COHORT_ERR_MISMATCH naming
 * both ranks and both calls. (The ranks compare their calls before data moves, src/coll/agree.c, with frames of the
 * call "internal" under the real call's number: a disagreement found there refuses the call and leaves the
 * transport as it was; what the frames find is a net behind it.) Any failure aborts the transport: an ABORT frame with
 * the status and message goes to every peer, so every rank returns the same status, and later calls fail at once.
 *
 * Thread-safety: a transport is driven by one thread at a time (the engine guarantees it); abort() may be called
 * from any thread.
 */
#ifndef COHORT_TRANSPORT_TRANSPORT_H
#define COHORT_TRANSPORT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"
#include "transport/call.h"

/* A posted send or receive. Caller-owned; must stay alive (and untouched) until it completes. */
typedef struct cohort__req {
  struct cohort__req *next; /* the transport's queue link */
  void *buf;
  size_t bytes;
  size_t done_bytes;
  int peer;
  int is_send;
  int complete;
  cohort__call call; /* the call it was posted under (used by transports that match in memory) */
} cohort__req;

typedef struct cohort__transport cohort__transport;

/* The most bytes of a rank's signature that a transport's agree operation carries. */
#define COHORT__AGREE_MAX 64
/* The most input bytes a transport's agree operation stages (shm: its small node allreduce). A rank in cohort_join
 * stages zeros from cohort__agree_zeros in every round, whatever the others' call turns out to be
 * (src/coll/agree.c): as many as the transport's small node allreduce takes (shm: COHORT_SHM_SMALL_BYTES), so that it
 * stages whenever the others do. */
#define COHORT__AGREE_STAGE_MAX ((size_t)64 << 10)
extern const char cohort__agree_zeros[COHORT__AGREE_STAGE_MAX];

/* Completes one reduced slice of a node allreduce in place, before the node's other ranks copy it: slice holds
 * count elements, the node's reduction (AVG as SUM) of elements [first, first + count) of the vector. Called once
 * per chunk on every rank, with count 0 for an empty slice, so that the ranks that complete the same slices on other
 * nodes make the same calls. The hierarchical allreduce (src/coll/hier.c) allreduces the slice across nodes here. */
typedef cohort_status (*cohort__slice_fn)(void *arg, void *slice, size_t first, size_t count);

/* The parts of a transport that spans several nodes with several ranks each (the layered transport, layered.c).
 * Node j holds ranks [j * per_node, (j + 1) * per_node); rank r has local index r % per_node. */
typedef struct cohort__layers {
  cohort__transport *wide;   /* the mesh over all ranks of the job */
  cohort__transport *node;   /* among the ranks of this node (it has node_allreduce): its rank is our local index */
  cohort__transport *across; /* a view of wide: rank j is the rank with our local index on node j */
  int nodes, per_node;
} cohort__layers;

typedef struct cohort__transport_ops {
  const char *name;
  /* Sets the call stamped on outgoing frames and expected on incoming ones. */
  void (*set_call)(cohort__transport *t, const cohort__call *call);
  cohort_status (*isend)(cohort__transport *t, int peer, const void *buf, size_t bytes, cohort__req *req);
  cohort_status (*irecv)(cohort__transport *t, int peer, void *buf, size_t bytes, cohort__req *req);
  /* Drives progress until req completes (req NULL: until every posted request completes). */
  cohort_status (*wait)(cohort__transport *t, cohort__req *req);
  /* Fails the transport with status and message and tells every peer. Only the thread that drives the transport
   * (or any thread while nobody does) may call it. Idempotent: the first failure is the one reported. */
  void (*abort)(cohort__transport *t, cohort_status status, const char *message);
  /* Any thread: makes the wait in progress (or the next one) fail with status and message, and abort. */
  void (*interrupt)(cohort__transport *t, cohort_status status, const char *message);
  void (*destroy)(cohort__transport *t);
  /* Optional (NULL where a transport has none): the whole allreduce of the current call (set_call came first) done
   * by the transport itself, for transports that share memory between all ranks (shm). Same contract as the
   * algorithms in src/coll/: every rank gets bitwise the same result; recvbuf may equal sendbuf; AVG divides.
   * complete (NULL for none) sees each rank's reduced slice of every chunk before the peers copy it, and then does
   * the division of AVG itself; small vectors (every rank reduces the whole vector) go through it whole. */
  cohort_status (*node_allreduce)(cohort__transport *t, const void *sendbuf, void *recvbuf, size_t count,
                                  cohort_dtype dtype, cohort_op op, cohort__slice_fn complete, void *arg);
  /* Optional (NULL where a transport has none): the ranks' agreement (src/coll/agree.c) through memory that all
   * ranks share, one round instead of frames: publishes this rank's `bytes` (at most COHORT__AGREE_MAX) of mine and
   * fills all with every rank's, in rank order. Every rank calls it once per collective, whatever its call (the
   * call set is the exchange's own). stage, when not NULL: the input (stage_bytes) of the node allreduce that this
   * rank runs next if the ranks agree; the transport may copy it in the same round, and the next node_allreduce
   * then starts from there (a call refused meanwhile leaves nothing behind). */
  cohort_status (*agree)(cohort__transport *t, const void *mine, size_t bytes, void *all, const void *stage,
                         size_t stage_bytes);
  /* Optional: the parts of a transport over several nodes (the hierarchical allreduce uses them), else NULL. */
  const cohort__layers *(*layers)(const cohort__transport *t);
  /* Optional, any thread: bytes of memory that the peers can read in place (cohort_alloc), or NULL when there is
   * none (the caller falls back to malloc); release() frees such a block and returns 1, or returns 0 for memory that
   * is not its own. */
  void *(*alloc)(cohort__transport *t, size_t bytes);
  int (*release)(cohort__transport *t, void *ptr);
  /* Optional, any thread: 1 when [ptr, ptr + bytes) lies in that memory (a collective on it is zero copy). */
  int (*in_arena)(cohort__transport *t, const void *ptr, size_t bytes);
  /* Optional, any thread: where that memory lies in this process (cohort_arena_range); 0 when there is none. */
  int (*arena_range)(cohort__transport *t, void **base, size_t *bytes);
  /* Optional, the driving thread: looks at the peers without waiting for anything, and fails t (as a wait would)
   * when one died or aborted. For a thread that waits on something else meanwhile (the GPU paths' waits on the
   * device: src/gpu/gpu.c). */
  cohort_status (*poll)(cohort__transport *t);
  /* Optional, the driving thread: one pass that moves whatever can move now (sets *progressed when something did)
   * and waits for nothing, then fails t as a wait would when a peer that something posted still expects has died or
   * aborted; no COHORT_OP_TIMEOUT (nothing says how long a point-to-point receive may wait). The point-to-point
   * engine (src/comm/p2p.c) drives its transport with it alone. */
  cohort_status (*progress)(cohort__transport *t, int *progressed);
} cohort__transport_ops;

/* The common head of every transport. */
struct cohort__transport {
  const cohort__transport_ops *ops;
  int rank;
  int size;
};

/* t's layers when t spans several nodes with several ranks each (a layered transport), else NULL. */
static inline const cohort__layers *cohort__layers_of(const cohort__transport *t) {
  return t && t->ops->layers ? t->ops->layers(t) : NULL;
}

#endif
