/*
 * shm.c: the shared-memory transport, for ranks on one host (COHORT_TRANSPORT=shm): its data path. The setup is in
 * shm_setup.c (shm.h says how it goes), the node allreduce in shm_coll.c.
 *
 * Each rank owns one segment holding its inbound rings, one per peer: a single-producer single-consumer byte ring
 * (COHORT_SHM_RING_BYTES) whose producer is the peer. The stream in a ring is the same as on a TCP socket: the
 * 40-byte frame header (frame.h) and the payload, frame after frame, split anywhere by the wrap-around. head
 * (bytes written, by the producer) and tail (bytes consumed, by the consumer) only grow; they sit on cache lines
 * of their own and are published with release and read with acquire, so the bytes below head are visible to the
 * consumer and the bytes below tail are free for the producer.
 *
 The frames in the rings are sent and received by frame.c, as TCP's are (it says how a header is checked, and
 * where an early frame waits: small ones in memory, large ones in the ring, which is the flow control as the socket
 * buffer is for TCP); this file carries their bytes. Both sides copy in pieces of at most CHUNK_BYTES, publishing
 * the index after each, so that the receiver copies out of the ring while the sender still copies in.
 *
 * Waiting: a rank with nothing to do polls its rings (yielding the CPU) for spin_us, then sleeps on the futex word
 * in its own segment header. Whoever may have unblocked it (a producer that wrote, a consumer that freed space, a
 * rank that failed) bumps that word and wakes it when its `sleeping` flag is up; a seq_cst fence on both sides
 * (flag store then ring re-check; index store then flag load) makes sure a wake-up is never lost. Sleeps are short
 * (SLEEP_NS) so that liveness is checked while waiting.
 *
 * Failure: a rank that fails writes its status and message into the abort slot of its own segment and wakes every
 * peer; every rank watches its peers' slots while waiting and fails with the same status and message. (TCP sends
 * ABORT frames instead; in a ring such a frame could sit behind a half-written frame or a full ring that nobody
 * drains, while the slot is always readable, even after the failed rank has exited.) A peer that dies is seen
 * through a pidfd (or /proc when pidfd_open is not allowed): once nothing more can come from its ring while a
 * receive from it (or a send to it) is pending, that is COHORT_ERR_REMOTE naming it, unless its slot holds the
 * real cause. A peer that exits after its last frame is not a failure. A silent peer fails the call after
 * COHORT_OP_TIMEOUT.
 *
 * Trust: segments are created 0600 under a random name that only the authenticated store carries, so only the
 * job's processes (same user, knowing the names) map them; what a peer writes is still checked like TCP input
 * (header fields, frame sizes, segment layout against its size).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/copy.h"
#include "core/error.h"
#include "core/log.h"
#include "transport/frame.h"
#include "transport/shm.h"
#include "transport/shm_impl.h"

#define CHUNK_BYTES (64u << 10)
#define SLEEP_NS 5000000LL    /* futex sleeps; liveness and abort slots are checked between them */
#define LIVENESS_NS 5000000LL /* how often an idle waiter polls its peers' pidfds */

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "ring indices are shared between processes: their atomics must be lock-free");

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout) {
  return syscall(SYS_futex, (uint32_t *)word, op, val, timeout, NULL, 0);
}

/* Wakes the owner of s if it sleeps; the caller has just published an index (or an abort) it may wait for. */
static void notify(seg_hdr *s) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&s->sleeping, memory_order_relaxed)) {
    atomic_fetch_add(&s->futex, 1);
    futex(&s->futex, FUTEX_WAKE, INT_MAX, NULL);
  }
}

static void wake(seg_hdr *s) {
  atomic_fetch_add(&s->futex, 1);
  futex(&s->futex, FUTEX_WAKE, INT_MAX, NULL);
}

/* ---- failure ---- */

/* Fails the transport once (later failures keep the first message, the root cause) and tells every peer through
 * the abort slot of our segment. */
