/*
 * coll_check.h: the collective correctness checks shared by the thread tests (unit/test_coll_inproc.c) and the
 * multi-process tests (mp/test_collectives.c): every collective x dtype x op x count, each result compared element
 * by element with a reference computed in double from the inputs every rank generated.
 */
#ifndef COHORT_TEST_COLL_CHECK_H
#define COHORT_TEST_COLL_CHECK_H

#include <stddef.h>
#include <string.h>

#include "cohort/cohort.h"

/* Runs the full matrix on comm with the given counts; returns the number of failed checks (0 = all good). Prints
 * one line per failure, naming the collective, dtype, op, count, element, got and expected. */
int coll_check_all(cohort_comm *comm, const size_t *counts, int ncounts);
/* The same for allreduce and broadcast alone, whose vectors do not grow with the world: at a large world, counts
 * that take their large-message paths (ring, chain, the node allreduce's chunks) without the count x world elements
 * per rank that reduce_scatter and allgather of such a count would need. */
int coll_check_allreduce_broadcast(cohort_comm *comm, const size_t *counts, int ncounts);
/* 1 when the communicator's transport has a shared arena (shm, and tcp+shm across nodes): cohort_alloc gives
 * blocks of it there, and malloc elsewhere. */
static inline int coll_check_has_arena(const cohort_comm *comm) {
  const char *tr = cohort_transport_name(comm);
  return strcmp(tr, "shm") == 0 || strcmp(tr, "tcp+shm") == 0;
}

/* On (for the calling thread's checks): every check's buffers come from cohort_alloc (the shared arena where the
 * transport has one: zero copy), and a buffer outside the arena on such a transport counts as a failed check. Off (the
 * default): malloc. */
void coll_check_use_arena(int on);
/* Only these dtypes (a bit per cohort_dtype; for the calling thread's checks), default all: the large-world runs
 * check the algorithms at scale on a few dtypes of each size, the small worlds every dtype (tests/mp/large.cmake). */
void coll_check_use_dtypes(unsigned mask);
/* Async: several iallreduce in flight, completed in order, mixed with a blocking call. */
int coll_check_async(cohort_comm *comm);
/* A root that runs ahead: rank 0 sends six 1.2 MB broadcasts while the others start 0.3 s late, so frames of later
 * calls reach them during earlier ones; every call's data must land whole, in its own call. */
int coll_check_run_ahead(cohort_comm *comm);
/* Barrier: nobody leaves before the last rank has entered. */
int coll_check_barrier(cohort_comm *comm);

#endif
