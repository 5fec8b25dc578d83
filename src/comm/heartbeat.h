/*
 * heartbeat.h: a worker's progress, shown to its launcher (cohortrun) through a shared page.
 *
 * When COHORT_HEARTBEAT_S asks for hang detection, cohortrun hands each worker an inherited memfd of one page
 * (COHORT_HEARTBEAT_FD, parsed with the other knobs by cohort_init). The process's first communicator maps it when
 * it is created and, around every collective, updates a few lock-free counters in it: collectives started and
 * completed, and the last one's number and kind.
 * That costs a few relaxed atomic stores per collective and no system call, so it is on whenever the launcher asks,
 * and nothing is ever dropped. cohortrun reads the page: a worker whose counters have not moved for
 * COHORT_HEARTBEAT_S is silent, and whether it is inside a collective (waiting on a peer) or outside (hung in its
 * own code) tells the culprit from its victims.
 *
 * Thread-safe: several communicators of one process (in-process replicas, the progress thread) share the page;
 * the counters are atomics. The page is a mapping, not a name in /dev/shm: nothing is left behind by a kill.
 */
#ifndef COHORT_COMM_HEARTBEAT_H
#define COHORT_COMM_HEARTBEAT_H

#include <stdatomic.h>
#include <stdint.h>

#include "transport/call.h"

#define COHORT_HEARTBEAT_MAGIC 0x4348423150414745ull /* "CHB1PAGE" */
#define COHORT_HEARTBEAT_PAGE_BYTES 4096

typedef struct cohort__heartbeat_page {
  _Atomic uint64_t magic;     /* set by cohortrun, checked by the worker before it trusts the mapping */
  _Atomic uint64_t started;   /* collectives started by this process (all its communicators) */
  _Atomic uint64_t completed; /* ... and completed (with success or not) */
  _Atomic uint64_t last_seq;  /* the number of the last collective started (its communicator's seq) */
  _Atomic uint32_t last_kind; /* its kind (a cohort__coll of transport/call.h) */
  _Atomic int32_t last_rank;  /* the rank of its communicator */
  _Atomic int32_t attached;   /* the pid of the process that mapped the page (its first communicator), 0 until then:
                               * cohortrun judges a worker that never maps it by its CPU time instead (watch.c) */
} cohort__heartbeat_page;

/* Maps the page behind descriptor fd (cohort__config.heartbeat_fd; -1: none) unless an earlier communicator of the
 * process has decided already. A descriptor that is not cohortrun's page is ignored: the variable may have been
 * inherited by a process that does not hold it. Thread-safe. */
void cohort__heartbeat_attach(long fd);
/* Collective number seq of kind starts (enter) on the communicator of rank. */
void cohort__heartbeat_enter(int rank, uint32_t seq, int kind);
/* The collective entered last on this thread has completed. */
void cohort__heartbeat_leave(void);
/* "allreduce", "broadcast", ... for a kind of the page. Inline: cohortrun reads pages without linking the engine. */
static inline const char *cohort__heartbeat_kind_name(uint32_t kind) {
  const char *name = cohort__coll_name(kind);
  return name ? name : "collective";
}

#endif
