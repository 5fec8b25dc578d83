/* counters.c: a rank's live counters in a file its launcher serves (counters.h). */
#include "ddp/counters.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

#define NOTES 8
#define WRITE_EVERY_NS 500000000LL

struct cohort__counters {
  char path[4096], tmp[4096];
  int64_t steps;
  double compute_s, comm_s, exposed_s, bytes, last_step_s;
  int stalls;
  int64_t last_end_ns, last_write_ns;
  struct {
    char name[32];
    double value;
  } notes[NOTES];
  int num_notes;
  int broken; /* a write failed: said once, then no more tries */
};

cohort_status cohort__counters_create(const char *dir, int rank, cohort__counters **out) {
  *out = NULL;
  cohort__counters *c = calloc(1, sizeof *c);
  if (!c) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  if ((size_t)snprintf(c->path, sizeof c->path, "%s/rank-%d.txt", dir, rank) >= sizeof c->path ||
      (size_t)snprintf(c->tmp, sizeof c->tmp, "%s/.rank-%d.tmp", dir, rank) >= sizeof c->tmp) {
    free(c);
    return cohort__error(COHORT_ERR_INVALID, "COHORT_METRICS_DIR is too long");
  }
  *out = c;
  return COHORT_OK;
}

void cohort__counters_note(cohort__counters *c, const char *name, double value) {
  if (!c || !name) return;
  for (int i = 0; i < c->num_notes; i++)
    if (strcmp(c->notes[i].name, name) == 0) {
      c->notes[i].value = value;
      return;
    }
  if (c->num_notes == NOTES) return;
  snprintf(c->notes[c->num_notes].name, sizeof c->notes[0].name, "%s", name);
  c->notes[c->num_notes++].value = value;
}

static void write_file(cohort__counters *c) {
  if (c->broken) return;
  FILE *f = fopen(c->tmp, "w");
  if (f) {
    fprintf(f,
            "steps_total %lld\ncompute_seconds_total %.6f\nallreduce_seconds_total %.6f\n"
            "exposed_comm_seconds_total %.6f\nallreduce_bytes_total %.0f\nstep_seconds %.6f\nstalls_total %d\n",
            (long long)c->steps, c->compute_s, c->comm_s, c->exposed_s, c->bytes, c->last_step_s, c->stalls);
    for (int i = 0; i < c->num_notes; i++)
      if (c->notes[i].value == c->notes[i].value) fprintf(f, "%s %.9g\n", c->notes[i].name, c->notes[i].value);
  }
  if (!f || fclose(f) != 0 || rename(c->tmp, c->path) != 0) {
    COHORT_LOG_WARN("metrics: cannot write %s (%s); the live counters stop here", c->path, strerror(errno));
    c->broken = 1;
  }
}

void cohort__counters_step(cohort__counters *c, const cohort_ddp_stats *s, double bytes, int stalls) {
  if (!c) return;
  c->stalls = stalls;
  int64_t now = cohort__now_ns();
  c->steps++;
  c->compute_s += s->last_compute_s;
  c->comm_s += s->last_comm_s;
  c->exposed_s += s->last_exposed_comm_s;
  c->bytes += bytes;
  c->last_step_s = c->last_end_ns ? (double)(now - c->last_end_ns) * 1e-9 : s->last_compute_s;
  c->last_end_ns = now;
  if (c->last_write_ns && now - c->last_write_ns < WRITE_EVERY_NS) return;
  c->last_write_ns = now;
  write_file(c);
}

void cohort__counters_destroy(cohort__counters *c) {
  if (!c) return;
  if (c->steps) write_file(c);
  free(c);
}
