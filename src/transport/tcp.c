/*
 * tcp.c: the TCP transport. A full mesh of non-blocking sockets (COHORT_SOCKETS_PER_PEER per pair), driven by
 * epoll on whichever thread waits (the engine makes that one thread at a time).
 *
 * Each socket ("channel") carries frames in both directions. Frame i to a peer goes on channel i % k, and the
 * peer posts its receives in the same order, so both ends agree on which channel carries which frame.
 *
 * Receiving reads the 40-byte header first and checks it before any payload is accepted:
 *  - a frame of the current call is read straight into the posted receive buffer (no copy); if no receive is
 *    posted yet, the header is held and the payload stays in the socket (TCP flow control is the buffer);
 *  - a frame of a later call (a peer that is ahead) is read into a private buffer while the frames read aside on
 *    its channel stay small (EARLY_ASIDE_BYTES); a larger one is held like a frame of the current call, and an
 *    ABORT or EOF behind it is seen only once this rank reaches that call (nothing of the current call can come
 *    after it on that channel, so no wait of the current call depends on it);
 *  - an ABORT frame fails the transport with the peer's status and message.
 * A peer that closes its socket between frames may simply be done (it finished its last collective and exited):
 * that only fails the transport when something more is expected from it. Mid-frame, or with a receive posted, it
 * is a failure: COHORT_ERR_REMOTE naming the peer, raised after a 200 ms grace in which the other links are still
 * read, so that an ABORT carrying the root cause (a mismatch elsewhere, say) wins over "connection closed".
 *
 * The mesh is connected by tcp_mesh.c; the state both files share is in tcp_impl.h.
 *
 * Limits: no reconnection; a failure is final for the communicator (as in NCCL).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sock.h"
#include "store/auth.h"
#include "transport/frame.h"
#include "transport/tcp_impl.h"
#include "transport/transport.h"

#define MAX_FRAME_BYTES (1ull << 40)
/* A frame from a peer already in a later call is read aside (malloc and copy) only while the frames read aside on
 * its channel stay this small; a larger one waits in the socket, its header read, until our receive for it is
 * posted, and then lands straight in it. Reading large ones aside cost a malloc, an extra copy and fresh pages from
 * the kernel for every call that a peer started first: a 2-rank 64 MiB allreduce ran at a third of its speed. Waiting
 * in the socket is safe: every frame of our current call from that peer came before it in the stream, and the peer's
 * sends still complete as long as the socket buffer has room (after that it waits for us, as it would anyway). */
#define EARLY_ASIDE_BYTES (64u << 10)

#define LOST_GRACE_NS 200000000LL

/* ---- failure ---- */

static void send_abort_frames(tcp_transport *t);

/* Fails the transport once; later failures keep the first message (the root cause). */
static cohort_status fail(tcp_transport *t, cohort_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cohort_status fail(tcp_transport *t, cohort_status status, const char *fmt, ...) {
  if (t->status == COHORT_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->message, sizeof t->message, fmt, ap);
    va_end(ap);
    t->status = status;
    COHORT_LOG_INFO("transport failed: %s", t->message);
    send_abort_frames(t);
  }
  return cohort__error(t->status, "%s", t->message);
}

/* Best effort, bounded: finish any frame half-written on channel 0 of each peer, then an ABORT frame, then FIN. */
static void send_abort_frames(tcp_transport *t) {
  int64_t deadline = cohort__now_ns() + 500000000LL;
  struct {
    cohort__frame hdr;
    int32_t status;
    char text[COHORT__ABORT_TEXT_MAX];
  } msg;
  size_t text_len = strlen(t->message);
  memset(&msg, 0, sizeof msg);
  msg.hdr = (cohort__frame){.magic = COHORT__FRAME_MAGIC,
                            .kind = COHORT__FRAME_ABORT,
                            .seq = t->call.seq,
                            .bytes = sizeof(int32_t) + text_len};
  msg.status = (int32_t)t->status;
  memcpy(msg.text, t->message, text_len);
  for (int p = 0; p < t->base.size; p++) {
    if (p == t->base.rank) continue;
    for (int c = 0; c < t->k; c++) {
      channel *ch = chan_at(t, p, c);
      if (ch->fd < 0) continue;
      if (c == 0) {
        cohort_status st = COHORT_OK;
        if (ch->send_started) { /* the stream must stay frame-aligned for the peer to read the ABORT */
          cohort__req *r = ch->send_head;
          if (ch->send_hdr_done < sizeof ch->send_hdr)
            st = cohort__sock_send_all(ch->fd, (char *)&ch->send_hdr + ch->send_hdr_done,
                                       sizeof ch->send_hdr - ch->send_hdr_done, deadline);
          if (st == COHORT_OK)
            st = cohort__sock_send_all(ch->fd, (char *)r->buf + r->done_bytes, r->bytes - r->done_bytes, deadline);
          ch->send_started = 0;
        }
        if (st == COHORT_OK) cohort__sock_send_all(ch->fd, &msg, sizeof msg.hdr + msg.hdr.bytes, deadline);
      }
      shutdown(ch->fd, SHUT_WR);
    }
  }
}

