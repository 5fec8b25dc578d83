/*
 * frame.h: the frames of a byte-stream transport (TCP sockets, shared-memory rings), and the one state machine that
 * sends and receives them over a link, whatever carries the bytes.
 *
 * Layout (40 bytes, host byte order, which must be little-endian on every rank): magic "CHRT", kind, coll, dtype,
 * op, seq, root, algo, the call's 32-bit `sig` (the hash of a v-form's counts array, zero for the other collectives:
 * bytes that were reserved, always zero, before the v-forms), 3 reserved bytes, count, payload bytes. ABORT frames
 * carry a status and a message as payload. The header is checked field by field before a byte of payload is accepted,
 * so that a malformed, foreign or mismatched frame never lands in user memory.
 *
 * A link is one ordered stream each way between this rank and a peer (a socket, or a pair of rings). The transport
 * owns its links and drives them: it calls cohort__link_send and cohort__link_recv when the link may move, and
 * gives the machine a small table (cohort__link_ops) to read and write its bytes and to fail. frame.c says how a
 * frame is received. Thread-safety: a link is driven by the one thread that drives its transport.
 */
#ifndef COHORT_TRANSPORT_FRAME_H
#define COHORT_TRANSPORT_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "core/failure.h"
#include "transport/transport.h"

#define COHORT__FRAME_MAGIC 0x54524843u /* "CHRT" */
#define COHORT__ABORT_TEXT_MAX 1024
_Static_assert(COHORT__FAILURE_TEXT_MAX == COHORT__ABORT_TEXT_MAX,
               "a transport's kept failure (core/failure.h) is what its ABORT frames and abort slot carry");

/* The message of a failure heard of from peer P: text + " (reported by rank P)". A text that already has that
 * suffix came through another relay; it keeps the first one, the rank that saw the failure, and gets no second. */
static inline void cohort__relayed_failure(char *out, size_t len, const char *text, int peer) {
  if (strstr(text, " (reported by rank "))
    snprintf(out, len, "%s", text);
  else
    snprintf(out, len, "%s (reported by rank %d)", text, peer);
}

enum { COHORT__FRAME_DATA = 1, COHORT__FRAME_ABORT = 2 };

/* Frames of the device collectives' control plane (algorithm COHORT__ALGO_DEVICE) may carry up to this many bytes
 * whatever the call's count and dtype. */
#define COHORT__FRAME_CONTROL_MAX 4096

typedef struct cohort__frame {
  uint32_t magic;
  uint8_t kind;
  uint8_t coll;
  uint8_t dtype;
  uint8_t op;
  uint32_t seq;
  int32_t root;
  uint8_t algo;
  uint8_t sig[4]; /* cohort__call's sig, little-endian (unaligned: bytes) */
  uint8_t reserved[3];
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
  memcpy(f->sig, &c->sig, sizeof f->sig);
}

static inline void cohort__frame_to_call(const cohort__frame *f, cohort__call *c) {
  *c = (cohort__call){.seq = f->seq,
                      .coll = f->coll,
                      .dtype = f->dtype,
                      .op = f->op,
                      .algo = f->algo,
                      .root = f->root,
                      .count = f->count};
  memcpy(&c->sig, f->sig, sizeof f->sig);
}

/* A DATA header's payload must fit its call (count x dtype size): else COHORT_ERR_PROTOCOL and a message in msg. */
cohort_status cohort__frame_check_size(const cohort__frame *hdr, int peer, char *msg, size_t len);
/* Does a received header belong to this rank's current call `mine`, with the expect_bytes of the receive posted for
 * it? Else COHORT_ERR_MISMATCH and a message naming both ranks and both calls (size_hint names the knobs that must
 * agree for the frame sizes to match). */
cohort_status cohort__frame_match(const cohort__call *mine, int my_rank, int peer, const cohort__frame *hdr,
                                  size_t expect_bytes, const char *size_hint, char *msg, size_t len);

/* ---- links ---- */

/* A frame of a later call read into memory ahead of its receive (a peer that is ahead). */
typedef struct cohort__early {
  struct cohort__early *next;
  cohort__frame hdr;
  char *data;
} cohort__early;

