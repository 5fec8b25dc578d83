/*
 * log.h: the library's only voice. Lines go to stderr as "cohort[rank] W: message" and are filtered by
 * COHORT_LOG_LEVEL (default warn). The rank is set once a communicator knows it.
 */
#ifndef COHORT_CORE_LOG_H
#define COHORT_CORE_LOG_H

enum { COHORT__LOG_ERROR = 0, COHORT__LOG_WARN = 1, COHORT__LOG_INFO = 2, COHORT__LOG_DEBUG = 3 };

void cohort__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cohort__log_enabled(int level);
void cohort__log_set_rank(int rank);

#define COHORT_LOG_ERROR(...) cohort__log(COHORT__LOG_ERROR, __VA_ARGS__)
#define COHORT_LOG_WARN(...) cohort__log(COHORT__LOG_WARN, __VA_ARGS__)
#define COHORT_LOG_INFO(...) cohort__log(COHORT__LOG_INFO, __VA_ARGS__)
#define COHORT_LOG_DEBUG(...)                                                                                          \
  do {                                                                                                                 \
    if (cohort__log_enabled(COHORT__LOG_DEBUG)) cohort__log(COHORT__LOG_DEBUG, __VA_ARGS__);                           \
  } while (0)

#endif
