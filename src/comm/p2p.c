/*
 * p2p.c: point-to-point messages, over a transport of their own.
 *
 * Why a transport of its own. A communicator's transport matches frames by position: a rank posts its receives from
 * a peer in the order that peer posted its sends, and every frame carries the collective call it belongs to. Messages
 * are not ordered with the other ranks' calls (rank 0 may send three while rank 1 runs an allreduce), so on that
 * transport a message would sit in the stream in front of the collective's frames. So every communicator of more
 * than one rank gets a second transport when it is made (cohort_init, cohort_init_inproc, cohort_comm_split: calls
 * that every rank makes anyway; made later it would take a collective call, which a send is not), the same kind as
 * its own (tcp, shm, tcp+shm, mpi, an in-process hub), with one socket per peer and no arena, driven by one engine
 * thread of its own. Collectives never wait behind messages, and messages never behind collectives.
 *
 * The protocol. Each direction of each pair is a stream of fixed 32-byte control frames (struct ctrl), some followed
 * by a payload frame; the receiving engine always has the next control frame's receive posted, so it sees every
 * message as it comes, matched or not:
 *  - EAGER (payloads of at most EAGER_BYTES): the payload follows at once. If a posted receive matches it, it lands
 *    in the receive's buffer; otherwise in a buffer of the engine's, queued as unexpected until a receive takes it;
 *  - RTS, for larger payloads: only the control frame goes; it waits in the unexpected queue (32 bytes) until a
 *    receive matches it, which answers CTS (accept, or reject: the receive is too small or of another dtype), and
 *    then the sender sends DATA and the payload, straight into the receive's buffer;
 *  - BYE: the rank destroys its communicator; its peers stop expecting anything of it (a stream that ends after a
 *    BYE is no failure; one that ends without it is a rank that died).
 * Matching: a receive takes the first message, in order of arrival, whose source and tag it accepts (COHORT_ANY_*),
 * and a message the first receive, in order of posting, that accepts it. A sender's messages reach the receiver in
 * the order sent, so two messages with the same source and tag are received in the order sent (MPI's rule).
 *
 * Bounds. An unexpected message keeps at most EAGER_BYTES of payload; once the unexpected payloads from one source
 * pass UNEXPECTED_BYTES, the engine stops reading that source's stream until receives take some: further messages
 * wait in the socket or ring, and their sender's sends wait for room (a program that sends that much nobody receives,
 * and then waits for a later message of that source, waits until it receives the earlier ones).
 *
 * Failures. A peer that dies (its stream ends without a BYE, its process is gone) fails the engine: every message in
 * flight and every later one fails with COHORT_ERR_REMOTE naming it, within the transport's usual grace (TCP: 200
 * ms after the connection closes; shm: a look at the peers' processes every 5 ms). A receive waits for its message
 * as long as it takes: COHORT_OP_TIMEOUT does not apply (there is no way to tell a peer that is slow to send from
 * one that never will). A message that does not fit its receive (more elements, another dtype) fails that receive
 * with COHORT_ERR_MISMATCH naming both sides and is dropped; the sender's send completes, and the communicator
 * stays usable.
 *
 * Threads. The engine's thread alone drives the transport; the callers post operations to it and wait on a
 * condition variable. It spins while something waits and naps (up to IDLE_NS) when nothing does, so that messages
 * nobody waits for yet are still taken in.
 */
#include "comm/p2p.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

#define EAGER_BYTES (64u << 10)
#define UNEXPECTED_BYTES (64ull << 20)
#define SPIN_NS 2000000LL  /* with something waiting: spin this long after the last progress, then nap */
#define NAP_NS 20000L      /* ... this long at a time */
#define IDLE_NS 2000000LL  /* with nothing waiting: the engine looks at the streams this often */
#define BYE_NS 500000000LL /* how long a leaving rank tries to get its BYE out */
#define MESSAGE_MAX 1024

enum { CTRL_EAGER = 1, CTRL_RTS = 2, CTRL_CTS = 3, CTRL_DATA = 4, CTRL_BYE = 5 };

typedef struct ctrl {
  uint32_t type;
  int32_t tag;
  uint32_t dtype;
  uint32_t accept; /* CTS: 1 to send the payload, 0 to drop it */
  uint64_t count;  /* elements */
  uint64_t id;     /* RTS, CTS, DATA: the sender's number for the message */
} ctrl;
_Static_assert(sizeof(ctrl) == 32, "a control frame is 32 bytes");

