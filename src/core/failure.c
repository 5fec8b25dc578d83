/* failure.c: keeping the first failure, and asking for one from another thread (failure.h). */
#include "core/failure.h"

#include <stdio.h>

#include "core/error.h"

int cohort__failure_vkeep(cohort__failure *f, cohort_status status, const char *fmt, va_list ap) {
  if (f->status != COHORT_OK) return 0;
  vsnprintf(f->message, sizeof f->message, fmt, ap);
  f->status = status;
  return 1;
}

int cohort__failure_keep(cohort__failure *f, cohort_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int kept = cohort__failure_vkeep(f, status, fmt, ap);
  va_end(ap);
  return kept;
}

cohort_status cohort__failure_raise(const cohort__failure *f) {
  if (f->status == COHORT_OK) return COHORT_OK;
  return cohort__error(f->status, "%s", f->message);
}

void cohort__failure_request_init(cohort__failure_request *r) {
  atomic_flag_clear(&r->claimed);
  atomic_init(&r->requested, 0);
  r->status = COHORT_OK;
  r->message[0] = '\0';
}

void cohort__failure_request_make(cohort__failure_request *r, cohort_status status, const char *message) {
  if (atomic_flag_test_and_set(&r->claimed)) return;
  r->status = status;
  snprintf(r->message, sizeof r->message, "%s", message);
  atomic_store(&r->requested, 1);
}