/* Marks ch's peer as gone; the failure is raised by tcp_wait once the grace has passed. */
static void peer_lost(tcp_transport *t, channel *ch, const char *why) {
  ch->eof = 1;
  ch->readable = ch->writable = 0;
  if (t->lost_deadline_ns == 0) {
    t->lost_deadline_ns = cohort__now_ns() + LOST_GRACE_NS;
    t->lost_peer = ch->peer;
    snprintf(t->lost_why, sizeof t->lost_why, "%s", why);
  }
}

/* ---- sending ---- */

static cohort_status do_send(tcp_transport *t, channel *ch, int *progressed) {
  cohort__req *r;
  while ((r = ch->send_head) != NULL && ch->writable) {
    if (!ch->send_started) {
      cohort__frame_from_call(&ch->send_hdr, &t->call, r->bytes);
      ch->send_hdr_done = 0;
      ch->send_started = 1;
    }
    struct iovec iov[2];
    int n_iov = 0;
    if (ch->send_hdr_done < sizeof ch->send_hdr)
      iov[n_iov++] = (struct iovec){(char *)&ch->send_hdr + ch->send_hdr_done, sizeof ch->send_hdr - ch->send_hdr_done};
    if (r->done_bytes < r->bytes)
      iov[n_iov++] = (struct iovec){(char *)r->buf + r->done_bytes, r->bytes - r->done_bytes};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
    ssize_t n = sendmsg(ch->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        ch->writable = 0;
        return COHORT_OK;
      }
      if (errno == EINTR) continue;
      if (errno == EPIPE || errno == ECONNRESET) {
        peer_lost(t, ch, "closed its connection");
        return COHORT_OK;
      }
      return fail(t, COHORT_ERR_SYSTEM, "send to rank %d: %s", ch->peer, strerror(errno));
    }
    *progressed = 1;
    size_t left = (size_t)n;
    size_t hdr_left = sizeof ch->send_hdr - ch->send_hdr_done;
    size_t h = left < hdr_left ? left : hdr_left;
    ch->send_hdr_done += h;
    left -= h;
    r->done_bytes += left;
    if (ch->send_hdr_done == sizeof ch->send_hdr && r->done_bytes == r->bytes) {
      r->complete = 1;
      ch->send_head = r->next;
      if (!ch->send_head) ch->send_tail = NULL;
      ch->send_started = 0;
      t->pending--;
    }
  }
  return COHORT_OK;
}

/* ---- receiving ---- */

/* Checks a frame of the current call against the receive posted for it (frame.c). */
static cohort_status check_frame(tcp_transport *t, channel *ch, const cohort__frame *hdr, const cohort__req *r) {
  char msg[COHORT__ABORT_TEXT_MAX];
  cohort_status st = cohort__frame_match(&t->call, t->base.rank, ch->peer, hdr, r->bytes,
                                         "COHORT_SEGMENT_BYTES and COHORT_SOCKETS_PER_PEER", msg, sizeof msg);
  return st == COHORT_OK ? COHORT_OK : fail(t, st, "%s", msg);
}

static void complete_recv(tcp_transport *t, channel *ch) {
  cohort__req *r = ch->recv_head;
  r->complete = 1;
  ch->recv_head = r->next;
  if (!ch->recv_head) ch->recv_tail = NULL;
  t->pending--;
}

