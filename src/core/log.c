/* log.c: a leveled logger with a rank prefix. One fprintf per line, so lines of threads do not interleave. */
#include "core/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/env.h"

static atomic_int log_rank = -1;
static atomic_int log_level = -1; /* -1: not read yet */

/* cohort_init rejects any other value with the knob table's error (config.c); code that logs before a communicator
 * exists, or in a program without one, gets the default then. */
static int read_level(void) {
  const char *v = cohort__env_str("COHORT_LOG_LEVEL");
  if (strcmp(v, "error") == 0) return COHORT__LOG_ERROR;
  if (strcmp(v, "info") == 0) return COHORT__LOG_INFO;
  if (strcmp(v, "debug") == 0) return COHORT__LOG_DEBUG;
  return COHORT__LOG_WARN;
}

int cohort__log_enabled(int level) {
  int current = atomic_load_explicit(&log_level, memory_order_relaxed);
  if (current < 0) {
    current = read_level();
    atomic_store(&log_level, current);
  }
  return level <= current;
}

void cohort__log_set_rank(int rank) { atomic_store(&log_rank, rank); }

static _Atomic int64_t stall_ns = 60 * INT64_C(1000000000);

void cohort__log_set_stall_s(double seconds) { atomic_store(&stall_ns, (int64_t)(seconds * 1e9)); }

int64_t cohort__log_stall_ns(void) { return atomic_load(&stall_ns); }

void cohort__log_stall(int *warned, int64_t waited_ns, const char *call, const char *who, double op_timeout_s) {
  *warned = 1;
  cohort__log(COHORT__LOG_WARN,
              "%s has waited %.0f s for rank(s) %s (COHORT_STALL_S): they have not sent their part; it fails after "
              "%.0f s without progress (COHORT_OP_TIMEOUT)",
              call, (double)waited_ns / 1e9, who, op_timeout_s);
}

void cohort__log(int level, const char *fmt, ...) {
  if (!cohort__log_enabled(level)) return;
  static const char tags[] = "EWID";
  char line[1536];
  int rank = atomic_load(&log_rank);
  int n = rank >= 0 ? snprintf(line, sizeof line, "cohort[%d] %c: ", rank, tags[level])
                    : snprintf(line, sizeof line, "cohort %c: ", tags[level]);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", line);
}

int cohort__log_budget_take(cohort__log_budget *b, uint64_t *held_before) {
  int64_t now = cohort__now_ns();
  pthread_mutex_lock(&b->mu);
  if (b->window_start_ns == 0 || now - b->window_start_ns >= (int64_t)COHORT__LOG_BUDGET_WINDOW_S * 1000000000LL) {
    b->window_start_ns = now;
    b->shown = 0;
  }
  int pass = b->shown < COHORT__LOG_BUDGET_LINES;
  *held_before = 0;
  if (pass) {
    b->shown++;
    *held_before = b->held;
    b->held = 0;
  } else {
    b->held++;
  }
  pthread_mutex_unlock(&b->mu);
  return pass;
}

uint64_t cohort__log_budget_flush(cohort__log_budget *b) {
  pthread_mutex_lock(&b->mu);
  uint64_t held = b->held;
  b->held = 0;
  pthread_mutex_unlock(&b->mu);
  return held;
}
