/*
 * inproc.c: the in-process transport. Ranks are threads of one process; a frame is copied once, straight from the
 * sender's buffer into the receiver's, by whichever side arrives second (rendezvous: a send completes when its
 * data has been copied).
 *
 * One hub serves a group: a mutex over all queues and one condition variable per rank. Per (sender, receiver) pair
 * there is a FIFO of unmatched sends and a FIFO of unmatched receives; matching is by position, and the calls of
 * the two sides are compared at the match (a difference is a mismatch, as over TCP). A failure of any rank fails
 * the hub, which wakes every rank with the same status.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/copy.h"
#include "core/error.h"
#include "core/failure.h"
#include "core/log.h"
#include "transport/frame.h"
#include "transport/inproc.h"

typedef struct queue {
  cohort__req *head, *tail;
} queue;

struct cohort__inproc_hub {
  int size;
  atomic_int refs;
  pthread_mutex_t mu;
  pthread_cond_t *cv;      /* one per rank */
  queue *sends;            /* [src * size + dst] unmatched sends */
  queue *recvs;            /* [src * size + dst] unmatched receives, posted by dst */
  unsigned char *joined;   /* [rank]: a transport was made for it (a rank may join once) */
  cohort__failure failure; /* the hub's first failure: every member's */
};

typedef struct inproc_transport {
  cohort__transport base;
  cohort__inproc_hub *hub;
  cohort__call call;
  double op_timeout_s;
} inproc_transport;

static void push(queue *q, cohort__req *r) {
  r->next = NULL;
  if (q->tail)
    q->tail->next = r;
  else
    q->head = r;
  q->tail = r;
}

static cohort__req *pop(queue *q) {
  cohort__req *r = q->head;
  if (r) {
    q->head = r->next;
    if (!q->head) q->tail = NULL;
  }
  return r;
}

/* Fails the hub (caller holds mu) and wakes everyone. */
static cohort_status hub_fail(cohort__inproc_hub *hub, cohort_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int first = cohort__failure_vkeep(&hub->failure, status, fmt, ap);
  va_end(ap);
  for (int r = 0; first && r < hub->size; r++)
    pthread_cond_broadcast(&hub->cv[r]);
  return cohort__failure_raise(&hub->failure);
}

/* Copies send into recv if their calls agree (caller holds mu). */
static cohort_status match(cohort__inproc_hub *hub, cohort__req *send, int src, cohort__req *recv, int dst) {
  if (!cohort__call_equal(&send->call, &recv->call) || send->bytes != recv->bytes) {
    char a[256], b[256];
    cohort__call_describe(&recv->call, a, sizeof a);
    cohort__call_describe(&send->call, b, sizeof b);
    if (cohort__call_equal(&send->call, &recv->call))
      return hub_fail(hub, COHORT_ERR_MISMATCH,
                      "ranks disagree: rank %d sent %zu bytes where rank %d expects %zu in %s", src, send->bytes, dst,
                      recv->bytes, a);
    return hub_fail(hub, COHORT_ERR_MISMATCH, "ranks disagree: rank %d called %s but rank %d called %s", dst, a, src,
                    b);
  }
  if (send->bytes) cohort__copy(recv->buf, send->buf, send->bytes);
  send->done_bytes = recv->done_bytes = send->bytes;
  send->complete = recv->complete = 1;
  pthread_cond_broadcast(&hub->cv[src]);
  pthread_cond_broadcast(&hub->cv[dst]);
  return COHORT_OK;
}

static void inproc_set_call(cohort__transport *base, const cohort__call *call) {
  ((inproc_transport *)base)->call = *call;
}

static cohort_status inproc_isend(cohort__transport *base, int peer, const void *buf, size_t bytes, cohort__req *req) {
  inproc_transport *t = (inproc_transport *)base;
  cohort__inproc_hub *hub = t->hub;
  int me = base->rank;
  *req = (cohort__req){.buf = (void *)buf, .bytes = bytes, .peer = peer, .is_send = 1, .call = t->call};
  pthread_mutex_lock(&hub->mu);
  cohort_status st = cohort__failure_raise(&hub->failure);
  if (st == COHORT_OK) {
    cohort__req *recv = pop(&hub->recvs[me * hub->size + peer]);
    if (recv)
      st = match(hub, req, me, recv, peer);
    else
      push(&hub->sends[me * hub->size + peer], req);
  }
  pthread_mutex_unlock(&hub->mu);
  return st;
}

