/* replicas.c: --replicas N, the job's N ranks as threads of this process (replicas.h says what holds). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "replicas.h"

typedef struct runner {
  const train_config *cfg;
  train_replica_fn fn;
  cohort_inproc_group *group;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int go; /* 0: wait; 1: every thread exists, join the group; -1: one could not be made, give up */
} runner;

typedef struct replica {
  runner *run;
  int rank;
  int rc;
  int started;
  pthread_t thread;
} replica;

static void *replica_main(void *arg) {
  replica *r = arg;
  runner *run = r->run;
  pthread_mutex_lock(&run->mu);
  while (run->go == 0)
    pthread_cond_wait(&run->cv, &run->mu);
  int go = run->go;
  pthread_mutex_unlock(&run->mu);
  if (go < 0) {
    r->rc = TRAIN_EXIT_FAIL;
    return NULL;
  }

  cohort_comm *comm = NULL;
  cohort_status st = cohort_init_inproc(run->group, r->rank, &comm);
  if (st != COHORT_OK) {
    fprintf(stderr, "fmnist-train: replica %d: joining the in-process group: %s: %s\n", r->rank, cohort_strerror(st),
            cohort_last_error());
    r->rc = TRAIN_EXIT_FAIL;
    return NULL;
  }
  r->rc = run->fn(run->cfg, comm);
  if (r->rc != TRAIN_EXIT_OK) {
    /* The others may be waiting in a collective this replica will never make: fail it for them (replicas.h). */
    char reason[64];
    snprintf(reason, sizeof reason, "replica %d failed (exit code %d)", r->rank, r->rc);
    cohort_comm_abort(comm, reason);
  }
  cohort_comm_destroy(comm);
  return NULL;
}

int train_replicas_run(const train_config *cfg, int n, train_replica_fn fn) {
  if (n < 1 || n > 64 || !fn) {
    fprintf(stderr, "fmnist-train: %d replicas: must be 1 to 64\n", n);
    return TRAIN_EXIT_FAIL;
  }
  runner run;
  memset(&run, 0, sizeof run);
  run.cfg = cfg;
  run.fn = fn;
  replica *reps = calloc((size_t)n, sizeof *reps);
  if (!reps) {
    fprintf(stderr, "fmnist-train: out of memory for %d replicas\n", n);
    return TRAIN_EXIT_FAIL;
  }
  cohort_status st = cohort_inproc_group_create(n, &run.group);
  if (st != COHORT_OK) {
    fprintf(stderr, "fmnist-train: making the in-process group of %d replicas: %s: %s\n", n, cohort_strerror(st),
            cohort_last_error());
    free(reps);
    return TRAIN_EXIT_FAIL;
  }
  pthread_mutex_init(&run.mu, NULL);
  pthread_cond_init(&run.cv, NULL);

  int rc = TRAIN_EXIT_OK;
  for (int r = 0; r < n; r++) {
    reps[r].run = &run;
    reps[r].rank = r;
    int err = pthread_create(&reps[r].thread, NULL, replica_main, &reps[r]);
    if (err != 0) {
      fprintf(stderr, "fmnist-train: starting replica %d of %d: %s\n", r, n, strerror(err));
      rc = TRAIN_EXIT_FAIL;
      break;
    }
    reps[r].started = 1;
  }
  pthread_mutex_lock(&run.mu);
  run.go = rc == TRAIN_EXIT_OK ? 1 : -1;
  pthread_cond_broadcast(&run.cv);
  pthread_mutex_unlock(&run.mu);

  for (int r = 0; r < n; r++) {
    if (!reps[r].started) continue;
    pthread_join(reps[r].thread, NULL);
    if (reps[r].rc > rc) rc = reps[r].rc;
  }
  /* Every cohort_init_inproc() has returned now, so the group may go. */
  cohort_inproc_group_destroy(run.group);
  pthread_cond_destroy(&run.cv);
  pthread_mutex_destroy(&run.mu);
  free(reps);
  return rc;
}
