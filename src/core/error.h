/*
 * error.h: status codes and the thread-local error message behind cohort_last_error().
 *
 * Every internal function that can fail returns a cohort_status. The function that first sees a failure records
 * the detail with cohort__error(), which returns the status so that the failure can be reported and returned in
 * one line. Callers pass the status upward unchanged (COHORT_CHECK), so the first, most specific message wins.
 */
#ifndef COHORT_CORE_ERROR_H
#define COHORT_CORE_ERROR_H

#include "cohort/cohort.h"

/* Records a printf-style message for cohort_last_error() and returns status. */
cohort_status cohort__error(cohort_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like cohort__error(), with ": <strerror(errno)>" appended. */
cohort_status cohort__error_errno(cohort_status status, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Sets the thread-local message as is (used to hand a message from one thread to another). */
void cohort__error_set_text(const char *text);
void cohort__error_clear(void);
/* Prepends "<context>: " to the current message (to add where a lower layer's failure happened); returns status. */
cohort_status cohort__error_prefix(cohort_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Returns the status of expr upward when it is not COHORT_OK. */
#define COHORT_CHECK(expr)                                                                                             \
  do {                                                                                                                 \
    cohort_status check_status__ = (expr);                                                                             \
    if (check_status__ != COHORT_OK) return check_status__;                                                            \
  } while (0)

#endif