/* A message that came before a receive for it. */
typedef struct unexpected {
  struct unexpected *next;
  int src, tag;
  cohort_dtype dtype;
  uint64_t count;
  int rts; /* 1: only its RTS came; the payload waits at the sender */
  uint64_t id;
  char *data; /* EAGER: its payload */
} unexpected;

enum { OP_NEW, OP_POSTED, OP_RUNNING };

struct cohort__p2p_op {
  struct cohort__p2p_op *next;
  cohort__p2p *p;
  int is_send, peer, tag;
  int blocking; /* a receive of cohort_recv: its caller waits in it, so cannot send to itself meanwhile */
  cohort_dtype dtype;
  void *buf;
  size_t count, bytes;
  int state;
  /* sends */
  uint64_t id;
  int rendezvous, cts_seen, data_posted;
  ctrl hdr, hdr2; /* EAGER or RTS; DATA */
  cohort__req req_hdr, req_hdr2, req_data;
  int posted_hdr, posted_hdr2, posted_data;
  /* receives */
  int src_rank;      /* matched: the sender */
  uint64_t rdv_id;   /* matched to an RTS: its id, awaiting DATA */
  int awaiting_data; /* matched to an RTS, CTS sent */
  int data_in;       /* its payload arrived */
  ctrl cts;
  cohort__req req_cts;
  int posted_cts;
  /* outcome */
  int done;
  cohort_status status;
  char message[MESSAGE_MAX];
  cohort_recv_info info;
};

enum { RX_CTRL, RX_PAYLOAD, RX_STOPPED };

typedef struct peer_rx {
  int state;
  int bye;
  ctrl in;
  cohort__req req_in, req_payload;
  cohort__p2p_op *payload_op;     /* the payload lands in this receive's buffer */
  unexpected *payload_unexpected; /* ... or in this unexpected message's */
  char *scratch;                  /* ... or is dropped here */
  uint64_t unexpected_bytes;
} peer_rx;

struct cohort__p2p {
  cohort__transport *t;
  cohort__store *store;
  int rank, size, goodbye;
  pthread_mutex_t mu;
  pthread_cond_t cv;   /* the callers wait here for their operations */
  pthread_cond_t wake; /* the engine naps here when nothing waits */
  pthread_t thread;
  int thread_started, stopping;
  /* under mu */
  cohort__p2p_op *incoming; /* posted by callers, not yet taken by the engine (LIFO; reversed when taken) */
  cohort__p2p_op *sends;    /* sends in flight */
  cohort__p2p_op *recvs;    /* receives not matched yet, in order of posting */
  cohort__p2p_op *matched;  /* receives matched, their payload (or CTS) in flight */
  unexpected *unexpected_head, *unexpected_tail;
  int active; /* operations not done */
  uint64_t next_id;
  cohort_status failed; /* the engine's failure: every operation's from then on */
  char failure[MESSAGE_MAX];
  peer_rx *rx; /* [size] */
  int gone;    /* other ranks that said goodbye (rx[src].bye) */
};

/* ---- completing ---- */

static void op_done(cohort__p2p *p, cohort__p2p_op *op, cohort_status st, const char *message) {
  if (op->done) return;
  op->status = st;
  snprintf(op->message, sizeof op->message, "%s", st == COHORT_OK ? "" : message);
  op->done = 1;
  p->active--;
  pthread_cond_broadcast(&p->cv);
}

static void list_remove(cohort__p2p_op **head, cohort__p2p_op *op) {
  for (cohort__p2p_op **l = head; *l; l = &(*l)->next)
    if (*l == op) {
      *l = op->next;
      op->next = NULL;
      return;
    }
}

/* A receive from any source once every other rank has left: nothing can come to it but a send of this rank to
 * itself, which a caller blocked in cohort_recv cannot make, so it fails rather than waiting for ever. (A rank
 * alone in its communicator receives only from itself: there it waits, as before; so does a cohort_irecv, which a
 * later send of this rank to itself may still match.) */
static int all_others_gone(const cohort__p2p *p) { return p->size > 1 && p->gone == p->size - 1; }
static int hopeless_any_source(const cohort__p2p *p, const cohort__p2p_op *r) {
  return r->peer == COHORT_ANY_SOURCE && r->blocking && all_others_gone(p);
}

static void fail_any_source(cohort__p2p *p, cohort__p2p_op *r) {
  char msg[MESSAGE_MAX];
  snprintf(msg, sizeof msg,
           "cohort_recv: every other rank (%d) left (destroyed its communicator) without sending a message that rank "
           "%d's receive from any source (tag %d) accepts",
           p->size - 1, p->rank, r->tag);
  op_done(p, r, COHORT_ERR_REMOTE, msg);
}

