/*
 * ddp_check.h: the DDP engine's checks, written once against a communicator and run both between real processes
 * (tests/mp/test_ddp.c under cohortrun) and between threads (tests/unit/test_ddp_inproc.c). Each check returns the
 * number of failed assertions on this rank and prints each failure with the rank, file and line.
 */
#ifndef COHORT_TEST_DDP_CHECK_H
#define COHORT_TEST_DDP_CHECK_H

#include "cohort/cohort.h"

typedef struct ddp_check {
  const char *name;
  int (*fn)(cohort_comm *comm);
} ddp_check;

/* The checks that leave the communicator usable, in the order they run. */
extern const ddp_check ddp_checks[];
extern const int ddp_num_checks;

/* Runs the named check, or every check when name is NULL; returns the failures. */
int ddp_check_run(cohort_comm *comm, const char *name);

#endif
