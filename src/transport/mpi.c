/*
 * mpi.c: the MPI transport (COHORT_TRANSPORT=mpi; auto under mpirun when built with MPI). Where a cluster's fast
 * network is reached through MPI (InfiniBand through UCX, Slurm's PMIx), cohort's collectives and engine run on MPI's
 * point-to-point calls instead of beside them: the algorithms of src/coll/ are unchanged, so a result's summation
 * order, and its bits, are those of the TCP transport.
 *
 * A frame is two MPI messages on a duplicate of MPI_COMM_WORLD (so cohort's traffic never matches the program's
 * own; a sub-communicator's, on a duplicate shared by all of them, under tags of its own: mpi.h says how): the 40-byte
 * header of frame.h (tag HEADER), then the payload (tag DATA, in pieces of at most 1 GiB, since an MPI count is an
 * int). MPI delivers the messages of one sender, tag and communicator in order, and a receiver posts its receives from
 * a peer in the order that peer posted its sends, so headers and payloads pair up by position as on the other
 * transports. The payload's receive is posted only once its header has been checked against this rank's call: a
 * mismatch is COHORT_ERR_MISMATCH naming both ranks and both calls, and a wrong size never lands in user memory (nor
 * becomes MPI_ERR_TRUNCATE).
 *
 * A failure is sent to every peer as one ABORT message (tag ABORT: status and text), which a waiting peer picks up
 * with MPI_Iprobe, so every rank returns the same status and names the rank that saw it. A rank that dies is MPI's
 * business: mpirun ends the job and says which process died.
 *
 * MPI is initialized here unless the program did it (then it must have asked for MPI_THREAD_MULTIPLE), and finalized
 * at exit if cohort initialized it, behind the exit gate (below) when a communicator is still alive.
 * MPI_THREAD_MULTIPLE is required: a communicator's collectives run on its progress thread or on the caller's, and each
 * communicator has its own progress thread.
 *
 * Thread-safety: as transport.h says (one thread drives it at a time; interrupt from any).
 */
#include "transport/mpi.h"

#include "core/error.h"

#if COHORT_HAVE_MPI

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/failure.h"
#include "core/log.h"
#include "transport/frame.h"

/* A transport's three tags are tag, tag + 1 and tag + 2 of its lane (below). */
enum { TAG_HEADER = 0, TAG_DATA = 1, TAG_ABORT = 2 };
#define WORLD_TAG 7301         /* on the job's duplicates of MPI_COMM_WORLD */
#define SETS_TAG 16            /* context c of the sub-communicators' duplicate: SETS_TAG + 3 c */
#define PIECE_BYTES (1u << 30) /* an MPI count is an int */
#define SPIN_NS 1000000LL      /* busy-poll this long before napping between polls */

/* A posted send or receive and its MPI requests: [0] the header, [1..] the payload's pieces. */
typedef struct op {
  struct op *next;
  cohort__req *req;
  cohort__frame hdr;
  int stage; /* receives: 0 the header is awaited, 1 the payload */
  int nreq;
  MPI_Request *mreq;
} op;

/* Where a transport's frames go: an MPI communicator, and the first of its three tags there. The job's transport and
 * the ones derived from it each have a duplicate of MPI_COMM_WORLD of their own (owned: freed with them). A
 * sub-communicator's share one duplicate, made once per process (sets_comm), each in a context of its own: a range
 * of three tags, agreed by the parent's ranks when they split (cohort__mpi_split). */
typedef struct lane {
  MPI_Comm comm; /* MPI_COMM_NULL: none */
  int tag;
  int owned;
} lane;

