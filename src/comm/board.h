/*
 * board.h: a communicator's notice board. Each rank publishes a small state of its own under a topic and reads its
 * peers' latest, for advisory uses (the DDP stall inspector's progress, src/ddp/stall.c): no rank waits for another's
 * notice, and what a rank reads may be a moment old.
 *
 * Where the notices live: in the communicator's key space in the store ("<topic>/<rank>"), for communicators made by
 * cohort_init and their splits; in-process groups have no store, so the group's communicators share a board in
 * memory (made with the group, and one per color of each split). Communicators with neither (1 rank, MPI) have no
 * board: publishing is a no-op and reading finds nothing.
 *
 * Thread-safety: any thread (the store handle is shared with the communicator's other users under its mutex).
 */
#ifndef COHORT_COMM_BOARD_H
#define COHORT_COMM_BOARD_H

#include <stddef.h>

#include "cohort/cohort.h"

#define COHORT__BOARD_TOPIC_MAX 32 /* a topic, its terminating zero included */
#define COHORT__BOARD_VALUE_MAX 64 /* a notice, its terminating zero included */

/* Whether c has a board: a store, or an in-process group's board in memory. */
int cohort__board_available(const cohort_comm *c);
/* Publishes value (text, shorter than COHORT__BOARD_VALUE_MAX) as this rank's notice under topic, replacing its last.
 */
cohort_status cohort__board_publish(cohort_comm *c, const char *topic, const char *value);
/* rank's latest notice under topic into value (len bytes, terminated); *found is 0 when it has published none. */
cohort_status cohort__board_read(cohort_comm *c, const char *topic, int rank, char *value, size_t len, int *found);

/* The board in memory of an in-process group of size ranks, with one reference (NULL: out of memory); the group
 * holds one and each of its communicators another. */
struct cohort__board *cohort__board_create(int size);
void cohort__board_retain(struct cohort__board *board);
/* Drops a reference; the last one frees the board. NULL is ignored. */
void cohort__board_release(struct cohort__board *board);

#endif