cohort_status cohort__shm_fail(shm_transport *t, cohort_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int first = cohort__failure_vkeep(&t->failure, status, fmt, ap);
  va_end(ap);
  if (first) {
    COHORT_LOG_INFO("transport failed: %s", t->failure.message);
    if (t->me) {
      t->me->abort_status = (int32_t)status;
      memcpy(t->me->abort_text, t->failure.message, sizeof t->me->abort_text);
      atomic_store_explicit(&t->me->aborted, 1, memory_order_release);
      for (int p = 0; p < t->base.size; p++)
        if (p != t->base.rank && t->peers[p].seg) wake(t->peers[p].seg);
    }
  }
  return cohort__failure_raise(&t->failure);
}

/* A peer's abort slot, if it has written one: its status and message become ours. */
static cohort_status take_peer_abort(shm_transport *t, int p) {
  seg_hdr *s = t->peers[p].seg;
  if (!atomic_load_explicit(&s->aborted, memory_order_acquire)) return COHORT_OK;
  int32_t st = s->abort_status;
  if (st <= COHORT_OK || st > COHORT_ERR_PROTOCOL) st = COHORT_ERR_REMOTE;
  char text[COHORT__ABORT_TEXT_MAX];
  memcpy(text, s->abort_text, sizeof text);
  text[sizeof text - 1] = '\0';
  /* Keep the originator's message as is: it already names the ranks involved. */
  char msg[COHORT__ABORT_TEXT_MAX + 40];
  cohort__relayed_failure(msg, sizeof msg, text, WORLD(t, p));
  return cohort__shm_fail(t, (cohort_status)st, "%s", msg);
}

static cohort_status check_peer_aborts(shm_transport *t) {
  for (int p = 0; p < t->base.size; p++)
    if (p != t->base.rank) COHORT_CHECK(take_peer_abort(t, p));
  return COHORT_OK;
}

/* ---- rings ---- */

static void ring_put(char *data, uint64_t cap, uint64_t pos, const void *src, size_t len) {
  size_t off = (size_t)(pos % cap), first = len < cap - off ? len : (size_t)(cap - off);
  cohort__copy(data + off, src, first);
  if (len > first) cohort__copy(data, (const char *)src + first, len - first);
}

static void ring_get(const char *data, uint64_t cap, uint64_t pos, void *dst, size_t len) {
  size_t off = (size_t)(pos % cap), first = len < cap - off ? len : (size_t)(cap - off);
  cohort__copy(dst, data + off, first);
  if (len > first) cohort__copy((char *)dst + first, data, len - first);
}

/* Bytes the peer has written that we have not consumed (re-reading head only when we run out). */
static uint64_t in_avail(peer *pe) {
  if (pe->in_head == pe->in_tail) pe->in_head = atomic_load_explicit(&pe->in_ctl->head, memory_order_acquire);
  return pe->in_head - pe->in_tail;
}

/* Copies n bytes out of the inbound ring and hands the space back to the producer. */
static void in_take(peer *pe, void *dst, size_t n) {
  if (dst) ring_get(pe->in_data, pe->in_cap, pe->in_tail, dst, n);
  pe->in_tail += n;
  atomic_store_explicit(&pe->in_ctl->tail, pe->in_tail, memory_order_release);
  notify(pe->seg);
}

/* ---- the bytes of a link (cohort__link_ops) ---- */

static cohort_status shm_write(void *tp, cohort__link *l, const struct iovec *iov, int n, size_t *put) {
  shm_transport *t = tp;
  peer *pe = &t->peers[l->peer];
  size_t want = 0;
  for (int i = 0; i < n; i++)
    want += iov[i].iov_len;
  if (want > CHUNK_BYTES) want = CHUNK_BYTES;
  *put = 0;
  uint64_t space = pe->out_cap - (pe->out_head - pe->out_tail);
  if (space < want) { /* re-read the consumer's index only when the space we know of is short */
    pe->out_tail = atomic_load_explicit(&pe->out_ctl->tail, memory_order_acquire);
    space = pe->out_cap - (pe->out_head - pe->out_tail);
    if (space == 0) return COHORT_OK;
  }
  size_t budget = space < want ? (size_t)space : want;
  for (int i = 0; i < n && budget > 0; i++) {
    size_t k = iov[i].iov_len < budget ? iov[i].iov_len : budget;
    ring_put(pe->out_data, pe->out_cap, pe->out_head, iov[i].iov_base, k);
    pe->out_head += k;
    *put += k;
    budget -= k;
  }
  atomic_store_explicit(&pe->out_ctl->head, pe->out_head, memory_order_release);
  notify(pe->seg);
  return COHORT_OK;
}

