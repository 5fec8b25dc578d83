/*
 * shm_impl.h: what shm.c (the rings, waiting, failure, setup) and shm_coll.c (the node collectives over the staging
 * buffers) share: the segment layout and the transport's private state. Private to src/transport/shm*.c.
 *
 * Invariants: every field of a segment that another process writes is atomic or written before a release store
 * that the reader acquires; a segment's layout (offsets, sizes) is written once by its owner before its name is
 * published and checked against the reader's own computation when mapped.
 *
 * Thread-safety: as transport.h says (one driving thread; interrupt from any thread).
 */
#ifndef COHORT_TRANSPORT_SHM_IMPL_H
#define COHORT_TRANSPORT_SHM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/failure.h"
#include "transport/frame.h"
#include "transport/transport.h"

#define CACHE_LINE 64
/* Allreduces up to this many bytes may take the small-message path of the node allreduce (shm_coll.c); up to how
 * many they do is COHORT_SHM_SMALL_BYTES (shm_transport.small_bytes), at most this. */
#define COHORT__SHM_SMALL_BYTES ((uint64_t)64 << 10)

/* ---- the segment (shared; laid out by its owner, read by everyone) ---- */

/* The owner's flags of the node collectives (shm_coll.c). Each sits on a cache line of its own and only the owner
 * writes it; the chunk numbers only grow, are stored with release and read with acquire. */
typedef struct node_flags {
  _Alignas(CACHE_LINE) _Atomic uint64_t in; /* chunk k of my input is in my staging buffer k % 2 */
  /* The node call whose first chunk uses staging buffer b: call_seq[b] (its seq + 1; 0: none) is stored after
   * call[b]. Tied to the buffer, the slot cannot be rewritten before every peer has read it (see claim()). On the
   * line of `in`, so that a peer reading `in` gets the call with it. */
  _Atomic uint32_t call_seq[2];
  cohort__call call[2];
  _Alignas(CACHE_LINE) _Atomic uint64_t out;  /* my slice of chunk k is reduced, in my staging buffer */
  _Alignas(CACHE_LINE) _Atomic uint64_t done; /* I read nothing more of anyone's buffers for chunks <= k */
  /* Zero copy, for the call of call[b]: the arena offsets of my sendbuf and recvbuf, where the peers read my input
   * and my slice's result instead of my staging buffer; -1: staged. Written before call_seq[b]. */
  _Alignas(CACHE_LINE) int64_t zc_in[2];
  int64_t zc_out[2];
} node_flags;
_Static_assert(sizeof(node_flags) == 4 * CACHE_LINE, "in and the calls share one cache line");

/* The ranks' agreement (coll/agree.c) through the segments: agreement k's signature of the owner is in sig[k % 2],
 * written before k is stored (release). A slot is rewritten two agreements later, when every peer has published
 * k + 1 and so has read it. A small node allreduce may have staged its input (staging buffer of its chunk) before k
 * too. */
typedef struct agree_slot {
  _Alignas(CACHE_LINE) _Atomic uint64_t k;
  unsigned char sig[2][COHORT__AGREE_MAX];
} agree_slot;

typedef struct ring_ctl {
  _Alignas(CACHE_LINE) _Atomic uint64_t head; /* bytes written so far (the producer, a peer) */
  _Alignas(CACHE_LINE) _Atomic uint64_t tail; /* bytes consumed so far (the consumer, the owner) */
} ring_ctl;

typedef struct seg_hdr {
  uint64_t magic;
  int32_t rank, size;
  uint64_t ring_bytes;   /* capacity of each inbound ring */
  uint64_t ctl_offset;   /* ring_ctl[size], indexed by producer rank (the owner's own entry is unused) */
  uint64_t data_offset;  /* size - 1 rings of ring_bytes, in producer order without the owner */
  uint64_t stage_offset; /* two staging buffers of stage_bytes for the node collectives */
  uint64_t stage_bytes;
  uint64_t small_bytes;  /* COHORT_SHM_SMALL_BYTES: the same on every rank of the host (checked at attach) */
  uint64_t arena_offset; /* the zero-copy arena (cohort_alloc): arena_bytes, reserved page by page as allocated */
  uint64_t arena_bytes;
  uint64_t total_bytes;
  _Alignas(CACHE_LINE) _Atomic uint32_t futex;   /* bumped by whoever may have unblocked the owner */
  _Atomic uint32_t sleeping;                     /* the owner is (about to be) asleep on futex */
  _Alignas(CACHE_LINE) _Atomic uint32_t aborted; /* 1 once abort_status and abort_text are written */
  /* 1 once the owner destroyed its transport (cohort_comm_destroy, cohort.shutdown()): its process may go on, but
   * it will never set another flag or write another frame, so a peer waiting on it fails at once (shm.c). */
  _Atomic uint32_t closed;
  int32_t abort_status;
  char abort_text[COHORT__ABORT_TEXT_MAX];
  node_flags node;
  agree_slot agree;
} seg_hdr;

/* ---- private state ---- */

enum { ALIVE, DEAD_SEEN, DEAD };