static void list_append(cohort__p2p_op **head, cohort__p2p_op *op) {
  op->next = NULL;
  cohort__p2p_op **l = head;
  while (*l)
    l = &(*l)->next;
  *l = op;
}

/* The engine fails: every operation with it, now and later (caller holds mu). */
static void engine_fail(cohort__p2p *p, cohort_status st, const char *message) {
  if (p->failed == COHORT_OK) {
    p->failed = st;
    snprintf(p->failure, sizeof p->failure, "%s", message);
    COHORT_LOG_INFO("point-to-point engine failed: %s", message);
  }
  cohort__p2p_op **lists[] = {&p->sends, &p->recvs, &p->matched, &p->incoming};
  for (int i = 0; i < 4; i++)
    while (*lists[i]) {
      cohort__p2p_op *op = *lists[i];
      *lists[i] = op->next;
      op->next = NULL;
      op_done(p, op, p->failed, p->failure);
    }
}

/* ---- matching ---- */

static int accepts(const cohort__p2p_op *r, int src, int tag) {
  return (r->peer == COHORT_ANY_SOURCE || r->peer == src) && (r->tag == COHORT_ANY_TAG || r->tag == tag);
}

/* Whether a message of count elements of dtype from src with tag fits receive r; else fails r with the reason. */
static int fits(cohort__p2p *p, cohort__p2p_op *r, int src, int tag, cohort_dtype dtype, uint64_t count) {
  char msg[MESSAGE_MAX];
  if (dtype != r->dtype) {
    snprintf(msg, sizeof msg,
             "cohort_recv: rank %d sent %llu elements of %s with tag %d where rank %d's receive expects %s "
             "(count %zu, %s %d, tag %d)",
             src, (unsigned long long)count, cohort_dtype_name(dtype), tag, p->rank, cohort_dtype_name(r->dtype),
             r->count, r->peer == COHORT_ANY_SOURCE ? "source" : "from rank", r->peer, r->tag);
  } else if (count > r->count) {
    snprintf(msg, sizeof msg,
             "cohort_recv: rank %d sent %llu elements of %s with tag %d, more than rank %d's receive of %zu "
             "elements holds",
             src, (unsigned long long)count, cohort_dtype_name(dtype), tag, p->rank, r->count);
  } else {
    r->info = (cohort_recv_info){.source = src, .tag = tag, .count = (size_t)count};
    return 1;
  }
  op_done(p, r, COHORT_ERR_MISMATCH, msg);
  return 0;
}

/* The first posted receive that accepts a message from src with tag, taken off the list; NULL for none. */
static cohort__p2p_op *take_recv(cohort__p2p *p, int src, int tag) {
  for (cohort__p2p_op *r = p->recvs; r; r = r->next)
    if (accepts(r, src, tag)) {
      list_remove(&p->recvs, r);
      return r;
    }
  return NULL;
}

/* ---- posting on the transport (the engine's thread) ---- */

static cohort_status post_send(cohort__p2p *p, int peer, const void *buf, size_t bytes, cohort__req *req) {
  return p->t->ops->isend(p->t, peer, buf, bytes, req);
}

static cohort_status post_ctrl_recv(cohort__p2p *p, int peer) {
  peer_rx *x = &p->rx[peer];
  x->state = RX_CTRL;
  return p->t->ops->irecv(p->t, peer, &x->in, sizeof x->in, &x->req_in);
}

/* Rejections of RTS whose receive failed: their CTS frames must outlive the send (the engine keeps a list). */
typedef struct reject {
  struct reject *next;
  ctrl c;
  cohort__req req;
} reject;

/* Answers an RTS from src: accept (r's buffer waits for the DATA) or reject (r is NULL: the receive failed). */
static cohort_status send_cts(cohort__p2p *p, int src, uint64_t id, cohort__p2p_op *r, ctrl *reject_slot,
                              cohort__req *reject_req) {
  ctrl *c = r ? &r->cts : reject_slot;
  cohort__req *req = r ? &r->req_cts : reject_req;
  *c = (ctrl){.type = CTRL_CTS, .accept = r != NULL, .id = id};
  if (r) {
    r->posted_cts = 1;
    r->awaiting_data = 1;
    r->rdv_id = id;
    r->src_rank = src;
  }
  return post_send(p, src, c, sizeof *c, req);
}