enum { COHORT__RX_HEADER, COHORT__RX_HELD, COHORT__RX_PAYLOAD, COHORT__RX_EARLY, COHORT__RX_ABORT };

typedef struct cohort__link {
  int peer; /* the peer's rank in the transport */
  /* sending: requests in posting order; the first one's header and payload go out as the link takes them */
  cohort__req *send_head, *send_tail;
  cohort__frame send_hdr;
  size_t send_hdr_done;
  int send_started;
  /* receiving */
  cohort__req *recv_head, *recv_tail;
  cohort__frame recv_hdr;
  size_t recv_hdr_done;
  int rx_state;                           /* COHORT__RX_* */
  cohort__early *early_head, *early_tail; /* in stream order */
  size_t aside_bytes;                     /* payload bytes of the early frames */
  char *rx_buf;                           /* payload target of RX_EARLY and RX_ABORT */
  size_t rx_done;
} cohort__link;

/* What a transport gives the machine. `t` is the transport. */
typedef struct cohort__link_ops {
  /* Reads up to len bytes of l's inbound stream into buf and sets *got: 0 when none is there now, also at the end
   * of the stream (the transport notes that itself: see cohort__link_mid_frame). Any other status than COHORT_OK
   * comes after failing the transport. */
  cohort_status (*read)(void *t, cohort__link *l, void *buf, size_t len, size_t *got);
  /* Writes a prefix of the n pieces in iov to l's outbound stream and sets *put (0: none can go now); as read. */
  cohort_status (*write)(void *t, cohort__link *l, const struct iovec *iov, int n, size_t *put);
  /* Fails the transport with msg (the first failure wins, the peers are told) and returns the status to hand up. */
  cohort_status (*fail)(void *t, cohort_status status, const char *msg);
  /* Link i of the transport's cohort__links.count (the scans over all links). */
  cohort__link *(*at)(void *t, int i);
  /* The knobs that must agree between ranks for frame sizes to match, named when they do not. */
  const char *size_hint;
} cohort__link_ops;

/* A transport's links, and what of the transport the machine reads. */
typedef struct cohort__links {
  const cohort__link_ops *ops;
  void *t;
  const cohort__call *call; /* the transport's current call */
  size_t *pending;          /* the transport's count of posted requests not complete; the machine decrements it */
  int rank;                 /* this rank in the transport */
  int world_offset;         /* added to ranks in messages, which name ranks as the job knows them */
  int count;                /* links, for ops->at */
} cohort__links;

/* Queue a send or receive on l (the transport counted it in *pending); a send starts going out at once, a receive
 * takes an early frame that waits for it. */
cohort_status cohort__link_post_send(cohort__links *s, cohort__link *l, cohort__req *req);
cohort_status cohort__link_post_recv(cohort__links *s, cohort__link *l, cohort__req *req);
/* Move l's sends / receives as far as its stream allows; *progressed is set when anything moved. */
cohort_status cohort__link_send(cohort__links *s, cohort__link *l, int *progressed);
cohort_status cohort__link_recv(cohort__links *s, cohort__link *l, int *progressed);
/* Whether cohort__link_recv has something to do without new bytes (a held frame or an early one for a receive). */
static inline int cohort__link_has_work(const cohort__link *l) {
  return l->recv_head && (l->rx_state == COHORT__RX_HELD || l->early_head);
}
/* Whether the stream stopped inside a frame: its header partly read, or its payload partly copied. A link whose
 * stream ends is a failure only then, or while a receive waits on it: a peer that finished its last collective
 * and exited ends its stream between frames. */
static inline int cohort__link_mid_frame(const cohort__link *l) {
  return l->recv_hdr_done > 0 || (l->rx_state != COHORT__RX_HEADER && l->rx_state != COHORT__RX_HELD);
}
/* When nothing moves: a held or early frame of our call number whose call differs from ours is a disagreement,
 * even if no receive is ever posted for it. Fails the transport then. */
cohort_status cohort__links_check_held(cohort__links *s);
/* The ranks that posted requests still wait on, "1, 3", for a timeout message. */
void cohort__links_describe_waiting(const cohort__links *s, char *buf, size_t len);
/* Frees what the machine allocated for l (early frames, a partly read one). */
void cohort__link_free(cohort__link *l);

#endif
