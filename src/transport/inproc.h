/*
 * inproc.h: the in-process transport (inproc.c): ranks are threads of one process that meet in a hub, for
 * cohort_init_inproc, the 1-rank communicator and the tests that run ranks as threads.
 */
#ifndef COHORT_TRANSPORT_INPROC_H
#define COHORT_TRANSPORT_INPROC_H

#include "transport/transport.h"

/* The hub of a group of size ranks, with one reference; each transport made on it holds another. */
typedef struct cohort__inproc_hub cohort__inproc_hub;
cohort_status cohort__inproc_hub_create(int size, cohort__inproc_hub **out);
void cohort__inproc_hub_release(cohort__inproc_hub *hub);
/* Makes rank's transport; a rank may join a hub once. op_timeout_s: COHORT_OP_TIMEOUT. */
cohort_status cohort__inproc_create(cohort__inproc_hub *hub, int rank, double op_timeout_s, cohort__transport **out);
/* Fails every member's current and later calls with status and message (a rank that could not join). */
void cohort__inproc_hub_abort(cohort__inproc_hub *hub, cohort_status status, const char *message);

#endif