/* Reads up to len bytes; returns 1 when bytes came, 0 on EAGAIN, -1 after failing the transport. */
static int read_some(tcp_transport *t, channel *ch, void *buf, size_t len, size_t *got) {
  for (;;) {
    ssize_t n = recv(ch->fd, buf, len, MSG_DONTWAIT);
    if (n > 0) {
      *got = (size_t)n;
      return 1;
    }
    if (n == 0) {
      /* A peer that finished its last collective and exited closes between frames: that only matters once we
       * expect something more from it. Mid-frame, or with a receive posted, it is a failure now. */
      ch->eof = 1;
      ch->readable = 0;
      if (ch->rx_state == RX_HEADER && ch->recv_hdr_done == 0 && !ch->recv_head) return 0;
      peer_lost(t, ch, "closed its connection");
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ch->readable = 0;
      return 0;
    }
    if (errno == ECONNRESET) {
      peer_lost(t, ch, "reset its connection");
      return 0;
    }
    fail(t, COHORT_ERR_SYSTEM, "recv from rank %d: %s", ch->peer, strerror(errno));
    return -1;
  }
}

/* Frames that came early wait in memory; once receives are posted for them they are handed over in stream order.
 * Invariant after this: a channel never has both an early frame and a posted receive waiting. */
static cohort_status drain_unexpected(tcp_transport *t, channel *ch, int *progressed) {
  while (ch->recv_head && ch->unexp_head) {
    unexpected *u = ch->unexp_head;
    cohort__req *r = ch->recv_head;
    COHORT_CHECK(check_frame(t, ch, &u->hdr, r));
    if (r->bytes) memcpy(r->buf, u->data, r->bytes);
    r->done_bytes = r->bytes;
    ch->unexp_head = u->next;
    if (!ch->unexp_head) ch->unexp_tail = NULL;
    ch->aside_bytes -= u->hdr.bytes;
    free(u->data);
    free(u);
    complete_recv(t, ch);
    *progressed = 1;
  }
  return COHORT_OK;
}

static cohort_status on_header(tcp_transport *t, channel *ch) {
  const cohort__frame *h = &ch->recv_hdr;
  if (h->magic != COHORT__FRAME_MAGIC)
    return fail(t, COHORT_ERR_PROTOCOL, "malformed frame from rank %d (bad magic 0x%08x)", ch->peer, h->magic);
  if (h->kind == COHORT__FRAME_ABORT) {
    if (h->bytes < sizeof(int32_t) || h->bytes > sizeof(int32_t) + COHORT__ABORT_TEXT_MAX)
      return fail(t, COHORT_ERR_PROTOCOL, "malformed abort frame from rank %d", ch->peer);
    ch->rx_buf = calloc(1, h->bytes + 1);
    if (!ch->rx_buf) return fail(t, COHORT_ERR_SYSTEM, "out of memory");
    ch->rx_done = 0;
    ch->rx_state = RX_ABORT;
    return COHORT_OK;
  }
  if (h->kind != COHORT__FRAME_DATA || h->bytes > MAX_FRAME_BYTES)
    return fail(t, COHORT_ERR_PROTOCOL, "malformed frame from rank %d (kind %u, %llu bytes)", ch->peer, h->kind,
                (unsigned long long)h->bytes);
  char msg[COHORT__ABORT_TEXT_MAX];
  cohort_status st = cohort__frame_check_size(h, ch->peer, msg, sizeof msg);
  if (st != COHORT_OK) return fail(t, st, "%s", msg);
  int32_t ahead = (int32_t)(h->seq - t->call.seq);
  if (ahead < 0)
    return fail(t, COHORT_ERR_PROTOCOL, "rank %d sent a frame of call #%u during call #%u", ch->peer, h->seq,
                t->call.seq);
  if (ahead > 0 && ch->aside_bytes + h->bytes <= EARLY_ASIDE_BYTES) { /* a small early frame: read it aside */
    ch->aside_bytes += h->bytes;
    ch->rx_buf = malloc(h->bytes ? h->bytes : 1);
    if (!ch->rx_buf)
      return fail(t, COHORT_ERR_SYSTEM, "out of memory for a %llu-byte early frame", (unsigned long long)h->bytes);
    ch->rx_done = 0;
    ch->rx_state = RX_UNEXPECTED;
    return COHORT_OK;
  }
  ch->rx_state = RX_HELD; /* of the current call, or a large early frame: its payload waits in the socket */
  return COHORT_OK;
}

