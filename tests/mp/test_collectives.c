/*
 * test_collectives.c: the full collective matrix between real processes, on whatever transport the job gets (TCP,
 * shm on one host, tcp+shm across simulated nodes). Run under cohortrun:
 *   cohortrun -np N build/tests/test_collectives [--quick] [--zero-copy] [--counts LIST] [--large-counts LIST]
 *                                                [--dtypes LIST]
 * --quick leaves out the largest count (1000003); --zero-copy takes every buffer from cohort_alloc (the shared arena,
 * where collectives read and write the peers' buffers in place). --counts replaces the matrix's counts (a list: 0,1,7);
 * --large-counts adds counts for allreduce and broadcast alone (every dtype and op): at a large world, the large-
 * message paths without the count x world elements per rank that reduce_scatter and allgather of such a count need.
 * --dtypes keeps only those dtypes (names as cohort_dtype_name gives them: f32,i64,f16,bool): the large worlds check
 * the algorithms at scale on one dtype of each size, the small worlds every dtype.
 * Every rank checks every result against the double-precision reference; a rank that finds a wrong value exits 1,
 * so cohortrun (and ctest) fail.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/cohort.h"
#include "coll_check.h"

enum { MAX_COUNTS = 16 };

/* "0,1,7,4097" into counts; the number of counts, or -1 (with a message) when the list is not one. */
static int parse_counts(const char *opt, const char *list, size_t *counts) {
  int n = 0;
  const char *p = list;
  while (*p) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || errno || (*end && *end != ',') || *p == '-' || n == MAX_COUNTS) {
      fprintf(stderr, "test_collectives: %s '%s' is not a list of at most %d counts (0,1,7,4097)\n", opt, list,
              MAX_COUNTS);
      return -1;
    }
    counts[n++] = (size_t)v;
    p = *end ? end + 1 : end;
  }
  return n;
}

/* "f32,i64,bool" into a mask of cohort_dtype bits; 0 (with a message) when a name is no dtype. */
static unsigned parse_dtypes(const char *list) {
  unsigned mask = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
    int d = 0;
    while (d < COHORT_DTYPE_COUNT && strcmp(cohort_dtype_name((cohort_dtype)d), name) != 0)
      d++;
    if (d == COHORT_DTYPE_COUNT) {
      fprintf(stderr, "test_collectives: --dtypes: '%s' is no dtype (f32, f64, f16, bf16, i32, i64, u8, ...)\n", name);
      return 0;
    }
    mask |= 1u << d;
  }
  return mask;
}

int main(int argc, char **argv) {
  int quick = 0, zero_copy = 0, custom = 0, ncounts = 5, nlarge = 0;
  unsigned dtypes = ~0u;
  size_t counts[MAX_COUNTS] = {0, 1, 7, 4097, 1000003}, large[MAX_COUNTS];
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else if (strcmp(argv[i], "--zero-copy") == 0)
      zero_copy = 1;
    else if (strcmp(argv[i], "--counts") == 0 && i + 1 < argc) {
      if ((ncounts = parse_counts(argv[i], argv[i + 1], counts)) < 0) return 2;
      custom = 1;
      i++;
    } else if (strcmp(argv[i], "--dtypes") == 0 && i + 1 < argc) {
      if (!(dtypes = parse_dtypes(argv[++i]))) return 2;
    } else if (strcmp(argv[i], "--large-counts") == 0 && i + 1 < argc) {
      if ((nlarge = parse_counts(argv[i], argv[i + 1], large)) < 0) return 2;
      i++;
    } else {
      fprintf(stderr,
              "test_collectives: unknown argument '%s' (--quick, --zero-copy, --counts LIST, --large-counts LIST, "
              "--dtypes LIST)\n",
              argv[i]);
      return 2;
    }
  }
  if (quick && !custom) ncounts = 4; /* without 1000003 */
  cohort_comm *c = NULL;
  cohort_status st = cohort_init(&c);
  if (st != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s: %s\n", cohort_strerror(st), cohort_last_error());
    return 1;
  }
  coll_check_use_arena(zero_copy);
  coll_check_use_dtypes(dtypes);
  int failures = coll_check_all(c, counts, ncounts);
  if (!failures) failures += coll_check_allreduce_broadcast(c, large, nlarge);
  if (!failures) failures += coll_check_async(c);
  if (!failures) failures += coll_check_run_ahead(c);
  if (!failures) failures += coll_check_barrier(c);
  printf("rank %d of %d (%s%s): %s\n", cohort_rank(c), cohort_size(c), cohort_transport_name(c),
         zero_copy ? ", zero copy" : "", failures ? "FAILED" : "all collectives correct");
  cohort_comm_destroy(c);
  return failures ? 1 : 0;
}
