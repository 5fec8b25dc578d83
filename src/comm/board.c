/* board.c: a communicator's notice board (board.h), in the store or in memory. */
#include "comm/board.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/error.h"

/* ---- in memory ---- */

typedef struct notice {
  struct notice *next;
  int rank;
  char topic[COHORT__BOARD_TOPIC_MAX];
  char value[COHORT__BOARD_VALUE_MAX];
} notice;

struct cohort__board {
  pthread_mutex_t mu; /* guards refs and the notices */
  int refs;
  int size;
  notice *notices;
};

struct cohort__board *cohort__board_create(int size) {
  if (size < 1) return NULL;
  struct cohort__board *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  pthread_mutex_init(&b->mu, NULL);
  b->refs = 1;
  b->size = size;
  return b;
}

void cohort__board_retain(struct cohort__board *b) {
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  b->refs++;
  pthread_mutex_unlock(&b->mu);
}

void cohort__board_release(struct cohort__board *b) {
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  int last = --b->refs == 0;
  pthread_mutex_unlock(&b->mu);
  if (!last) return;
  while (b->notices) {
    notice *n = b->notices;
    b->notices = n->next;
    free(n);
  }
  pthread_mutex_destroy(&b->mu);
  free(b);
}

/* Under b->mu: rank's notice under topic, made (empty) when create is set; NULL when there is none (or no memory). */
static notice *find(struct cohort__board *b, const char *topic, int rank, int create) {
  for (notice *n = b->notices; n; n = n->next)
    if (n->rank == rank && strcmp(n->topic, topic) == 0) return n;
  if (!create) return NULL;
  notice *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->rank = rank;
  snprintf(n->topic, sizeof n->topic, "%s", topic);
  n->next = b->notices;
  b->notices = n;
  return n;
}

/* ---- either ---- */

int cohort__board_available(const cohort_comm *c) { return c->board || c->store; }

static cohort_status check_args(const char *topic, const char *value) {
  if (strlen(topic) >= COHORT__BOARD_TOPIC_MAX || (value && strlen(value) >= COHORT__BOARD_VALUE_MAX))
    return cohort__error(COHORT_ERR_INVALID, "board: topic '%s' or its notice is too long", topic);
  return COHORT_OK;
}

cohort_status cohort__board_publish(cohort_comm *c, const char *topic, const char *value) {
  COHORT_CHECK(check_args(topic, value));
  if (c->board) {
    struct cohort__board *b = c->board;
    pthread_mutex_lock(&b->mu);
    notice *n = c->rank < b->size ? find(b, topic, c->rank, 1) : NULL;
    if (n) snprintf(n->value, sizeof n->value, "%s", value);
    pthread_mutex_unlock(&b->mu);
    return n || c->rank >= b->size ? COHORT_OK : cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  if (!c->store) return COHORT_OK;
  char key[COHORT_STORE_KEY_MAX];
  snprintf(key, sizeof key, "%s/%d", topic, c->rank); /* in the communicator's key space */
  pthread_mutex_lock(&c->store_mu);
  cohort_status st = cohort__store_set(c->store, key, value, strlen(value));
  pthread_mutex_unlock(&c->store_mu);
  return st;
}

cohort_status cohort__board_read(cohort_comm *c, const char *topic, int rank, char *value, size_t len, int *found) {
  *found = 0;
  if (len) value[0] = '\0';
  COHORT_CHECK(check_args(topic, NULL));
  if (c->board) {
    struct cohort__board *b = c->board;
    pthread_mutex_lock(&b->mu);
    notice *n = find(b, topic, rank, 0);
    if (n) {
      snprintf(value, len, "%s", n->value);
      *found = 1;
    }
    pthread_mutex_unlock(&b->mu);
    return COHORT_OK;
  }
  if (!c->store) return COHORT_OK;
  char key[COHORT_STORE_KEY_MAX];
  snprintf(key, sizeof key, "%s/%d", topic, rank);
  int exists = 0;
  void *got = NULL;
  size_t got_len = 0;
  pthread_mutex_lock(&c->store_mu);
  cohort_status st = cohort__store_check(c->store, key, &exists);
  /* The key exists, so this returns at once; the timeout only bounds a store that stops answering. */
  if (st == COHORT_OK && exists) st = cohort__store_get(c->store, key, 1.0, &got, &got_len);
  pthread_mutex_unlock(&c->store_mu);
  if (st == COHORT_OK && got) {
    snprintf(value, len, "%.*s", (int)got_len, (const char *)got);
    *found = 1;
  }
  free(got);
  return st;
}