static cohort_status shm_read(void *tp, cohort__link *l, void *buf, size_t len, size_t *got) {
  peer *pe = &((shm_transport *)tp)->peers[l->peer];
  uint64_t avail = in_avail(pe);
  size_t n = len < avail ? len : (size_t)avail;
  if (n > CHUNK_BYTES) n = CHUNK_BYTES;
  if (n) in_take(pe, buf, n);
  *got = n;
  return COHORT_OK;
}

static cohort_status shm_fail_link(void *t, cohort_status status, const char *msg) {
  return cohort__shm_fail(t, status, "%s", msg);
}

static cohort__link *shm_link_at(void *t, int i) { return &((shm_transport *)t)->peers[i].l; }

const cohort__link_ops cohort__shm_link_ops = {
    .read = shm_read,
    .write = shm_write,
    .fail = shm_fail_link,
    .at = shm_link_at,
    .size_hint = "COHORT_SEGMENT_BYTES",
};

/* ---- progress and waiting ---- */

static cohort_status progress_once(shm_transport *t, int *progressed) {
  for (int p = 0; p < t->base.size; p++) {
    if (p == t->base.rank) continue;
    cohort__link *l = &t->peers[p].l;
    if (l->send_head) COHORT_CHECK(cohort__link_send(&t->links, l, progressed));
    COHORT_CHECK(cohort__link_recv(&t->links, l, progressed));
  }
  return COHORT_OK;
}

/* Without a pidfd: a process that is gone, or a zombie, has died. */
static int proc_dead(int pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')'); /* the state follows the command name, which may hold anything */
  return paren && (paren[2] == 'Z' || paren[2] == 'X');
}

/* How a peer that is no longer there went: its process exited, or it destroyed its end of the communicator. */
static const char *gone_how(const peer *pe) {
  /* A Python rank that raised destroys its communicators on its way out (atexit), so "left" is often a crash: the
   * message says where to look. */
  return pe->closed ? "left the communicator (it destroyed it: cohort_comm_destroy, or shutdown(); a Python rank "
                      "also does as it exits, after an exception too: its own output says why)"
                    : "died (its process exited)";
}

/* Polls the peers' liveness. A peer seen dead gets one more drain of its ring before it is judged (*again = 1
 * asks for it); after that, it is a failure while we still wait on it, or when its ring stops inside a frame (as a
 * TCP stream that ends there): that frame can never be whole. A whole frame held in the ring is not a failure: the
 * ring is in our segment and stays readable after its producer exits. */
static cohort_status check_liveness(shm_transport *t, int *again) {
  struct pollfd pfd[64];
  int who[64];
  for (int p0 = 0; p0 < t->base.size; p0 += 64) {
    int n = 0;
    for (int p = p0; p < t->base.size && p < p0 + 64; p++) {
      peer *pe = &t->peers[p];
      if (p == t->base.rank || pe->life != ALIVE) continue;
      if (atomic_load_explicit(&pe->seg->closed, memory_order_acquire)) {
        pe->life = DEAD_SEEN, pe->closed = 1;
        continue;
      }
      if (pe->pidfd >= 0) {
        pfd[n] = (struct pollfd){.fd = pe->pidfd, .events = POLLIN};
        who[n++] = p;
      } else if (proc_dead(pe->pid)) {
        pe->life = DEAD_SEEN;
      }
    }
    if (n > 0 && poll(pfd, (nfds_t)n, 0) > 0)
      for (int i = 0; i < n; i++)
        if (pfd[i].revents) t->peers[who[i]].life = DEAD_SEEN;
  }
  for (int p = 0; p < t->base.size; p++) {
    peer *pe = &t->peers[p];
    if (p == t->base.rank) continue;
    if (pe->life == DEAD_SEEN) {
      pe->life = DEAD;
      *again = 1;
      continue;
    }
    if (pe->life != DEAD || !(pe->l.recv_head || pe->l.send_head || cohort__link_mid_frame(&pe->l))) continue;
    COHORT_CHECK(take_peer_abort(t, p)); /* it may have died of a failure whose cause it wrote down */
    char call[256];
    cohort__call_describe(&t->call, call, sizeof call);
    return cohort__shm_fail(t, COHORT_ERR_REMOTE, "rank %d %s while rank %d was %s it in %s", WORLD(t, p), gone_how(pe),
                            WORLD(t, t->base.rank),
                            pe->l.send_head && !pe->l.recv_head ? "sending to" : "receiving from", call);
  }
  return COHORT_OK;
}