/* A receive r meets unexpected message u (taken off the queue). */
static cohort_status deliver_unexpected(cohort__p2p *p, cohort__p2p_op *r, unexpected *u, reject **rej) {
  int ok = fits(p, r, u->src, u->tag, u->dtype, u->count);
  cohort_status st = COHORT_OK;
  if (u->rts) {
    if (ok) {
      list_append(&p->matched, r);
      st = send_cts(p, u->src, u->id, r, NULL, NULL);
    } else {
      reject *j = calloc(1, sizeof *j);
      if (!j) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
      j->next = *rej;
      *rej = j;
      st = send_cts(p, u->src, u->id, NULL, &j->c, &j->req);
    }
  } else {
    size_t bytes = (size_t)u->count * cohort_dtype_size(u->dtype);
    p->rx[u->src].unexpected_bytes -= bytes;
    if (ok) {
      if (bytes) memcpy(r->buf, u->data, bytes);
      op_done(p, r, COHORT_OK, NULL);
    }
    /* a source stopped for too much unexpected data may go on */
    peer_rx *x = &p->rx[u->src];
    if (x->state == RX_STOPPED && !x->bye && x->unexpected_bytes < UNEXPECTED_BYTES && u->src != p->rank)
      st = post_ctrl_recv(p, u->src);
  }
  free(u->data);
  free(u);
  return st;
}

static void queue_unexpected(cohort__p2p *p, unexpected *u) {
  u->next = NULL;
  if (p->unexpected_tail)
    p->unexpected_tail->next = u;
  else
    p->unexpected_head = u;
  p->unexpected_tail = u;
}

/* A new receive: the first unexpected message it accepts, or the list of posted receives. */
static cohort_status start_recv(cohort__p2p *p, cohort__p2p_op *r, reject **rej) {
  unexpected *prev = NULL;
  for (unexpected *u = p->unexpected_head; u; prev = u, u = u->next) {
    if (!accepts(r, u->src, u->tag)) continue;
    if (prev)
      prev->next = u->next;
    else
      p->unexpected_head = u->next;
    if (p->unexpected_tail == u) p->unexpected_tail = prev;
    return deliver_unexpected(p, r, u, rej);
  }
  if (r->peer != COHORT_ANY_SOURCE && r->peer != p->rank && p->rx[r->peer].bye) {
    char msg[MESSAGE_MAX];
    snprintf(msg, sizeof msg,
             "cohort_recv: rank %d left (destroyed its communicator) without sending the message that rank %d's "
             "receive (tag %d) waits for",
             r->peer, p->rank, r->tag);
    op_done(p, r, COHORT_ERR_REMOTE, msg);
    return COHORT_OK;
  }
  if (hopeless_any_source(p, r)) {
    fail_any_source(p, r);
    return COHORT_OK;
  }
  list_append(&p->recvs, r);
  return COHORT_OK;
}

static cohort_status start_send(cohort__p2p *p, cohort__p2p_op *s) {
  if (s->peer == p->rank) { /* to itself: a receive, or the unexpected queue */
    cohort__p2p_op *r = take_recv(p, p->rank, s->tag);
    if (r) {
      if (fits(p, r, p->rank, s->tag, s->dtype, s->count)) {
        if (s->bytes) memcpy(r->buf, s->buf, s->bytes);
        op_done(p, r, COHORT_OK, NULL);
      }
    } else {
      unexpected *u = calloc(1, sizeof *u);
      char *data = malloc(s->bytes ? s->bytes : 1);
      if (!u || !data) {
        free(u);
        free(data);
        return cohort__error(COHORT_ERR_SYSTEM, "out of memory for a message of %zu bytes to itself", s->bytes);
      }
      memcpy(data, s->buf, s->bytes);
      *u = (unexpected){.src = p->rank, .tag = s->tag, .dtype = s->dtype, .count = s->count, .data = data};
      queue_unexpected(p, u);
    }
    op_done(p, s, COHORT_OK, NULL);
    return COHORT_OK;
  }
  list_append(&p->sends, s);
  s->rendezvous = s->bytes > EAGER_BYTES;
  s->id = p->next_id++;
  s->hdr = (ctrl){.type = s->rendezvous ? CTRL_RTS : CTRL_EAGER,
                  .tag = s->tag,
                  .dtype = (uint32_t)s->dtype,
                  .count = s->count,
                  .id = s->id};
  s->posted_hdr = 1;
  COHORT_CHECK(post_send(p, s->peer, &s->hdr, sizeof s->hdr, &s->req_hdr));
  if (!s->rendezvous && s->bytes) {
    s->posted_data = 1;
    COHORT_CHECK(post_send(p, s->peer, s->buf, s->bytes, &s->req_data));
  }
  return COHORT_OK;
}

