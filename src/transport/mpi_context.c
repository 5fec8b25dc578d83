/*
 * mpi_context.c: which contexts of the sub-communicators' duplicate of MPI_COMM_WORLD this process holds
 * (transport/mpi.h says what a context is), and the three steps by which a split's ranks agree on a free one.
 *
 * One allreduce of each rank's lowest free context is not enough where two threads split two communicators at once:
 * rank A's threads may propose 0 and 4 while rank B's propose 4 and 0, and both maxima are 4. So a context is held
 * by one proposal at a time within a process, and the ranks check after the MAX that every one of them could hold
 * the agreed context (an allreduce MIN of "I hold it"); where one could not, all let go and try again above it. MPI
 * libraries agree on context ids the same way. A context taken for good is never let go, so none is reused, after
 * a communicator is destroyed or after a shutdown and a new cohort_init.
 *
 * Pure bookkeeping, no MPI: built with or without it, and tested alone (tests/unit/test_core.c).
 */
#include <pthread.h>
#include <stdlib.h>

#include "transport/mpi.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *held; /* first contexts of the groups held (tentatively or for good), unordered */
static size_t nheld, cap;

static int is_held(uint64_t c) {
  for (size_t i = 0; i < nheld; i++)
    if (held[i] == c) return 1;
  return 0;
}

static int hold(uint64_t c) {
  if (nheld == cap) {
    size_t ncap = cap ? 2 * cap : 64;
    uint64_t *more = realloc(held, ncap * sizeof *more);
    if (!more) return 0;
    held = more, cap = ncap;
  }
  held[nheld++] = c;
  return 1;
}

static void let_go(uint64_t c) {
  for (size_t i = 0; i < nheld; i++)
    if (held[i] == c) {
      held[i] = held[--nheld];
      return;
    }
}

uint64_t cohort__mpi_context_propose(uint64_t floor) {
  uint64_t c = (floor + COHORT__MPI_SPLIT_CONTEXTS - 1) / COHORT__MPI_SPLIT_CONTEXTS * COHORT__MPI_SPLIT_CONTEXTS;
  pthread_mutex_lock(&mu);
  while (is_held(c))
    c += COHORT__MPI_SPLIT_CONTEXTS;
  if (!hold(c)) c = UINT64_MAX; /* out of memory: a proposal no rank can hold, so the agreement fails */
  pthread_mutex_unlock(&mu);
  return c;
}

int cohort__mpi_context_claim(uint64_t proposed, uint64_t agreed) {
  if (agreed == UINT64_MAX) {
    cohort__mpi_context_release(proposed);
    return 0;
  }
  pthread_mutex_lock(&mu);
  int mine = 1;
  if (agreed != proposed) {
    let_go(proposed);
    mine = !is_held(agreed) && hold(agreed);
  }
  pthread_mutex_unlock(&mu);
  return mine;
}

void cohort__mpi_context_release(uint64_t context) {
  if (context == UINT64_MAX) return;
  pthread_mutex_lock(&mu);
  let_go(context);
  pthread_mutex_unlock(&mu);
}
