/*
 * comm.h: the communicator's insides, shared by the files of src/comm/ (and the work timestamps the DDP engine reads).
 *
 * Execution model: collectives run one at a time, in issue order. A blocking call runs on the caller's thread when
 * nothing is queued (lowest latency); otherwise it queues behind the asynchronous work and waits. Asynchronous
 * work runs on the communicator's progress thread. `busy` says that some thread is driving the transport; whoever
 * sets it owns the transport until it clears it.
 *
 * After a failure the communicator is dead: `failure` keeps the first status and message, and every later call
 * returns them at once.
 */
#ifndef COHORT_COMM_COMM_H
#define COHORT_COMM_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "cohort/cohort.h"
#include "coll/coll.h"
#include "comm/launch_env.h"
#include "core/config.h"
#include "core/failure.h"
#include "gpu/gpu.h"
#include "store/store.h"
#include "transport/transport.h"

#define COHORT__MESSAGE_MAX 1024

/* Where a communicator's key space lies in the job's store, so that a sub-communicator can open its own connection
 * to it (a store handle serves one thread at a time, and sub-communicators run on threads of their own). */
typedef struct cohort__store_place {
  char addr[256];         /* the TCP store's host (the file store's directory is the config's COHORT_STORE) */
  long port;              /* the TCP store's port */
  char prefix[384];       /* this communicator's key space: "cohort/<run id>/<generation>/" + "split/<n>/<color>/"... */
  cohort__launch_env env; /* the layout the job was launched with (the bind address follows its MASTER_ADDR) */
} cohort__store_place;

struct cohort_work {
  struct cohort_work *next;
  /* The communicator; NULL once it was destroyed (cohort_comm_destroy detaches every handle the caller still holds:
   * done by then, they answer from their own fields). */
  cohort_comm *comm;
  struct cohort_work *live_prev, *live_next; /* in comm->live while the caller holds it (an async handle) */
  struct cohort__p2p_op *p2p; /* a message (cohort_isend, cohort_irecv): its operation; NULL for a collective */
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
  pthread_mutex_t store_mu;    /* a store handle serves one thread at a time (the board's readers, abort notes) */
  struct cohort__board *board; /* in-process groups: the notice board in memory, in place of the store (board.h) */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  cohort_work *queue_head, *queue_tail;
  cohort_work *live; /* under mu: the async handles not yet freed (cohort_work_free), detached at destroy */
  int busy;
  int idle_waiters; /* blocking calls waiting for the queue to drain and busy to fall (a per-thread stream's) */
  int stopping;
  int thread_started;
  uint64_t fork_generation; /* cohort__fork_generation() when it was made: another means a forked child has it */
  pthread_t thread;

  cohort__failure failure; /* under mu: the first failure, which every later call returns */

  /* Sub-communicators (split.c). */
  cohort__store_place *place;          /* NULL when there is no store (1-rank and in-process communicators) */
  struct cohort__split_registry *hubs; /* in-process communicators: where the members of a split find its hub */
  uint32_t splits;                     /* splits made from this communicator so far: the same on every rank */
  uint32_t twins[8];                   /* hashes of the names of its twins (cohort_comm_twin), once each */
  int ntwins;
  int *parent_ranks; /* a sub-communicator: member i is rank parent_ranks[i] of its parent */

  /* Device collectives (src/gpu/): made at the first one by the thread that drives the transport; `label` is then
   * the transport's name with the device path's ("shm+cuda-ipc"), set under mu. */
  cohort__gpu *gpu;
  char label[64];

  /* Point-to-point messages (p2p.c): their engine and transport, made with the communicator. */
  struct cohort__p2p *p2p;
};

/* Makes c's point-to-point engine over a transport of its own (p2p.c says why), the same kind as c's: for a
 * communicator just made, on every rank at the same point (it meets the peers as c's transport did). */
cohort_status cohort__comm_start_p2p(cohort_comm *c);

/* Rewrites "rank N" in text (a failure message of a sub-communicator) as "rank N (rank P of the parent)", in place
 * (len: text's buffer). Does nothing on a communicator that is no sub-communicator. */
