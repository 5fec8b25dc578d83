/*
 * shm.h: the shared-memory transport (shm.c), for a job whose ranks all run on one host (COHORT_TRANSPORT=shm).
 *
 * Setting it up is a rendezvous of its own over a store that the caller scopes to it (a prefix view, store.h), so
 * it lives beside the transport rather than in comm/rendezvous.c: every rank first publishes its arrival (its host
 * identity, key "arrived/<rank>") and waits for everyone's, so that nothing exists in /dev/shm while a rank may
 * still be killed waiting for late peers; then every rank creates one segment for its inbound rings, publishes its
 * name, its pid and its host identity under "<rank>", maps every peer's segment, and after a store barrier
 * ("mapped", which also stands for the TCP path's "connected" barrier: no rank touches the store after it) unlinks
 * its own, so nothing is left in /dev/shm even if a rank is killed later. A rank whose setup fails leaves its reason
 * under "error", so the others fail at once with it.
 *
 * Thread-safety: as transport.h says (one driving thread; interrupt from any thread).
 */
#ifndef COHORT_TRANSPORT_SHM_H
#define COHORT_TRANSPORT_SHM_H

#include <stdint.h>

#include "store/store.h"
#include "transport/transport.h"

#define COHORT__SHM_HOST_ID_MAX 256
/* What must be equal on every rank for shared memory to work between them: the host (name and boot id), the pid
 * namespace, and node_id (COHORT_NODE_ID) when not empty (so that tests can simulate several hosts on one). */
void cohort__shm_host_identity(const char *node_id, char *out, size_t len);

/* COHORT_SHM_RING_BYTES=auto for a transport of size ranks: 4 MiB a ring up to 9 ranks, then 32 MiB of rings per
 * rank shared among its size - 1 peers, never below 256 KiB a ring (one default pipeline segment); whole pages.
 * Every rank reserves its inbound rings in /dev/shm at init, so a host holds size x (size - 1) rings: with 4 MiB
 * each, 64 ranks on one host took 15.75 GiB of memory (and 10 s of cohort_init on 2 cores to reserve it); auto
 * keeps that to 32 MiB per rank (2 GiB at 64 ranks) while up to 9 ranks keep the 4 MiB rings. */
long cohort__shm_auto_ring_bytes(int size);
long cohort__shm_auto_arena_bytes(int size);
/* COHORT_SHM_SMALL_BYTES=auto for size ranks on a host: the small path (every rank reduces the whole vector from all
 * size staging buffers) up to COHORT__SHM_SMALL_BYTES at 2 ranks, where it beats the sliced path by a round of
 * flags; none from 3 ranks on. On the 16-core GPU host (2026-11-27, every threshold at 4 KiB to 256 KiB) it won at
 * no size from 4 ranks on and lost by 1.4x to 4.4x at 8 and 16 ranks (docs/performance.md); 3 is unmeasured. */
long cohort__shm_auto_small_bytes(int size);

typedef struct cohort__shm_options {
  long ring_bytes;  /* COHORT_SHM_RING_BYTES; -1: auto (cohort__shm_auto_ring_bytes) */
  long chunk_bytes; /* COHORT_SHM_CHUNK_BYTES: a multiple of 64 */
  long small_bytes; /* COHORT_SHM_SMALL_BYTES: 0 to COHORT__SHM_SMALL_BYTES; -1: auto (cohort__shm_auto_small_bytes) */
  long arena_bytes; /* COHORT_SHM_ARENA_BYTES; -1: auto (cohort__shm_auto_arena_bytes) */
  double op_timeout_s; /* COHORT_OP_TIMEOUT */
  long spin_us;        /* how long a waiting rank polls before it sleeps on its futex */
  const char *node_id; /* COHORT_NODE_ID */
  /* Optional: called while waiting for peer p's keys; a failure it returns (p runs another transport, say) ends the
   * setup at once instead of at the deadline. */
  cohort_status (*peer_elsewhere)(void *arg, int p);
  void *arg;
} cohort__shm_options;

/* Builds the shm transport of rank of size over store (a view scoped to this setup: the keys above); the job knows
 * rank r as r + world_offset (see cohort__shm_set_world_offset), which is how messages name it. deadline_ns bounds
 * the whole setup (COHORT_TIMEOUT). Fails with COHORT_ERR_INVALID when the ranks are not on one host. */
cohort_status cohort__shm_rendezvous(int rank, int size, int world_offset, cohort__store *store, int64_t deadline_ns,
                                     const cohort__shm_options *options, cohort__transport **out);

/* A transport among the ranks of one node of a multi-node job (the hierarchical allreduce, src/coll/hier.c):
 * rank r here is rank r + world_offset of the job, which is how messages name it (cohort__shm_rendezvous takes the
 * same offset, so that setup errors name job ranks too; 0 for a job on one host). */
void cohort__shm_set_world_offset(cohort__transport *t, int world_offset);

/* Optional: check(arg) runs every few milliseconds while a node collective of t waits on a peer's flag; a failure it
 * returns fails the wait (and t, so the node peers hear of it). The layered transport polls the TCP mesh with it: a
 * failure that only the mesh shows (an ABORT from another node) must not leave a rank waiting on a node peer that
 * will never come (one that has left, say) until COHORT_OP_TIMEOUT. */
void cohort__shm_set_idle_check(cohort__transport *t, cohort_status (*check)(void *arg), void *arg);

/* Whether a node peer has published a node collective of t's current call number that differs from it
 * (COHORT_ERR_MISMATCH naming both, and t aborted), for a rank that waits elsewhere (on the TCP mesh). */
cohort_status cohort__shm_check_node_calls(cohort__transport *t);

#endif
