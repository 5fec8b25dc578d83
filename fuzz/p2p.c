/* p2p.c: the point-to-point engine (src/comm/p2p.c) reading any bytes as the stream from peer 1 of a 2-rank
 * communicator: its control frames (EAGER, RTS, CTS, DATA, BYE) and their payloads. The first input byte sets the size
 * of each read (1 to 256 bytes: a stream arrives in pieces); the second chooses what this rank has posted before the
 * bytes arrive: receives from rank 1 or any source, with tags 0, 7 or any, of float32 or bytes, small or large, and a
 * send to rank 1 (eager or rendezvous, so that CTS frames find one). The rest is the stream. Sends to rank 1 complete
 * at once. The stream's end is rank 1's death, unless a BYE came first.
 *
 * What must hold, whatever the bytes: every operation ends (done, or failed by the engine or by destroy); a receive
 * that succeeded reports a source of 1, a tag it accepts and a count within its buffer, and nothing was written past
 * that count; a failure says what (its message is not empty). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "comm/p2p.h"
#include "core/error.h"
#include "fuzz.h"

#define GUARD 0x5Au

typedef struct fake {
  cohort__transport base;
  const uint8_t *data;
  size_t size, at, piece;
  cohort__req *head, *tail; /* receives posted from rank 1, filled in order */
  atomic_int go;            /* the harness has posted its operations: the stream flows */
  atomic_int passes;        /* the engine's calls of progress */
  atomic_int drained;       /* the stream is all read, the engine reads no more, or the transport failed */
  cohort_status failed;
} fake;

static void set_call(cohort__transport *t, const cohort__call *call) { (void)t, (void)call; }

static cohort_status isend(cohort__transport *t, int peer, const void *buf, size_t bytes, cohort__req *req) {
  (void)t;
  FUZZ_CHECK(peer == 1);
  fuzz_touch(buf, bytes); /* what the engine sends lies inside its buffers */
  memset(req, 0, sizeof *req);
  req->bytes = req->done_bytes = bytes;
  req->complete = 1;
  return COHORT_OK;
}

static cohort_status irecv(cohort__transport *t, int peer, void *buf, size_t bytes, cohort__req *req) {
  fake *f = (fake *)t;
  FUZZ_CHECK(peer == 1);
  if (f->failed != COHORT_OK) return cohort__error(f->failed, "the fake transport failed");
  memset(req, 0, sizeof *req);
  req->buf = buf;
  req->bytes = bytes;
  req->peer = peer;
  if (f->tail)
    f->tail->next = req;
  else
    f->head = req;
  f->tail = req;
  return COHORT_OK;
}

static cohort_status progress(cohort__transport *t, int *progressed) {
  fake *f = (fake *)t;
  atomic_fetch_add(&f->passes, 1);
  if (f->failed != COHORT_OK) return cohort__error(f->failed, "the fake transport failed");
  if (!atomic_load(&f->go)) return COHORT_OK; /* the same posts before the same bytes, on every replay */
  cohort__req *r = f->head;
  if (!r) { /* the engine reads no more from rank 1 (after a BYE, or past its bound on unexpected bytes) */
    atomic_store(&f->drained, 1);
    return COHORT_OK;
  }
  if (f->at == f->size) { /* a receive waits and the stream has ended: rank 1 died */
    f->failed = COHORT_ERR_REMOTE;
    atomic_store(&f->drained, 1);
    return cohort__error(COHORT_ERR_REMOTE, "rank 1's stream ended (fuzz input exhausted)");
  }
  size_t n = r->bytes - r->done_bytes, left = f->size - f->at;
  if (n > left) n = left;
  if (n > f->piece) n = f->piece;
  memcpy((char *)r->buf + r->done_bytes, f->data + f->at, n);
  r->done_bytes += n;
  f->at += n;
  *progressed = 1;
  if (r->done_bytes == r->bytes) {
    r->complete = 1;
    f->head = r->next;
    if (!f->head) f->tail = NULL;
    r->next = NULL;
  }
  return COHORT_OK;
}

static cohort_status wait_all(cohort__transport *t, cohort__req *req) {
  (void)t, (void)req;
  return cohort__error(COHORT_ERR_INTERNAL, "the engine never waits");
}

static void fail_transport(fake *f, cohort_status status, const char *message) {
  FUZZ_CHECK(status != COHORT_OK && message && message[0]);
  if (f->failed == COHORT_OK) f->failed = status;
  atomic_store(&f->drained, 1);
}

static void abort_transport(cohort__transport *t, cohort_status status, const char *message) {
  fail_transport((fake *)t, status, message);
}

static void destroy(cohort__transport *t) { (void)t; /* on the harness's stack */ }