/* A control frame has come from src. */
static cohort_status on_ctrl(cohort__p2p *p, int src, reject **rej) {
  peer_rx *x = &p->rx[src];
  ctrl c = x->in;
  size_t es = cohort_dtype_size((cohort_dtype)c.dtype);
  switch (c.type) {
  case CTRL_EAGER: {
    if (es == 0 || c.tag < 0 || c.count > EAGER_BYTES / es)
      return cohort__error(COHORT_ERR_PROTOCOL, "malformed message header from rank %d (%llu elements of dtype %u)",
                           src, (unsigned long long)c.count, c.dtype);
    size_t bytes = (size_t)c.count * es;
    cohort__p2p_op *r = take_recv(p, src, c.tag);
    if (r && !fits(p, r, src, c.tag, (cohort_dtype)c.dtype, c.count))
      r = NULL, x->scratch = malloc(bytes ? bytes : 1);
    else if (r)
      x->payload_op = r;
    if (!r && !x->scratch) {
      unexpected *u = calloc(1, sizeof *u);
      char *data = malloc(bytes ? bytes : 1);
      if (!u || !data) {
        free(u);
        free(data);
        return cohort__error(COHORT_ERR_SYSTEM, "out of memory for an unexpected message from rank %d", src);
      }
      *u = (unexpected){.src = src, .tag = c.tag, .dtype = (cohort_dtype)c.dtype, .count = c.count, .data = data};
      x->payload_unexpected = u;
      x->unexpected_bytes += bytes;
    }
    if (r) list_append(&p->matched, r);
    if (bytes == 0) return COHORT_OK; /* no payload frame: finished by the caller's loop */
    void *dst = r ? r->buf : x->scratch ? x->scratch : x->payload_unexpected->data;
    if (!dst) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    x->state = RX_PAYLOAD;
    return p->t->ops->irecv(p->t, src, dst, bytes, &x->req_payload);
  }
  case CTRL_RTS: {
    if (es == 0 || c.tag < 0) return cohort__error(COHORT_ERR_PROTOCOL, "malformed message header from rank %d", src);
    cohort__p2p_op *r = take_recv(p, src, c.tag);
    unexpected u0 = {.src = src, .tag = c.tag, .dtype = (cohort_dtype)c.dtype, .count = c.count, .rts = 1, .id = c.id};
    if (r) {
      unexpected *u = malloc(sizeof *u);
      if (!u) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
      *u = u0;
      return deliver_unexpected(p, r, u, rej);
    }
    unexpected *u = malloc(sizeof *u);
    if (!u) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    *u = u0;
    queue_unexpected(p, u);
    return COHORT_OK;
  }
  case CTRL_CTS: {
    for (cohort__p2p_op *s = p->sends; s; s = s->next) {
      if (s->peer != src || !s->rendezvous || s->id != c.id || s->cts_seen) continue;
      s->cts_seen = 1;
      if (!c.accept) return COHORT_OK; /* the receive failed: the message is dropped */
      s->hdr2 = (ctrl){.type = CTRL_DATA, .tag = s->tag, .dtype = (uint32_t)s->dtype, .count = s->count, .id = s->id};
      s->posted_hdr2 = s->posted_data = 1;
      COHORT_CHECK(post_send(p, src, &s->hdr2, sizeof s->hdr2, &s->req_hdr2));
      return post_send(p, src, s->buf, s->bytes, &s->req_data);
    }
    return cohort__error(COHORT_ERR_PROTOCOL, "rank %d answered a message %llu that rank %d never offered", src,
                         (unsigned long long)c.id, p->rank);
  }
  case CTRL_DATA: {
    for (cohort__p2p_op *r = p->matched; r; r = r->next) {
      if (!r->awaiting_data || r->src_rank != src || r->rdv_id != c.id) continue;
      r->awaiting_data = 0;
      x->payload_op = r;
      x->state = RX_PAYLOAD;
      return p->t->ops->irecv(p->t, src, r->buf, r->info.count * cohort_dtype_size(r->dtype), &x->req_payload);
    }
    return cohort__error(COHORT_ERR_PROTOCOL, "rank %d sent the payload of message %llu, which nobody accepted", src,
                         (unsigned long long)c.id);
  }
  case CTRL_BYE:
    if (!x->bye && src != p->rank) p->gone++;
    x->bye = 1;
    x->state = RX_STOPPED;
    for (cohort__p2p_op *r = p->recvs, *next; r; r = next) {
      next = r->next;
      if (hopeless_any_source(p, r)) {
        list_remove(&p->recvs, r);
        fail_any_source(p, r);
        continue;
      }
      if (r->peer != src) continue;
      list_remove(&p->recvs, r);
      char msg[MESSAGE_MAX];
      snprintf(msg, sizeof msg,
               "cohort_recv: rank %d left (destroyed its communicator) without sending the message that rank %d's "
               "receive (tag %d) waits for",
               src, p->rank, r->tag);
      op_done(p, r, COHORT_ERR_REMOTE, msg);
    }
    return COHORT_OK;
  default:
    return cohort__error(COHORT_ERR_PROTOCOL, "malformed message header from rank %d (type %u)", src, c.type);
  }
}

