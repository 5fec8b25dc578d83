/* error.c: status names and the thread-local message. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define COHORT_ERROR_TEXT_MAX 1024

static _Thread_local char error_text[COHORT_ERROR_TEXT_MAX];

#ifndef COHORT_VERSION_STRING
#define COHORT_VERSION_STRING "unknown"
#endif
const char *cohort_version(void) { return COHORT_VERSION_STRING; }

const char *cohort_strerror(cohort_status status) {
  switch (status) {
  case COHORT_OK:
    return "success";
  case COHORT_ERR_INVALID:
    return "invalid argument";
  case COHORT_ERR_SYSTEM:
    return "system error";
  case COHORT_ERR_TIMEOUT:
    return "timeout";
  case COHORT_ERR_REMOTE:
    return "remote failure";
  case COHORT_ERR_MISMATCH:
    return "mismatch between ranks";
  case COHORT_ERR_AUTH:
    return "authentication failure";
  case COHORT_ERR_INTERNAL:
    return "internal error";
  case COHORT_ERR_PROTOCOL:
    return "protocol error";
  }
  return "unknown status";
}

const char *cohort_last_error(void) { return error_text; }

void cohort__error_set_text(const char *text) { snprintf(error_text, sizeof error_text, "%s", text); }

void cohort__error_clear(void) { error_text[0] = '\0'; }

cohort_status cohort__error(cohort_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_text, sizeof error_text, fmt, ap);
  va_end(ap);
  return status;
}

cohort_status cohort__error_errno(cohort_status status, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(error_text, sizeof error_text, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof error_text)
    snprintf(error_text + n, sizeof error_text - (size_t)n, ": %s", strerror(err));
  return status;
}

cohort_status cohort__error_prefix(cohort_status status, const char *fmt, ...) {
  char old[COHORT_ERROR_TEXT_MAX];
  snprintf(old, sizeof old, "%s", error_text);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(error_text, sizeof error_text, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n + 2 < sizeof error_text) {
    /* Truncation is fine here: the message is for people, and the start of it names the context. */
    size_t room = sizeof error_text - (size_t)n;
    memcpy(error_text + n, ": ", 2);
    size_t len = strnlen(old, room - 3);
    memcpy(error_text + n + 2, old, len);
    error_text[(size_t)n + 2 + len] = '\0';
  }
  return status;
}