static cohort_status inproc_irecv(cohort__transport *base, int peer, void *buf, size_t bytes, cohort__req *req) {
  inproc_transport *t = (inproc_transport *)base;
  cohort__inproc_hub *hub = t->hub;
  int me = base->rank;
  *req = (cohort__req){.buf = buf, .bytes = bytes, .peer = peer, .call = t->call};
  pthread_mutex_lock(&hub->mu);
  cohort_status st = cohort__failure_raise(&hub->failure);
  if (st == COHORT_OK) {
    cohort__req *send = pop(&hub->sends[peer * hub->size + me]);
    if (send)
      st = match(hub, send, peer, req, me);
    else
      push(&hub->recvs[peer * hub->size + me], req);
  }
  pthread_mutex_unlock(&hub->mu);
  return st;
}

/* True when nothing this rank posted is still queued (used by wait(NULL)). */
static int all_done(cohort__inproc_hub *hub, int me) {
  for (int p = 0; p < hub->size; p++)
    if (hub->sends[me * hub->size + p].head || hub->recvs[p * hub->size + me].head) return 0;
  return 1;
}

/* The peers this rank's wait is held up by, "1, 3" into out: the one req waits on, or (wait(NULL)) every peer with
 * one of this rank's sends not yet taken or one of its receives not yet filled. Called with hub->mu held. */
static void describe_waiting(cohort__inproc_hub *hub, int me, const cohort__req *req, char *out, size_t len) {
  size_t at = 0;
  out[0] = '\0';
  for (int p = 0; p < hub->size && at + 16 < len; p++) {
    int held = req ? req->peer == p
                   : hub->sends[me * hub->size + p].head != NULL || hub->recvs[p * hub->size + me].head != NULL;
    if (held) at += (size_t)snprintf(out + at, len - at, "%s%d", at ? ", " : "", p);
  }
  if (!at) snprintf(out, len, "(any)");
}

static struct timespec timespec_after(struct timespec t, int64_t ns) {
  ns += t.tv_nsec;
  t.tv_sec += (time_t)(ns / 1000000000);
  t.tv_nsec = (long)(ns % 1000000000);
  return t;
}

static cohort_status inproc_wait(cohort__transport *base, cohort__req *req) {
  inproc_transport *t = (inproc_transport *)base;
  cohort__inproc_hub *hub = t->hub;
  int me = base->rank;
  struct timespec start;
  clock_gettime(CLOCK_REALTIME, &start);
  struct timespec deadline = timespec_after(start, (int64_t)(t->op_timeout_s * 1e9));
  /* COHORT_STALL_S: one warning naming the peers this wait is held up by, as tcp and shm log it, when it comes
   * before the timeout. */
  int64_t stall_ns = cohort__log_stall_ns();
  int stall_warned = !(stall_ns > 0 && (double)stall_ns < t->op_timeout_s * 1e9);
  struct timespec stall_at = timespec_after(start, stall_warned ? 0 : stall_ns);
  cohort_status st = COHORT_OK;
  pthread_mutex_lock(&hub->mu);
  while (hub->failure.status == COHORT_OK && !(req ? req->complete : all_done(hub, me))) {
    const struct timespec *until = stall_warned ? &deadline : &stall_at;
    if (pthread_cond_timedwait(&hub->cv[me], &hub->mu, until) != ETIMEDOUT) continue;
    char call[256], who[256];
    cohort__call_describe(&t->call, call, sizeof call);
    describe_waiting(hub, me, req, who, sizeof who);
    if (!stall_warned) {
      char where[300];
      snprintf(where, sizeof where, "%s on rank %d", call, me); /* threads share the log's rank prefix */
      cohort__log_stall(&stall_warned, stall_ns, where, who, t->op_timeout_s);
      continue;
    }
    st = hub_fail(hub, COHORT_ERR_TIMEOUT,
                  "%s: no progress for %.0f s on rank %d, waiting on rank(s) %s (COHORT_OP_TIMEOUT)", call,
                  t->op_timeout_s, me, who);
    break;
  }
  /* What completed did complete: a failure that came after (another call of faster ranks, say) is reported by this
   * rank's next call, not by one that already finished. */
  int done = req ? req->complete : all_done(hub, me);
  if (!done && hub->failure.status != COHORT_OK) st = cohort__failure_raise(&hub->failure);
  pthread_mutex_unlock(&hub->mu);
  return st;
}

