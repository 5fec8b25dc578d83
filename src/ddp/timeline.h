/*
 * timeline.h: a Chrome trace of the training loop (COHORT_TIMELINE=path), readable by chrome://tracing and
 * Perfetto. One process lane per rank (pid = rank, named "rank N"), with two threads: "compute" (forward,
 * backward, optimizer) and "comm" (one allreduce span per bucket, args {bucket, bytes}).
 *
 * Spans are recorded in memory (cheap: an append under a mutex) and written once, by rank 0, for all ranks: at
 * cohort__timeline_write() the ranks send their spans to rank 0 over the communicator, and rank 0 writes the file
 * atomically (temp file + rename). Times are microseconds since each rank's cohort__timeline_create(), which the
 * ranks call together (the engine's creation is collective), so the lanes line up to within a barrier's skew.
 * If the communicator has failed, each rank writes its own lane to "<path>.rank<N>" instead, so a crashed job
 * still leaves a trace to look at.
 *
 * Thread-safety: cohort__timeline_span() may be called from any thread; create/write/destroy from one.
 */
#ifndef COHORT_DDP_TIMELINE_H
#define COHORT_DDP_TIMELINE_H

#include <stdint.h>

#include "cohort/cohort.h"

typedef struct cohort__timeline cohort__timeline;

typedef enum cohort__timeline_lane {
  COHORT__LANE_COMPUTE = 0,
  COHORT__LANE_COMM = 1,
} cohort__timeline_lane;

/* Starts a timeline for this rank writing to path (normally COHORT_TIMELINE). Collective over comm. */
cohort_status cohort__timeline_create(cohort_comm *comm, const char *path, cohort__timeline **out);
/* Records a span [begin_ns, end_ns] (CLOCK_MONOTONIC, cohort__now_ns()). name must be a string literal or
 * otherwise outlive the timeline. bucket < 0 means no args; else args {"bucket": bucket, "bytes": bytes}. */
void cohort__timeline_span(cohort__timeline *tl, cohort__timeline_lane lane, const char *name, int64_t begin_ns,
                           int64_t end_ns, int bucket, int64_t bytes);
/* Gathers every rank's spans to rank 0, which writes the file. Collective over comm. */
cohort_status cohort__timeline_write(cohort__timeline *tl);
/* Frees the timeline (without writing). Safe on NULL. */
void cohort__timeline_destroy(cohort__timeline *tl);

#endif
