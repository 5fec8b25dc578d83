/*
 * replicas.h: fmnist-train --replicas N, single-process data parallelism. N replicas of the job run as threads of
 * this process, joined by the in-process transport (cohort_inproc_group), each a full rank that runs the same
 * train_run() as a process under cohortrun would: the same collectives, the same parameters bit for bit.
 *
 * Invariants:
 *  - Either every replica joins the group or none does: the threads wait for all of them to exist before any calls
 *    cohort_init_inproc(), which blocks until all N have joined (a thread that could not be created would leave
 *    the others waiting forever).
 *  - A replica that fails aborts the group before it leaves, so that replicas blocked in a collective it will
 *    never join return COHORT_ERR_REMOTE instead of waiting for COHORT_OP_TIMEOUT. (Over TCP the dying process
 *    closes its links; a thread that returns closes nothing, hence the explicit abort.)
 *  - The exit code is the worst of the replicas' (TRAIN_EXIT_FAIL over TRAIN_EXIT_OK).
 *
 * Thread-safety: train_replicas_run() is called once, from the main thread; the job function runs on N threads at
 * once, each with its own communicator, and must keep no state outside what it is given.
 */
#ifndef FMNIST_REPLICAS_H
#define FMNIST_REPLICAS_H

#include "train.h"

/* What each replica runs: train_run, or a test's job. Returns a TRAIN_EXIT_* code. */
typedef int (*train_replica_fn)(const train_config *cfg, cohort_comm *comm);

/* Runs fn on n threads (1..64), replica r as rank r of an n-rank in-process communicator. Returns the worst exit
 * code; a failure to start (threads, the group) is TRAIN_EXIT_FAIL with one line on stderr. */
int train_replicas_run(const train_config *cfg, int n, train_replica_fn fn);

#endif /* FMNIST_REPLICAS_H */
