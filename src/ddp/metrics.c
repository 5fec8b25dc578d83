/* metrics.c: the engine's per-step metrics across ranks, and the straggler they name (metrics.h). */
#include "ddp/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/log.h"

#define NOTES 8
#define FIELDS 4 /* compute, comm, exposed communication, the whole step */

struct cohort__metrics {
  cohort_comm *comm;
  int rank, size;
  FILE *f; /* rank 0 with a path */
  char *path;
  struct {
    char name[32];
    double value;
  } notes[NOTES];
  int num_notes;
  double *all;      /* size x FIELDS, this step */
  double *totals;   /* size x FIELDS, summed over steps */
  int64_t *slowest; /* per rank: steps in which it was the slowest */
  double *lead;     /* per rank: its summed lead over the median in those steps */
  int64_t steps;
  struct timespec last; /* CLOCK_MONOTONIC at the end of this rank's last step */
  int has_last;
  double own_s; /* the time this file spent (the gather and the line), summed: its cost, in the summary line */
  /* The step whose gather is in flight (cohort__metrics_step). */
  cohort_work *pending;
  double mine[FIELDS];
  int64_t pending_step;
  double pending_wall, pending_bytes;
  struct {
    char name[32];
    double value;
  } pending_notes[NOTES];
  int pending_num_notes;
};

cohort_status cohort__metrics_create(cohort_comm *comm, const char *path, cohort__metrics **out) {
  *out = NULL;
  cohort__metrics *m = calloc(1, sizeof *m);
  if (!m) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  m->comm = comm;
  m->rank = cohort_rank(comm);
  m->size = cohort_size(comm);
  size_t n = (size_t)m->size;
  m->all = calloc(n * FIELDS, sizeof *m->all);
  m->totals = calloc(n * FIELDS, sizeof *m->totals);
  m->slowest = calloc(n, sizeof *m->slowest);
  m->lead = calloc(n, sizeof *m->lead);
  if (!m->all || !m->totals || !m->slowest || !m->lead) {
    cohort__metrics_destroy(m);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  if (m->rank == 0 && path && path[0]) {
    m->f = fopen(path, "w");
    m->path = strdup(path);
    if (!m->f || !m->path) {
      cohort_status st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "metrics: cannot open %s", path);
      cohort__metrics_destroy(m);
      return st;
    }
  }
  *out = m;
  return COHORT_OK;
}