/* ---- node collectives: flags and waiting (the algorithms are in shm_coll.c) ---- */

static cohort_status disagree(shm_transport *t, int p, const cohort__call *theirs) {
  char a[256], b[256];
  cohort__call_describe(&t->call, a, sizeof a);
  cohort__call_describe(theirs, b, sizeof b);
  return cohort__shm_fail(t, COHORT_ERR_MISMATCH, "ranks disagree: rank %d called %s but rank %d called %s",
                          WORLD(t, t->base.rank), a, WORLD(t, p), b);
}

/* While we run the node collective of call seq, a frame of seq in a ring means that its sender runs another
 * algorithm (another collective, or COHORT_ALGO differs): the same verdict as TCP's, from the same check. */
static cohort_status check_frames_of_node_call(shm_transport *t) {
  int progressed = 0;
  COHORT_CHECK(progress_once(t, &progressed));
  return cohort__links_check_held(&t->links);
}

/* The reverse, while we wait on rings: a peer that runs a node collective of our call number. */
static cohort_status check_peer_node_calls(shm_transport *t) {
  /* While we compare signatures (coll/agree.c), a peer that agreed already may run the node collective of our call
   * number: no disagreement. */
  if (t->call.coll == COHORT__COLL_INTERNAL) return COHORT_OK;
  for (int p = 0; p < t->base.size; p++) {
    if (p == t->base.rank) continue;
    node_flags *f = &t->peers[p].seg->node;
    for (int b = 0; b < 2; b++) {
      if (atomic_load_explicit(&f->call_seq[b], memory_order_acquire) != t->call.seq + 1) continue;
      cohort__call theirs = f->call[b];
      if (!cohort__call_equal(&theirs, &t->call)) return disagree(t, p, &theirs);
    }
  }
  return COHORT_OK;
}

void cohort__shm_publish(shm_transport *t, _Atomic uint64_t *flag, uint64_t v) {
  atomic_store_explicit(flag, v, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst); /* pairs with the sleeper's fence: see the header comment */
  for (int p = 0; p < t->base.size; p++) {
    seg_hdr *s = t->peers[p].seg;
    if (p != t->base.rank && atomic_load_explicit(&s->sleeping, memory_order_relaxed)) {
      atomic_fetch_add(&s->futex, 1);
      futex(&s->futex, FUTEX_WAKE, INT_MAX, NULL);
    }
  }
}

