/*
 * split_check.h: checks of sub-communicators (cohort_comm_split, cohort_comm_dup), shared by the thread tests
 * (unit/test_coll_inproc.c) and the multi-process tests (mp/test_split.c). Each returns the number of failed
 * checks (0 = all good) and prints one line per failure. Collective over world: every rank calls each.
 */
#ifndef COHORT_TEST_SPLIT_CHECK_H
#define COHORT_TEST_SPLIT_CHECK_H

#include <stddef.h>

#include "cohort/cohort.h"

/* Splits world by rank parity (rank 1 in no group at 5 ranks and more), ordered by descending rank: checks
 * membership, order and the NULL of the rank left out, then runs the collective matrix (coll_check_all with counts,
 * async, barrier) on each group; then the same on a dup of world and on a split of each group. */
int split_check_matrix(cohort_comm *world, const size_t *counts, int ncounts);
/* Two splits (parity, lower/upper half) that both hold every rank: two threads of each rank drive one each with
 * different collectives at the same time, and then one thread issues cohort_i* work on both in opposite orders on
 * even and odd ranks. A shared transport would mismatch or hang. */
int split_check_concurrent(cohort_comm *world);
/* Splits made at the same time: a dup of world first, then two threads of each rank split world and the dup by
 * parity, 8 times each, keeping every group; each thread checks an allreduce of its own values on each new group
 * (two groups that met in one channel would swap or mismatch them), and at the end every group once more. */
int split_check_concurrent_splits(cohort_comm *world);
/* In the odd group (ranks 1, 3, ...: at least 4 ranks) one member calls another count: every member of that group
 * gets COHORT_ERR_MISMATCH naming ranks by their rank in world too, and goes on (its next allreduce is right), as
 * do the even group and world. */
int split_check_mismatch(cohort_comm *world);

/* Each rank makes a twin of world (cohort_comm_twin) from a second thread, at a time of its own (rank r after r
 * collectives of its main thread on world), while the main thread goes on with allreduces on world: both carry on
 * with the right values. Then a second twin of the same name and a bad name are refused. */
int split_check_twin(cohort_comm *world);

#endif