/* The payload of src's current message is in. */
static cohort_status on_payload(cohort__p2p *p, int src) {
  peer_rx *x = &p->rx[src];
  if (x->payload_op) {
    cohort__p2p_op *r = x->payload_op;
    r->data_in = 1;
    x->payload_op = NULL;
  } else if (x->payload_unexpected) {
    unexpected *u = x->payload_unexpected;
    x->payload_unexpected = NULL;
    cohort__p2p_op *r = take_recv(p, src, u->tag); /* posted while its payload came */
    if (r) return deliver_unexpected(p, r, u, NULL);
    queue_unexpected(p, u);
  } else {
    free(x->scratch);
    x->scratch = NULL;
  }
  return COHORT_OK;
}

/* Moves every peer's receiving side as far as the completed frames allow. */
static cohort_status drive_rx(cohort__p2p *p, int *moved, reject **rej) {
  for (int src = 0; src < p->size; src++) {
    if (src == p->rank) continue;
    peer_rx *x = &p->rx[src];
    for (;;) {
      if (x->state == RX_CTRL && x->req_in.complete) {
        *moved = 1;
        x->state = RX_STOPPED;
        COHORT_CHECK(on_ctrl(p, src, rej));
        if (x->state == RX_PAYLOAD) continue;
        if (x->payload_unexpected || x->payload_op || x->scratch) COHORT_CHECK(on_payload(p, src)); /* 0 bytes */
      } else if (x->state == RX_PAYLOAD && x->req_payload.complete) {
        *moved = 1;
        x->state = RX_STOPPED;
        COHORT_CHECK(on_payload(p, src));
      } else {
        break;
      }
      if (!x->bye && x->state == RX_STOPPED && x->unexpected_bytes < UNEXPECTED_BYTES)
        COHORT_CHECK(post_ctrl_recv(p, src));
    }
  }
  return COHORT_OK;
}

/* Completes sends and matched receives whose frames are all through. */
static void finish_ops(cohort__p2p *p) {
  for (cohort__p2p_op *s = p->sends, *next; s; s = next) {
    next = s->next;
    int through = (!s->posted_hdr || s->req_hdr.complete) && (!s->posted_hdr2 || s->req_hdr2.complete) &&
                  (!s->posted_data || s->req_data.complete);
    if (!through || (s->rendezvous && !s->cts_seen)) continue;
    list_remove(&p->sends, s);
    op_done(p, s, COHORT_OK, NULL);
  }
  for (cohort__p2p_op *r = p->matched, *next; r; r = next) {
    next = r->next;
    if (r->done) { /* failed by fits() */
      list_remove(&p->matched, r);
      continue;
    }
    if (!r->data_in || (r->posted_cts && !r->req_cts.complete)) continue;
    list_remove(&p->matched, r);
    op_done(p, r, COHORT_OK, NULL);
  }
}

/* ---- the engine's thread ---- */

static void take_incoming(cohort__p2p *p, reject **rej) {
  cohort__p2p_op *in = p->incoming, *rev = NULL;
  p->incoming = NULL;
  while (in) { /* posted LIFO: take them in order of posting */
    cohort__p2p_op *next = in->next;
    in->next = rev;
    rev = in;
    in = next;
  }
  while (rev) {
    cohort__p2p_op *op = rev;
    rev = rev->next;
    op->next = NULL;
    op->state = OP_RUNNING;
    cohort_status st = op->is_send ? start_send(p, op) : start_recv(p, op, rej);
    if (st != COHORT_OK) {
      op_done(p, op, st, cohort_last_error());
      engine_fail(p, st, cohort_last_error());
    }
  }
}

static void free_rejects(reject **rej, int all) {
  for (reject **l = rej; *l;) {
    reject *j = *l;
    if (all || j->req.complete) {
      *l = j->next;
      free(j);
    } else {
      l = &j->next;
    }
  }
}