/* Whether peer p's process has exited (pidfd, or /proc without one). */
static int peer_gone(shm_transport *t, int p) {
  peer *pe = &t->peers[p];
  if (pe->life == ALIVE) {
    if (atomic_load_explicit(&pe->seg->closed, memory_order_acquire)) {
      pe->life = DEAD, pe->closed = 1;
    } else if (pe->pidfd >= 0) {
      struct pollfd f = {.fd = pe->pidfd, .events = POLLIN};
      if (poll(&f, 1, 0) > 0) pe->life = DEAD;
    } else if (proc_dead(pe->pid)) {
      pe->life = DEAD;
    }
  }
  return pe->life != ALIVE;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Spinning with pause for this long answers in well under a microsecond; after it a waiter yields its core (the
 * rank it waits for may need it), and after spin_ns it sleeps. */
#define PAUSE_NS 50000LL

cohort_status cohort__shm_await(shm_transport *t, int p, _Atomic uint64_t *flag, uint64_t want) {
  if (atomic_load_explicit(flag, memory_order_acquire) >= want) return COHORT_OK;
  int64_t start = cohort__now_ns(), next_check = start + LIVENESS_NS, stall_ns = cohort__log_stall_ns();
  int stall_warned = 0;
  for (;;) {
    for (int i = 0; i < 64; i++) {
      if (atomic_load_explicit(flag, memory_order_acquire) >= want) return COHORT_OK;
      cpu_relax();
    }
    if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
    if (cohort__failure_requested(&t->interrupt))
      return cohort__shm_fail(t, t->interrupt.status, "%s", t->interrupt.message);
    COHORT_CHECK(check_peer_aborts(t));
    int64_t now = cohort__now_ns();
    if (now >= next_check) {
      next_check = now + LIVENESS_NS;
      COHORT_CHECK(check_frames_of_node_call(t));
      if (t->idle_check) {
        cohort_status st = t->idle_check(t->idle_arg);
        if (st != COHORT_OK) return cohort__shm_fail(t, st, "%s", cohort_last_error());
      }
      if (peer_gone(t, p)) {
        if (atomic_load_explicit(flag, memory_order_acquire) >= want) return COHORT_OK;
        COHORT_CHECK(take_peer_abort(t, p)); /* it may have died of a failure whose cause it wrote down */
        char call[256];
        cohort__call_describe(&t->call, call, sizeof call);
        return cohort__shm_fail(t, COHORT_ERR_REMOTE, "rank %d %s while rank %d waited for it in %s", WORLD(t, p),
                                gone_how(&t->peers[p]), WORLD(t, t->base.rank), call);
      }
    }
    if (now - start > t->timeout_ns) {
      char call[256];
      cohort__call_describe(&t->call, call, sizeof call);
      return cohort__shm_fail(t, COHORT_ERR_TIMEOUT,
                              "%s: no progress for %.0f s waiting on rank(s) %d (COHORT_OP_TIMEOUT)", call,
                              t->op_timeout_s, WORLD(t, p));
    }
    if (!stall_warned && stall_ns > 0 && now - start > stall_ns) {
      char call[256], who[16];
      cohort__call_describe(&t->call, call, sizeof call);
      snprintf(who, sizeof who, "%d", WORLD(t, p));
      cohort__log_stall(&stall_warned, now - start, call, who, t->op_timeout_s);
    }
    if (now - start < t->spin_ns) {
      if (now - start > PAUSE_NS) sched_yield();
      continue;
    }
    /* Sleep: raise the flag, then look once more (the header comment says why no wake-up is lost). */
    atomic_store_explicit(&t->me->sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    uint32_t seen = atomic_load(&t->me->futex);
    if (atomic_load_explicit(flag, memory_order_acquire) < want && !cohort__failure_requested(&t->interrupt)) {
      struct timespec ts = {.tv_sec = 0, .tv_nsec = SLEEP_NS};
      futex(&t->me->futex, FUTEX_WAIT, seen, &ts);
    }
    atomic_store_explicit(&t->me->sleeping, 0, memory_order_relaxed);
  }
}

static cohort_status shm_wait(cohort__transport *base, cohort__req *req) {
  shm_transport *t = (shm_transport *)base;
  int64_t last_progress = cohort__now_ns(), next_liveness = 0, stall_ns = cohort__log_stall_ns();
  int stall_warned = 0;
  for (;;) {
    /* What completed did complete; a failure read after it belongs to a later call (as in tcp.c). */
    if (req ? req->complete : t->pending == 0) return COHORT_OK;
    if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
    if (cohort__failure_requested(&t->interrupt))
      return cohort__shm_fail(t, t->interrupt.status, "%s", t->interrupt.message);
    int progressed = 0;
    COHORT_CHECK(progress_once(t, &progressed));
    if (progressed) {
      last_progress = cohort__now_ns();
      continue;
    }
    COHORT_CHECK(check_peer_aborts(t));
    int64_t now = cohort__now_ns();
    if (now >= next_liveness) {
      COHORT_CHECK(check_peer_node_calls(t));
      COHORT_CHECK(cohort__links_check_held(&t->links));
      int again = 0;
      COHORT_CHECK(check_liveness(t, &again));
      next_liveness = now + LIVENESS_NS;
      if (again) continue;
    }
    if (now - last_progress > t->timeout_ns) {
      char who[256], call[256];
      cohort__links_describe_waiting(&t->links, who, sizeof who);
      cohort__call_describe(&t->call, call, sizeof call);
      return cohort__shm_fail(t, COHORT_ERR_TIMEOUT,
                              "%s: no progress for %.0f s waiting on rank(s) %s (COHORT_OP_TIMEOUT)", call,
                              t->op_timeout_s, who);
    }
    if (!stall_warned && stall_ns > 0 && now - last_progress > stall_ns) {
      char who[256], call[256];
      cohort__links_describe_waiting(&t->links, who, sizeof who);
      cohort__call_describe(&t->call, call, sizeof call);
      cohort__log_stall(&stall_warned, now - last_progress, call, who, t->op_timeout_s);
    }
    if (now - last_progress < t->spin_ns) {
      sched_yield(); /* the rank we wait for may need this very core */
      continue;
    }
    /* Sleep: raise the flag, then look once more (see the header comment for why this order loses no wake-up). */
    atomic_store_explicit(&t->me->sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    uint32_t seen = atomic_load(&t->me->futex);
    cohort_status st = progress_once(t, &progressed);
    if (st == COHORT_OK && !progressed && !cohort__failure_requested(&t->interrupt)) {
      struct timespec ts = {.tv_sec = 0, .tv_nsec = SLEEP_NS};
      futex(&t->me->futex, FUTEX_WAIT, seen, &ts);
    }
    atomic_store_explicit(&t->me->sleeping, 0, memory_order_relaxed);
    COHORT_CHECK(st);
    if (progressed) last_progress = cohort__now_ns();
  }
}

/* Any peer that died or aborted fails t, whether or not something is expected of it now (the device paths wait on
 * the GPU while their peers' kernels may wait on them). */
static cohort_status shm_poll(cohort__transport *base) {
  shm_transport *t = (shm_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  if (cohort__failure_requested(&t->interrupt))
    return cohort__shm_fail(t, t->interrupt.status, "%s", t->interrupt.message);
  COHORT_CHECK(check_peer_aborts(t));
  int again = 0;
  COHORT_CHECK(check_liveness(t, &again));
  for (int p = 0; p < t->base.size; p++) {
    if (p == t->base.rank || t->peers[p].life == ALIVE) continue;
    COHORT_CHECK(take_peer_abort(t, p));
    char call[256];
    cohort__call_describe(&t->call, call, sizeof call);
    return cohort__shm_fail(t, COHORT_ERR_REMOTE, "rank %d died (its process exited) during %s", WORLD(t, p), call);
  }
  return COHORT_OK;
}

/* Unlike shm_poll, a dead peer fails t only while something posted still expects it (check_liveness): a peer that
 * said goodbye and exited is no failure of the point-to-point engine's transport. */
static cohort_status shm_progress(cohort__transport *base, int *progressed) {
  shm_transport *t = (shm_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  if (cohort__failure_requested(&t->interrupt))
    return cohort__shm_fail(t, t->interrupt.status, "%s", t->interrupt.message);
  COHORT_CHECK(progress_once(t, progressed));
  COHORT_CHECK(check_peer_aborts(t));
  int64_t now = cohort__now_ns();
  if (now >= t->next_progress_liveness) {
    t->next_progress_liveness = now + LIVENESS_NS;
    int again = 0;
    COHORT_CHECK(check_liveness(t, &again));
    if (again) COHORT_CHECK(progress_once(t, progressed)); /* a dead peer's ring is drained once more */
    COHORT_CHECK(check_liveness(t, &again));
  }
  return COHORT_OK;
}

/* ---- posting ---- */

static void shm_set_call(cohort__transport *base, const cohort__call *call) { ((shm_transport *)base)->call = *call; }

static cohort_status check_peer(shm_transport *t, int p) {
  if (p < 0 || p >= t->base.size || p == t->base.rank)
    return cohort__error(COHORT_ERR_INTERNAL, "shm transport: rank %d cannot exchange frames with rank %d (of %d)",
                         t->base.rank, p, t->base.size);
  return COHORT_OK;
}

static cohort_status shm_isend(cohort__transport *base, int p, const void *buf, size_t bytes, cohort__req *req) {
  shm_transport *t = (shm_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  COHORT_CHECK(check_peer(t, p));
  peer *pe = &t->peers[p];
  *req = (cohort__req){.buf = (void *)buf, .bytes = bytes, .peer = p, .is_send = 1, .call = t->call};
  t->pending++;
  return cohort__link_post_send(&t->links, &pe->l, req);
}

static cohort_status shm_irecv(cohort__transport *base, int p, void *buf, size_t bytes, cohort__req *req) {
  shm_transport *t = (shm_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  COHORT_CHECK(check_peer(t, p));
  peer *pe = &t->peers[p];
  *req = (cohort__req){.buf = buf, .bytes = bytes, .peer = p, .call = t->call};
  t->pending++;
  return cohort__link_post_recv(&t->links, &pe->l, req);
}

static void shm_abort(cohort__transport *base, cohort_status status, const char *message) {
  cohort__shm_fail((shm_transport *)base, status, "%s", message);
}

static void shm_interrupt(cohort__transport *base, cohort_status status, const char *message) {
  shm_transport *t = (shm_transport *)base;
  cohort__failure_request_make(&t->interrupt, status, message);
  if (t->me) wake(t->me); /* the driving thread may be asleep on our futex */
}

void cohort__shm_destroy(cohort__transport *base) {
  shm_transport *t = (shm_transport *)base;
  if (!t) return;
  if (cohort__failure_requested(&t->interrupt) && t->failure.status == COHORT_OK)
    cohort__shm_fail(t, t->interrupt.status, "%s", t->interrupt.message);
  /* A peer still waiting on us (it is in a call we never made) fails now, naming us, instead of at its
   * COHORT_OP_TIMEOUT: our process may live on (shutdown() then init(), as Horovod's tests do). */
  if (t->me) {
    atomic_store_explicit(&t->me->closed, 1, memory_order_release);
    for (int p = 0; t->peers && p < t->base.size; p++)
      if (p != t->base.rank && t->peers[p].seg) wake(t->peers[p].seg);
  }
  for (int p = 0; t->peers && p < t->base.size; p++) {
    peer *pe = &t->peers[p];
    if (pe->seg) munmap(pe->seg, pe->seg_len);
    if (pe->pidfd >= 0) close(pe->pidfd);
    cohort__link_free(&pe->l);
  }
  /* The arena stays mapped while blocks of it are out: their holders may outlive the communicator (torch's tensors,
   * python/torch_ext/shared_alloc.cpp), and the mapping keeps the segment alive after its name and fd are gone. */
  if (t->me) munmap(t->me, t->nblocks ? t->me->arena_offset : t->me_len);
  if (t->me_fd >= 0) close(t->me_fd);
  pthread_mutex_destroy(&t->arena_mu);
  free(t->blocks);
  free(t->operands);
  free(t->peers);
  free(t);
}

/* ---- the zero-copy arena (cohort_alloc) ---- */

/* First fit over the sorted blocks; whole pages, so that a block's pages are its own to reserve and give back. */
static void *shm_alloc(cohort__transport *base, size_t bytes) {
  shm_transport *t = (shm_transport *)base;
  uint64_t len = round_up(bytes ? bytes : 1, PAGE), cap = t->me ? t->me->arena_bytes : 0, at = 0;
  void *ptr = NULL;
  if (len > cap) return NULL;
  pthread_mutex_lock(&t->arena_mu);
  size_t i = 0;
  for (; i < t->nblocks && t->blocks[i].off - at < len; i++)
    at = t->blocks[i].off + t->blocks[i].len;
  if (t->nblocks == t->blocks_cap) {
    size_t want = t->blocks_cap * 2 + 8;
    arena_block *grown = realloc(t->blocks, want * sizeof *grown);
    if (grown) t->blocks = grown, t->blocks_cap = want;
  }
  /* Reserve the pages now: a full /dev/shm must make cohort_alloc fall back to malloc, not raise SIGBUS later. */
  if (cap - at >= len && t->nblocks < t->blocks_cap &&
      posix_fallocate(t->me_fd, (off_t)(t->me->arena_offset + at), (off_t)len) == 0) {
    memmove(&t->blocks[i + 1], &t->blocks[i], (t->nblocks - i) * sizeof *t->blocks);
    t->blocks[i] = (arena_block){.off = at, .len = len};
    t->nblocks++;
    ptr = cohort__shm_arena(t->me) + at;
  }
  pthread_mutex_unlock(&t->arena_mu);
  return ptr;
}

static int shm_release(cohort__transport *base, void *ptr) {
  shm_transport *t = (shm_transport *)base;
  if (!t->me || !t->me->arena_bytes) return 0;
  char *arena = cohort__shm_arena(t->me);
  if ((char *)ptr < arena || (char *)ptr >= arena + t->me->arena_bytes) return 0;
  uint64_t off = (uint64_t)((char *)ptr - arena);
  pthread_mutex_lock(&t->arena_mu);
  for (size_t i = 0; i < t->nblocks; i++) {
    if (t->blocks[i].off != off) continue;
    /* Give the pages back to /dev/shm. */
    fallocate(t->me_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(t->me->arena_offset + off),
              (off_t)t->blocks[i].len);
    memmove(&t->blocks[i], &t->blocks[i + 1], (t->nblocks - i - 1) * sizeof *t->blocks);
    t->nblocks--;
    break;
  }
  pthread_mutex_unlock(&t->arena_mu);
  return 1;
}

int64_t cohort__shm_arena_offset(shm_transport *t, const void *ptr, size_t bytes) {
  if (!t->me->arena_bytes) return -1;
  const char *arena = cohort__shm_arena(t->me), *p = ptr;
  if (p < arena || p > arena + t->me->arena_bytes || bytes > (size_t)(arena + t->me->arena_bytes - p)) return -1;
  return (int64_t)(p - arena);
}

static int shm_in_arena(cohort__transport *base, const void *ptr, size_t bytes) {
  shm_transport *t = (shm_transport *)base;
  return t->me && cohort__shm_arena_offset(t, ptr, bytes) >= 0;
}

static int shm_arena_range(cohort__transport *base, void **at, size_t *bytes) {
  shm_transport *t = (shm_transport *)base;
  if (!t->me || !t->me->arena_bytes) return 0;
  *at = cohort__shm_arena(t->me);
  *bytes = t->me->arena_bytes;
  return 1;
}

cohort_status cohort__shm_check_node_calls(cohort__transport *t) { return check_peer_node_calls((shm_transport *)t); }

void cohort__shm_set_world_offset(cohort__transport *t, int world_offset) {
  ((shm_transport *)t)->links.world_offset = world_offset;
}

void cohort__shm_set_idle_check(cohort__transport *base, cohort_status (*check)(void *arg), void *arg) {
  shm_transport *t = (shm_transport *)base;
  t->idle_check = check;
  t->idle_arg = arg;
}

const cohort__transport_ops cohort__shm_ops = {
    .name = "shm",
    .set_call = shm_set_call,
    .isend = shm_isend,
    .irecv = shm_irecv,
    .wait = shm_wait,
    .abort = shm_abort,
    .interrupt = shm_interrupt,
    .destroy = cohort__shm_destroy,
    .node_allreduce = cohort__shm_node_allreduce,
    .agree = cohort__shm_agree,
    .alloc = shm_alloc,
    .release = shm_release,
    .in_arena = shm_in_arena,
    .arena_range = shm_arena_range,
    .poll = shm_poll,
    .progress = shm_progress,
};
