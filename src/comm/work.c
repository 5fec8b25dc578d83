/*
 * work.c: running collectives in issue order, on the caller's thread or on the progress thread, and the public
 * collective entry points (blocking and cohort_i*).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/heartbeat.h"
#include "comm/p2p.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

/* Runs one collective; the caller owns the transport (busy is set). */
static cohort_status execute(cohort_comm *c, const cohort__coll_args *a, uint32_t seq) {
  pthread_mutex_lock(&c->mu); /* cohort_comm_abort() may set it from another thread */
  cohort_status failed = cohort__failure_raise(&c->failure);
  pthread_mutex_unlock(&c->mu);
  if (failed != COHORT_OK) return failed;
  cohort__heartbeat_enter(c->rank, seq, (int)a->coll); /* the launcher's hang detection (COHORT_HEARTBEAT_S) */
  c->coll.refused = 0;
  cohort_status st;
  if (a->on_device) {
    int had = c->gpu != NULL;
    st = cohort__gpu_run(&c->gpu, c->transport, &c->coll, &c->config, a, seq);
    if (!had && c->gpu) {
      pthread_mutex_lock(&c->mu);
      snprintf(c->label, sizeof c->label, "%s+%s", c->transport->ops->name, cohort__gpu_path_name(c->gpu));
      pthread_mutex_unlock(&c->mu);
    }
  } else {
    st = cohort__coll_run(&c->coll, a, seq);
  }
  cohort__heartbeat_leave();
  if (st != COHORT_OK && c->coll.refused) {
    /* The ranks disagreed on the call and every rank refused it before data moved (coll/agree.c): the same error
     * on every rank, and the communicator goes on. */
    char message[COHORT__MESSAGE_MAX];
    snprintf(message, sizeof message, "%s", cohort_last_error());
    cohort__comm_name_parent_ranks(c, message, sizeof message);
    cohort__error_set_text(message);
    return st;
  }
  if (st != COHORT_OK) {
    /* Make sure the peers hear about it too (a no-op when the transport has failed already), and keep the first
     * message for every later call. */
    char message[COHORT__MESSAGE_MAX];
    snprintf(message, sizeof message, "%s", cohort_last_error());
    if (!cohort__comm_read_abort_note(c, &st, message, sizeof message))
      cohort__comm_leave_abort_note(c, st, message); /* this rank's own failure: for the peers it cannot reach */
    c->transport->ops->abort(c->transport, st, message);
    cohort__gpu_abort(c->gpu); /* nothing on the device waits any longer for the peers */
    cohort__comm_name_parent_ranks(c, message, sizeof message); /* after abort: peers name the ranks themselves */
    pthread_mutex_lock(&c->mu);
    cohort__failure_keep(&c->failure, st, "%s", message);
    pthread_mutex_unlock(&c->mu);
    cohort__error_set_text(message);
  }
  return st;
}

static void finish(cohort_work *w, cohort_status st) {
  cohort__gpu_release_ready(&w->args);
  w->status = st;
  snprintf(w->message, sizeof w->message, "%s", st == COHORT_OK ? "" : cohort_last_error());
  w->done = 1;
}