static cohort_status do_recv(tcp_transport *t, channel *ch, int *progressed) {
  size_t got;
  int rc;
  for (;;) {
    switch (ch->rx_state) {
    case RX_HEADER:
      COHORT_CHECK(drain_unexpected(t, ch, progressed));
      if (!ch->readable) return COHORT_OK;
      rc = read_some(t, ch, (char *)&ch->recv_hdr + ch->recv_hdr_done, sizeof ch->recv_hdr - ch->recv_hdr_done, &got);
      if (rc < 0) return t->status;
      if (rc == 0) return COHORT_OK;
      *progressed = 1;
      ch->recv_hdr_done += got;
      if (ch->recv_hdr_done < sizeof ch->recv_hdr) break;
      ch->recv_hdr_done = 0;
      COHORT_CHECK(on_header(t, ch));
      break;
    case RX_HELD:
      if (!ch->recv_head) return COHORT_OK; /* the payload waits in the socket until a receive is posted */
      COHORT_CHECK(check_frame(t, ch, &ch->recv_hdr, ch->recv_head));
      ch->rx_state = RX_PAYLOAD;
      if (ch->recv_head->bytes == 0) {
        complete_recv(t, ch);
        ch->rx_state = RX_HEADER;
        *progressed = 1;
      }
      break;
    case RX_PAYLOAD: {
      cohort__req *r = ch->recv_head;
      if (!ch->readable) return COHORT_OK;
      rc = read_some(t, ch, (char *)r->buf + r->done_bytes, r->bytes - r->done_bytes, &got);
      if (rc < 0) return t->status;
      if (rc == 0) return COHORT_OK;
      *progressed = 1;
      r->done_bytes += got;
      if (r->done_bytes == r->bytes) {
        complete_recv(t, ch);
        ch->rx_state = RX_HEADER;
      }
      break;
    }
    case RX_UNEXPECTED:
    case RX_ABORT: {
      size_t want = ch->recv_hdr.bytes - ch->rx_done;
      if (want > 0) {
        if (!ch->readable) return COHORT_OK;
        rc = read_some(t, ch, ch->rx_buf + ch->rx_done, want, &got);
        if (rc < 0) return t->status;
        if (rc == 0) return COHORT_OK;
        *progressed = 1;
        ch->rx_done += got;
        if (ch->rx_done < ch->recv_hdr.bytes) break;
      }
      if (ch->rx_state == RX_ABORT) {
        int32_t st;
        memcpy(&st, ch->rx_buf, sizeof st);
        if (st <= COHORT_OK || st > COHORT_ERR_PROTOCOL) st = COHORT_ERR_REMOTE;
        char text[COHORT__ABORT_TEXT_MAX + 1];
        snprintf(text, sizeof text, "%s", ch->rx_buf + sizeof st);
        free(ch->rx_buf);
        ch->rx_buf = NULL;
        ch->rx_state = RX_HEADER;
        /* Keep the originator's message as is: it already names the ranks involved. */
        char msg[COHORT__ABORT_TEXT_MAX + 40];
        cohort__relayed_failure(msg, sizeof msg, text, ch->peer);
        return fail(t, (cohort_status)st, "%s", msg);
      }
      unexpected *u = malloc(sizeof *u);
      if (!u) return fail(t, COHORT_ERR_SYSTEM, "out of memory");
      *u = (unexpected){.hdr = ch->recv_hdr, .data = ch->rx_buf};
      if (ch->unexp_tail)
        ch->unexp_tail->next = u;
      else
        ch->unexp_head = u;
      ch->unexp_tail = u;
      ch->rx_buf = NULL;
      ch->rx_state = RX_HEADER;
      COHORT_CHECK(drain_unexpected(t, ch, progressed)); /* the call may have moved on while it was read */
      break;
    }
    }
  }
}

/* ---- progress ---- */

static cohort_status progress_once(tcp_transport *t, int *progressed) {
  int n = t->base.size * t->k;
  for (int i = 0; i < n; i++) {
    channel *ch = &t->chans[i];
    if (ch->fd < 0 || (ch->eof && ch->peer == t->lost_peer && t->lost_deadline_ns)) continue;
    if (ch->send_head && ch->writable) COHORT_CHECK(do_send(t, ch, progressed));
    if (ch->readable || (ch->recv_head && (ch->rx_state == RX_HELD || ch->unexp_head)))
      COHORT_CHECK(do_recv(t, ch, progressed));
  }
  return COHORT_OK;
}

