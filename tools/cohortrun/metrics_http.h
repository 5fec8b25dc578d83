/*
 * metrics_http.h: cohortrun --metrics-port, live metrics of the job for Prometheus (OpenMetrics text over HTTP).
 *
 * The workers' DDP engines rewrite their counters in a directory (COHORT_METRICS_DIR, src/ddp/counters.c); a thread of
 * cohortrun's answers each GET /metrics with them, one series per rank (labels rank and host), and the launcher's own
 * (ranks running, generation, failures). Read-only and unauthenticated, as Prometheus' exporters are: it reveals
 * training figures, takes nothing from the request but its first line, and serves one connection at a time.
 */
#ifndef COHORT_TOOLS_COHORTRUN_METRICS_HTTP_H
#define COHORT_TOOLS_COHORTRUN_METRICS_HTTP_H

#include "cohort/cohort.h"

typedef struct cohortrun_metrics cohortrun_metrics;

/* What the launcher says of itself, read by the serving thread (written by the main thread: plain ints). */
typedef struct cohortrun_job_figures {
  volatile int ranks_running;
  volatile int generation;
  volatile int failures;
} cohortrun_job_figures;

/* Listens on addr:port (addr NULL: every interface; port 0: any, *bound_port says which), makes the counters'
 * directory and sets COHORT_METRICS_DIR for the workers, and starts serving. */
cohort_status cohortrun_metrics_start(const char *addr, int port, const char *host, int rank0,
                                      const cohortrun_job_figures *figures, cohortrun_metrics **out, int *bound_port);
/* Stops serving and removes the directory. Safe on NULL. */
void cohortrun_metrics_stop(cohortrun_metrics *m);
/* The page as it would be served now (for tests and the last look): a malloc'd string. */
char *cohortrun_metrics_page(cohortrun_metrics *m);

#endif
