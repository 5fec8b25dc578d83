/* frame.c: the frame machine of the byte-stream transports (src/transport/frame.c), reading any bytes as the stream
 * from peer 1 of a 2-rank transport. This rank receives three frames of 4000 bytes, one per call (an allreduce of
 * 1000 f32, recursive doubling, calls #0, #1 and #2, each posted when the one before completed), so that the fuzzer
 * reaches held, early and ABORT frames, mismatches and truncations. The first input byte sets the size of each read
 * (1 to 256 bytes: a stream arrives in pieces); the rest is the stream. A frame it accepts must have been exactly the
 * header the call expects, and its payload lands only in the receive of that call. */
#include <string.h>
#include <sys/uio.h>

#include "fuzz.h"
#include "transport/frame.h"

typedef struct stream {
  const uint8_t *data;
  size_t size, at, piece;
  cohort_status failed;
  cohort__link link;
} stream;

static cohort_status read_bytes(void *t, cohort__link *l, void *buf, size_t len, size_t *got) {
  (void)l;
  stream *s = t;
  size_t n = s->size - s->at;
  if (n > len) n = len;
  if (n > s->piece) n = s->piece;
  memcpy(buf, s->data + s->at, n);
  s->at += n;
  *got = n;
  return COHORT_OK;
}

static cohort_status write_bytes(void *t, cohort__link *l, const struct iovec *iov, int n, size_t *put) {
  (void)t, (void)l;
  size_t total = 0;
  for (int i = 0; i < n; i++)
    total += iov[i].iov_len;
  *put = total;
  return COHORT_OK;
}

static cohort_status fail(void *t, cohort_status status, const char *msg) {
  stream *s = t;
  FUZZ_CHECK(status != COHORT_OK && msg && msg[0]);
  if (s->failed == COHORT_OK) s->failed = status;
  return s->failed;
}

static cohort__link *at(void *t, int i) {
  FUZZ_CHECK(i == 0);
  return &((stream *)t)->link;
}

static const cohort__link_ops ops = {
    .read = read_bytes, .write = write_bytes, .fail = fail, .at = at, .size_hint = "fuzz"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  stream s = {.data = data + 1, .size = size - 1, .piece = (size_t)data[0] + 1};
  s.link.peer = 1;
  size_t pending = 0;
  cohort__call call = {.seq = 0,
                       .coll = COHORT__COLL_ALLREDUCE,
                       .dtype = COHORT_F32,
                       .op = COHORT_SUM,
                       .algo = 2,
                       .root = -1,
                       .count = 1000};
  cohort__links links = {.ops = &ops, .t = &s, .call = &call, .pending = &pending, .rank = 0, .count = 1};
  static float payload[1000];
  /* Call 0 an allreduce; 1 an alltoallv (its count is COHORT__COUNT_PER_PEER: only the posted size bounds a frame);
   * 2 a gatherv (a total count and the counts' signature, which a frame must carry). */
  for (uint32_t seq = 0; seq < 3 && s.failed == COHORT_OK; seq++) {
    call.seq = seq;
    if (seq == 1)
      call = (cohort__call){.seq = seq,
                            .coll = COHORT__COLL_ALLTOALLV,
                            .dtype = COHORT_F32,
                            .algo = COHORT__ALGO_PAIRWISE,
                            .root = -1,
                            .count = COHORT__COUNT_PER_PEER};
    if (seq == 2)
      call = (cohort__call){.seq = seq,
                            .coll = COHORT__COLL_GATHERV,
                            .dtype = COHORT_F32,
                            .algo = COHORT__ALGO_LINEAR,
                            .root = 0,
                            .sig = 0x5eed1234u,
                            .count = 1000};
    memset(payload, 0xAB, sizeof payload);
    cohort__req req = {.buf = payload, .bytes = sizeof payload, .peer = 1, .call = call};
    pending++;
    if (cohort__link_post_recv(&links, &s.link, &req) != COHORT_OK) break;
    int progressed = 1;
    while (!req.complete && progressed && s.failed == COHORT_OK) {
      progressed = 0;
      if (cohort__link_recv(&links, &s.link, &progressed) != COHORT_OK) break;
      if (!progressed) cohort__links_check_held(&links);
    }
    if (!req.complete) break;
    /* Complete means whole; the same pass may have gone on to read a later frame that failed: that is the next
     * call's failure, not this one's. */
    FUZZ_CHECK(req.done_bytes == req.bytes);
    FUZZ_CHECK(pending == 0);
  }
  /* A failure leaves the link as it is; what it holds must still be freed cleanly. */
  cohort__link_free(&s.link);
  return 0;
}
