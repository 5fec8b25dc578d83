/*
 * shm.h: the shared-memory transport (shm.c), for a job whose ranks all run on one host (COHORT_TRANSPORT=shm).
 *
 * Setting it up is a rendezvous of its own over the store, so it lives beside the transport rather than in
 * comm/rendezvous.c: every rank first publishes its arrival (its host identity) and waits for everyone's, so that
 * nothing exists in /dev/shm while a rank may still be killed waiting for late peers; then every rank creates one
 * segment for its inbound rings, publishes its name, its pid and its host identity under "<prefix>shm/<rank>", maps
 * every peer's segment, and after a store barrier (which also stands for the TCP path's "connected" barrier: no rank
 * touches the store after it) unlinks its own, so nothing is left in /dev/shm even if a rank is killed later.
 *
 * Thread-safety: as transport.h says (one driving thread; interrupt from any thread).
 */
#ifndef COHORT_TRANSPORT_SHM_H
#define COHORT_TRANSPORT_SHM_H

#include <stdint.h>

#include "store/store.h"
#include "transport/transport.h"

/* Builds the shm transport of rank of size over store (keys under prefix); the job knows rank r as r + world_offset
 * (see cohort__shm_set_world_offset), which is how messages name it. deadline_ns bounds the whole setup
 * (COHORT_TIMEOUT); spin_us is how long a waiting rank polls before it sleeps on its futex. Reads
 * COHORT_SHM_RING_BYTES and COHORT_OP_TIMEOUT. Fails with COHORT_ERR_INVALID when the ranks are not on one host. */
#define COHORT__SHM_HOST_ID_MAX 256
/* What must be equal on every rank for shared memory to work between them: the host (name and boot id), the pid
 * namespace, and COHORT_NODE_ID when set (so that tests can simulate several hosts on one). */
void cohort__shm_host_identity(char *out, size_t len);

cohort_status cohort__shm_rendezvous(int rank, int size, int world_offset, cohort__store *store, const char *prefix,
                                     int64_t deadline_ns, long spin_us, cohort__transport **out);

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
