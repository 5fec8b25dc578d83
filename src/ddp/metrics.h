/*
 * metrics.h: the engine's per-step metrics (COHORT_METRICS, cohort_ddp_metrics_open): every rank's compute,
 * communication and step times gathered each synchronized step, the slowest rank named, rank 0 writing one JSON line
 * per step (docs/training.md, "Metrics").
 */
#ifndef COHORT_DDP_METRICS_H
#define COHORT_DDP_METRICS_H

#include <stdint.h>

#include "cohort/cohort.h"
#include "cohort/ddp.h"

typedef struct cohort__metrics cohort__metrics;

/* Starts gathering over comm; rank 0 writes to path (NULL or "": gather only, for the end summary). Collective. */
cohort_status cohort__metrics_create(cohort_comm *comm, const char *path, cohort__metrics **out);
/* A value of the program's for the next record (rank 0's are written). At most 8 names a step. */
void cohort__metrics_note(cohort__metrics *m, const char *name, double value);
/* One synchronized step ended on this rank: gathers every rank's times (collective) and writes the line. */
cohort_status cohort__metrics_step(cohort__metrics *m, int64_t step, const cohort_ddp_stats *s, double bytes);
/* Writes the summary line (rank 0) and frees. */
void cohort__metrics_destroy(cohort__metrics *m);
/* The summary so far: the rank slowest most often, in how many steps, by how much on average. */
void cohort__metrics_summary(const cohort__metrics *m, cohort_ddp_straggler *out);

#endif