/* Sends BYE to every peer and waits (a while) until they are out. */
static void say_goodbye(cohort__p2p *p) {
  ctrl *bye = calloc((size_t)p->size, sizeof *bye);
  cohort__req *req = calloc((size_t)p->size, sizeof *req);
  if (!bye || !req) {
    free(bye);
    free(req);
    return;
  }
  int posted = 0;
  for (int q = 0; q < p->size; q++) {
    if (q == p->rank) continue;
    bye[q] = (ctrl){.type = CTRL_BYE};
    if (post_send(p, q, &bye[q], sizeof bye[q], &req[q]) != COHORT_OK) break;
    posted++;
  }
  int64_t deadline = cohort__now_ns() + BYE_NS;
  while (posted && cohort__now_ns() < deadline) {
    int all = 1, progressed = 0;
    for (int q = 0; q < p->size; q++)
      if (q != p->rank && !req[q].complete) all = 0;
    if (all || p->t->ops->progress(p->t, &progressed) != COHORT_OK) break;
    if (!progressed) sched_yield();
  }
  free(bye);
  free(req);
}

static void *engine_main(void *arg) {
  cohort__p2p *p = arg;
  reject *rej = NULL;
  int64_t last = cohort__now_ns();
  pthread_mutex_lock(&p->mu);
  for (int q = 0; p->t && q < p->size && p->failed == COHORT_OK; q++) {
    cohort_status st = q == p->rank ? COHORT_OK : post_ctrl_recv(p, q);
    if (st != COHORT_OK) engine_fail(p, st, cohort_last_error());
  }
  while (!p->stopping) {
    take_incoming(p, &rej);
    if (p->failed != COHORT_OK) engine_fail(p, p->failed, p->failure); /* what was posted meanwhile */
    if (p->failed != COHORT_OK || !p->t) { /* one rank: sends to itself are done when posted */
      pthread_cond_wait(&p->wake, &p->mu);
      continue;
    }
    pthread_mutex_unlock(&p->mu);
    int progressed = 0;
    cohort_status st = p->t->ops->progress(p->t, &progressed);
    char failure[MESSAGE_MAX];
    if (st != COHORT_OK) snprintf(failure, sizeof failure, "%s", cohort_last_error());
    pthread_mutex_lock(&p->mu);
    int moved = 0;
    /* what completed did complete, even if a failure was seen right after it */
    cohort_status rx = drive_rx(p, &moved, &rej);
    if (rx != COHORT_OK && st == COHORT_OK) {
      st = rx;
      snprintf(failure, sizeof failure, "%s", cohort_last_error());
      p->t->ops->abort(p->t, st, failure); /* the peers hear of it */
    }
    finish_ops(p);
    free_rejects(&rej, 0);
    if (st != COHORT_OK) {
      engine_fail(p, st, failure);
      continue;
    }
    int64_t now = cohort__now_ns();
    if (progressed || moved) {
      last = now;
      continue;
    }
    if (p->incoming) continue;
    if (p->active > 0 && now - last < SPIN_NS) {
      pthread_mutex_unlock(&p->mu);
      sched_yield();
      pthread_mutex_lock(&p->mu);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long nap = p->active > 0 ? NAP_NS : (long)IDLE_NS;
    ts.tv_nsec += nap;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&p->wake, &p->mu, &ts);
  }
  /* Leaving. Messages still in flight are cut: the transport fails first (so that it lets go of their buffers, and
   * the peers hear of it), then they do. Otherwise the peers are told that this rank leaves. */
  int healthy = p->failed == COHORT_OK && p->t;
  if (healthy && p->active > 0) {
    healthy = 0;
    p->t->ops->abort(p->t, COHORT_ERR_REMOTE, "a communicator was destroyed with messages in flight");
  }
  engine_fail(p, p->failed != COHORT_OK ? p->failed : COHORT_ERR_REMOTE,
              p->failed != COHORT_OK ? p->failure : "communicator destroyed");
  pthread_mutex_unlock(&p->mu);
  if (healthy && p->goodbye) say_goodbye(p);
  free_rejects(&rej, 1);
  return NULL;
}

/* ---- the callers' side ---- */