void cohort__comm_name_parent_ranks(const cohort_comm *c, char *text, size_t len);
/* The in-process split registry (split.c): made with an in-process group, shared by its members' communicators. */
struct cohort__split_registry *cohort__split_registry_create(void);
void cohort__split_registry_retain(struct cohort__split_registry *reg);
void cohort__split_registry_release(struct cohort__split_registry *reg);

/* Makes the communicator around a connected transport (takes ownership of it) and starts the progress thread. */
cohort_status cohort__comm_create(cohort__transport *transport, int local_rank, int local_size,
                                  const cohort__config *config, cohort_comm **out);

/* The job's store (job.c): opens it (serving it on rank 0 unless the launcher does or it is a file store), checks that
 * a store rank 0 serves belongs to this job, and returns the job's key space in *store (a view under
 * "cohort/<run id>/<generation>/" that owns the connection: the one place that names that prefix) and the server
 * this rank runs (or NULL) in *server, both the caller's; place says where it is (for sub-communicators), where
 * (where_len bytes) how messages name it. deadline bounds the wait for rank 0's word on whose store it is. */
cohort_status cohort__job_open(const cohort__launch_env *env, const cohort__config *cfg, int64_t deadline,
                               cohort__store **store, cohort__store_server **server, cohort__store_place *place,
                               char *where, size_t where_len);

/* Joins the job (rendezvous.c): opens the store (serving it on rank 0 unless the launcher does), chooses the
 * transport by COHORT_TRANSPORT and where the ranks are (shm on one host, tcp, or tcp+shm for several nodes of
 * several ranks), and connects it over the store. *out, *store_out and *server_out belong to the caller; *store_out is
 * the job's key space (a view under "cohort/<run id>/<generation>/" that owns the connection): keys the caller
 * publishes there are the job's and no other job's. */
cohort_status cohort__rendezvous_connect(const cohort__launch_env *env, const cohort__config *config,
                                         cohort__transport **out, cohort__store **store_out,
                                         cohort__store_server **server_out, cohort__store_place *place);

/* Opens a connection of its own to the store of place, as a view under place->prefix + suffix that owns it. */
cohort_status cohort__store_place_open(const cohort__store_place *place, const cohort__config *cfg, const char *suffix,
                                       cohort__store **out);
/* A sub-communicator's transport (split.c): the same choice and setup as the job's (shm, tcp or tcp+shm by where
 * the members are), among size members numbered by rank, over store (the split's key space, which the caller
 * keeps). local_rank/local_size: the member's place among the members on its host. */
cohort_status cohort__rendezvous_sub(const cohort__store_place *place, const cohort__config *cfg, int rank, int size,
                                     int local_rank, int local_size, cohort__store *store, cohort__transport **out);

/* abort_note.c: a failure's root cause in the job's store, for the peers an ABORT frame could not reach. */
void cohort__comm_leave_abort_note(cohort_comm *c, cohort_status status, const char *message);
/* For a lost peer ("rank P ..." with COHORT_ERR_REMOTE): its note, if it left one, replaces status and message
 * ("... (reported by rank P)"); returns 1 then. */
int cohort__comm_read_abort_note(cohort_comm *c, cohort_status *status, char *message, size_t len);

/* When the progress thread started and ended work w (CLOCK_MONOTONIC ns); 0 for a part not reached. Valid once the
 * work has completed. */
void cohort__work_times(const cohort_work *w, int64_t *start_ns, int64_t *end_ns);
/* cohort_comm_destroy: every async handle the caller has not freed yet is detached from c (done, answering from its
 * own fields), so that cohort_work_wait, _test and _free after the destroy touch no freed memory. */
void cohort__work_detach_all(cohort_comm *c);

/* How many times this process's line was forked since cohort loaded (pthread_atfork counts in each child): a
 * communicator made before the last fork belongs to the parent. A forked child has its parent's links (sockets,
 * shared memory) but none of its threads, so it must neither use such a communicator nor tear it down: that
 * joined threads that exist only in the parent (a child's exit hung or crashed) and told the parent's peers that
 * it left. cohort_init in the child makes a communicator of its own. */
uint64_t cohort__fork_generation(void);

static inline int cohort__comm_inherited(const cohort_comm *c) {
  return c->fork_generation != cohort__fork_generation();
}

#endif