static const cohort__transport_ops ops = {.name = "fuzz",
                                          .set_call = set_call,
                                          .isend = isend,
                                          .irecv = irecv,
                                          .wait = wait_all,
                                          .abort = abort_transport,
                                          .interrupt = abort_transport,
                                          .destroy = destroy,
                                          .progress = progress};

typedef struct posted {
  int is_send, peer, tag;
  cohort_dtype dtype;
  size_t count;
  uint8_t *buf; /* count elements and a guard of 64 bytes */
  cohort__p2p_op *op;
} posted;

static void check_outcome(const posted *o) {
  int done = 0;
  cohort_status st = cohort__p2p_test(o->op, &done);
  FUZZ_CHECK(done);
  size_t es = cohort_dtype_size(o->dtype), cap = o->count * es;
  for (size_t i = cap; i < cap + 64; i++)
    FUZZ_CHECK(o->buf[i] == GUARD); /* nothing past the buffer */
  if (st != COHORT_OK) {
    FUZZ_CHECK(cohort_last_error()[0] != '\0');
    return;
  }
  if (o->is_send) return;
  cohort_recv_info info;
  FUZZ_CHECK(cohort__p2p_info(o->op, &info) == COHORT_OK);
  FUZZ_CHECK(info.source == 1);
  FUZZ_CHECK(o->tag == COHORT_ANY_TAG || info.tag == o->tag);
  FUZZ_CHECK(info.count <= o->count);
  for (size_t i = info.count * es; i < cap; i++)
    FUZZ_CHECK(o->buf[i] == GUARD); /* nothing past the count received */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  fake f = {.base = {.ops = &ops, .rank = 0, .size = 2}, .data = data + 2, .size = size - 2, .piece = data[0] + 1u};
  const uint8_t choose = data[1];
  posted ops_posted[4];
  int n = 0;
  /* bit 0: a receive from rank 1, tag 0, 16 floats; bit 1: one from any source, any tag, 100000 bytes (past the eager
   * size: an RTS matches it); bit 2: one from rank 1, tag 7, 3 bytes; bit 3: a send of 200000 bytes to rank 1 (a
   * rendezvous: an RTS goes out, and a CTS in the stream may answer it), else of 4 floats (eager). */
  if (choose & 1) ops_posted[n++] = (posted){0, 1, 0, COHORT_F32, 16, NULL, NULL};
  if (choose & 2) ops_posted[n++] = (posted){0, COHORT_ANY_SOURCE, COHORT_ANY_TAG, COHORT_U8, 100000, NULL, NULL};
  if (choose & 4) ops_posted[n++] = (posted){0, 1, 7, COHORT_U8, 3, NULL, NULL};
  ops_posted[n++] = (posted){1, 1, 5, (choose & 8) ? COHORT_U8 : COHORT_F32, (choose & 8) ? 200000u : 4u, NULL, NULL};
  cohort__p2p *p = NULL;
  FUZZ_CHECK(cohort__p2p_create(&f.base, 0, 2, 0, NULL, &p) == COHORT_OK);
  for (int i = 0; i < n; i++) {
    posted *o = &ops_posted[i];
    size_t bytes = o->count * cohort_dtype_size(o->dtype);
    o->buf = malloc(bytes + 64);
    FUZZ_CHECK(o->buf != NULL);
    memset(o->buf, o->is_send ? 0x11 : GUARD, bytes);
    memset(o->buf + bytes, GUARD, 64);
    /* Posted as not blocking: a blocking receive from any source would fail at once once rank 1 said goodbye. */
    FUZZ_CHECK(cohort__p2p_post(p, o->is_send, 0, o->buf, o->count, o->dtype, o->peer, o->tag, &o->op) == COHORT_OK);
  }
  /* The bytes flow once the engine has taken the posts: each of its passes looks at its queue, then at the transport,
   * so the second pass that calls progress after the posts has taken them. The same input then always meets the same
   * posts, whatever the threads' timing. */
  const int passes = atomic_load(&f.passes);
  for (int spins = 0; atomic_load(&f.passes) < passes + 2 && spins < 200000; spins++) {
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
  atomic_store(&f.go, 1);
  /* Until the stream is read (or the transport failed): a pass that read the last bytes has handled them before the
   * next one sees the stream drained. destroy() fails whatever waits for more. */
  for (int spins = 0; !atomic_load(&f.drained) && spins < 200000; spins++) {
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
  FUZZ_CHECK(atomic_load(&f.drained)); /* 4 s at most: the engine reads a stream as fast as it can */
  cohort__p2p_destroy(p);
  for (int i = 0; i < n; i++) {
    cohort__p2p_op_detach(ops_posted[i].op);
    check_outcome(&ops_posted[i]);
    cohort__p2p_op_free(ops_posted[i].op);
    free(ops_posted[i].buf);
  }
  return 0;
}
