/*
 * frame.c: frames over a link, for every byte-stream transport (TCP, shared memory), so that both accept, hold and
 * reject the same frames with the same words. The transport carries the bytes (cohort__link_ops); this file decides
 * what they are.
 *
 * Receiving reads the 40-byte header first and checks it before any payload is accepted:
 *  - a frame of the current call is read straight into the posted receive buffer (no copy); if no receive is
 *    posted yet, the header is held and the payload stays in the stream (the socket buffer or the ring is the flow
 *    control);
 *  - a frame of a later call (a peer that is ahead) is read into a private buffer while the frames read aside on
 *    its link stay small (EARLY_ASIDE_BYTES); a larger one is held like a frame of the current call, and whatever
 *    comes behind it is read only once this rank reaches that call (nothing of the current call can come after it
 *    on that link, so no wait of the current call depends on it);
 *  - an ABORT frame fails the transport with the peer's status and message (TCP sends them; shared memory uses the
 *    abort slot in its segment instead, but would read one the same way).
 * The transport's read may hand over any number of bytes: a header or payload arrives in as many pieces as it likes.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "transport/frame.h"

/* Bound on a frame's payload, checked before anything else: no call is this large. */
#define MAX_FRAME_BYTES (1ull << 40)
/* A frame from a peer already in a later call is read aside (malloc and copy) only while the frames read aside on
 * its link stay this small; a larger one waits in the stream, its header read, until our receive for it is posted,
 * and then lands straight in it. Reading large ones aside cost a malloc, an extra copy and fresh pages from the
 * kernel for every call that a peer started first: a 2-rank 64 MiB allreduce over TCP ran at a third of its speed.
 * Waiting in the stream is safe: every frame of our current call from that peer came before it, and the peer's
 * sends still complete as long as the stream has room (after that it waits for us, as it would anyway). */
#define EARLY_ASIDE_BYTES (64u << 10)

cohort_status cohort__frame_check_size(const cohort__frame *hdr, int peer, char *msg, size_t len) {
  /* No algorithm sends more than the call's whole buffer in one frame; checked before anything is allocated for
   * it, so that a corrupt header cannot make a rank reserve 2^40 bytes for an early frame. */
  size_t es = cohort_dtype_size((cohort_dtype)hdr->dtype);
  /* The device paths' control frames (descriptors, outcomes: src/gpu, src/cuda) are small and of any size. */
  if (hdr->algo == COHORT__ALGO_DEVICE && es != 0 && hdr->bytes <= COHORT__FRAME_CONTROL_MAX) return COHORT_OK;
  if (es == 0 || hdr->bytes / es > hdr->count || hdr->bytes % es != 0) {
    snprintf(msg, len, "malformed frame from rank %d: %llu bytes for a call of %llu elements of dtype %u", peer,
             (unsigned long long)hdr->bytes, (unsigned long long)hdr->count, hdr->dtype);
    return COHORT_ERR_PROTOCOL;
  }
  return COHORT_OK;
}

cohort_status cohort__frame_match(const cohort__call *mine, int my_rank, int peer, const cohort__frame *hdr,
                                  size_t expect_bytes, const char *size_hint, char *msg, size_t len) {
  cohort__call theirs;
  cohort__frame_to_call(hdr, &theirs);
  if (cohort__call_equal(&theirs, mine)) {
    if (hdr->bytes == expect_bytes) return COHORT_OK;
    if (cohort__coll_flags(mine->coll) & COHORT__CALL_PEER_COUNTS) {
      size_t es = cohort_dtype_size((cohort_dtype)mine->dtype);
      snprintf(msg, len,
               "ranks disagree on the counts of %s: rank %d sends %llu elements to rank %d, which expects %zu from "
               "it (its recv_counts[%d] against rank %d's send_counts[%d])",
               cohort__coll_api_name(mine->coll), peer, (unsigned long long)(hdr->bytes / es), my_rank,
               expect_bytes / es, peer, peer, my_rank);
      return COHORT_ERR_MISMATCH;
    }
    snprintf(msg, len,
             "rank %d sent a frame of %llu bytes where rank %d expects %zu in the same call: do the ranks "
             "use the same %s?",
             peer, (unsigned long long)hdr->bytes, my_rank, expect_bytes, size_hint);
    return COHORT_ERR_MISMATCH;
  }
  char a[256], b[256];
  cohort__call_describe(mine, a, sizeof a);
  cohort__call_describe(&theirs, b, sizeof b);
  if (theirs.seq != mine->seq)
    snprintf(msg, len, "ranks disagree: rank %d is in %s and expects more data from rank %d, which has moved on to %s",
             my_rank, a, peer, b);
  else
    snprintf(msg, len, "ranks disagree: rank %d called %s but rank %d called %s", my_rank, a, peer, b);
  return COHORT_ERR_MISMATCH;
}