typedef struct mpi_transport {
  cohort__transport base;
  lane lane;   /* the frames' traffic */
  int *to_mpi; /* member i is rank to_mpi[i] of lane.comm; NULL: the same rank */
  /* Lanes set aside when the transport is made (cohort__mpi_derive hands them out): for the communicator's
   * point-to-point engine, for its twin and for the twin's engine. For the job's transport they are duplicates of
   * MPI_COMM_WORLD made on the thread that calls cohort_init, because Open MPI 4's communicator creation is not safe
   * while other threads drive MPI (MPI_Comm_split and MPI_Comm_dup from a splitting thread, beside the progress and
   * message threads, crashed in mca_pml_ob1_add_comm at 4 ranks, 3 runs of 3); for a sub-communicator's, contexts of
   * sets_comm. comm MPI_COMM_NULL: none (given out, or never had). */
  lane p2p_spare, twin_spare, twin_p2p_spare;
  cohort__call call;
  double op_timeout_s;
  op *head, *tail; /* in posting order */
  int pending;
  cohort__failure failure;           /* the first failure, final */
  cohort__failure_request interrupt; /* interrupt(): any thread asks, the driving thread fails */
  /* the ABORT messages this rank sent: they must stay alive until MPI is done with them */
  char *abort_out;
  MPI_Request *abort_reqs;
} mpi_transport;

/* ---- lanes and ranks ---- */

static void lane_free(lane *l) {
  if (l->owned && l->comm != MPI_COMM_NULL) MPI_Comm_free(&l->comm);
  l->comm = MPI_COMM_NULL;
}

/* Member p's rank in the lane's communicator. */
static int mpi_rank_of(const mpi_transport *t, int p) { return t->to_mpi ? t->to_mpi[p] : p; }

/* The member whose rank in the lane's communicator is r (-1: none). */
static int member_of(const mpi_transport *t, int r) {
  if (!t->to_mpi) return r;
  for (int p = 0; p < t->base.size; p++)
    if (t->to_mpi[p] == r) return p;
  return -1;
}

/* ---- MPI itself ---- */

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized_here;
/* The sub-communicators' duplicate of MPI_COMM_WORLD (made with the first job's transport, kept until MPI_Finalize);
 * which of its contexts this process holds is mpi_context.c's. */
static MPI_Comm sets_comm = MPI_COMM_NULL;
static int tag_ub = 32767; /* MPI_TAG_UB, read when sets_comm is made; the standard's least */

/* The exit gate. A program may return from main with a communicator alive (an error path, say): its message engine
 * goes on polling MPI from its own thread while finalize_at_exit() runs MPI_Finalize, which then crashed it (SIGSEGV in
 * MPI_Test: exit status 139, not the program's own). So every entry of this transport that calls MPI passes the gate:
 * once the process is closing, a thread that reaches it sleeps until the process is gone, and MPI_Finalize waits for
 * the threads inside MPI to leave (MPI_Test and the like return at once). Sequentially consistent on both sides: a
 * thread either sees closing, or is counted in inside before the finalizing thread looks. */
static atomic_int closing, inside;
static pthread_t closer; /* the thread that runs finalize_at_exit (set before closing) */

/* 1: go on, and call gate_leave() after. 0: refused, for the thread that finalized MPI (a later exit handler): it
 * gets an error rather than sleeping forever. Any other thread sleeps here once the process is closing. */
static int gate_enter(void) {
  atomic_fetch_add(&inside, 1);
  if (!atomic_load(&closing)) return 1;
  atomic_fetch_sub(&inside, 1);
  if (pthread_equal(pthread_self(), closer)) return 0;
  for (;;)
    pause(); /* the process is exiting: this thread never calls MPI again */
}

static cohort_status gate_refused(void) {
  return cohort__error(COHORT_ERR_INVALID, "COHORT_TRANSPORT=mpi: MPI was finalized at exit; a communicator cannot be "
                                           "used from an exit handler that runs after that");
}

static void gate_leave(void) { atomic_fetch_sub(&inside, 1); }

/* The process that initialized MPI. A child it forks inherits the exit handler below but must not call MPI (Open
 * MPI's rule): run there, MPI_Finalize hung the child that left by exit(0), every time (mpi_check.c fork, 3 of 3 runs
 * before this), and its parent waiting for it. */
static pid_t initialized_by;