cohort_status cohort__p2p_create(cohort__transport *t, int rank, int size, int goodbye, cohort__store *store,
                                 cohort__p2p **out) {
  *out = NULL;
  cohort__p2p *p = calloc(1, sizeof *p);
  if (p) p->rx = calloc((size_t)size, sizeof *p->rx);
  if (!p || !p->rx) {
    if (p) free(p->rx);
    free(p);
    if (t) t->ops->destroy(t);
    if (store) cohort__store_close(store);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  p->t = t, p->store = store, p->rank = rank, p->size = size, p->goodbye = goodbye;
  for (int q = 0; q < size; q++)
    p->rx[q].state = RX_STOPPED;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  pthread_cond_init(&p->wake, NULL);
  if (t) {
    cohort__call call =
        cohort__call_make(0, COHORT__COLL_P2P, COHORT_U8, COHORT_SUM, COHORT__ALGO_AUTO, -1, 1ull << 40, 0);
    t->ops->set_call(t, &call);
  }
  if (pthread_create(&p->thread, NULL, engine_main, p) != 0) {
    cohort__p2p_destroy(p);
    return cohort__error(COHORT_ERR_SYSTEM, "cannot start the point-to-point engine's thread");
  }
  p->thread_started = 1;
  *out = p;
  return COHORT_OK;
}

void cohort__p2p_destroy(cohort__p2p *p) {
  if (!p) return;
  if (p->thread_started) {
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
  }
  while (p->unexpected_head) {
    unexpected *u = p->unexpected_head;
    p->unexpected_head = u->next;
    free(u->data);
    free(u);
  }
  for (int q = 0; q < p->size; q++) {
    free(p->rx[q].scratch);
    if (p->rx[q].payload_unexpected) free(p->rx[q].payload_unexpected->data);
    free(p->rx[q].payload_unexpected);
  }
  if (p->t) p->t->ops->destroy(p->t);
  if (p->store) cohort__store_close(p->store);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->rx);
  free(p);
}

void cohort__p2p_abort(cohort__p2p *p, cohort_status status, const char *message) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  if (p->t)
    p->t->ops->interrupt(p->t, status, message); /* the engine fails at its next look, and tells the peers */
  else
    engine_fail(p, status, message);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
}

cohort_status cohort__p2p_post(cohort__p2p *p, int is_send, int blocking, void *buf, size_t count, cohort_dtype dtype,
                               int peer, int tag, cohort__p2p_op **out) {
  *out = NULL;
  cohort__p2p_op *op = calloc(1, sizeof *op);
  if (!op) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  *op = (cohort__p2p_op){.p = p,
                         .is_send = is_send,
                         .blocking = blocking,
                         .peer = peer,
                         .tag = tag,
                         .dtype = dtype,
                         .buf = buf,
                         .count = count,
                         .bytes = count * cohort_dtype_size(dtype),
                         .state = OP_POSTED};
  pthread_mutex_lock(&p->mu);
  cohort_status failed = p->failed;
  if (failed != COHORT_OK) {
    cohort__error(failed, "%s", p->failure);
    pthread_mutex_unlock(&p->mu);
    free(op);
    return failed;
  }
  op->next = p->incoming;
  p->incoming = op;
  p->active++;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  *out = op;
  return COHORT_OK;
}

cohort_status cohort__p2p_wait(cohort__p2p_op *op) {
  cohort__p2p *p = op->p;
  if (!p) { /* detached: done */
    if (op->status != COHORT_OK) cohort__error_set_text(op->message);
    return op->status;
  }
  pthread_mutex_lock(&p->mu);
  while (!op->done)
    pthread_cond_wait(&p->cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
  if (op->status != COHORT_OK) cohort__error_set_text(op->message);
  return op->status;
}

cohort_status cohort__p2p_test(cohort__p2p_op *op, int *done) {
  cohort__p2p *p = op->p;
  if (!p) { /* detached: done */
    *done = 1;
    return cohort__p2p_wait(op);
  }
  pthread_mutex_lock(&p->mu);
  *done = op->done;
  cohort_status st = op->done ? op->status : COHORT_OK;
  pthread_mutex_unlock(&p->mu);
  if (st != COHORT_OK) cohort__error_set_text(op->message);
  return st;
}

cohort_status cohort__p2p_info(const cohort__p2p_op *op, cohort_recv_info *info) {
  if (op->is_send) return cohort__error(COHORT_ERR_INVALID, "cohort_work_recv_info: the work is a send");
  if (op->p) pthread_mutex_lock(&op->p->mu);
  int done = op->done;
  cohort_status st = op->status;
  if (op->p) pthread_mutex_unlock(&op->p->mu);
  if (!done) return cohort__error(COHORT_ERR_INVALID, "cohort_work_recv_info: the receive has not completed");
  if (st != COHORT_OK) return cohort__error(COHORT_ERR_INVALID, "cohort_work_recv_info: the receive failed");
  *info = op->info;
  return COHORT_OK;
}

void cohort__p2p_op_detach(cohort__p2p_op *op) {
  if (!op->done) {
    op->status = COHORT_ERR_REMOTE;
    snprintf(op->message, sizeof op->message, "%s", "communicator destroyed");
    op->done = 1;
  }
  op->p = NULL;
}

void cohort__p2p_op_free(cohort__p2p_op *op) {
  if (!op) return;
  cohort__p2p_wait(op);
  free(op);
}
