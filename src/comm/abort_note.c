/*
 * abort_note.c: the root cause of a failure, left in the job's store beside the ABORT frames.
 *
 * A failing rank sends every peer an ABORT frame with its status and message. Over a byte stream that frame can only
 * follow the frame already half-written to that peer, and when the peer is not reading it (a large frame of a call
 * it has not reached: it waits in the stream), the ABORT misses its deadline and the peer sees only the connection
 * close mid-frame. So the failing rank also writes "abort/<rank>" into the store, and a rank that loses a peer
 * looks there before it reports a bare "closed its connection": every survivor then names the rank and the reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/log.h"
#include "transport/frame.h"

/* How long a rank that lost a peer waits for that peer's note: the note is written right after the peer's ABORT
 * frames were tried, before the lost-peer grace (200 ms) on this side has run out, so it is there or never comes. */
#define NOTE_WAIT_S 0.25

void cohort__comm_leave_abort_note(cohort_comm *c, cohort_status status, const char *message) {
  if (!c->store || strstr(message, " (reported by rank ")) return; /* a relayed failure: its origin left the note */
  char key[32], value[COHORT__MESSAGE_MAX + 16];
  snprintf(key, sizeof key, "abort/%d", c->rank);
  int n = snprintf(value, sizeof value, "%d %s", (int)status, message);
  pthread_mutex_lock(&c->store_mu);
  if (cohort__store_set(c->store, key, value, (size_t)(n < (int)sizeof value ? n : (int)sizeof value - 1)) != COHORT_OK)
    COHORT_LOG_DEBUG("could not leave the abort note in the store: %s", cohort_last_error());
  pthread_mutex_unlock(&c->store_mu);
}

int cohort__comm_read_abort_note(cohort_comm *c, cohort_status *status, char *message, size_t len) {
  int peer = -1;
  if (!c->store || *status != COHORT_ERR_REMOTE || strstr(message, " (reported by rank ") ||
      sscanf(message, "rank %d ", &peer) != 1 || peer < 0 || peer >= c->size || peer == c->rank)
    return 0;
  char key[32];
  snprintf(key, sizeof key, "abort/%d", peer);
  void *got = NULL;
  size_t got_len = 0;
  pthread_mutex_lock(&c->store_mu);
  cohort_status st = cohort__store_get(c->store, key, NOTE_WAIT_S, &got, &got_len);
  pthread_mutex_unlock(&c->store_mu);
  if (st != COHORT_OK) return 0;
  char *text = malloc(got_len + 1);
  if (!text) {
    free(got);
    return 0;
  }
  memcpy(text, got, got_len);
  text[got_len] = '\0';
  free(got);
  int code = 0, skip = 0;
  if (sscanf(text, "%d %n", &code, &skip) == 1 && code > COHORT_OK && code <= COHORT_ERR_PROTOCOL) {
    *status = (cohort_status)code;
    cohort__relayed_failure(message, len, text + skip, peer);
  }
  free(text);
  return 1;
}
