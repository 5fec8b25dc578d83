/*
 * test_collectives.c: the full collective matrix between real processes over TCP. Run under cohortrun:
 *   cohortrun -np N build/tests/test_collectives [--quick]
 * Every rank checks every result against the double-precision reference; a rank that finds a wrong value exits 1,
 * so cohortrun (and ctest) fail.
 */
#include <stdio.h>
#include <string.h>

#include "coll_check.h"
#include "cohort/cohort.h"

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  cohort_comm *c = NULL;
  cohort_status st = cohort_init(&c);
  if (st != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s: %s\n", cohort_strerror(st), cohort_last_error());
    return 1;
  }
  static const size_t counts[] = {0, 1, 7, 4097, 1000003};
  int failures = coll_check_all(c, counts, quick ? 4 : 5);
  if (!failures) failures += coll_check_async(c);
  if (!failures) failures += coll_check_run_ahead(c);
  if (!failures) failures += coll_check_barrier(c);
  printf("rank %d of %d (%s): %s\n", cohort_rank(c), cohort_size(c), cohort_transport_name(c),
         failures ? "FAILED" : "all collectives correct");
  cohort_comm_destroy(c);
  return failures ? 1 : 0;
}
