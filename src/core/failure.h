/*
 * failure.h: the failure of something that fails once and stays failed (a transport, an in-process hub, a
 * communicator, a DDP engine), and the failure that another thread asks of it.
 *
 * cohort__failure keeps the first status and message it is given and drops the later ones, which are consequences
 * of the first: the root cause is what every later call reports. It has no lock of its own: its owner's lock, or
 * the one thread that drives the owner, guards it.
 *
 * cohort__failure_request is how any thread asks the thread that drives an object to fail it (a transport's
 * interrupt()): the first request wins, later ones are dropped, and the driving thread takes it at its next look.
 * Lock-free: asking never waits for the driving thread.
 */
#ifndef COHORT_CORE_FAILURE_H
#define COHORT_CORE_FAILURE_H

#include <stdarg.h>
#include <stdatomic.h>

#include "cohort/cohort.h"

#define COHORT__FAILURE_TEXT_MAX 1024

typedef struct cohort__failure {
  cohort_status status; /* COHORT_OK until the first failure */
  char message[COHORT__FAILURE_TEXT_MAX];
} cohort__failure;

/* Keeps status and the formatted message unless a failure is kept already. Returns 1 when this one was kept (the
 * first: its owner tells whoever must hear of it), 0 when it was dropped. */
int cohort__failure_keep(cohort__failure *f, cohort_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int cohort__failure_vkeep(cohort__failure *f, cohort_status status, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* The kept failure as this thread's error (cohort_last_error); returns its status (COHORT_OK when there is none). */
cohort_status cohort__failure_raise(const cohort__failure *f);

typedef struct cohort__failure_request {
  atomic_flag claimed;  /* taken by the one request that writes status and message */
  atomic_int requested; /* set once they are written */
  cohort_status status;
  char message[COHORT__FAILURE_TEXT_MAX];
} cohort__failure_request;

/* An empty request (zeroed memory is one too, on every platform cohort runs on). */
void cohort__failure_request_init(cohort__failure_request *r);
/* Any thread: asks for a failure with status and message, unless another request came first. */
void cohort__failure_request_make(cohort__failure_request *r, cohort_status status, const char *message);
/* Whether a request has come: one atomic load, for the driving thread's loops. */
static inline int cohort__failure_requested(cohort__failure_request *r) { return atomic_load(&r->requested); }

#endif
