/*
 * frame.h: the wire header in front of every frame on a byte-stream transport.
 *
 * Layout (40 bytes, host byte order, which must be little-endian on every rank): magic "CHRT", kind, coll, dtype,
 * op, seq, root, algo + 7 reserved bytes, count, payload bytes. ABORT frames carry a status and a message as payload.
 * The header is checked field by field before a byte of payload is accepted, so that a malformed, foreign or mismatched
 * frame never lands in user memory.
 */
#ifndef COHORT_TRANSPORT_FRAME_H
#define COHORT_TRANSPORT_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "transport/transport.h"

#define COHORT__FRAME_MAGIC 0x54524843u /* "CHRT" */
#define COHORT__ABORT_TEXT_MAX 1024

/* The message of a failure heard of from peer P: text + " (reported by rank P)". A text that already has that
 * suffix came through another relay; it keeps the first one, the rank that saw the failure, and gets no second. */
static inline void cohort__relayed_failure(char *out, size_t len, const char *text, int peer) {
  if (strstr(text, " (reported by rank "))
    snprintf(out, len, "%s", text);
  else
    snprintf(out, len, "%s (reported by rank %d)", text, peer);
}

enum { COHORT__FRAME_DATA = 1, COHORT__FRAME_ABORT = 2 };

typedef struct cohort__frame {
  uint32_t magic;
  uint8_t kind;
  uint8_t coll;
  uint8_t dtype;
  uint8_t op;
  uint32_t seq;
  int32_t root;
  uint8_t algo;
  uint8_t reserved[7];
  uint64_t count;
  uint64_t bytes;
} cohort__frame;

_Static_assert(sizeof(cohort__frame) == 40, "the wire header is 40 bytes");
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the frame header is sent as host memory and assumes a little-endian host"
#endif

static inline void cohort__frame_from_call(cohort__frame *f, const cohort__call *c, uint64_t bytes) {
  *f = (cohort__frame){.magic = COHORT__FRAME_MAGIC,
                       .kind = COHORT__FRAME_DATA,
                       .coll = c->coll,
                       .dtype = c->dtype,
                       .op = c->op,
                       .seq = c->seq,
                       .root = c->root,
                       .algo = c->algo,
                       .count = c->count,
                       .bytes = bytes};
}

static inline void cohort__frame_to_call(const cohort__frame *f, cohort__call *c) {
  *c = (cohort__call){.seq = f->seq,
                      .coll = f->coll,
                      .dtype = f->dtype,
                      .op = f->op,
                      .algo = f->algo,
                      .root = f->root,
                      .count = f->count};
}

/* A DATA header's payload must fit its call (count x dtype size): else COHORT_ERR_PROTOCOL and a message in msg. */
cohort_status cohort__frame_check_size(const cohort__frame *hdr, int peer, char *msg, size_t len);
/* Does a received header belong to this rank's current call `mine`, with the expect_bytes of the receive posted for
 * it? Else COHORT_ERR_MISMATCH and a message naming both ranks and both calls (size_hint names the knobs that must
 * agree for the frame sizes to match). */
cohort_status cohort__frame_match(const cohort__call *mine, int my_rank, int peer, const cohort__frame *hdr,
                                  size_t expect_bytes, const char *size_hint, char *msg, size_t len);

static inline int cohort__call_equal(const cohort__call *a, const cohort__call *b) {
  return a->seq == b->seq && a->coll == b->coll && a->dtype == b->dtype && a->op == b->op && a->algo == b->algo &&
         a->root == b->root && a->count == b->count;
}

#endif