void cohort__metrics_note(cohort__metrics *m, const char *name, double value) {
  if (!m || !name) return;
  for (int i = 0; i < m->num_notes; i++)
    if (strcmp(m->notes[i].name, name) == 0) {
      m->notes[i].value = value;
      return;
    }
  if (m->num_notes == NOTES) return;
  snprintf(m->notes[m->num_notes].name, sizeof m->notes[0].name, "%s", name);
  m->notes[m->num_notes++].value = value;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* JSON has no NaN or infinity: a value that is neither is written as null. */
static void put_number(FILE *f, double v) {
  if (v != v || v > 1e300 || v < -1e300)
    fputs("null", f);
  else
    fprintf(f, "%.6g", v);
}

static void put_array(FILE *f, const char *name, const double *all, int size, int field, double scale) {
  fprintf(f, ",\"%s\":[", name);
  for (int r = 0; r < size; r++) {
    if (r) fputc(',', f);
    put_number(f, all[(size_t)r * FIELDS + (size_t)field] * scale);
  }
  fputc(']', f);
}

static void put_name(FILE *f, const char *name) {
  fputc('"', f);
  for (const char *p = name; *p; p++)
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if ((unsigned char)*p >= 0x20)
      fputc(*p, f);
  fputc('"', f);
}

static double seconds_between(struct timespec a, struct timespec b) {
  return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
}

/* The gathered step: the slowest rank, the totals, and rank 0's line. */
static cohort_status process(cohort__metrics *m) {
  int size = m->size, slow = 0;
  double *compute = malloc((size_t)size * sizeof *compute);
  if (!compute) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  for (int r = 0; r < size; r++) {
    compute[r] = m->all[(size_t)r * FIELDS];
    if (compute[r] > compute[slow]) slow = r;
    for (int k = 0; k < FIELDS; k++)
      m->totals[(size_t)r * FIELDS + (size_t)k] += m->all[(size_t)r * FIELDS + (size_t)k];
  }
  /* The slowest rank: the longest compute (forward and backward); its lead over the median rank's. */
  double slowest = compute[slow];
  qsort(compute, (size_t)size, sizeof *compute, cmp_double);
  double median = size % 2 ? compute[size / 2] : 0.5 * (compute[size / 2 - 1] + compute[size / 2]);
  free(compute);
  m->steps++;
  m->slowest[slow]++;
  m->lead[slow] += slowest - median;
  if (!m->f) return COHORT_OK;
  FILE *f = m->f;
  fprintf(f, "{\"step\":%lld,\"time\":%.3f,\"world\":%d", (long long)m->pending_step, m->pending_wall, size);
  for (int i = 0; i < m->pending_num_notes; i++) {
    fputc(',', f);
    put_name(f, m->pending_notes[i].name);
    fputc(':', f);
    put_number(f, m->pending_notes[i].value);
  }
  fprintf(f, ",\"bytes\":%.0f", m->pending_bytes);
  put_array(f, "compute_s", m->all, size, 0, 1);
  put_array(f, "comm_s", m->all, size, 1, 1);
  put_array(f, "exposed_comm_s", m->all, size, 2, 1);
  put_array(f, "step_s", m->all, size, 3, 1);
  fprintf(f, ",\"slowest_rank\":%d,\"slowest_by_s\":", slow);
  put_number(f, slowest - median);
  fputs("}\n", f);
  if (fflush(f) != 0 || ferror(f)) {
    COHORT_LOG_WARN("metrics: writing %s failed (%s); no more lines are written", m->path, strerror(errno));
    fclose(f);
    m->f = NULL;
  }
  return COHORT_OK;
}

/* The gather started at the end of the last step (it ran on the progress thread meanwhile): its result. */
static cohort_status finish_pending(cohort__metrics *m) {
  if (!m->pending) return COHORT_OK;
  cohort_status st = cohort_work_wait(m->pending);
  cohort_work_free(m->pending);
  m->pending = NULL;
  return st == COHORT_OK ? process(m) : st;
}

cohort_status cohort__metrics_step(cohort__metrics *m, int64_t step, const cohort_ddp_stats *s, double bytes) {
  struct timespec now, done, wall;
  clock_gettime(CLOCK_MONOTONIC, &now);
  /* The gather of this step starts now and is read at the end of the next one, so that no rank waits here for the
   * others: the line of a step is written one step later (and the last at the end). */
  cohort_status st = finish_pending(m);
  if (st == COHORT_OK) {
    double step_s = m->has_last ? seconds_between(m->last, now) : s->last_compute_s + s->last_exposed_comm_s;
    m->last = now;
    m->has_last = 1;
    m->mine[0] = s->last_compute_s;
    m->mine[1] = s->last_comm_s;
    m->mine[2] = s->last_exposed_comm_s;
    m->mine[3] = step_s;
    clock_gettime(CLOCK_REALTIME, &wall);
    m->pending_step = step;
    m->pending_wall = (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9;
    m->pending_bytes = bytes;
    m->pending_num_notes = m->num_notes;
    memcpy(m->pending_notes, m->notes, sizeof m->notes);
    m->num_notes = 0;
    st = cohort_iallgather(m->comm, m->mine, m->all, FIELDS, COHORT_F64, &m->pending);
  }
  clock_gettime(CLOCK_MONOTONIC, &done);
  m->own_s += seconds_between(now, done);
  return st;
}

void cohort__metrics_summary(const cohort__metrics *m, cohort_ddp_straggler *out) {
  memset(out, 0, sizeof *out);
  out->rank = -1;
  if (!m) return;
  out->steps = m->steps;
  for (int r = 0; r < m->size; r++)
    if (m->slowest[r] > 0 && (out->rank < 0 || m->slowest[r] > out->slowest_in)) {
      out->rank = r;
      out->slowest_in = m->slowest[r];
    }
  if (out->rank >= 0) out->mean_by_s = m->lead[out->rank] / (double)out->slowest_in;
}

void cohort__metrics_destroy(cohort__metrics *m) {
  if (!m) return;
  if (finish_pending(m) != COHORT_OK)
    COHORT_LOG_WARN("metrics: the last step's gather failed (%s); it is left out", cohort_last_error());
  if (m->f) {
    cohort_ddp_straggler sg;
    cohort__metrics_summary(m, &sg);
    FILE *f = m->f;
    fprintf(f,
            "{\"summary\":true,\"steps\":%lld,\"world\":%d,\"straggler\":{\"rank\":%d,\"slowest_in\":%lld,"
            "\"mean_by_s\":",
            (long long)m->steps, m->size, sg.rank, (long long)sg.slowest_in);
    put_number(f, sg.mean_by_s);
    fputs("},\"slowest_counts\":[", f);
    for (int r = 0; r < m->size; r++)
      fprintf(f, "%s%lld", r ? "," : "", (long long)m->slowest[r]);
    fputc(']', f);
    double per = m->steps ? 1.0 / (double)m->steps : 0;
    put_array(f, "mean_compute_s", m->totals, m->size, 0, per);
    put_array(f, "mean_comm_s", m->totals, m->size, 1, per);
    put_array(f, "mean_exposed_comm_s", m->totals, m->size, 2, per);
    put_array(f, "mean_step_s", m->totals, m->size, 3, per);
    /* What the metrics cost rank 0 a step (the gather and the line), beside its mean step. */
    fputs(",\"metrics_s_per_step\":", f);
    put_number(f, m->own_s * per);
    fputs("}\n", f);
    fclose(f);
  }
  free(m->path);
  free(m->all);
  free(m->totals);
  free(m->slowest);
  free(m->lead);
  free(m);
}
