/*
 * stall.h: the stall inspector. When this rank has waited COHORT_STALL_S seconds (default 60) for a bucket's
 * reduction, it logs a warning naming the bucket and the ranks that have not submitted it yet, and what each of
 * them was last seen doing, e.g.
 *   "stall: waited 60 s for bucket 3 of step 17; missing: rank 2 (last submitted: bucket 1 of step 17)".
 * It warns again every COHORT_STALL_S while the wait lasts; it never aborts anything (the op timeout does that).
 *
 * How ranks learn about each other: each rank's watchdog thread publishes this rank's progress (step, bucket
 * submitted) on the communicator's notice board (comm/board.h: the job's key space in the store, "stall/<rank>", or
 * an in-process group's board in memory), at most every stall_s / 4 seconds and only when it changed; a stalled rank
 * reads every other rank's. So the store sees a handful of small writes per minute, not one per bucket.
 *
 * Thread-safety: progress/wait_begin/wait_end are called from the training thread and are cheap (a mutex, no I/O);
 * the store traffic happens on the inspector's own thread.
 */
#ifndef COHORT_DDP_STALL_H
#define COHORT_DDP_STALL_H

#include <stdint.h>

#include "cohort/cohort.h"

typedef struct cohort__stall cohort__stall;

/* Starts the inspector's thread for this rank of comm. stall_s <= 0 turns it off (*out = NULL, COHORT_OK). */
cohort_status cohort__stall_create(cohort_comm *comm, double stall_s, cohort__stall **out);
/* This rank has submitted bucket `bucket` of step `step` (buckets of a step are submitted in increasing order). */
void cohort__stall_progress(cohort__stall *s, int64_t step, int bucket);
/* This rank starts (and ends) waiting for bucket `bucket` of step `step` to finish reducing. */
void cohort__stall_wait_begin(cohort__stall *s, int64_t step, int bucket);
void cohort__stall_wait_end(cohort__stall *s);
/* How many warnings this inspector has logged (for tests). */
int cohort__stall_warnings(const cohort__stall *s);
/* Stops the thread and frees. Safe on NULL. */
void cohort__stall_destroy(cohort__stall *s);

#endif