void *cohort__progress_main(void *arg) {
  cohort_comm *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    if (c->queue_head && !c->busy) {
      cohort_work *w = c->queue_head;
      c->queue_head = w->next;
      if (!c->queue_head) c->queue_tail = NULL;
      c->busy = 1;
      uint32_t seq = c->seq++;
      int stopping = c->stopping;
      pthread_mutex_unlock(&c->mu);
      w->start_ns = cohort__now_ns();
      cohort_status st =
          stopping ? cohort__error(COHORT_ERR_REMOTE, "communicator destroyed") : execute(c, &w->args, seq);
      w->end_ns = cohort__now_ns();
      pthread_mutex_lock(&c->mu);
      c->busy = 0;
      finish(w, st);
      pthread_cond_broadcast(&c->cv);
      continue;
    }
    if (c->stopping && !c->queue_head) break;
    pthread_cond_wait(&c->cv, &c->mu);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* cohort_tag_next_call's tag, for this thread's next collective. */
static _Thread_local uint64_t next_call_tag;

void cohort_tag_next_call(uint64_t tag) { next_call_tag = tag; }

static uint64_t take_call_tag(void) {
  uint64_t tag = next_call_tag;
  next_call_tag = 0;
  return tag;
}

/* A forked child's copy of a communicator (comm.h): refused, naming the call. */
static cohort_status refuse_inherited(const char *fn) {
  return cohort__error(COHORT_ERR_INVALID,
                       "%s: this communicator was made before this process was forked: it belongs to the parent, "
                       "and a forked child cannot use it (cohort_init here makes one of its own)",
                       fn);
}

/* CUDA's per-thread default stream (cudaStreamPerThread) names the calling thread's own: a _stream call on it must
 * run on the caller's thread, never queued to the progress thread, whose handle 0x2 is another stream. */
static int callers_thread_only(const cohort__coll_args *a, int stream_call) {
  return stream_call && a->stream == (void *)(uintptr_t)2;
}

static cohort_status run_blocking(cohort_comm *c, cohort__coll_args *a, int stream_call) {
  a->tag = take_call_tag();
  if (!c) return cohort__error(COHORT_ERR_INVALID, "communicator is NULL");
  if (cohort__comm_inherited(c)) return refuse_inherited(cohort__coll_api_name(a->coll));
  COHORT_CHECK(cohort__coll_check(&c->coll, a));
  COHORT_CHECK(cohort__gpu_classify(a, stream_call));
  a->stream_ordered = stream_call;
  pthread_mutex_lock(&c->mu);
  cohort_status failed = cohort__failure_raise(&c->failure);
  if (failed != COHORT_OK) {
    pthread_mutex_unlock(&c->mu);
    return failed;
  }
  if (callers_thread_only(a, stream_call)) { /* what is queued runs first (the call order), then this, here */
    c->idle_waiters++;
    while (c->busy || c->queue_head)
      pthread_cond_wait(&c->cv, &c->mu);
    c->idle_waiters--;
    if ((failed = cohort__failure_raise(&c->failure)) != COHORT_OK) { /* what ran before it failed */
      pthread_mutex_unlock(&c->mu);
      return failed;
    }
  }
  if (!c->busy && !c->queue_head) { /* the fast path: nothing queued, run here */
    c->busy = 1;
    uint32_t seq = c->seq++;
    pthread_mutex_unlock(&c->mu);
    cohort_status st = execute(c, a, seq);
    pthread_mutex_lock(&c->mu);
    c->busy = 0;
    /* Only the progress thread waits for busy to fall, with work queued behind this call, and a call on a per-thread
     * stream. Waking them for nothing cost a futex wake and two context switches per call: a quarter of a small
     * blocking call's time. */
    if (c->queue_head || c->idle_waiters) pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return st;
  }
  cohort_work w = {.comm = c, .args = *a};
  if (c->queue_tail)
    c->queue_tail->next = &w;
  else
    c->queue_head = &w;
  c->queue_tail = &w;
  pthread_cond_broadcast(&c->cv);
  while (!w.done)
    pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  if (w.status != COHORT_OK) cohort__error_set_text(w.message);
  return w.status;
}

/* The caller holds w (an async handle) until cohort_work_free: cohort_comm_destroy detaches what is left. */
static void live_add(cohort_comm *c, cohort_work *w) {
  w->live_prev = NULL;
  w->live_next = c->live;
  if (c->live) c->live->live_prev = w;
  c->live = w;
}

static void live_remove(cohort_comm *c, cohort_work *w) {
  if (w->live_prev)
    w->live_prev->live_next = w->live_next;
  else
    c->live = w->live_next;
  if (w->live_next) w->live_next->live_prev = w->live_prev;
}

void cohort__work_detach_all(cohort_comm *c) {
  pthread_mutex_lock(&c->mu);
  for (cohort_work *w = c->live, *next; w; w = next) {
    next = w->live_next;
    if (!w->done) { /* the progress thread failed every queued call before it stopped: not expected here */
      w->status = COHORT_ERR_REMOTE;
      snprintf(w->message, sizeof w->message, "%s", "communicator destroyed");
      w->done = 1;
    }
    if (w->p2p) cohort__p2p_op_detach(w->p2p);
    w->comm = NULL;
  }
  c->live = NULL;
  pthread_mutex_unlock(&c->mu);
}

static cohort_status run_async(cohort_comm *c, cohort__coll_args *a, cohort_work **out, int stream_call) {
  a->tag = take_call_tag();
  if (!out) return cohort__error(COHORT_ERR_INVALID, "work handle pointer is NULL");
  *out = NULL;
  if (!c) return cohort__error(COHORT_ERR_INVALID, "communicator is NULL");
  if (cohort__comm_inherited(c)) return refuse_inherited(cohort__coll_api_name(a->coll));
  COHORT_CHECK(cohort__coll_check(&c->coll, a));
  COHORT_CHECK(cohort__gpu_classify(a, stream_call));
  if (a->on_device) COHORT_CHECK(cohort__gpu_mark_ready(a)); /* the input as the caller's stream has it now */
  cohort_work *w = calloc(1, sizeof *w);
  if (!w) {
    cohort__gpu_release_ready(a);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  w->comm = c;
  w->args = *a;
  pthread_mutex_lock(&c->mu);
  live_add(c, w);
  if (c->queue_tail)
    c->queue_tail->next = w;
  else
    c->queue_head = w;
  c->queue_tail = w;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  *out = w;
  return COHORT_OK;
}

void cohort__work_times(const cohort_work *w, int64_t *start_ns, int64_t *end_ns) {
  *start_ns = w ? w->start_ns : 0;
  *end_ns = w ? w->end_ns : 0;
}

cohort_status cohort_work_wait(cohort_work *w) {
  if (!w) return cohort__error(COHORT_ERR_INVALID, "cohort_work_wait: work is NULL");
  if (w->p2p) return cohort__p2p_wait(w->p2p);
  cohort_comm *c = w->comm;
  if (c) { /* else detached by cohort_comm_destroy: done */
    pthread_mutex_lock(&c->mu);
    while (!w->done)
      pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
  }
  if (w->status != COHORT_OK) cohort__error_set_text(w->message);
  return w->status;
}

cohort_status cohort_work_test(cohort_work *w, int *done) {
  if (!w || !done) return cohort__error(COHORT_ERR_INVALID, "cohort_work_test: NULL argument");
  if (w->p2p) return cohort__p2p_test(w->p2p, done);
  cohort_comm *c = w->comm; /* NULL: detached by cohort_comm_destroy, done */
  if (c) pthread_mutex_lock(&c->mu);
  *done = w->done;
  cohort_status st = w->done ? w->status : COHORT_OK;
  if (c) pthread_mutex_unlock(&c->mu);
  if (st != COHORT_OK) cohort__error_set_text(w->message);
  return st;
}

void cohort_work_free(cohort_work *w) {
  if (!w) return;
  cohort_work_wait(w);
  cohort_comm *c = w->comm;
  if (c) {
    pthread_mutex_lock(&c->mu);
    live_remove(c, w);
    pthread_mutex_unlock(&c->mu);
  }
  cohort__p2p_op_free(w->p2p);
  free(w);
}

void cohort_comm_abort(cohort_comm *c, const char *reason) {
  if (!c) return;
  char message[COHORT__MESSAGE_MAX];
  snprintf(message, sizeof message, "rank %d aborted the job: %s", c->rank, reason ? reason : "(no reason given)");
  pthread_mutex_lock(&c->mu);
  if (cohort__failure_keep(&c->failure, COHORT_ERR_REMOTE, "%s", message))
    cohort__comm_name_parent_ranks(c, c->failure.message, sizeof c->failure.message);
  pthread_mutex_unlock(&c->mu);
  cohort__comm_leave_abort_note(c, COHORT_ERR_REMOTE, message);
  cohort__gpu_abort(c->gpu);                             /* NCCL's kernels stop waiting for the peers */
  cohort__p2p_abort(c->p2p, COHORT_ERR_REMOTE, message); /* messages in flight, here and at the peers */
  pthread_mutex_lock(&c->mu);
  if (c->busy) { /* the driving thread does it at its next look */
    c->transport->ops->interrupt(c->transport, COHORT_ERR_REMOTE, message);
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->busy = 1;
  pthread_mutex_unlock(&c->mu);
  c->transport->ops->abort(c->transport, COHORT_ERR_REMOTE, message);
  pthread_mutex_lock(&c->mu);
  c->busy = 0;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* ---- the public collectives ---- */

#define ARGS(kind, s, r, n, d, o, root_)                                                                               \
  (cohort__coll_args) { .coll = kind, .sendbuf = s, .recvbuf = r, .count = n, .dtype = d, .op = o, .root = root_ }

cohort_status cohort_allreduce(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_op o) {
  cohort__coll_args a = ARGS(COHORT__COLL_ALLREDUCE, s, r, n, d, o, -1);
  return run_blocking(c, &a, 0);
}
cohort_status cohort_broadcast(cohort_comm *c, void *buf, size_t n, cohort_dtype d, int root) {
  cohort__coll_args a = ARGS(COHORT__COLL_BROADCAST, buf, buf, n, d, COHORT_SUM, root);
  return run_blocking(c, &a, 0);
}
cohort_status cohort_allgather(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d) {
  cohort__coll_args a = ARGS(COHORT__COLL_ALLGATHER, s, r, n, d, COHORT_SUM, -1);
  return run_blocking(c, &a, 0);
}
cohort_status cohort_reduce_scatter(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_op o) {
  cohort__coll_args a = ARGS(COHORT__COLL_REDUCE_SCATTER, s, r, n, d, o, -1);
  return run_blocking(c, &a, 0);
}
cohort_status cohort_barrier(cohort_comm *c) {
  cohort__coll_args a = ARGS(COHORT__COLL_BARRIER, NULL, NULL, 0, COHORT_U8, COHORT_SUM, -1);
  return run_blocking(c, &a, 0);
}

cohort_status cohort_join(cohort_comm *c, int *last_rank) {
  if (!c) return cohort__error(COHORT_ERR_INVALID, "communicator is NULL");
  if (last_rank) *last_rank = -1;
  if (c->coll.size == 1) {
    if (last_rank) *last_rank = 0;
    return COHORT_OK;
  }
  if (!c->coll.call_check)
    return cohort__error(COHORT_ERR_INVALID, "cohort_join needs COHORT_CALL_CHECK=on: a joined rank learns each of the "
                                             "others' calls from the ranks' agreement before data moves");
  /* One round per call of the others (each a call number of its own, as theirs), until all have joined. */
  for (uint64_t rounds = 0;; rounds++) {
    cohort__coll_args a = ARGS(COHORT__COLL_JOIN, NULL, NULL, rounds, COHORT_U8, COHORT_SUM, -1);
    COHORT_CHECK(run_blocking(c, &a, 0));
    if (c->coll.join_state == COHORT__JOIN_DONE) break;
  }
  if (last_rank) *last_rank = c->coll.join_last;
  return COHORT_OK;
}

cohort_status cohort_iallreduce(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_op o,
                                cohort_work **w) {
  cohort__coll_args a = ARGS(COHORT__COLL_ALLREDUCE, s, r, n, d, o, -1);
  return run_async(c, &a, w, 0);
}
cohort_status cohort_ibroadcast(cohort_comm *c, void *buf, size_t n, cohort_dtype d, int root, cohort_work **w) {
  cohort__coll_args a = ARGS(COHORT__COLL_BROADCAST, buf, buf, n, d, COHORT_SUM, root);
  return run_async(c, &a, w, 0);
}
cohort_status cohort_iallgather(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_work **w) {
  cohort__coll_args a = ARGS(COHORT__COLL_ALLGATHER, s, r, n, d, COHORT_SUM, -1);
  return run_async(c, &a, w, 0);
}
cohort_status cohort_ireduce_scatter(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_op o,
                                     cohort_work **w) {
  cohort__coll_args a = ARGS(COHORT__COLL_REDUCE_SCATTER, s, r, n, d, o, -1);
  return run_async(c, &a, w, 0);
}
cohort_status cohort_ibarrier(cohort_comm *c, cohort_work **w) {
  cohort__coll_args a = ARGS(COHORT__COLL_BARRIER, NULL, NULL, 0, COHORT_U8, COHORT_SUM, -1);
  return run_async(c, &a, w, 0);
}

/* ---- rooted and personalized collectives (coll/rooted.c, coll/alltoall.c) ---- */

#define VARGS(kind, s, r, c, dp, d, root_)                                                                             \
  (cohort__coll_args) {                                                                                                \
    .coll = kind, .sendbuf = s, .recvbuf = r, .counts = c, .displs = dp, .dtype = d, .op = COHORT_SUM, .root = root_   \
  }
#define A2AV_ARGS(s, sc, sd, r, rc, rd, d)                                                                             \
  (cohort__coll_args) {                                                                                                \
    .coll = COHORT__COLL_ALLTOALLV, .sendbuf = s, .send_counts = sc, .send_displs = sd, .recvbuf = r, .counts = rc,    \
    .displs = rd, .dtype = d, .op = COHORT_SUM, .root = -1                                                             \
  }

/* Each public call once, blocking or not: w NULL runs it blocking. */
static cohort_status run(cohort_comm *c, cohort__coll_args *a, cohort_work **w) {
  return w ? run_async(c, a, w, 0) : run_blocking(c, a, 0);
}

static cohort_status reduce(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_op o, int root,
                            cohort_work **w) {
  cohort__coll_args a = ARGS(COHORT__COLL_REDUCE, s, r, n, d, o, root);
  return run(c, &a, w);
}
static cohort_status gather(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, int root,
                            cohort_work **w) {
  cohort__coll_args a = ARGS(COHORT__COLL_GATHER, s, r, n, d, COHORT_SUM, root);
  return run(c, &a, w);
}
static cohort_status scatter(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, int root,
                             cohort_work **w) {
  cohort__coll_args a = ARGS(COHORT__COLL_SCATTER, s, r, n, d, COHORT_SUM, root);
  return run(c, &a, w);
}
static cohort_status gatherv(cohort_comm *c, const void *s, void *r, const size_t *counts, const size_t *displs,
                             cohort_dtype d, int root, cohort_work **w) {
  cohort__coll_args a = VARGS(COHORT__COLL_GATHERV, s, r, counts, displs, d, root);
  return run(c, &a, w);
}
static cohort_status scatterv(cohort_comm *c, const void *s, void *r, const size_t *counts, const size_t *displs,
                              cohort_dtype d, int root, cohort_work **w) {
  cohort__coll_args a = VARGS(COHORT__COLL_SCATTERV, s, r, counts, displs, d, root);
  return run(c, &a, w);
}
static cohort_status allgatherv(cohort_comm *c, const void *s, void *r, const size_t *counts, const size_t *displs,
                                cohort_dtype d, cohort_work **w) {
  cohort__coll_args a = VARGS(COHORT__COLL_ALLGATHERV, s, r, counts, displs, d, -1);
  return run(c, &a, w);
}
static cohort_status alltoall(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_work **w) {
  cohort__coll_args a = ARGS(COHORT__COLL_ALLTOALL, s, r, n, d, COHORT_SUM, -1);
  return run(c, &a, w);
}
static cohort_status alltoallv(cohort_comm *c, const void *s, const size_t *sc, const size_t *sd, void *r,
                               const size_t *rc, const size_t *rd, cohort_dtype d, cohort_work **w) {
  cohort__coll_args a = A2AV_ARGS(s, sc, sd, r, rc, rd, d);
  return run(c, &a, w);
}

cohort_status cohort_reduce(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_op o, int root) {
  return reduce(c, s, r, n, d, o, root, NULL);
}
cohort_status cohort_gather(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, int root) {
  return gather(c, s, r, n, d, root, NULL);
}
cohort_status cohort_scatter(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, int root) {
  return scatter(c, s, r, n, d, root, NULL);
}
cohort_status cohort_gatherv(cohort_comm *c, const void *s, void *r, const size_t *counts, const size_t *displs,
                             cohort_dtype d, int root) {
  return gatherv(c, s, r, counts, displs, d, root, NULL);
}
cohort_status cohort_scatterv(cohort_comm *c, const void *s, void *r, const size_t *counts, const size_t *displs,
                              cohort_dtype d, int root) {
  return scatterv(c, s, r, counts, displs, d, root, NULL);
}
cohort_status cohort_allgatherv(cohort_comm *c, const void *s, void *r, const size_t *counts, const size_t *displs,
                                cohort_dtype d) {
  return allgatherv(c, s, r, counts, displs, d, NULL);
}
cohort_status cohort_alltoall(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d) {
  return alltoall(c, s, r, n, d, NULL);
}
cohort_status cohort_alltoallv(cohort_comm *c, const void *s, const size_t *sc, const size_t *sd, void *r,
                               const size_t *rc, const size_t *rd, cohort_dtype d) {
  return alltoallv(c, s, sc, sd, r, rc, rd, d, NULL);
}

/* The work handle's pointer is checked here: run() takes NULL for "blocking". */
#define NEED_WORK(w)                                                                                                   \
  if (!(w)) return cohort__error(COHORT_ERR_INVALID, "work handle pointer is NULL")

cohort_status cohort_ireduce(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_op o, int root,
                             cohort_work **w) {
  NEED_WORK(w);
  return reduce(c, s, r, n, d, o, root, w);
}
cohort_status cohort_igather(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, int root,
                             cohort_work **w) {
  NEED_WORK(w);
  return gather(c, s, r, n, d, root, w);
}
cohort_status cohort_iscatter(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, int root,
                              cohort_work **w) {
  NEED_WORK(w);
  return scatter(c, s, r, n, d, root, w);
}
cohort_status cohort_igatherv(cohort_comm *c, const void *s, void *r, const size_t *counts, const size_t *displs,
                              cohort_dtype d, int root, cohort_work **w) {
  NEED_WORK(w);
  return gatherv(c, s, r, counts, displs, d, root, w);
}
cohort_status cohort_iscatterv(cohort_comm *c, const void *s, void *r, const size_t *counts, const size_t *displs,
                               cohort_dtype d, int root, cohort_work **w) {
  NEED_WORK(w);
  return scatterv(c, s, r, counts, displs, d, root, w);
}
cohort_status cohort_iallgatherv(cohort_comm *c, const void *s, void *r, const size_t *counts, const size_t *displs,
                                 cohort_dtype d, cohort_work **w) {
  NEED_WORK(w);
  return allgatherv(c, s, r, counts, displs, d, w);
}
cohort_status cohort_ialltoall(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_work **w) {
  NEED_WORK(w);
  return alltoall(c, s, r, n, d, w);
}
cohort_status cohort_ialltoallv(cohort_comm *c, const void *s, const size_t *sc, const size_t *sd, void *r,
                                const size_t *rc, const size_t *rd, cohort_dtype d, cohort_work **w) {
  NEED_WORK(w);
  return alltoallv(c, s, sc, sd, r, rc, rd, d, w);
}

/* ---- on device memory, ordered on a stream (src/gpu/) ---- */

#define STREAM_ARGS(kind, s, r, n, d, o, root_, stream_)                                                               \
  (cohort__coll_args) {                                                                                                \
    .coll = kind, .sendbuf = s, .recvbuf = r, .count = n, .dtype = d, .op = o, .root = root_, .stream = stream_        \
  }

cohort_status cohort_allreduce_stream(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_op o,
                                      void *stream) {
  cohort__coll_args a = STREAM_ARGS(COHORT__COLL_ALLREDUCE, s, r, n, d, o, -1, stream);
  return run_blocking(c, &a, 1);
}
cohort_status cohort_broadcast_stream(cohort_comm *c, void *buf, size_t n, cohort_dtype d, int root, void *stream) {
  cohort__coll_args a = STREAM_ARGS(COHORT__COLL_BROADCAST, buf, buf, n, d, COHORT_SUM, root, stream);
  return run_blocking(c, &a, 1);
}
cohort_status cohort_allgather_stream(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, void *stream) {
  cohort__coll_args a = STREAM_ARGS(COHORT__COLL_ALLGATHER, s, r, n, d, COHORT_SUM, -1, stream);
  return run_blocking(c, &a, 1);
}
cohort_status cohort_reduce_scatter_stream(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d,
                                           cohort_op o, void *stream) {
  cohort__coll_args a = STREAM_ARGS(COHORT__COLL_REDUCE_SCATTER, s, r, n, d, o, -1, stream);
  return run_blocking(c, &a, 1);
}
cohort_status cohort_iallreduce_stream(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, cohort_op o,
                                       void *stream, cohort_work **w) {
  cohort__coll_args a = STREAM_ARGS(COHORT__COLL_ALLREDUCE, s, r, n, d, o, -1, stream);
  return run_async(c, &a, w, 1);
}
cohort_status cohort_ibroadcast_stream(cohort_comm *c, void *buf, size_t n, cohort_dtype d, int root, void *stream,
                                       cohort_work **w) {
  cohort__coll_args a = STREAM_ARGS(COHORT__COLL_BROADCAST, buf, buf, n, d, COHORT_SUM, root, stream);
  return run_async(c, &a, w, 1);
}
cohort_status cohort_iallgather_stream(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d, void *stream,
                                       cohort_work **w) {
  cohort__coll_args a = STREAM_ARGS(COHORT__COLL_ALLGATHER, s, r, n, d, COHORT_SUM, -1, stream);
  return run_async(c, &a, w, 1);
}
cohort_status cohort_ireduce_scatter_stream(cohort_comm *c, const void *s, void *r, size_t n, cohort_dtype d,
                                            cohort_op o, void *stream, cohort_work **w) {
  cohort__coll_args a = STREAM_ARGS(COHORT__COLL_REDUCE_SCATTER, s, r, n, d, o, -1, stream);
  return run_async(c, &a, w, 1);
}

/* ---- point-to-point messages (p2p.c) ---- */

static cohort_status p2p_check(cohort_comm *c, const char *fn, int is_send, const void *buf, size_t count,
                               cohort_dtype dtype, int peer, int tag) {
  if (!c) return cohort__error(COHORT_ERR_INVALID, "%s: communicator is NULL", fn);
  if (cohort__comm_inherited(c)) return refuse_inherited(fn);
  size_t es = cohort_dtype_size(dtype);
  if (es == 0) return cohort__error(COHORT_ERR_INVALID, "%s: unknown dtype %d", fn, (int)dtype);
  if (count > SIZE_MAX / es) return cohort__error(COHORT_ERR_INVALID, "%s: count %zu overflows", fn, count);
  if (!buf && count > 0) return cohort__error(COHORT_ERR_INVALID, "%s: buf is NULL with count %zu", fn, count);
  if (is_send ? peer < 0 || peer >= c->size : peer < COHORT_ANY_SOURCE || peer >= c->size)
    return cohort__error(COHORT_ERR_INVALID, "%s: rank %d is not in [0, %d)%s", fn, peer, c->size,
                         is_send ? "" : " nor COHORT_ANY_SOURCE");
  if (is_send ? tag < 0 : tag < COHORT_ANY_TAG)
    return cohort__error(COHORT_ERR_INVALID, "%s: tag %d must be >= 0%s", fn, tag, is_send ? "" : " or COHORT_ANY_TAG");
  if (count > 0) { /* one buffer of count elements, as a broadcast's */
    cohort__coll_args a = {.coll = COHORT__COLL_BROADCAST,
                           .sendbuf = buf,
                           .recvbuf = (void *)buf,
                           .count = count,
                           .dtype = dtype,
                           .root = 0};
    COHORT_CHECK(cohort__gpu_classify(&a, 0));
    if (a.on_device)
      return cohort__error(COHORT_ERR_INVALID, "%s: buf is device memory: messages take host memory", fn);
  }
  return COHORT_OK;
}

static void p2p_name_ranks(cohort_comm *c, cohort_status st) {
  if (st == COHORT_OK || !c->parent_ranks) return;
  char message[COHORT__MESSAGE_MAX];
  snprintf(message, sizeof message, "%s", cohort_last_error());
  cohort__comm_name_parent_ranks(c, message, sizeof message);
  cohort__error_set_text(message);
}

static cohort_status p2p_post(cohort_comm *c, const char *fn, int is_send, int blocking, const void *buf, size_t count,
                              cohort_dtype dtype, int peer, int tag, struct cohort__p2p_op **op) {
  COHORT_CHECK(p2p_check(c, fn, is_send, buf, count, dtype, peer, tag));
  if (!c->p2p)
    return cohort__error(COHORT_ERR_INVALID,
                         "%s: point-to-point messages are off on this communicator (COHORT_P2P=off when it was made)",
                         fn);
  cohort_status st = cohort__p2p_post(c->p2p, is_send, blocking, (void *)buf, count, dtype, peer, tag, op);
  p2p_name_ranks(c, st);
  return st;
}

static cohort_status p2p_blocking(cohort_comm *c, const char *fn, int is_send, const void *buf, size_t count,
                                  cohort_dtype dtype, int peer, int tag, cohort_recv_info *info) {
  struct cohort__p2p_op *op;
  COHORT_CHECK(p2p_post(c, fn, is_send, 1, buf, count, dtype, peer, tag, &op));
  cohort_status st = cohort__p2p_wait(op);
  if (st == COHORT_OK && info) cohort__p2p_info(op, info);
  p2p_name_ranks(c, st);
  char message[COHORT__MESSAGE_MAX];
  snprintf(message, sizeof message, "%s", cohort_last_error());
  cohort__p2p_op_free(op);
  if (st != COHORT_OK) cohort__error_set_text(message);
  return st;
}

static cohort_status p2p_async(cohort_comm *c, const char *fn, int is_send, const void *buf, size_t count,
                               cohort_dtype dtype, int peer, int tag, cohort_work **out) {
  if (!out) return cohort__error(COHORT_ERR_INVALID, "%s: work handle pointer is NULL", fn);
  *out = NULL;
  COHORT_CHECK(p2p_check(c, fn, is_send, buf, count, dtype, peer, tag));
  cohort_work *w = calloc(1, sizeof *w);
  if (!w) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  w->comm = c;
  cohort_status st = p2p_post(c, fn, is_send, 0, buf, count, dtype, peer, tag, &w->p2p);
  if (st != COHORT_OK) {
    free(w);
    return st;
  }
  pthread_mutex_lock(&c->mu);
  live_add(c, w);
  pthread_mutex_unlock(&c->mu);
  *out = w;
  return COHORT_OK;
}

cohort_status cohort_send(cohort_comm *c, const void *buf, size_t n, cohort_dtype d, int peer, int tag) {
  return p2p_blocking(c, "cohort_send", 1, buf, n, d, peer, tag, NULL);
}
cohort_status cohort_recv(cohort_comm *c, void *buf, size_t n, cohort_dtype d, int peer, int tag,
                          cohort_recv_info *info) {
  return p2p_blocking(c, "cohort_recv", 0, buf, n, d, peer, tag, info);
}
cohort_status cohort_isend(cohort_comm *c, const void *buf, size_t n, cohort_dtype d, int peer, int tag,
                           cohort_work **w) {
  return p2p_async(c, "cohort_isend", 1, buf, n, d, peer, tag, w);
}
cohort_status cohort_irecv(cohort_comm *c, void *buf, size_t n, cohort_dtype d, int peer, int tag, cohort_work **w) {
  return p2p_async(c, "cohort_irecv", 0, buf, n, d, peer, tag, w);
}
cohort_status cohort_work_recv_info(cohort_work *w, cohort_recv_info *info) {
  if (!w || !info) return cohort__error(COHORT_ERR_INVALID, "cohort_work_recv_info: NULL argument");
  if (!w->p2p) return cohort__error(COHORT_ERR_INVALID, "cohort_work_recv_info: the work is a collective");
  return cohort__p2p_info(w->p2p, info);
}
