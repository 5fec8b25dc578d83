/*
 * test_split.c: sub-communicators between real processes, on whatever transport the job and its groups get (TCP,
 * shm on one host, tcp+shm across simulated nodes). Run under cohortrun:
 *   cohortrun -np N build/tests/test_split [--quick]
 * The checks of tests/split_check.h: the collective matrix on split groups (one rank in none at N >= 5), nested and
 * dup'ed communicators, two groups driven at once by two threads, a mismatch in one group. Then each rank prints the
 * transport of its half of the job ("half: <transport>"), which the tests of simulated nodes match. A rank that finds
 * a wrong value exits 1, so cohortrun (and ctest) fail.
 *   mpirun -np N build/tests/test_split --twin
 * runs the twin's check alone, on the job's communicator and on a split of it by parity, and over MPI also checks that
 * a second twin is refused (the transport sets one lane aside for it). Under mpirun with COHORT_TRANSPORT=mpi the
 * first form checks splits over MPI (contexts of one shared duplicate of MPI_COMM_WORLD, transport/mpi.h).
 */
#include <stdio.h>
#include <string.h>

#include "cohort/cohort.h"
#include "split_check.h"

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  cohort_comm *c = NULL;
  cohort_status st = cohort_init(&c);
  if (st != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s: %s\n", cohort_strerror(st), cohort_last_error());
    return 1;
  }
  if (argc > 1 && strcmp(argv[1], "--twin") == 0) {
    int failures = split_check_twin(c);
    cohort_comm *second = NULL;
    if (!failures && strcmp(cohort_transport_name(c), "mpi") == 0 &&
        (cohort_comm_twin(c, "second", &second) != COHORT_ERR_INVALID || !strstr(cohort_last_error(), "one twin"))) {
      fprintf(stderr, "rank %d: a second twin over MPI was not refused: %s\n", cohort_rank(c), cohort_last_error());
      failures++;
    }
    /* A sub-communicator's twin: over MPI both live in contexts of one shared duplicate (transport/mpi.h); odd and
     * even ranks, so that a member's rank is not its MPI rank. */
    cohort_comm *parity = NULL;
    if (!failures && cohort_comm_split(c, cohort_rank(c) % 2, 0, &parity) != COHORT_OK) {
      fprintf(stderr, "rank %d: split by parity: %s\n", cohort_rank(c), cohort_last_error());
      failures++;
    }
    if (!failures) failures += split_check_twin(parity);
    printf("rank %d of %d (%s, parity group: %s of %d): %s\n", cohort_rank(c), cohort_size(c), cohort_transport_name(c),
           parity ? cohort_transport_name(parity) : "none", parity ? cohort_size(parity) : 0,
           failures ? "FAILED" : "twin checks correct");
    cohort_comm_destroy(parity);
    cohort_comm_destroy(c);
    return failures ? 1 : 0;
  }
  static const size_t counts[] = {0, 1, 7, 4097, 1000003};
  int failures = split_check_matrix(c, counts, quick ? 4 : 5);
  if (!failures) failures += split_check_concurrent(c);
  if (!failures) failures += split_check_concurrent_splits(c);
  if (!failures && cohort_size(c) >= 4) failures += split_check_mismatch(c);
  if (!failures) failures += split_check_twin(c);
  cohort_comm *half = NULL;
  if (!failures && cohort_comm_split(c, cohort_rank(c) < cohort_size(c) / 2, 0, &half) != COHORT_OK) {
    fprintf(stderr, "split: %s\n", cohort_last_error());
    failures++;
  }
  printf("rank %d of %d (%s), half: %s: %s\n", cohort_rank(c), cohort_size(c), cohort_transport_name(c),
         half ? cohort_transport_name(half) : "none", failures ? "FAILED" : "all split checks correct");
  cohort_comm_destroy(half);
  cohort_comm_destroy(c);
  return failures ? 1 : 0;
}
