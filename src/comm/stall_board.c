/* stall_board.c: the in-process group's progress table (stall_board.h). */
#include "comm/stall_board.h"

#include <stdlib.h>

struct cohort__stall_board *cohort__stall_board_create(int size) {
  if (size < 1) return NULL;
  struct cohort__stall_board *b = calloc(1, sizeof *b + (size_t)size * sizeof b->slot[0]);
  if (!b) return NULL;
  pthread_mutex_init(&b->mu, NULL);
  b->refs = 1;
  b->size = size;
  return b;
}

void cohort__stall_board_retain(struct cohort__stall_board *b) {
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  b->refs++;
  pthread_mutex_unlock(&b->mu);
}

void cohort__stall_board_release(struct cohort__stall_board *b) {
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  int last = --b->refs == 0;
  pthread_mutex_unlock(&b->mu);
  if (!last) return;
  pthread_mutex_destroy(&b->mu);
  free(b);
}