/* Frames are copied when they are posted: there is nothing to move, only the hub's failure to report. */
static cohort_status inproc_progress(cohort__transport *base, int *progressed) {
  cohort__inproc_hub *hub = ((inproc_transport *)base)->hub;
  (void)progressed;
  pthread_mutex_lock(&hub->mu);
  cohort_status st = cohort__failure_raise(&hub->failure);
  pthread_mutex_unlock(&hub->mu);
  return st;
}

static void inproc_abort(cohort__transport *base, cohort_status status, const char *message) {
  cohort__inproc_hub *hub = ((inproc_transport *)base)->hub;
  pthread_mutex_lock(&hub->mu);
  hub_fail(hub, status, "%s", message);
  pthread_mutex_unlock(&hub->mu);
}

static void inproc_destroy(cohort__transport *base) {
  inproc_transport *t = (inproc_transport *)base;
  if (!t) return;
  cohort__inproc_hub_release(t->hub);
  free(t);
}

static const cohort__transport_ops inproc_ops = {
    .name = "inproc",
    .set_call = inproc_set_call,
    .isend = inproc_isend,
    .irecv = inproc_irecv,
    .wait = inproc_wait,
    .abort = inproc_abort,
    .interrupt = inproc_abort,
    .destroy = inproc_destroy,
    .progress = inproc_progress,
};

cohort_status cohort__inproc_hub_create(int size, cohort__inproc_hub **out) {
  cohort__inproc_hub *hub = calloc(1, sizeof *hub);
  if (!hub) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  hub->size = size;
  atomic_init(&hub->refs, 1);
  pthread_mutex_init(&hub->mu, NULL);
  hub->cv = calloc((size_t)size, sizeof *hub->cv);
  hub->sends = calloc((size_t)size * (size_t)size, sizeof *hub->sends);
  hub->recvs = calloc((size_t)size * (size_t)size, sizeof *hub->recvs);
  hub->joined = calloc((size_t)size, 1);
  if (!hub->cv || !hub->sends || !hub->recvs || !hub->joined) {
    free(hub->joined);
    free(hub->cv);
    free(hub->sends);
    free(hub->recvs);
    free(hub);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  for (int r = 0; r < size; r++)
    pthread_cond_init(&hub->cv[r], NULL);
  *out = hub;
  return COHORT_OK;
}

void cohort__inproc_hub_release(cohort__inproc_hub *hub) {
  if (!hub || atomic_fetch_sub(&hub->refs, 1) != 1) return;
  for (int r = 0; r < hub->size; r++)
    pthread_cond_destroy(&hub->cv[r]);
  pthread_mutex_destroy(&hub->mu);
  free(hub->cv);
  free(hub->sends);
  free(hub->recvs);
  free(hub->joined);
  free(hub);
}

void cohort__inproc_hub_abort(cohort__inproc_hub *hub, cohort_status status, const char *message) {
  pthread_mutex_lock(&hub->mu);
  hub_fail(hub, status, "%s", message);
  pthread_mutex_unlock(&hub->mu);
}

cohort_status cohort__inproc_create(cohort__inproc_hub *hub, int rank, double op_timeout_s, cohort__transport **out) {
  pthread_mutex_lock(&hub->mu);
  int twice = hub->joined[rank];
  hub->joined[rank] = 1;
  pthread_mutex_unlock(&hub->mu);
  if (twice) return cohort__error(COHORT_ERR_INVALID, "rank %d joined the in-process group twice", rank);
  inproc_transport *t = calloc(1, sizeof *t);
  if (!t) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  t->base = (cohort__transport){.ops = &inproc_ops, .rank = rank, .size = hub->size};
  t->hub = hub;
  t->op_timeout_s = op_timeout_s;
  atomic_fetch_add(&hub->refs, 1);
  *out = &t->base;
  return COHORT_OK;
}
