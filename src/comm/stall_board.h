/*
 * stall_board.h: the progress table that the stall inspectors (src/ddp/stall.c) of an in-process group share, since
 * such a group has no store to publish progress in. The group (comm.c) owns it, so it lives with the communicator;
 * the inspector reads and writes its slots under its mutex.
 *
 * Reference counted: the group holds one reference and each of its communicators another. Thread-safe.
 */
#ifndef COHORT_COMM_STALL_BOARD_H
#define COHORT_COMM_STALL_BOARD_H

#include <pthread.h>
#include <stdint.h>

typedef struct cohort__stall_slot {
  int64_t step;
  int bucket;
  int set;
} cohort__stall_slot;

struct cohort__stall_board {
  pthread_mutex_t mu; /* guards refs and slot */
  int refs;
  int size;
  cohort__stall_slot slot[];
};

/* A board of size empty slots with one reference, or NULL (size < 1, out of memory). */
struct cohort__stall_board *cohort__stall_board_create(int size);
void cohort__stall_board_retain(struct cohort__stall_board *board);
/* Drops a reference; the last one frees the board. NULL is ignored. */
void cohort__stall_board_release(struct cohort__stall_board *board);

#endif