static cohort_status poll_events(tcp_transport *t, int timeout_ms) {
  struct epoll_event ev[64];
  int n = epoll_wait(t->epfd, ev, 64, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return COHORT_OK;
    return fail(t, COHORT_ERR_SYSTEM, "epoll_wait: %s", strerror(errno));
  }
  for (int i = 0; i < n; i++) {
    channel *ch = ev[i].data.ptr;
    if (ev[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ch->readable = 1;
    if (ev[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) ch->writable = 1;
  }
  return COHORT_OK;
}

static void describe_waiting(tcp_transport *t, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int p = 0; p < t->base.size && off < len; p++)
    for (int c = 0; c < t->k; c++) {
      channel *ch = chan_at(t, p, c);
      if (p == t->base.rank || !(ch->recv_head || ch->send_head)) continue;
      off += (size_t)snprintf(buf + off, len - off, "%s%d", off ? ", " : "", p);
      break;
    }
}

/* A frame of the current call from a peer that we expect nothing (more) from yet is held (or kept aside, when it came
 * early) and compared with our call only once a receive is posted for it. Ranks that run different algorithms
 * (COHORT_ALGO set differently on two nodes, say) may never post that receive while each waits on another rank: so
 * when nothing moves, such frames are compared now. Every frame of one call carries the same call, so a frame of our
 * call number that differs from it is a disagreement whoever it was meant for. */
static cohort_status check_held_frames(tcp_transport *t) {
  for (int i = 0; i < t->base.size * t->k; i++) {
    channel *ch = &t->chans[i];
    const cohort__frame *h = NULL;
    for (unexpected *u = ch->unexp_head; !h && u; u = u->next)
      if (u->hdr.seq == t->call.seq) h = &u->hdr;
    if (!h && ch->rx_state == RX_HELD && ch->recv_hdr.seq == t->call.seq) h = &ch->recv_hdr;
    if (!h) continue;
    cohort__call theirs;
    cohort__frame_to_call(h, &theirs);
    if (cohort__call_equal(&theirs, &t->call)) continue;
    char a[256], b[256];
    cohort__call_describe(&t->call, a, sizeof a);
    cohort__call_describe(&theirs, b, sizeof b);
    return fail(t, COHORT_ERR_MISMATCH, "ranks disagree: rank %d called %s but rank %d called %s", t->base.rank, a,
                ch->peer, b);
  }
  return COHORT_OK;
}

static cohort_status tcp_wait(cohort__transport *base, cohort__req *req) {
  tcp_transport *t = (tcp_transport *)base;
  int64_t last_progress = cohort__now_ns();
  int64_t spin_ns = (int64_t)t->opt.spin_us * 1000;
  int64_t timeout_ns = (int64_t)(t->opt.op_timeout_s * 1e9);
  for (;;) {
    /* What completed did complete, even if a failure was read right after it: that failure belongs to a later call
     * and is reported by it. */
    if (req ? req->complete : t->pending == 0) return COHORT_OK;
    if (t->status != COHORT_OK) return cohort__error(t->status, "%s", t->message);
    if (atomic_load(&t->abort_requested)) return fail(t, t->requested_status, "%s", t->requested_message);
    if (t->lost_deadline_ns && cohort__now_ns() > t->lost_deadline_ns)
      return fail(t, COHORT_ERR_REMOTE, "rank %d %s (it exited, crashed or aborted)", t->lost_peer, t->lost_why);
    int progressed = 0;
    COHORT_CHECK(progress_once(t, &progressed));
    if (progressed) {
      last_progress = cohort__now_ns();
      continue;
    }
    COHORT_CHECK(check_held_frames(t));
    if (t->idle_check) {
      cohort_status st = t->idle_check(t->idle_arg);
      if (st != COHORT_OK) return fail(t, st, "%s", cohort_last_error());
    }
    int64_t idle = cohort__now_ns() - last_progress;
    if (idle > timeout_ns) {
      char who[256];
      describe_waiting(t, who, sizeof who);
      char call[256];
      cohort__call_describe(&t->call, call, sizeof call);
      return fail(t, COHORT_ERR_TIMEOUT, "%s: no progress for %.0f s waiting on rank(s) %s (COHORT_OP_TIMEOUT)", call,
                  t->opt.op_timeout_s, who);
    }
    if (idle < spin_ns) {
      COHORT_CHECK(poll_events(t, 0));
      /* Spin, but give the core away if anything else wants it: on a busy host the task we would keep off the
       * CPU may be the very peer (or softirq work) that we are waiting for. */
      sched_yield();
    } else {
      COHORT_CHECK(poll_events(t, t->lost_deadline_ns ? 10 : 100));
    }
  }
}

void cohort__tcp_set_idle_check(cohort__transport *base, cohort_status (*check)(void *arg), void *arg) {
  tcp_transport *t = (tcp_transport *)base;
  t->idle_check = check;
  t->idle_arg = arg;
}

cohort_status cohort__tcp_poll(cohort__transport *base) {
  tcp_transport *t = (tcp_transport *)base;
  if (t->status != COHORT_OK) return cohort__error(t->status, "%s", t->message);
  if (t->lost_deadline_ns && cohort__now_ns() > t->lost_deadline_ns)
    return fail(t, COHORT_ERR_REMOTE, "rank %d %s (it exited, crashed or aborted)", t->lost_peer, t->lost_why);
  int progressed = 0;
  COHORT_CHECK(poll_events(t, 0));
  COHORT_CHECK(progress_once(t, &progressed));
  return check_held_frames(t);
}

/* ---- posting ---- */

static void tcp_set_call(cohort__transport *base, const cohort__call *call) { ((tcp_transport *)base)->call = *call; }

static cohort_status tcp_isend(cohort__transport *base, int peer, const void *buf, size_t bytes, cohort__req *req) {
  tcp_transport *t = (tcp_transport *)base;
  if (t->status != COHORT_OK) return cohort__error(t->status, "%s", t->message);
  channel *ch = chan_at(t, peer, (int)(t->send_frames[peer]++ % (uint64_t)t->k));
  *req = (cohort__req){.buf = (void *)buf, .bytes = bytes, .peer = peer, .is_send = 1};
  if (ch->send_tail)
    ch->send_tail->next = req;
  else
    ch->send_head = req;
  ch->send_tail = req;
  t->pending++;
  int progressed = 0;
  return do_send(t, ch, &progressed); /* start writing at once: most small frames leave here */
}

static cohort_status tcp_irecv(cohort__transport *base, int peer, void *buf, size_t bytes, cohort__req *req) {
  tcp_transport *t = (tcp_transport *)base;
  if (t->status != COHORT_OK) return cohort__error(t->status, "%s", t->message);
  channel *ch = chan_at(t, peer, (int)(t->recv_frames[peer]++ % (uint64_t)t->k));
  *req = (cohort__req){.buf = buf, .bytes = bytes, .peer = peer};
  if (!ch->recv_head && ch->unexp_head) { /* the frame came early: it is waiting in memory */
    ch->recv_head = ch->recv_tail = req;
    t->pending++;
    int progressed = 0;
    return drain_unexpected(t, ch, &progressed);
  }
  if (ch->eof && ch->rx_state == RX_HEADER) peer_lost(t, ch, "closed its connection");
  if (ch->recv_tail)
    ch->recv_tail->next = req;
  else
    ch->recv_head = req;
  ch->recv_tail = req;
  t->pending++;
  return COHORT_OK;
}

static void tcp_abort(cohort__transport *base, cohort_status status, const char *message) {
  fail((tcp_transport *)base, status, "%s", message);
}

static void tcp_interrupt(cohort__transport *base, cohort_status status, const char *message) {
  tcp_transport *t = (tcp_transport *)base;
  if (atomic_flag_test_and_set(&t->abort_claimed)) return;
  t->requested_status = status;
  snprintf(t->requested_message, sizeof t->requested_message, "%s", message);
  atomic_store(&t->abort_requested, 1);
}

void cohort__tcp_destroy(cohort__transport *base) {
  tcp_transport *t = (tcp_transport *)base;
  if (!t) return;
  if (atomic_load(&t->abort_requested) && t->status == COHORT_OK)
    fail(t, t->requested_status, "%s", t->requested_message);
  for (int i = 0; t->chans && i < t->base.size * t->k; i++) {
    channel *ch = &t->chans[i];
    if (ch->fd >= 0) close(ch->fd);
    free(ch->rx_buf);
    for (unexpected *u = ch->unexp_head, *next; u; u = next) {
      next = u->next;
      free(u->data);
      free(u);
    }
  }
  if (t->epfd >= 0) close(t->epfd);
  free(t->chans);
  free(t->send_frames);
  free(t->recv_frames);
  free(t);
}

const cohort__transport_ops cohort__tcp_ops = {
    .name = "tcp",
    .set_call = tcp_set_call,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .wait = tcp_wait,
    .abort = tcp_abort,
    .interrupt = tcp_interrupt,
    .destroy = cohort__tcp_destroy,
};
