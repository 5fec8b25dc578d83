/*
 * comm.h: the communicator's insides, shared by the files of src/engine/.
 *
 * Execution model: collectives run one at a time, in issue order. A blocking call runs on the caller's thread when
 * nothing is queued (lowest latency); otherwise it queues behind the asynchronous work and waits. Asynchronous
 * work runs on the communicator's progress thread. `busy` says that some thread is driving the transport; whoever
 * sets it owns the transport until it clears it.
 *
 * After a failure the communicator is dead: `failed` keeps the first status and message, and every later call
 * returns them at once.
 */
#ifndef COHORT_ENGINE_COMM_H
#define COHORT_ENGINE_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "cohort/cohort.h"
#include "coll/coll.h"
#include "store/store.h"
#include "transport/transport.h"

#define COHORT__MESSAGE_MAX 1024

struct cohort_work {
  struct cohort_work *next;
  cohort_comm *comm;
  cohort__coll_args args;
  int done;
  int64_t start_ns, end_ns; /* when the progress thread ran it (CLOCK_MONOTONIC); 0 until then */
  cohort_status status;
  char message[COHORT__MESSAGE_MAX];
};

struct cohort_comm {
  int rank, size, local_rank, local_size;
  cohort__transport *transport;
  cohort__coll_ctx coll;
  uint32_t seq; /* number of the next collective; the same on every rank */
  cohort__store *store;             /* NULL for 1-rank and in-process communicators */
  cohort__store_server *store_server;
  pthread_mutex_t store_mu;          /* a store handle serves one thread at a time (e.g. the stall inspector) */
  char store_prefix[128];            /* "cohort/<run id>/<generation>/": this job's keys */
  struct cohort__stall_board *stall_board; /* in-process groups: stands in for the store's stall keys (stall.c) */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  cohort_work *queue_head, *queue_tail;
  int busy;
  int stopping;
  int thread_started;
  pthread_t thread;

  cohort_status failed;
  char failure[COHORT__MESSAGE_MAX];
};

/* Makes the communicator around a connected transport (takes ownership of it) and starts the progress thread. */
cohort_status cohort__comm_create(cohort__transport *transport, int local_rank, int local_size, cohort_comm **out);

/* Rendezvous over the store: publishes this rank's peer address and collects everyone's (rendezvous.c). */
struct cohort__launch_env;
cohort_status cohort__rendezvous_tcp(const struct cohort__launch_env *env, cohort__transport **out,
                                     cohort__store **store_out, cohort__store_server **server_out,
                                     char *prefix_out, size_t prefix_len);

/* The progress table that the stall inspectors of an in-process group share, since such a group has no store.
 * Reference counted: the group holds one reference and each of its communicators another (stall.c). */
struct cohort__stall_board *cohort__stall_board_create(int size);
void cohort__stall_board_retain(struct cohort__stall_board *board);
void cohort__stall_board_release(struct cohort__stall_board *board);

/* When the progress thread started and ended work w (CLOCK_MONOTONIC ns); 0 for a part not reached. Valid once the
 * work has completed. */
void cohort__work_times(const cohort_work *w, int64_t *start_ns, int64_t *end_ns);

#endif