static void finalize_at_exit(void) {
  if (getpid() != initialized_by) return;
  closer = pthread_self();
  atomic_store(&closing, 1);
  for (int i = 0; i < 2000 && atomic_load(&inside) > 0; i++) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  /* One still inside after 2 s is in a blocking call: MPI_Finalize under it would crash it. Exit without. */
  if (atomic_load(&inside) > 0) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

static const char *thread_level_name(int level) {
  switch (level) {
  case MPI_THREAD_SINGLE:
    return "MPI_THREAD_SINGLE";
  case MPI_THREAD_FUNNELED:
    return "MPI_THREAD_FUNNELED";
  case MPI_THREAD_SERIALIZED:
    return "MPI_THREAD_SERIALIZED";
  default:
    return "MPI_THREAD_MULTIPLE";
  }
}

static cohort_status mpi_up(void) {
  pthread_mutex_lock(&init_lock);
  int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
  cohort_status st = COHORT_OK;
  MPI_Finalized(&finalized);
  MPI_Initialized(&inited);
  if (finalized) {
    st = cohort__error(COHORT_ERR_INVALID, "COHORT_TRANSPORT=mpi: MPI was already finalized in this process");
  } else if (!inited) {
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      st = cohort__error(COHORT_ERR_SYSTEM, "COHORT_TRANSPORT=mpi: MPI_Init_thread failed");
    } else {
      initialized_here = 1;
      initialized_by = getpid();
      atexit(finalize_at_exit);
    }
  } else {
    MPI_Query_thread(&provided);
  }
  if (st == COHORT_OK && provided < MPI_THREAD_MULTIPLE)
    st = cohort__error(
        COHORT_ERR_INVALID,
        "COHORT_TRANSPORT=mpi needs MPI_THREAD_MULTIPLE (cohort calls MPI from each communicator's "
        "progress thread), but this MPI %s %s: %s",
        initialized_here ? "provides only" : "was initialized by the program with", thread_level_name(provided),
        initialized_here ? "use an MPI built with thread support (Open MPI: --enable-mpi-thread-multiple)"
                         : "call MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) instead of MPI_Init");
  pthread_mutex_unlock(&init_lock);
  return st;
}

/* ---- failure ---- */

static void send_aborts(mpi_transport *t);