/* ---- failing ---- */

static cohort_status failf(cohort__links *s, cohort_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cohort_status failf(cohort__links *s, cohort_status st, const char *fmt, ...) {
  char msg[COHORT__ABORT_TEXT_MAX + 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return s->ops->fail(s->t, st, msg);
}

#define WORLD(s, p) ((p) + (s)->world_offset)

/* ---- sending ---- */

cohort_status cohort__link_send(cohort__links *s, cohort__link *l, int *progressed) {
  cohort__req *r;
  while ((r = l->send_head) != NULL) {
    if (!l->send_started) { /* the header carries the call the send was posted under */
      cohort__frame_from_call(&l->send_hdr, &r->call, r->bytes);
      l->send_hdr_done = 0;
      l->send_started = 1;
    }
    struct iovec iov[2];
    int n = 0;
    if (l->send_hdr_done < sizeof l->send_hdr)
      iov[n++] = (struct iovec){(char *)&l->send_hdr + l->send_hdr_done, sizeof l->send_hdr - l->send_hdr_done};
    if (r->done_bytes < r->bytes) iov[n++] = (struct iovec){(char *)r->buf + r->done_bytes, r->bytes - r->done_bytes};
    size_t put = 0;
    COHORT_CHECK(s->ops->write(s->t, l, iov, n, &put));
    if (put == 0) return COHORT_OK;
    *progressed = 1;
    size_t hdr_left = sizeof l->send_hdr - l->send_hdr_done, h = put < hdr_left ? put : hdr_left;
    l->send_hdr_done += h;
    r->done_bytes += put - h;
    if (l->send_hdr_done == sizeof l->send_hdr && r->done_bytes == r->bytes) {
      r->complete = 1;
      l->send_head = r->next;
      if (!l->send_head) l->send_tail = NULL;
      l->send_started = 0;
      (*s->pending)--;
    }
  }
  return COHORT_OK;
}

cohort_status cohort__link_post_send(cohort__links *s, cohort__link *l, cohort__req *req) {
  if (l->send_tail)
    l->send_tail->next = req;
  else
    l->send_head = req;
  l->send_tail = req;
  int progressed = 0;
  return cohort__link_send(s, l, &progressed); /* most small frames leave here */
}

/* ---- receiving ---- */

/* Checks a frame of the current call against the receive posted for it. */
static cohort_status check_frame(cohort__links *s, cohort__link *l, const cohort__frame *hdr, const cohort__req *r) {
  char msg[COHORT__ABORT_TEXT_MAX];
  cohort_status st = cohort__frame_match(s->call, WORLD(s, s->rank), WORLD(s, l->peer), hdr, r->bytes,
                                         s->ops->size_hint, msg, sizeof msg);
  return st == COHORT_OK ? COHORT_OK : s->ops->fail(s->t, st, msg);
}

static void complete_recv(cohort__links *s, cohort__link *l) {
  cohort__req *r = l->recv_head;
  r->complete = 1;
  l->recv_head = r->next;
  if (!l->recv_head) l->recv_tail = NULL;
  (*s->pending)--;
}

/* Early frames are handed to posted receives in stream order. Invariant after this: a link never has both an early
 * frame and a posted receive waiting. */
static cohort_status drain_early(cohort__links *s, cohort__link *l, int *progressed) {
  while (l->recv_head && l->early_head) {
    cohort__early *e = l->early_head;
    cohort__req *r = l->recv_head;
    COHORT_CHECK(check_frame(s, l, &e->hdr, r));
    if (r->bytes) memcpy(r->buf, e->data, r->bytes);
    r->done_bytes = r->bytes;
    l->early_head = e->next;
    if (!l->early_head) l->early_tail = NULL;
    l->aside_bytes -= e->hdr.bytes;
    free(e->data);
    free(e);
    complete_recv(s, l);
    *progressed = 1;
  }
  return COHORT_OK;
}

cohort_status cohort__link_post_recv(cohort__links *s, cohort__link *l, cohort__req *req) {
  if (l->recv_tail)
    l->recv_tail->next = req;
  else
    l->recv_head = req;
  l->recv_tail = req;
  int progressed = 0;
  return drain_early(s, l, &progressed); /* the frame may have come early: it is waiting in memory */
}

/* A whole header has come: decide where its payload goes. */
static cohort_status on_header(cohort__links *s, cohort__link *l) {
  const cohort__frame *h = &l->recv_hdr;
  int peer = WORLD(s, l->peer);
  if (h->magic != COHORT__FRAME_MAGIC)
    return failf(s, COHORT_ERR_PROTOCOL, "malformed frame from rank %d (bad magic 0x%08x)", peer, h->magic);
  if (h->kind == COHORT__FRAME_ABORT) {
    if (h->bytes < sizeof(int32_t) || h->bytes > sizeof(int32_t) + COHORT__ABORT_TEXT_MAX)
      return failf(s, COHORT_ERR_PROTOCOL, "malformed abort frame from rank %d", peer);
    l->rx_buf = calloc(1, h->bytes + 1);
    if (!l->rx_buf) return failf(s, COHORT_ERR_SYSTEM, "out of memory");
    l->rx_done = 0;
    l->rx_state = COHORT__RX_ABORT;
    return COHORT_OK;
  }
  if (h->kind != COHORT__FRAME_DATA || h->bytes > MAX_FRAME_BYTES)
    return failf(s, COHORT_ERR_PROTOCOL, "malformed frame from rank %d (kind %u, %llu bytes)", peer, h->kind,
                 (unsigned long long)h->bytes);
  char msg[COHORT__ABORT_TEXT_MAX];
  cohort_status st = cohort__frame_check_size(h, peer, msg, sizeof msg);
  if (st != COHORT_OK) return s->ops->fail(s->t, st, msg);
  int32_t ahead = (int32_t)(h->seq - s->call->seq);
  if (ahead < 0)
    return failf(s, COHORT_ERR_PROTOCOL, "rank %d sent a frame of call #%u during call #%u", peer, h->seq,
                 s->call->seq);
  if (ahead > 0 && l->aside_bytes + h->bytes <= EARLY_ASIDE_BYTES) { /* a small early frame: read it aside */
    l->aside_bytes += h->bytes;
    l->rx_buf = malloc(h->bytes ? h->bytes : 1);
    if (!l->rx_buf)
      return failf(s, COHORT_ERR_SYSTEM, "out of memory for a %llu-byte early frame from rank %d",
                   (unsigned long long)h->bytes, peer);
    l->rx_done = 0;
    l->rx_state = COHORT__RX_EARLY;
    return COHORT_OK;
  }
  l->rx_state = COHORT__RX_HELD; /* of the current call, or a large early frame: its payload waits in the stream */
  return COHORT_OK;
}

/* An ABORT frame is complete: the peer's failure becomes ours, its message kept (it already names the ranks). */
static cohort_status on_abort(cohort__links *s, cohort__link *l) {
  int32_t st;
  memcpy(&st, l->rx_buf, sizeof st);
  if (st <= COHORT_OK || st > COHORT_ERR_PROTOCOL) st = COHORT_ERR_REMOTE;
  char text[COHORT__ABORT_TEXT_MAX + 1];
  snprintf(text, sizeof text, "%s", l->rx_buf + sizeof st);
  free(l->rx_buf);
  l->rx_buf = NULL;
  l->rx_state = COHORT__RX_HEADER;
  char msg[COHORT__ABORT_TEXT_MAX + 40];
  cohort__relayed_failure(msg, sizeof msg, text, WORLD(s, l->peer));
  return s->ops->fail(s->t, (cohort_status)st, msg);
}

cohort_status cohort__link_recv(cohort__links *s, cohort__link *l, int *progressed) {
  size_t got;
  for (;;) {
    switch (l->rx_state) {
    case COHORT__RX_HEADER:
      COHORT_CHECK(drain_early(s, l, progressed));
      COHORT_CHECK(
          s->ops->read(s->t, l, (char *)&l->recv_hdr + l->recv_hdr_done, sizeof l->recv_hdr - l->recv_hdr_done, &got));
      if (got == 0) return COHORT_OK;
      *progressed = 1;
      l->recv_hdr_done += got;
      if (l->recv_hdr_done < sizeof l->recv_hdr) break;
      l->recv_hdr_done = 0;
      COHORT_CHECK(on_header(s, l));
      break;
    case COHORT__RX_HELD:
      if (!l->recv_head) return COHORT_OK; /* the payload waits in the stream until a receive is posted */
      COHORT_CHECK(check_frame(s, l, &l->recv_hdr, l->recv_head));
      l->rx_state = COHORT__RX_PAYLOAD;
      if (l->recv_head->bytes == 0) {
        complete_recv(s, l);
        l->rx_state = COHORT__RX_HEADER;
        *progressed = 1;
      }
      break;
    case COHORT__RX_PAYLOAD: {
      cohort__req *r = l->recv_head;
      COHORT_CHECK(s->ops->read(s->t, l, (char *)r->buf + r->done_bytes, r->bytes - r->done_bytes, &got));
      if (got == 0) return COHORT_OK;
      *progressed = 1;
      r->done_bytes += got;
      if (r->done_bytes == r->bytes) {
        complete_recv(s, l);
        l->rx_state = COHORT__RX_HEADER;
      }
      break;
    }
    case COHORT__RX_EARLY:
    case COHORT__RX_ABORT: {
      size_t want = l->recv_hdr.bytes - l->rx_done;
      if (want > 0) {
        COHORT_CHECK(s->ops->read(s->t, l, l->rx_buf + l->rx_done, want, &got));
        if (got == 0) return COHORT_OK;
        *progressed = 1;
        l->rx_done += got;
        if (l->rx_done < l->recv_hdr.bytes) break;
      }
      if (l->rx_state == COHORT__RX_ABORT) return on_abort(s, l);
      cohort__early *e = malloc(sizeof *e);
      if (!e) return failf(s, COHORT_ERR_SYSTEM, "out of memory");
      *e = (cohort__early){.hdr = l->recv_hdr, .data = l->rx_buf};
      if (l->early_tail)
        l->early_tail->next = e;
      else
        l->early_head = e;
      l->early_tail = e;
      l->rx_buf = NULL;
      l->rx_state = COHORT__RX_HEADER; /* which hands it over first if its receive was posted meanwhile */
      break;
    }
    }
  }
}

/* ---- when nothing moves ---- */

/* A frame of the current call from a peer that we expect nothing (more) from yet is held (or kept aside, when it came
 * early) and compared with our call only once a receive is posted for it. Ranks that run different algorithms
 * (COHORT_ALGO set differently on two nodes, or one rank in a node collective of shared memory while another sends
 * frames) may never post that receive while each waits on another rank: so when nothing moves, such frames are
 * compared now. Every frame of one call carries the same call, so a frame of our call number that differs from it
 * is a disagreement whoever it was meant for. */
cohort_status cohort__links_check_held(cohort__links *s) {
  for (int i = 0; i < s->count; i++) {
    cohort__link *l = s->ops->at(s->t, i);
    const cohort__frame *h = NULL;
    for (cohort__early *e = l->early_head; !h && e; e = e->next)
      if (e->hdr.seq == s->call->seq) h = &e->hdr;
    if (!h && l->rx_state == COHORT__RX_HELD && l->recv_hdr.seq == s->call->seq) h = &l->recv_hdr;
    if (!h) continue;
    cohort__call theirs;
    cohort__frame_to_call(h, &theirs);
    if (cohort__call_equal(&theirs, s->call)) continue;
    /* We are still comparing signatures (coll/agree.c: its frames carry "internal" with the call's number) and the
     * peer agreed already: its frames of the call itself wait for us. */
    if (s->call->coll == COHORT__COLL_INTERNAL && theirs.coll != COHORT__COLL_INTERNAL) continue;
    /* And the reverse: while a recursive-doubling allreduce rides on the exchange (agree.c), we wait for a partner's
     * data frame under its call, and a later round's partner may already have sent us its signatures. */
    if (theirs.coll == COHORT__COLL_INTERNAL && s->call->coll != COHORT__COLL_INTERNAL) continue;
    char a[256], b[256];
    cohort__call_describe(s->call, a, sizeof a);
    cohort__call_describe(&theirs, b, sizeof b);
    return failf(s, COHORT_ERR_MISMATCH, "ranks disagree: rank %d called %s but rank %d called %s", WORLD(s, s->rank),
                 a, WORLD(s, l->peer), b);
  }
  return COHORT_OK;
}

void cohort__links_describe_waiting(const cohort__links *s, char *buf, size_t len) {
  size_t off = 0;
  int last = -1; /* a transport's links to one peer are consecutive: name it once */
  buf[0] = '\0';
  for (int i = 0; i < s->count && off < len; i++) {
    const cohort__link *l = s->ops->at(s->t, i);
    if (l->peer == last || l->peer == s->rank || !(l->recv_head || l->send_head)) continue;
    last = l->peer;
    off += (size_t)snprintf(buf + off, len - off, "%s%d", off ? ", " : "", WORLD(s, l->peer));
  }
}

void cohort__link_free(cohort__link *l) {
  free(l->rx_buf);
  l->rx_buf = NULL;
  for (cohort__early *e = l->early_head, *next; e; e = next) {
    next = e->next;
    free(e->data);
    free(e);
  }
  l->early_head = l->early_tail = NULL;
}
