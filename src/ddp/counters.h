/*
 * counters.h: a rank's live counters for a launcher to serve (COHORT_METRICS_DIR, set by cohortrun --metrics-port):
 * cumulative steps, seconds and bytes, and the program's latest values, rewritten atomically (a temporary file and
 * rename) at most twice a second as "<dir>/rank-<r>.txt", one "name value" line each. No communication: each rank
 * writes its own; cohortrun reads them when Prometheus scrapes it (docs/cohortrun.md, "Live metrics").
 */
#ifndef COHORT_DDP_COUNTERS_H
#define COHORT_DDP_COUNTERS_H

#include "cohort/cohort.h"
#include "cohort/ddp.h"

typedef struct cohort__counters cohort__counters;

cohort_status cohort__counters_create(const char *dir, int rank, cohort__counters **out);
/* The program's latest value of name (loss, lr, img_per_s): written as cohort_<name>. At most 8 names. */
void cohort__counters_note(cohort__counters *c, const char *name, double value);
/* A synchronized step ended: adds it to the totals and rewrites the file when the last write is 0.5 s old. stalls:
 * the stall inspector's warnings so far (COHORT_STALL_S). */
void cohort__counters_step(cohort__counters *c, const cohort_ddp_stats *s, double bytes, int stalls);
/* Writes the file a last time and frees. */
void cohort__counters_destroy(cohort__counters *c);

#endif