static cohort_status fail(mpi_transport *t, cohort_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cohort_status fail(mpi_transport *t, cohort_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int first = cohort__failure_vkeep(&t->failure, status, fmt, ap);
  va_end(ap);
  if (first) send_aborts(t);
  return cohort__failure_raise(&t->failure);
}

/* An ABORT is [int32 status][text]; a peer that already failed sends none back (its own failure came first). */
static void send_aborts(mpi_transport *t) {
  const int n = t->base.size, len = 4 + (int)strlen(t->failure.message) + 1;
  t->abort_out = malloc((size_t)len);
  t->abort_reqs = calloc((size_t)n, sizeof *t->abort_reqs);
  if (!t->abort_out || !t->abort_reqs) return;
  int32_t code = (int32_t)t->failure.status;
  memcpy(t->abort_out, &code, 4);
  memcpy(t->abort_out + 4, t->failure.message, (size_t)len - 4);
  for (int p = 0; p < n; p++) {
    t->abort_reqs[p] = MPI_REQUEST_NULL;
    if (p != t->base.rank)
      MPI_Isend(t->abort_out, len, MPI_BYTE, mpi_rank_of(t, p), t->lane.tag + TAG_ABORT, t->lane.comm,
                &t->abort_reqs[p]);
  }
  /* Small messages go out eagerly; give them a moment to leave before the caller tears things down. */
  int64_t until = cohort__now_ns() + 1000000000LL;
  int done = 0;
  while (!done && cohort__now_ns() < until)
    MPI_Testall(n, t->abort_reqs, &done, MPI_STATUSES_IGNORE);
}

/* A peer's ABORT, if one has come: fails t with its status and text. */
static cohort_status check_aborts(mpi_transport *t) {
  int flag = 0;
  MPI_Status s;
  if (MPI_Iprobe(MPI_ANY_SOURCE, t->lane.tag + TAG_ABORT, t->lane.comm, &flag, &s) != MPI_SUCCESS || !flag)
    return COHORT_OK;
  int len = 0;
  MPI_Get_count(&s, MPI_BYTE, &len);
  char buf[4 + COHORT__ABORT_TEXT_MAX];
  if (len < 4 || len > (int)sizeof buf) len = (int)sizeof buf;
  MPI_Recv(buf, len, MPI_BYTE, s.MPI_SOURCE, t->lane.tag + TAG_ABORT, t->lane.comm, MPI_STATUS_IGNORE);
  int32_t code;
  memcpy(&code, buf, 4);
  buf[len - 1] = '\0';
  char text[COHORT__ABORT_TEXT_MAX + 40];
  cohort__relayed_failure(text, sizeof text, buf + 4, member_of(t, s.MPI_SOURCE));
  return fail(t, code > COHORT_OK && code <= COHORT_ERR_PROTOCOL ? (cohort_status)code : COHORT_ERR_REMOTE, "%s", text);
}

/* ---- requests ---- */

static op *new_op(mpi_transport *t, cohort__req *req, int nreq) {
  op *o = calloc(1, sizeof *o);
  MPI_Request *m = calloc((size_t)nreq, sizeof *m);
  if (!o || !m) {
    free(o);
    free(m);
    return NULL;
  }
  for (int i = 0; i < nreq; i++)
    m[i] = MPI_REQUEST_NULL;
  o->req = req;
  o->mreq = m;
  o->nreq = nreq;
  if (t->tail)
    t->tail->next = o;
  else
    t->head = o;
  t->tail = o;
  t->pending++;
  return o;
}

static int pieces(size_t bytes) { return (int)((bytes + PIECE_BYTES - 1) / PIECE_BYTES); }

/* Posts the payload's pieces (send or receive) into o->mreq[1..]. */
static int post_payload(mpi_transport *t, op *o, int is_send) {
  char *buf = o->req->buf;
  size_t left = o->req->bytes;
  for (int i = 1; left > 0; i++) {
    int n = left < PIECE_BYTES ? (int)left : (int)PIECE_BYTES;
    int peer = mpi_rank_of(t, o->req->peer), tag = t->lane.tag + TAG_DATA;
    int rc = is_send ? MPI_Isend(buf, n, MPI_BYTE, peer, tag, t->lane.comm, &o->mreq[i])
                     : MPI_Irecv(buf, n, MPI_BYTE, peer, tag, t->lane.comm, &o->mreq[i]);
    if (rc != MPI_SUCCESS) return rc;
    buf += n;
    left -= (size_t)n;
  }
  return MPI_SUCCESS;
}

static void mpi_set_call(cohort__transport *base, const cohort__call *call) { ((mpi_transport *)base)->call = *call; }

static cohort_status mpi_isend(cohort__transport *base, int peer, const void *buf, size_t bytes, cohort__req *req) {
  mpi_transport *t = (mpi_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  *req = (cohort__req){.buf = (void *)buf, .bytes = bytes, .peer = peer, .is_send = 1, .call = t->call};
  op *o = new_op(t, req, 1 + pieces(bytes));
  if (!o) return fail(t, COHORT_ERR_SYSTEM, "out of memory posting a send to rank %d", peer);
  cohort__frame_from_call(&o->hdr, &t->call, bytes);
  if (MPI_Isend(&o->hdr, (int)sizeof o->hdr, MPI_BYTE, mpi_rank_of(t, peer), t->lane.tag + TAG_HEADER, t->lane.comm,
                &o->mreq[0]) != MPI_SUCCESS ||
      post_payload(t, o, 1) != MPI_SUCCESS)
    return fail(t, COHORT_ERR_SYSTEM, "MPI_Isend to rank %d failed", peer);
  return COHORT_OK;
}

static cohort_status mpi_irecv(cohort__transport *base, int peer, void *buf, size_t bytes, cohort__req *req) {
  mpi_transport *t = (mpi_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  *req = (cohort__req){.buf = buf, .bytes = bytes, .peer = peer, .call = t->call};
  op *o = new_op(t, req, 1 + pieces(bytes));
  if (!o) return fail(t, COHORT_ERR_SYSTEM, "out of memory posting a receive from rank %d", peer);
  if (MPI_Irecv(&o->hdr, (int)sizeof o->hdr, MPI_BYTE, mpi_rank_of(t, peer), t->lane.tag + TAG_HEADER, t->lane.comm,
                &o->mreq[0]) != MPI_SUCCESS)
    return fail(t, COHORT_ERR_SYSTEM, "MPI_Irecv from rank %d failed", peer);
  return COHORT_OK;
}

/* A receive's header has come: is it this call's frame, of the size posted? Then its payload may be received. */
static cohort_status header_arrived(mpi_transport *t, op *o) {
  char msg[COHORT__ABORT_TEXT_MAX];
  if (o->hdr.magic != COHORT__FRAME_MAGIC || o->hdr.kind != COHORT__FRAME_DATA)
    return fail(t, COHORT_ERR_PROTOCOL, "malformed frame header from rank %d", o->req->peer);
  cohort_status st = cohort__frame_check_size(&o->hdr, o->req->peer, msg, sizeof msg);
  if (st == COHORT_OK)
    st = cohort__frame_match(&o->req->call, t->base.rank, o->req->peer, &o->hdr, o->req->bytes, "count and dtype", msg,
                             sizeof msg);
  if (st != COHORT_OK) return fail(t, st, "%s", msg);
  o->stage = 1;
  if (post_payload(t, o, 0) != MPI_SUCCESS)
    return fail(t, COHORT_ERR_SYSTEM, "MPI_Irecv of %zu bytes from rank %d failed", o->req->bytes, o->req->peer);
  return COHORT_OK;
}

/* Tests every posted op once, in posting order. A receive's payload is posted only after the headers of the earlier
 * receives from the same peer: payloads then pair with their headers by position. */
static cohort_status progress_once(mpi_transport *t, int *progressed) {
  unsigned char held[256] = {0}; /* peers (mod 256) with a header still awaited in this pass: a conservative hold */
  op **link = &t->head, *prev = NULL;
  while (*link) {
    op *o = *link;
    int done = 0;
    if (o->req->is_send) {
      MPI_Testall(o->nreq, o->mreq, &done, MPI_STATUSES_IGNORE);
    } else if (o->stage == 0) {
      int got = 0;
      if (!held[o->req->peer & 255]) MPI_Test(&o->mreq[0], &got, MPI_STATUS_IGNORE);
      if (got) {
        *progressed = 1;
        COHORT_CHECK(header_arrived(t, o));
      } else {
        held[o->req->peer & 255] = 1;
      }
      if (o->stage == 1) MPI_Testall(o->nreq, o->mreq, &done, MPI_STATUSES_IGNORE);
    } else {
      MPI_Testall(o->nreq, o->mreq, &done, MPI_STATUSES_IGNORE);
    }
    if (!done) {
      prev = o;
      link = &o->next;
      continue;
    }
    *progressed = 1;
    o->req->done_bytes = o->req->bytes;
    o->req->complete = 1;
    *link = o->next;
    if (t->tail == o) t->tail = prev;
    t->pending--;
    free(o->mreq);
    free(o);
  }
  return COHORT_OK;
}

/* The peers whose frames are awaited, for a timeout's message ("1,3"); each once. */
static void describe_waiting(const mpi_transport *t, char *out, size_t len) {
  size_t n = 0;
  out[0] = '\0';
  for (const op *o = t->head; o && n + 16 < len; o = o->next) {
    int seen = 0;
    for (const op *e = t->head; e != o; e = e->next)
      seen |= !e->req->is_send && e->req->peer == o->req->peer;
    if (!o->req->is_send && !seen) n += (size_t)snprintf(out + n, len - n, "%s%d", n ? "," : "", o->req->peer);
  }
  if (!n) snprintf(out, len, "none: its sends are not taken");
}

static cohort_status mpi_wait(cohort__transport *base, cohort__req *req) {
  mpi_transport *t = (mpi_transport *)base;
  int64_t last_progress = cohort__now_ns();
  const int64_t timeout_ns = (int64_t)(t->op_timeout_s * 1e9), stall_ns = cohort__log_stall_ns();
  int stall_warned = 0;
  for (;;) {
    if (req ? req->complete : t->pending == 0) return COHORT_OK;
    if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
    if (cohort__failure_requested(&t->interrupt)) return fail(t, t->interrupt.status, "%s", t->interrupt.message);
    int progressed = 0;
    COHORT_CHECK(progress_once(t, &progressed));
    COHORT_CHECK(check_aborts(t));
    int64_t now = cohort__now_ns();
    if (progressed) {
      last_progress = now;
      continue;
    }
    if (now - last_progress > timeout_ns) {
      char who[256], call[256];
      describe_waiting(t, who, sizeof who);
      cohort__call_describe(&t->call, call, sizeof call);
      return fail(t, COHORT_ERR_TIMEOUT, "%s: no progress for %.0f s waiting on rank(s) %s (COHORT_OP_TIMEOUT)", call,
                  t->op_timeout_s, who);
    }
    if (!stall_warned && stall_ns > 0 && now - last_progress > stall_ns) {
      char who[256], call[256];
      describe_waiting(t, who, sizeof who);
      cohort__call_describe(&t->call, call, sizeof call);
      cohort__log_stall(&stall_warned, now - last_progress, call, who, t->op_timeout_s);
    }
    /* MPI progresses only inside its calls here: poll, and nap a little once the wait is long. Out of the exit gate
     * meanwhile (gated_wait holds it): MPI_Finalize at exit need not wait out a whole collective. */
    gate_leave();
    if (now - last_progress < SPIN_NS) {
      sched_yield();
    } else {
      struct timespec nap = {0, 20000};
      nanosleep(&nap, NULL);
    }
    (void)gate_enter(); /* never refused here: the closing thread is in its exit handler, not in a wait */
  }
}

static cohort_status mpi_progress(cohort__transport *base, int *progressed) {
  mpi_transport *t = (mpi_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  if (cohort__failure_requested(&t->interrupt)) return fail(t, t->interrupt.status, "%s", t->interrupt.message);
  COHORT_CHECK(progress_once(t, progressed));
  return check_aborts(t);
}

static void mpi_abort(cohort__transport *base, cohort_status status, const char *message) {
  fail((mpi_transport *)base, status, "%s", message);
}

static void mpi_interrupt(cohort__transport *base, cohort_status status, const char *message) {
  mpi_transport *t = (mpi_transport *)base;
  cohort__failure_request_make(&t->interrupt, status, message);
}

static void mpi_destroy(cohort__transport *base) {
  mpi_transport *t = (mpi_transport *)base;
  if (!t) return;
  /* After MPI_Finalize (a communicator destroyed later at exit) nothing of MPI's may be touched: only our memory. */
  int finalized = 0;
  MPI_Finalized(&finalized);
  while (t->head) {
    op *o = t->head;
    t->head = o->next;
    for (int i = 0; i < o->nreq && !finalized; i++)
      if (o->mreq[i] != MPI_REQUEST_NULL) {
        if (!o->req->is_send) MPI_Cancel(&o->mreq[i]);
        MPI_Request_free(&o->mreq[i]);
      }
    free(o->mreq);
    free(o);
  }
  if (t->abort_reqs && !finalized)
    for (int p = 0; p < t->base.size; p++)
      if (t->abort_reqs[p] != MPI_REQUEST_NULL) MPI_Request_free(&t->abort_reqs[p]);
  if (!finalized) {
    lane *held[] = {&t->lane, &t->p2p_spare, &t->twin_spare, &t->twin_p2p_spare};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
      lane_free(held[i]);
  }
  free(t->to_mpi);
  free(t->abort_out);
  free(t->abort_reqs);
  free(t);
}

/* The entries that call MPI, through the exit gate. */
static cohort_status gated_isend(cohort__transport *base, int peer, const void *buf, size_t bytes, cohort__req *req) {
  if (!gate_enter()) return gate_refused();
  cohort_status st = mpi_isend(base, peer, buf, bytes, req);
  gate_leave();
  return st;
}

static cohort_status gated_irecv(cohort__transport *base, int peer, void *buf, size_t bytes, cohort__req *req) {
  if (!gate_enter()) return gate_refused();
  cohort_status st = mpi_irecv(base, peer, buf, bytes, req);
  gate_leave();
  return st;
}

static cohort_status gated_wait(cohort__transport *base, cohort__req *req) {
  if (!gate_enter()) return gate_refused();
  cohort_status st = mpi_wait(base, req);
  gate_leave();
  return st;
}

static cohort_status gated_progress(cohort__transport *base, int *progressed) {
  if (!gate_enter()) return gate_refused();
  cohort_status st = mpi_progress(base, progressed);
  gate_leave();
  return st;
}

static void gated_abort(cohort__transport *base, cohort_status status, const char *message) {
  if (!gate_enter()) return;
  mpi_abort(base, status, message);
  gate_leave();
}

static const cohort__transport_ops mpi_ops = {
    .name = "mpi",
    .set_call = mpi_set_call,
    .isend = gated_isend,
    .irecv = gated_irecv,
    .wait = gated_wait,
    .abort = gated_abort,
    .interrupt = mpi_interrupt,
    .destroy = mpi_destroy,
    .progress = gated_progress,
};

/* The transport of size members over l, this rank being member rank (to_mpi: as in mpi_transport, copied; NULL: the
 * lane's communicator's own ranks), with the lanes it hands out. It takes every lane, even when it fails. */
static cohort_status wrap(lane l, int rank, int size, const int *to_mpi, lane p2p, lane twin, lane twin_p2p,
                          double op_timeout_s, cohort__transport **out) {
  mpi_transport *t = calloc(1, sizeof *t);
  int *map = to_mpi ? malloc(sizeof *map * (size_t)size) : NULL;
  if (!t || (to_mpi && !map)) {
    lane held[] = {l, p2p, twin, twin_p2p};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
      lane_free(&held[i]);
    free(t);
    free(map);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  if (map) memcpy(map, to_mpi, sizeof *map * (size_t)size);
  t->base = (cohort__transport){.ops = &mpi_ops, .rank = rank, .size = size};
  t->op_timeout_s = op_timeout_s;
  t->lane = l;
  t->to_mpi = map;
  t->p2p_spare = p2p, t->twin_spare = twin, t->twin_p2p_spare = twin_p2p;
  cohort__failure_request_init(&t->interrupt);
  *out = &t->base;
  return COHORT_OK;
}

/* A duplicate of MPI_COMM_WORLD whose errors come back as codes, to become cohort errors, instead of ending the
 * process in MPI's handler. */
static int dup_world(MPI_Comm *out) {
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, out);
  if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  return rc;
}

cohort_status cohort__mpi_create(int rank, int size, double op_timeout_s, cohort__transport **out) {
  *out = NULL;
  COHORT_CHECK(mpi_up());
  int mrank = -1, msize = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mrank);
  MPI_Comm_size(MPI_COMM_WORLD, &msize);
  if (mrank != rank || msize != size)
    return cohort__error(COHORT_ERR_INVALID,
                         "COHORT_TRANSPORT=mpi: MPI says this is rank %d of %d, the environment says rank %d of %d: "
                         "run the job under mpirun (or srun with PMIx) alone",
                         mrank, msize, rank, size);
  /* Every rank makes its job's transport at once (cohort_init), so the first one is where all make sets_comm. */
  pthread_mutex_lock(&init_lock);
  if (sets_comm == MPI_COMM_NULL && dup_world(&sets_comm) == MPI_SUCCESS) {
    int *ub = NULL, found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
    if (found && ub && *ub > tag_ub) tag_ub = *ub;
  }
  int have_sets = sets_comm != MPI_COMM_NULL;
  pthread_mutex_unlock(&init_lock);
  lane c[4] = {{MPI_COMM_NULL, 0, 0}, {MPI_COMM_NULL, 0, 0}, {MPI_COMM_NULL, 0, 0}, {MPI_COMM_NULL, 0, 0}};
  for (int i = 0; i < 4; i++) {
    c[i] = (lane){MPI_COMM_NULL, WORLD_TAG, 1};
    if (!have_sets || dup_world(&c[i].comm) != MPI_SUCCESS) {
      while (i-- > 0)
        lane_free(&c[i]);
      return cohort__error(COHORT_ERR_SYSTEM, "COHORT_TRANSPORT=mpi: MPI_Comm_dup failed");
    }
  }
  return wrap(c[0], rank, size, NULL, c[1], c[2], c[3], op_timeout_s, out);
}

cohort_status cohort__mpi_derive(cohort__transport *parent, cohort__mpi_derivation how, double op_timeout_s,
                                 cohort__transport **out) {
  *out = NULL;
  mpi_transport *p = (mpi_transport *)parent;
  lane *spare = how == COHORT__MPI_TWIN ? &p->twin_spare : &p->p2p_spare;
  if (spare->comm == MPI_COMM_NULL)
    return cohort__error(
        COHORT_ERR_INVALID,
        "over COHORT_TRANSPORT=mpi a communicator has one %s, set aside when it was made, and this one "
        "has had it",
        how == COHORT__MPI_TWIN ? "twin" : "message engine");
  lane l = *spare, twin_p2p = {MPI_COMM_NULL, 0, 0}, none = {MPI_COMM_NULL, 0, 0};
  spare->comm = MPI_COMM_NULL;
  if (how == COHORT__MPI_TWIN) twin_p2p = p->twin_p2p_spare, p->twin_p2p_spare.comm = MPI_COMM_NULL;
  return wrap(l, p->base.rank, p->base.size, p->to_mpi, twin_p2p, none, none, op_timeout_s, out);
}

cohort_status cohort__mpi_split(cohort__transport *parent, uint64_t context, int rank, int size, const int *members,
                                double op_timeout_s, cohort__transport **out) {
  *out = NULL;
  mpi_transport *p = (mpi_transport *)parent;
  /* Contexts context .. context + 3: the communicator, its message engine, its twin, the twin's engine. */
  uint64_t last_tag = SETS_TAG + 3 * (context + COHORT__MPI_SPLIT_CONTEXTS) - 1;
  if (last_tag > (uint64_t)tag_ub)
    return cohort__error(COHORT_ERR_INVALID,
                         "over COHORT_TRANSPORT=mpi the split's context %llu is past what MPI's tags (MPI_TAG_UB %d) "
                         "can keep apart",
                         (unsigned long long)context, tag_ub);
  int *to_mpi = malloc(sizeof *to_mpi * (size_t)size);
  if (!to_mpi) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  for (int i = 0; i < size; i++)
    to_mpi[i] = mpi_rank_of(p, members[i]);
  lane l[COHORT__MPI_SPLIT_CONTEXTS];
  for (int i = 0; i < COHORT__MPI_SPLIT_CONTEXTS; i++)
    l[i] = (lane){sets_comm, SETS_TAG + 3 * (int)(context + (uint64_t)i), 0};
  cohort_status st = wrap(l[0], rank, size, to_mpi, l[1], l[2], l[3], op_timeout_s, out);
  free(to_mpi);
  return st;
}

int cohort__mpi_available(void) { return 1; }

#else /* built without MPI */

cohort_status cohort__mpi_create(int rank, int size, double op_timeout_s, cohort__transport **out) {
  (void)rank, (void)size, (void)op_timeout_s;
  *out = NULL;
  return cohort__error(COHORT_ERR_INVALID, "COHORT_TRANSPORT=mpi: this libcohort was built without MPI (install "
                                           "libopenmpi-dev, as scripts/setup.sh does, and build again)");
}

cohort_status cohort__mpi_derive(cohort__transport *parent, cohort__mpi_derivation how, double op_timeout_s,
                                 cohort__transport **out) {
  (void)parent, (void)how, (void)op_timeout_s;
  *out = NULL;
  return cohort__error(COHORT_ERR_INVALID, "COHORT_TRANSPORT=mpi: this libcohort was built without MPI");
}

cohort_status cohort__mpi_split(cohort__transport *parent, uint64_t context, int rank, int size, const int *members,
                                double op_timeout_s, cohort__transport **out) {
  (void)parent, (void)context, (void)rank, (void)size, (void)members, (void)op_timeout_s;
  *out = NULL;
  return cohort__error(COHORT_ERR_INVALID, "COHORT_TRANSPORT=mpi: this libcohort was built without MPI");
}

int cohort__mpi_available(void) { return 0; }

#endif
