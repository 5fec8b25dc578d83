/*
 * comm.h: the communicator's insides, shared by the files of src/comm/ (and the work timestamps the DDP engine reads).
 *
 * Execution model: collectives run one at a time, in issue order. A blocking call runs on the caller's thread when
 * nothing is queued (lowest latency); otherwise it queues behind the asynchronous work and waits. Asynchronous
 * work runs on the communicator's progress thread. `busy` says that some thread is driving the transport; whoever
 * sets it owns the transport until it clears it.
 *
 * After a failure the communicator is dead: `failed` keeps the first status and message, and every later call
 * returns them at once.
 */
#ifndef COHORT_COMM_COMM_H
#define COHORT_COMM_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "cohort/cohort.h"
#include "coll/coll.h"
#include "core/config.h"
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
  cohort__config config; /* the knobs, parsed once when it was made; the DDP engine reads its own here too */
  cohort__transport *transport;
  cohort__coll_ctx coll;
  uint32_t seq;         /* number of the next collective; the same on every rank */
  cohort__store *store; /* the job's key space (a view owning the store connection); NULL for 1-rank and in-process */
  cohort__store_server *store_server;
  pthread_mutex_t store_mu;                /* a store handle serves one thread at a time (e.g. the stall inspector) */
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
cohort_status cohort__comm_create(cohort__transport *transport, int local_rank, int local_size,
                                  const cohort__config *config, cohort_comm **out);

/* Joins the job (rendezvous.c): opens the store (serving it on rank 0 unless the launcher does), chooses the
 * transport by COHORT_TRANSPORT and where the ranks are (shm on one host, tcp, or tcp+shm for several nodes of
 * several ranks), and connects it over the store. *out, *store_out and *server_out belong to the caller; *store_out is
 * the job's key space (a view under "cohort/<run id>/<generation>/" that owns the connection): keys the caller
 * publishes there are the job's and no other job's. */
struct cohort__launch_env;
cohort_status cohort__rendezvous_connect(const struct cohort__launch_env *env, const cohort__config *config,
                                         cohort__transport **out, cohort__store **store_out,
                                         cohort__store_server **server_out);

/* abort_note.c: a failure's root cause in the job's store, for the peers an ABORT frame could not reach. */
void cohort__comm_leave_abort_note(cohort_comm *c, cohort_status status, const char *message);
/* For a lost peer ("rank P ..." with COHORT_ERR_REMOTE): its note, if it left one, replaces status and message
 * ("... (reported by rank P)"); returns 1 then. */
int cohort__comm_read_abort_note(cohort_comm *c, cohort_status *status, char *message, size_t len);

/* When the progress thread started and ended work w (CLOCK_MONOTONIC ns); 0 for a part not reached. Valid once the
 * work has completed. */
void cohort__work_times(const cohort_work *w, int64_t *start_ns, int64_t *end_ns);

#endif
