/* job_value.c: one rank of a job that must stay among its own. Every rank contributes JOB_VALUE * 1000 + rank to a
 * SUM allreduce and checks that the result is what its own job's ranks give: a rank of another job (another
 * JOB_VALUE) that joined the rendezvous would change it. Prints "job V rank R of N: sum S ok", or says what went
 * wrong on stderr and exits 1. Used by test_mpirun_jobs.sh, which starts two mpirun jobs at once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cohort/cohort.h"

int main(void) {
  const char *text = getenv("JOB_VALUE");
  long value = text ? atol(text) : 0;
  cohort_comm *comm = NULL;
  if (cohort_init(&comm) != COHORT_OK) {
    fprintf(stderr, "job %ld: cohort_init: %s\n", value, cohort_last_error());
    return 1;
  }
  int rank = cohort_rank(comm), size = cohort_size(comm);
  int64_t x = (int64_t)value * 1000 + rank, expect = (int64_t)value * 1000 * size + (int64_t)size * (size - 1) / 2;
  cohort_status st = cohort_allreduce(comm, &x, &x, 1, COHORT_I64, COHORT_SUM);
  int rc = 0;
  if (st != COHORT_OK) {
    fprintf(stderr, "job %ld rank %d: allreduce: %s\n", value, rank, cohort_last_error());
    rc = 1;
  } else if (x != expect) {
    fprintf(stderr, "job %ld rank %d of %d: allreduce gave %lld, expected %lld: ranks of another job took part\n",
            value, rank, size, (long long)x, (long long)expect);
    rc = 1;
  } else {
    printf("job %ld rank %d of %d: sum %lld ok\n", value, rank, size, (long long)x);
  }
  /* JOB_HOLD_S: rank 0 keeps the job (and the store it serves) up a while, for a stranger to knock on. */
  const char *hold = getenv("JOB_HOLD_S");
  if (rank == 0 && hold) sleep((unsigned)atoi(hold));
  cohort_comm_destroy(comm);
  return rc;
}
