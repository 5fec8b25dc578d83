/* abort_behind_frame.c: an abort whose ABORT frame cannot reach a peer still reaches it with its reason.
 *
 * Two ranks over TCP, ring allreduce of 64 MiB. Rank 1 enters the allreduce 2 s late, so rank 0's first frame to it
 * is early there: rank 1 reads 64 KiB of it aside and leaves the rest in the stream, and rank 0's send stops
 * half-written. Rank 0 then aborts (another thread, after 0.5 s). Its ABORT frame can only follow the half-written
 * frame, which rank 1 does not read, so it misses its deadline and rank 1 sees the connection close mid-frame. Rank 1
 * must still return COHORT_ERR_REMOTE with rank 0's reason, relayed (the note in the store, src/comm/abort_note.c),
 * rather than a bare "closed its connection". Run under cohortrun with COHORT_TRANSPORT=tcp COHORT_ALGO=ring; each
 * rank exits 0 when it saw what it must. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/cohort.h"

#define REASON "rank 0's data loader broke"

static cohort_comm *comm;

static void *abort_soon(void *arg) {
  (void)arg;
  usleep(500000);
  cohort_comm_abort(comm, REASON);
  return NULL;
}

int main(void) {
  if (cohort_init(&comm) != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s\n", cohort_last_error());
    return 1;
  }
  const size_t count = 16u << 20;
  float *buf = calloc(count, sizeof(float));
  int rank = cohort_rank(comm);
  pthread_t t;
  if (rank == 0)
    pthread_create(&t, NULL, abort_soon, NULL);
  else
    sleep(2);
  cohort_status st = cohort_allreduce(comm, buf, buf, count, COHORT_F32, COHORT_SUM);
  const char *msg = cohort_last_error();
  printf("rank %d: %s: %s\n", rank, cohort_strerror(st), msg);
  int ok = st == COHORT_ERR_REMOTE && strstr(msg, "rank 0 aborted the job: " REASON) &&
           (rank == 0 || strstr(msg, "(reported by rank 0)"));
  if (rank == 0) pthread_join(t, NULL);
  cohort_comm_destroy(comm);
  free(buf);
  return ok ? 0 : 1;
}