typedef struct arena_block {
  uint64_t off, len;
} arena_block;

typedef struct peer {
  seg_hdr *seg; /* the peer's segment (our outbound ring lives there) */
  size_t seg_len;
  int pid, pidfd;
  int life;              /* ALIVE, DEAD_SEEN (one more drain before judging), DEAD */
  int closed;            /* its life ended by its cohort_comm_destroy, not by its process's exit */
  int64_t zc_in, zc_out; /* the peer's zero-copy offsets for the current node call (-1: staged) */
  cohort__link l;        /* the frames both ways over the two rings (frame.c); l.peer is the peer */
  /* outbound: the ring in the peer's segment that we produce into */
  ring_ctl *out_ctl;
  char *out_data;
  uint64_t out_cap, out_head, out_tail;
  /* inbound: the ring in our segment that the peer produces into */
  ring_ctl *in_ctl;
  char *in_data;
  uint64_t in_cap, in_head, in_tail;
} peer;

typedef struct shm_transport {
  cohort__transport base;
  seg_hdr *me; /* our own segment */
  size_t me_len;
  peer *peers;         /* [size]; our own entry is unused */
  cohort__links links; /* the rings' frame machine (frame.h); its world_offset is WORLD's */
  cohort__call call;
  uint64_t node_k;          /* the last chunk number of the node collectives (the same on every rank) */
  uint64_t agree_k;         /* the last agreement (cohort__shm_agree; the same on every rank) */
  int staged;               /* the last agreement staged our input for node chunk node_k + 1 */
  uint64_t small_bytes;     /* allreduces up to this many bytes take the small path (COHORT_SHM_SMALL_BYTES) */
  int me_fd;                /* our segment, kept open to reserve arena pages as they are allocated */
  pthread_mutex_t arena_mu; /* cohort_alloc may run on any thread */
  arena_block *blocks;      /* allocated arena blocks, sorted by offset */
  size_t nblocks, blocks_cap;
  const void **operands;                  /* [size]: the inputs of one reduction (shm_coll.c) */
  cohort_status (*idle_check)(void *arg); /* cohort__shm_set_idle_check */
  void *idle_arg;
  int64_t spin_ns, timeout_ns;
  int64_t next_progress_liveness; /* shm_progress: when it next looks at the peers' processes */
  double op_timeout_s;
  size_t pending;                    /* posted requests not yet complete */
  cohort__failure failure;           /* the first failure, final; also in our abort slot for the peers */
  cohort__failure_request interrupt; /* interrupt(): any thread asks, the driving thread fails */
} shm_transport;

/* Rank p of this transport as the job numbers it (differs when the transport spans one node of several). */
#define WORLD(t, p) ((p) + (t)->links.world_offset)

/* Owner s's arena. */
static inline char *cohort__shm_arena(seg_hdr *s) { return (char *)s + s->arena_offset; }

/* Owner s's staging buffer b (0 or 1). */
static inline char *cohort__shm_stage(seg_hdr *s, int b) {
  return (char *)s + s->stage_offset + (uint64_t)b * s->stage_bytes;
}

/* Fails the transport (the first failure wins) and tells every peer through our abort slot. */
cohort_status cohort__shm_fail(shm_transport *t, cohort_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Stores v into one of our node flags (release) and wakes the peers that sleep. */
void cohort__shm_publish(shm_transport *t, _Atomic uint64_t *flag, uint64_t v);
/* Waits until peer p's flag (in p's segment) reaches want: spins, then sleeps on our futex; fails on an abort of
 * anyone, an interrupt, p's death, a frame of this very call in a ring (a peer in another collective), or
 * COHORT_OP_TIMEOUT. */
cohort_status cohort__shm_await(shm_transport *t, int p, _Atomic uint64_t *flag, uint64_t want);

/* ptr's offset in our arena when all its bytes lie in it, else -1. */
int64_t cohort__shm_arena_offset(shm_transport *t, const void *ptr, size_t bytes);

/* The node allreduce (shm_coll.c): the transport's node_allreduce operation (transport.h); the call has been set. */
cohort_status cohort__shm_node_allreduce(cohort__transport *t, const void *sendbuf, void *recvbuf, size_t count,
                                         cohort_dtype dtype, cohort_op op, cohort__slice_fn complete, void *arg);

/* The transport's agree operation (shm_coll.c, transport.h). */
cohort_status cohort__shm_agree(cohort__transport *t, const void *mine, size_t bytes, void *all, const void *stage,
                                size_t stage_bytes);

/* The segment's magic, and the page size its parts are aligned to. */
#define SEG_MAGIC 0x314d485354524843ull /* "CHRTSHM1" */
#define PAGE 4096
static inline uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

/* The transport table and the rings' byte carrier (shm.c), which shm_setup.c puts in the transports it makes, and
 * the destructor a failed setup calls. */
extern const cohort__transport_ops cohort__shm_ops;
extern const cohort__link_ops cohort__shm_link_ops;
void cohort__shm_destroy(cohort__transport *t);

#endif
