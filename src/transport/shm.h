/*
 * shm.h: the shared-memory transport (shm.c), for a job whose ranks all run on one host (COHORT_TRANSPORT=shm).
 *
 * Setting it up is a rendezvous of its own over the store, so it lives beside the transport rather than in
 * engine/rendezvous.c: every rank creates one segment for its inbound rings, publishes its name, its pid and its
 * host identity under "<prefix>shm/<rank>", maps every peer's segment, and after a store barrier (which also
 * stands for the TCP path's "connected" barrier: no rank touches the store after it) unlinks its own, so nothing
 * is left in /dev/shm even if a rank is killed later.
 *
 * Thread-safety: as transport.h says (one driving thread; interrupt from any thread).
 */
#ifndef COHORT_TRANSPORT_SHM_H
#define COHORT_TRANSPORT_SHM_H

#include <stdint.h>

#include "store/store.h"
#include "transport/transport.h"

/* Builds the shm transport of rank of size over store (keys under prefix). deadline_ns bounds the whole setup
 * (COHORT_TIMEOUT); spin_us is how long a waiting rank polls before it sleeps on its futex. Reads
 * COHORT_SHM_RING_BYTES and COHORT_OP_TIMEOUT. Fails with COHORT_ERR_INVALID when the ranks are not on one host. */
#define COHORT__SHM_HOST_ID_MAX 256
/* What must be equal on every rank for shared memory to work between them: the host (name and boot id), the pid
 * namespace, and COHORT_NODE_ID when set (so that tests can simulate several hosts on one). */
void cohort__shm_host_identity(char *out, size_t len);

cohort_status cohort__shm_rendezvous(int rank, int size, cohort__store *store, const char *prefix, int64_t deadline_ns,
                                     long spin_us, cohort__transport **out);

#endif
