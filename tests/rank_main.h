/*
 * rank_main.h: the main() of a multi-rank test program that runs as processes under cohortrun, or as threads of one
 * process over the in-process transport (--inproc N): each rank calls run(comm) and prints PASS or FAILED.
 */
#ifndef COHORT_TEST_RANK_MAIN_H
#define COHORT_TEST_RANK_MAIN_H

#include "cohort/cohort.h"

/* run returns its number of failures. Without --inproc: one rank, under cohortrun (at least 2 ranks), printing
 * "PASS (<transport>, rank R of N)"; with --inproc N (2..16): N threads, then "PASS (inproc, N ranks)". Returns the
 * exit code (0, 1 on a failure, 2 on a bad command line). */
int test_rank_main(int argc, char **argv, const char *prog, int (*run)(cohort_comm *comm));

#endif
