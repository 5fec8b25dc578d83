/*
 * tcp.c: the TCP transport. A full mesh of non-blocking sockets (COHORT_SOCKETS_PER_PEER per pair), driven by
 * epoll on whichever thread waits (the engine makes that one thread at a time).
 *
 * Each socket ("channel") carries frames in both directions. Frame i to a peer goes on channel i % k, and the
 * peer posts its receives in the same order, so both ends agree on which channel carries which frame.
 *
 * The frames on a channel are sent and received by frame.c (which says how a header is checked, and where an early
 * frame waits); this file carries their bytes with sendmsg and recv.
 *
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

#define LOST_GRACE_NS 200000000LL

/* ---- failure ---- */

static void send_abort_frames(tcp_transport *t);

/* Fails the transport once and tells the peers; later failures keep the first message (the root cause). */
static cohort_status fail(tcp_transport *t, cohort_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cohort_status fail(tcp_transport *t, cohort_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int first = cohort__failure_vkeep(&t->failure, status, fmt, ap);
  va_end(ap);
  if (first) {
    COHORT_LOG_INFO("transport failed: %s", t->failure.message);
    send_abort_frames(t);
  }
  return cohort__failure_raise(&t->failure);
}

/* Best effort, bounded: finish any frame half-written on channel 0 of each peer, then an ABORT frame, then FIN. */
static void send_abort_frames(tcp_transport *t) {
  int64_t deadline = cohort__now_ns() + 500000000LL;
  struct {
    cohort__frame hdr;
    int32_t status;
    char text[COHORT__ABORT_TEXT_MAX];
  } msg;
  size_t text_len = strlen(t->failure.message);
  memset(&msg, 0, sizeof msg);
  msg.hdr = (cohort__frame){.magic = COHORT__FRAME_MAGIC,
                            .kind = COHORT__FRAME_ABORT,
                            .seq = t->call.seq,
                            .bytes = sizeof(int32_t) + text_len};
  msg.status = (int32_t)t->failure.status;
  memcpy(msg.text, t->failure.message, text_len);
  for (int p = 0; p < t->base.size; p++) {
    if (p == t->base.rank) continue;
    for (int c = 0; c < t->k; c++) {
      channel *ch = chan_at(t, p, c);
      if (ch->fd < 0) continue;
      if (c == 0) {
        cohort_status st = COHORT_OK;
        cohort__link *l = &ch->l;
        if (l->send_started) { /* the stream must stay frame-aligned for the peer to read the ABORT */
          cohort__req *r = l->send_head;
          if (l->send_hdr_done < sizeof l->send_hdr)
            st = cohort__sock_send_all(ch->fd, (char *)&l->send_hdr + l->send_hdr_done,
                                       sizeof l->send_hdr - l->send_hdr_done, deadline);
          if (st == COHORT_OK)
            st = cohort__sock_send_all(ch->fd, (char *)r->buf + r->done_bytes, r->bytes - r->done_bytes, deadline);
          l->send_started = 0;
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
    t->lost_peer = ch->l.peer;
    snprintf(t->lost_why, sizeof t->lost_why, "%s", why);
  }
}

/* ---- the bytes of a channel (cohort__link_ops) ---- */

/* The channel a link is (its first member). */
static channel *chan_of(cohort__link *l) { return (channel *)l; }

static cohort_status tcp_write(void *tp, cohort__link *l, const struct iovec *iov, int n, size_t *put) {
  tcp_transport *t = tp;
  channel *ch = chan_of(l);
  *put = 0;
  while (ch->writable) {
    struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    ssize_t k = sendmsg(ch->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k >= 0) {
      *put = (size_t)k;
      return COHORT_OK;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ch->writable = 0;
      return COHORT_OK;
    }
    if (errno == EPIPE || errno == ECONNRESET) {
      peer_lost(t, ch, "closed its connection");
      return COHORT_OK;
    }
    return fail(t, COHORT_ERR_SYSTEM, "send to rank %d: %s", l->peer, strerror(errno));
  }
  return COHORT_OK;
}

static cohort_status tcp_read(void *tp, cohort__link *l, void *buf, size_t len, size_t *got) {
  tcp_transport *t = tp;
  channel *ch = chan_of(l);
  *got = 0;
  while (ch->readable) {
    ssize_t n = recv(ch->fd, buf, len, MSG_DONTWAIT);
    if (n > 0) {
      *got = (size_t)n;
      return COHORT_OK;
    }
    if (n == 0) {
      /* A peer that finished its last collective and exited closes between frames: that only matters once we
       * expect something more from it. Mid-frame, or with a receive posted, it is a failure now. */
      ch->eof = 1;
      ch->readable = 0;
      if (cohort__link_mid_frame(l) || l->recv_head) peer_lost(t, ch, "closed its connection");
      return COHORT_OK;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ch->readable = 0;
      return COHORT_OK;
    }
    if (errno == ECONNRESET) {
      peer_lost(t, ch, "reset its connection");
      return COHORT_OK;
    }
    return fail(t, COHORT_ERR_SYSTEM, "recv from rank %d: %s", l->peer, strerror(errno));
  }
  return COHORT_OK;
}

static cohort_status tcp_fail(void *t, cohort_status status, const char *msg) { return fail(t, status, "%s", msg); }

static cohort__link *tcp_link_at(void *t, int i) { return &((tcp_transport *)t)->chans[i].l; }

const cohort__link_ops cohort__tcp_link_ops = {
    .read = tcp_read,
    .write = tcp_write,
    .fail = tcp_fail,
    .at = tcp_link_at,
    .size_hint = "COHORT_SEGMENT_BYTES and COHORT_SOCKETS_PER_PEER",
};

/* ---- progress ---- */

static cohort_status progress_once(tcp_transport *t, int *progressed) {
  int n = t->base.size * t->k;
  for (int i = 0; i < n; i++) {
    channel *ch = &t->chans[i];
    if (ch->fd < 0 || (ch->eof && ch->l.peer == t->lost_peer && t->lost_deadline_ns)) continue;
    if (ch->l.send_head && ch->writable) COHORT_CHECK(cohort__link_send(&t->links, &ch->l, progressed));
    if (ch->readable || cohort__link_has_work(&ch->l)) COHORT_CHECK(cohort__link_recv(&t->links, &ch->l, progressed));
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

static cohort_status tcp_wait(cohort__transport *base, cohort__req *req) {
  tcp_transport *t = (tcp_transport *)base;
  int64_t last_progress = cohort__now_ns();
  int64_t spin_ns = (int64_t)t->opt.spin_us * 1000;
  int64_t timeout_ns = (int64_t)(t->opt.op_timeout_s * 1e9), stall_ns = cohort__log_stall_ns();
  int stall_warned = 0;
  for (;;) {
    /* What completed did complete, even if a failure was read right after it: that failure belongs to a later call
     * and is reported by it. */
    if (req ? req->complete : t->pending == 0) return COHORT_OK;
    if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
    if (cohort__failure_requested(&t->interrupt)) return fail(t, t->interrupt.status, "%s", t->interrupt.message);
    if (t->lost_deadline_ns && cohort__now_ns() > t->lost_deadline_ns)
      return fail(t, COHORT_ERR_REMOTE, "rank %d %s (it exited, crashed or aborted)", t->lost_peer, t->lost_why);
    int progressed = 0;
    COHORT_CHECK(progress_once(t, &progressed));
    if (progressed) {
      last_progress = cohort__now_ns();
      continue;
    }
    COHORT_CHECK(cohort__links_check_held(&t->links));
    if (t->idle_check) {
      cohort_status st = t->idle_check(t->idle_arg);
      if (st != COHORT_OK) return fail(t, st, "%s", cohort_last_error());
    }
    int64_t idle = cohort__now_ns() - last_progress;
    if (idle > timeout_ns) {
      char who[256];
      cohort__links_describe_waiting(&t->links, who, sizeof who);
      char call[256];
      cohort__call_describe(&t->call, call, sizeof call);
      return fail(t, COHORT_ERR_TIMEOUT, "%s: no progress for %.0f s waiting on rank(s) %s (COHORT_OP_TIMEOUT)", call,
                  t->opt.op_timeout_s, who);
    }
    if (!stall_warned && stall_ns > 0 && idle > stall_ns) {
      char who[256], call[256];
      cohort__links_describe_waiting(&t->links, who, sizeof who);
      cohort__call_describe(&t->call, call, sizeof call);
      cohort__log_stall(&stall_warned, idle, call, who, t->opt.op_timeout_s);
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
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  if (t->lost_deadline_ns && cohort__now_ns() > t->lost_deadline_ns)
    return fail(t, COHORT_ERR_REMOTE, "rank %d %s (it exited, crashed or aborted)", t->lost_peer, t->lost_why);
  int progressed = 0;
  COHORT_CHECK(poll_events(t, 0));
  COHORT_CHECK(progress_once(t, &progressed));
  return cohort__links_check_held(&t->links);
}

cohort_status cohort__tcp_progress(cohort__transport *base, int *progressed) {
  tcp_transport *t = (tcp_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  if (cohort__failure_requested(&t->interrupt)) return fail(t, t->interrupt.status, "%s", t->interrupt.message);
  if (t->lost_deadline_ns && cohort__now_ns() > t->lost_deadline_ns)
    return fail(t, COHORT_ERR_REMOTE, "rank %d %s (it exited, crashed or aborted)", t->lost_peer, t->lost_why);
  COHORT_CHECK(poll_events(t, 0));
  return progress_once(t, progressed);
}

/* ---- posting ---- */

static void tcp_set_call(cohort__transport *base, const cohort__call *call) { ((tcp_transport *)base)->call = *call; }

static cohort_status tcp_isend(cohort__transport *base, int peer, const void *buf, size_t bytes, cohort__req *req) {
  tcp_transport *t = (tcp_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  channel *ch = chan_at(t, peer, (int)(t->send_frames[peer]++ % (uint64_t)t->k));
  *req = (cohort__req){.buf = (void *)buf, .bytes = bytes, .peer = peer, .is_send = 1, .call = t->call};
  t->pending++;
  return cohort__link_post_send(&t->links, &ch->l, req);
}

static cohort_status tcp_irecv(cohort__transport *base, int peer, void *buf, size_t bytes, cohort__req *req) {
  tcp_transport *t = (tcp_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  channel *ch = chan_at(t, peer, (int)(t->recv_frames[peer]++ % (uint64_t)t->k));
  *req = (cohort__req){.buf = buf, .bytes = bytes, .peer = peer, .call = t->call};
  t->pending++;
  COHORT_CHECK(cohort__link_post_recv(&t->links, &ch->l, req));
  /* A receive that no early frame served, from a peer that has closed: nothing more will come. */
  if (ch->eof && ch->l.recv_head) peer_lost(t, ch, "closed its connection");
  return COHORT_OK;
}

static void tcp_abort(cohort__transport *base, cohort_status status, const char *message) {
  fail((tcp_transport *)base, status, "%s", message);
}

static void tcp_interrupt(cohort__transport *base, cohort_status status, const char *message) {
  tcp_transport *t = (tcp_transport *)base;
  cohort__failure_request_make(&t->interrupt, status, message);
}

void cohort__tcp_destroy(cohort__transport *base) {
  tcp_transport *t = (tcp_transport *)base;
  if (!t) return;
  if (cohort__failure_requested(&t->interrupt) && t->failure.status == COHORT_OK)
    fail(t, t->interrupt.status, "%s", t->interrupt.message);
  for (int i = 0; t->chans && i < t->base.size * t->k; i++) {
    channel *ch = &t->chans[i];
    if (ch->fd >= 0) close(ch->fd);
    cohort__link_free(&ch->l);
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
    .poll = cohort__tcp_poll,
    .progress = cohort__tcp_progress,
};
