/*
 * test_collectives.c: the full collective matrix between real processes, on whatever transport the job gets (TCP,
 * shm on one host, tcp+shm across simulated nodes). Run under cohortrun:
 *   cohortrun -np N build/tests/test_collectives [--quick] [--zero-copy]
 * --quick leaves out the largest count; --zero-copy takes every buffer from cohort_alloc (the shared arena, where
 * collectives read and write the peers' buffers in place). Every rank checks every result against the
 * double-precision reference; a rank that finds a wrong value exits 1, so cohortrun (and ctest) fail.
 */
#include <stdio.h>
#include <string.h>

#include "cohort/cohort.h"
#include "coll_check.h"

int main(int argc, char **argv) {
  int quick = 0, zero_copy = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else if (strcmp(argv[i], "--zero-copy") == 0)
      zero_copy = 1;
    else {
      fprintf(stderr, "test_collectives: unknown argument '%s' (--quick, --zero-copy)\n", argv[i]);
      return 2;
    }
  }
  cohort_comm *c = NULL;
  cohort_status st = cohort_init(&c);
  if (st != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s: %s\n", cohort_strerror(st), cohort_last_error());
    return 1;
  }
  coll_check_use_arena(zero_copy);
  static const size_t counts[] = {0, 1, 7, 4097, 1000003};
  int failures = coll_check_all(c, counts, quick ? 4 : 5);
  if (!failures) failures += coll_check_async(c);
  if (!failures) failures += coll_check_run_ahead(c);
  if (!failures) failures += coll_check_barrier(c);
  printf("rank %d of %d (%s%s): %s\n", cohort_rank(c), cohort_size(c), cohort_transport_name(c),
         zero_copy ? ", zero copy" : "", failures ? "FAILED" : "all collectives correct");
  cohort_comm_destroy(c);
  return failures ? 1 : 0;
}
