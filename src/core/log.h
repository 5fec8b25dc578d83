/*
 * log.h: the library's only voice. Lines go to stderr as "cohort[rank] W: message" and are filtered by
 * COHORT_LOG_LEVEL (default warn). The rank is set once a communicator knows it.
 */
#ifndef COHORT_CORE_LOG_H
#define COHORT_CORE_LOG_H

#include <pthread.h>
#include <stdint.h>

enum { COHORT__LOG_ERROR = 0, COHORT__LOG_WARN = 1, COHORT__LOG_INFO = 2, COHORT__LOG_DEBUG = 3 };

void cohort__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cohort__log_enabled(int level);
void cohort__log_set_rank(int rank);
/* COHORT_STALL_S as the transports' waits read it (set by cohort_init from its config; 60 until then; 0: off): a
 * wait on peers that lasts this long logs one warning naming them and when COHORT_OP_TIMEOUT ends it. */
void cohort__log_set_stall_s(double seconds);
int64_t cohort__log_stall_ns(void);
/* That warning, once per wait (*warned): call is the call's description, who the ranks waited on. */
void cohort__log_stall(int *warned, int64_t waited_ns, const char *call, const char *who, double op_timeout_s);

/* A budget for lines that strangers can cause (refused connections): a port scan must not flood the job's stderr.
 * At most COHORT__LOG_BUDGET_LINES lines per COHORT__LOG_BUDGET_WINDOW_S seconds pass; the rest are counted, and the
 * count is reported with the next line that passes, or by cohort__log_budget_flush. */
enum { COHORT__LOG_BUDGET_LINES = 5 };
#define COHORT__LOG_BUDGET_WINDOW_S 60
typedef struct cohort__log_budget {
  pthread_mutex_t mu;
  int64_t window_start_ns;
  int shown;     /* lines passed in this window */
  uint64_t held; /* lines held back since the last one passed */
} cohort__log_budget;
#define COHORT__LOG_BUDGET_INIT                                                                                        \
  { PTHREAD_MUTEX_INITIALIZER, 0, 0, 0 }

/* 1: log the line now, with *held_before lines held back before it (mention them); 0: it is counted instead. */
int cohort__log_budget_take(cohort__log_budget *b, uint64_t *held_before);
/* The number held back and not yet reported, which the caller reports (e.g. when a server stops); resets it. */
uint64_t cohort__log_budget_flush(cohort__log_budget *b);

#define COHORT_LOG_ERROR(...) cohort__log(COHORT__LOG_ERROR, __VA_ARGS__)
#define COHORT_LOG_WARN(...) cohort__log(COHORT__LOG_WARN, __VA_ARGS__)
#define COHORT_LOG_INFO(...) cohort__log(COHORT__LOG_INFO, __VA_ARGS__)
#define COHORT_LOG_DEBUG(...)                                                                                          \
  do {                                                                                                                 \
    if (cohort__log_enabled(COHORT__LOG_DEBUG)) cohort__log(COHORT__LOG_DEBUG, __VA_ARGS__);                           \
  } while (0)

#endif
