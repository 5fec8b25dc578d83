/*
 * test_frames_fault.c: malformed and truncated frames from an authenticated peer.
 *
 * The test process plays rank 1 of a 2-rank job itself. It serves the rendezvous store (so it knows the secret),
 * starts rank 0 as a child (this binary with --child: one cohort_allreduce of 1000 f32, sum), publishes an address
 * for rank 1 that nobody ever dials (rank 0 only dials lower ranks), reads rank 0's address, connects, passes the
 * peer handshake with the right secret and hello {CHLO, 1, 0, 2}, and counts itself in on "cohort/0/0/0/connected".
 * From then on rank 0 believes it talks to a real rank 1, and the test writes whatever bytes it likes.
 *
 * Before any data moves the ranks compare their calls (src/coll/agree.c): rank 0 sends us its signature in a frame
 * of seq 0, internal (6), u8 (6), sum (0), algo dissemination (6), root -1, count 80 (40 bytes a rank), bytes 40, and
 * we answer with ours, the same call: seq 0, allreduce (1), f32 (0), sum (0), rd (2), root -1, count 1000, no counts
 * hash. Rank 0 picks recursive doubling for 1000 floats (4000 bytes <= COHORT_SMALL_BYTES), which rides on the
 * exchange: right behind its signature it sends its vector, and it expects ours right behind our signature, in a
 * frame that matches its call: seq 0, allreduce (1), f32 (0), sum (0), algo rd (2), root -1, count 1000, bytes 4000.
 * Headers and signatures are encoded here byte by byte from the documented wire layout (frame.h, cohort__signature in
 * coll.h), not with the library's structs, so that the test also pins the layout down. The control case sends
 * exactly that frame and checks rank 0's result, which proves the other cases fail for the one field they change
 * and for nothing else.
 *
 *   control         a correct frame: rank 0 returns OK with 1 + 2.5 in every element.
 *   bad_magic       a header with a wrong magic: COHORT_ERR_PROTOCOL naming rank 1; rank 0 sends us an ABORT.
 *   bad_kind        a header of an unknown kind: COHORT_ERR_PROTOCOL.
 *   stale_seq       a frame of an earlier call (seq -1): COHORT_ERR_PROTOCOL.
 *   bad_abort       an ABORT frame with a 2-byte body (too short for its status): COHORT_ERR_PROTOCOL.
 *   huge_bytes      a header claiming 2^50 payload bytes: COHORT_ERR_PROTOCOL, without trying to allocate it.
 *   early_oversize  a frame of the next call claiming more bytes than its call holds: COHORT_ERR_PROTOCOL, before
 *                   any allocation.
 *   other_call      a header of another call (count 999): COHORT_ERR_MISMATCH naming both calls.
 *   short_payload   a correct header, 100 of its 4000 payload bytes, then close: COHORT_ERR_REMOTE naming rank 1
 *                   within 1 s of the close (no hang).
 *   short_header    20 bytes of a header, then close: the same.
 *   other_signature our signature says count 999 (and our vector of 999 follows it): rank 0 refuses the call with
 *                   COHORT_ERR_MISMATCH naming both calls before any data lands in its buffer, and sends no ABORT
 *                   (its communicator stays usable).
 *
 * Every child runs with COHORT_OP_TIMEOUT=5, so a rank 0 that misses a fault still ends (as a failed test).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/sock.h"
#include "store/auth.h"
#include "store/store.h"
#include "test.h"

#define SECRET "frames-fault-secret-0123456789abcdef"
#define COUNT 1000
#define HDR_BYTES 40
#define FRAME_MAGIC 0x54524843u /* "CHRT" */
#define HELLO_MAGIC 0x4f4c4843u /* "CHLO" */
#define KIND_DATA 1
#define KIND_ABORT 2
#define RANK0_VALUE 1.0f
#define RANK1_VALUE 2.5f

static const char *self_path;

/* ---------------- the child: rank 0 ---------------- */

static int child(void) {
  cohort_comm *c = NULL;
  float buf[COUNT];
  for (int i = 0; i < COUNT; i++)
    buf[i] = RANK0_VALUE;
  cohort_status st = cohort_init(&c);
  if (st == COHORT_OK) st = cohort_allreduce(c, buf, buf, COUNT, COHORT_F32, COHORT_SUM);
  int uniform = 1;
  for (int i = 1; i < COUNT; i++)
    uniform &= buf[i] == buf[0];
  printf("RESULT status=%d t=%.6f first=%.3f uniform=%d msg=%s\n", (int)st, cohort__now_s(), (double)buf[0], uniform,
         st == COHORT_OK ? "" : cohort_last_error());
  fflush(stdout);
  cohort_comm_destroy(c);
  return 0;
}

/* ---------------- the wire, by hand ---------------- */

typedef struct wire_hdr {
  uint32_t magic;
  uint8_t kind, coll, dtype, op;
  uint32_t seq;
  int32_t root;
  uint8_t algo;
  uint64_t count, bytes;
} wire_hdr;

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* magic @0, kind @4, coll @5, dtype @6, op @7, seq @8, root @12, algo @16, sig @17..20, reserved @21..23, count @24,
 * bytes @32. */
static void encode(const wire_hdr *h, uint8_t out[HDR_BYTES]) {
  memset(out, 0, HDR_BYTES);
  put_le(out + 0, h->magic, 4);
  out[4] = h->kind;
  out[5] = h->coll;
  out[6] = h->dtype;
  out[7] = h->op;
  put_le(out + 8, h->seq, 4);
  put_le(out + 12, (uint32_t)h->root, 4);
  out[16] = h->algo;
  put_le(out + 24, h->count, 8);
  put_le(out + 32, h->bytes, 8);
}

static void decode(const uint8_t in[HDR_BYTES], wire_hdr *h) {
  *h = (wire_hdr){.magic = (uint32_t)get_le(in, 4),
                  .kind = in[4],
                  .coll = in[5],
                  .dtype = in[6],
                  .op = in[7],
                  .seq = (uint32_t)get_le(in + 8, 4),
                  .root = (int32_t)(uint32_t)get_le(in + 12, 4),
                  .algo = in[16],
                  .count = get_le(in + 24, 8),
                  .bytes = get_le(in + 32, 8)};
}

#define SIG_BYTES 40

/* A call's signature as the ranks compare it (cohort__signature): seq @0, coll @4, dtype @5, op @6, algo @7,
 * root @8, 4 bytes of padding (not compared), count @16, counts hash @24, balance @32 (alltoallv's; summed, not
 * compared: 0 here). */
static void encode_signature(uint32_t seq, uint8_t coll, uint8_t dtype, uint8_t op, uint8_t algo, int32_t root,
                             uint64_t count, uint8_t out[SIG_BYTES]) {
  memset(out, 0, SIG_BYTES);
  put_le(out, seq, 4);
  out[4] = coll;
  out[5] = dtype;
  out[6] = op;
  out[7] = algo;
  put_le(out + 8, (uint32_t)root, 4);
  put_le(out + 16, count, 8);
}

/* The frame that carries a signature in a 2-rank job's first call. */
static wire_hdr agreement_header(void) {
  return (wire_hdr){.magic = FRAME_MAGIC,
                    .kind = KIND_DATA,
                    .coll = 6,
                    .dtype = 6,
                    .op = 0,
                    .seq = 0,
                    .root = -1,
                    .algo = 6,
                    .count = 2 * SIG_BYTES,
                    .bytes = SIG_BYTES};
}

/* The frame rank 0 expects from rank 1 in its first allreduce. */
static wire_hdr matching_header(void) {
  return (wire_hdr){.magic = FRAME_MAGIC,
                    .kind = KIND_DATA,
                    .coll = 1,
                    .dtype = 0,
                    .op = 0,
                    .seq = 0,
                    .root = -1,
                    .algo = 2,
                    .count = COUNT,
                    .bytes = COUNT * sizeof(float)};
}

static int send_bytes(int fd, const void *p, size_t n) {
  return cohort__sock_send_all(fd, p, n, cohort__now_ns() + 5000000000LL) == COHORT_OK ? 0 : -1;
}

static int send_header(int fd, const wire_hdr *h) {
  uint8_t b[HDR_BYTES];
  encode(h, b);
  return send_bytes(fd, b, sizeof b);
}

/* ---------------- the parent: the launcher and a hand-made rank 1 ---------------- */

typedef struct job {
  cohort__store_server *server;
  cohort__store *store;
  pid_t pid;
  FILE *out;
  int fd; /* our authenticated link to rank 0 */
  /* rank 0's signature frame */
  wire_hdr agree;
  uint8_t agree_payload[SIG_BYTES];
  /* rank 0's first data frame to us, and its result */
  wire_hdr first;
  float first_payload[COUNT];
  int have;
  int status;
  double t;
  float value;
  int uniform;
  char msg[1024];
} job;

static void start_rank0(job *j, int port) {
  int fds[2];
  if (pipe(fds) != 0) abort();
  pid_t pid = fork();
  if (pid < 0) abort();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    char v[32];
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("COHORT_SECRET", SECRET, 1);
    setenv("COHORT_LAUNCHER_STORE", "1", 1);
    setenv("COHORT_RUN_ID", "0",
           1); /* keys under cohort/0/0/0/ (run id, generation, first open): the test plays a rank and reads them */
    setenv("COHORT_RESTART_COUNT", "0", 1);
    setenv("COHORT_STORE", "tcp", 1);
    /* Pin what decides the frame rank 0 expects, whatever the caller's environment says. */
    setenv("COHORT_ALGO", "auto", 1);
    setenv("COHORT_P2P", "off", 1); /* the test plays rank 1 of the collectives' transport only */
    setenv("COHORT_SMALL_BYTES", "65536", 1);
    setenv("COHORT_SOCKETS_PER_PEER", "1", 1);
    setenv("COHORT_TIMEOUT", "10", 1);
    setenv("COHORT_OP_TIMEOUT", "5", 1);
    setenv("COHORT_LOG_LEVEL", "error", 1);
    signal(SIGPIPE, SIG_DFL); /* the library must not rely on the caller ignoring it */
    execl(self_path, self_path, "--child", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  j->pid = pid;
  j->out = fdopen(fds[0], "r");
}

static int read_frame_header(int fd, wire_hdr *h) {
  uint8_t b[HDR_BYTES];
  if (cohort__sock_recv_all(fd, b, sizeof b, cohort__now_ns() + 5000000000LL) != COHORT_OK) return -1;
  decode(b, h);
  return 0;
}

/* Everything up to the moment rank 0 starts its allreduce; then the signatures (ours says our_count), and when they
 * agree reads the frame rank 0 sends us in it. Returns a description of the step that failed, or NULL. */
static const char *join_as_rank1_claiming(job *j, uint64_t our_count) {
  memset(j, 0, sizeof *j);
  j->fd = -1;
  if (cohort__store_server_start("127.0.0.1", 0, SECRET, &j->server) != COHORT_OK) return "store server";
  int port = cohort__store_server_port(j->server);
  start_rank0(j, port);
  if (cohort__store_connect_tcp("127.0.0.1", port, SECRET, 10, &j->store) != COHORT_OK) return "store connect";
  /* Port 9 (discard): rank 0 has no lower rank to dial, so it never uses this address. */
  static const char fake_addr[] = "127.0.0.1:9";
  if (cohort__store_set(j->store, "cohort/0/0/0/peer/1", fake_addr, strlen(fake_addr)) != COHORT_OK) return "publish";
  void *addr = NULL;
  size_t len = 0;
  if (cohort__store_get(j->store, "cohort/0/0/0/peer/0", 10, &addr, &len) != COHORT_OK) return "rank 0's address";
  char host[128];
  snprintf(host, sizeof host, "%s", (char *)addr);
  free(addr);
  char *colon = strrchr(host, ':');
  if (!colon) return "rank 0's address has no port";
  *colon = '\0';
  int64_t deadline = cohort__now_ns() + 5000000000LL;
  if (cohort__sock_connect(host, atoi(colon + 1), deadline, &j->fd) != COHORT_OK) return "connect to rank 0";
  struct {
    uint32_t magic;
    int32_t rank, channel, size;
  } hello = {HELLO_MAGIC, 1, 0, 2};
  _Static_assert(sizeof hello == 16, "the peer hello is 16 bytes");
  if (cohort__auth_connect(j->fd, SECRET, "cohort-peer-v1", &hello, sizeof hello, deadline) != COHORT_OK)
    return "peer handshake";
  int64_t joined = 0;
  /* Rank 0 counts itself in once its side of the handshake is done: before or after us. */
  if (cohort__store_add(j->store, "cohort/0/0/0/connected", 1, &joined) != COHORT_OK || joined < 1 || joined > 2)
    return "count in on cohort/0/connected";
  /* The signatures first: rank 0's, then ours. */
  if (read_frame_header(j->fd, &j->agree) != 0) return "rank 0's signature header";
  if (j->agree.bytes != SIG_BYTES) return "rank 0's signature frame has an unexpected size";
  if (cohort__sock_recv_all(j->fd, j->agree_payload, SIG_BYTES, cohort__now_ns() + 5000000000LL) != COHORT_OK)
    return "rank 0's signature";
  wire_hdr ah = agreement_header();
  uint8_t ours[SIG_BYTES];
  encode_signature(0, 1, 0, 0, 2, -1, our_count, ours);
  if (send_header(j->fd, &ah) != 0 || send_bytes(j->fd, ours, sizeof ours) != 0) return "our signature";
  /* Rank 0 sends its vector at once, right behind its signature (the recursive doubling rides on the exchange of
   * signatures: agree.c), whatever our signature says. Reading it now keeps our receive queue empty, so that our
   * close() later is a clean FIN and not a reset. */
  if (read_frame_header(j->fd, &j->first) != 0) return "rank 0's frame header";
  if (j->first.bytes != sizeof j->first_payload) return "rank 0's frame has an unexpected size";
  if (cohort__sock_recv_all(j->fd, j->first_payload, sizeof j->first_payload, cohort__now_ns() + 5000000000LL) !=
      COHORT_OK)
    return "rank 0's payload";
  return NULL;
}

static const char *join_as_rank1(job *j) { return join_as_rank1_claiming(j, COUNT); }

/* Reads rank 0's RESULT line (it ends by itself: COHORT_OP_TIMEOUT=5), then cleans up everything. */
static void finish(job *j) {
  char line[2048];
  while (j->out && fgets(line, sizeof line, j->out)) {
    if (sscanf(line, "RESULT status=%d t=%lf first=%f uniform=%d", &j->status, &j->t, &j->value, &j->uniform) == 4) {
      j->have = 1;
      char *m = strstr(line, "msg=");
      snprintf(j->msg, sizeof j->msg, "%s", m ? m + 4 : "");
      j->msg[strcspn(j->msg, "\n")] = '\0';
      break;
    }
  }
  if (j->pid > 0) {
    kill(j->pid, SIGKILL);
    waitpid(j->pid, NULL, 0);
  }
  if (j->out) fclose(j->out);
  if (j->fd >= 0) close(j->fd);
  if (j->store) cohort__store_close(j->store);
  cohort__store_server_stop(j->server);
  fprintf(stderr, "  rank 0: have=%d status=%s value=%g msg=%s\n", j->have, cohort_strerror((cohort_status)j->status),
          (double)j->value, j->msg);
}

/* After rank 0 fails it tells its peers: the next frame on our link is an ABORT carrying its status. */
static int read_abort_status(int fd) {
  wire_hdr h;
  if (read_frame_header(fd, &h) != 0 || h.magic != FRAME_MAGIC || h.kind != KIND_ABORT || h.bytes < 4 ||
      h.bytes > 4 + 1024)
    return -1;
  uint8_t body[4 + 1024];
  if (cohort__sock_recv_all(fd, body, (size_t)h.bytes, cohort__now_ns() + 5000000000LL) != COHORT_OK) return -1;
  return (int)(int32_t)get_le(body, 4);
}

#define JOIN(j)                                                                                                        \
  do {                                                                                                                 \
    const char *step__ = join_as_rank1(j);                                                                             \
    if (step__) {                                                                                                      \
      finish(j);                                                                                                       \
      TEST_FAIL_("joining as rank 1 failed at: %s (%s)", step__, cohort_last_error());                                 \
    }                                                                                                                  \
  } while (0)

static job the_job;

TEST(control_a_correct_frame_completes_the_allreduce) {
  job *j = &the_job;
  JOIN(j);
  /* What rank 0 sent is what this test assumes about the call: its signature first, then its data. */
  wire_hdr ah = agreement_header();
  ASSERT_EQ(j->agree.magic, ah.magic);
  ASSERT_EQ(j->agree.kind, ah.kind);
  ASSERT_EQ(j->agree.coll, ah.coll);
  ASSERT_EQ(j->agree.dtype, ah.dtype);
  ASSERT_EQ(j->agree.op, ah.op);
  ASSERT_EQ(j->agree.seq, ah.seq);
  ASSERT_EQ(j->agree.root, ah.root);
  ASSERT_EQ(j->agree.algo, ah.algo);
  ASSERT_EQ(j->agree.count, ah.count);
  uint8_t want_sig[SIG_BYTES];
  encode_signature(0, 1, 0, 0, 2, -1, COUNT, want_sig);
  memcpy(j->agree_payload + 12, want_sig + 12, 4); /* padding: not compared, whatever it holds */
  ASSERT_TRUE(memcmp(j->agree_payload, want_sig, SIG_BYTES) == 0);
  ASSERT_EQ(j->first.magic, FRAME_MAGIC);
  ASSERT_EQ(j->first.kind, KIND_DATA);
  ASSERT_EQ(j->first.coll, 1);
  ASSERT_EQ(j->first.dtype, 0);
  ASSERT_EQ(j->first.op, 0);
  ASSERT_EQ(j->first.seq, 0);
  ASSERT_EQ(j->first.root, -1);
  ASSERT_EQ(j->first.algo, 2);
  ASSERT_EQ(j->first.count, COUNT);
  for (int i = 0; i < COUNT; i++)
    ASSERT_TRUE(j->first_payload[i] == RANK0_VALUE);
  wire_hdr h = matching_header();
  float payload[COUNT];
  for (int i = 0; i < COUNT; i++)
    payload[i] = RANK1_VALUE;
  int sent = send_header(j->fd, &h) == 0 && send_bytes(j->fd, payload, sizeof payload) == 0;
  finish(j);
  ASSERT_TRUE(sent);
  ASSERT_TRUE(j->have);
  ASSERT_EQ(j->status, COHORT_OK);
  ASSERT_TRUE(j->value == RANK0_VALUE + RANK1_VALUE);
  ASSERT_TRUE(j->uniform);
}

/* Sends hdr (and no payload); rank 0 must fail with want, name rank 1 and the detail, and send us an ABORT. */
static void expect_rejected(const wire_hdr *hdr, cohort_status want, const char *detail) {
  job *j = &the_job;
  JOIN(j);
  int sent = send_header(j->fd, hdr) == 0;
  int abort_status = read_abort_status(j->fd);
  finish(j);
  ASSERT_TRUE(sent);
  ASSERT_TRUE(j->have);
  ASSERT_STATUS((cohort_status)j->status, want);
  ASSERT_CONTAINS(j->msg, "rank 1");
  ASSERT_CONTAINS(j->msg, detail);
  ASSERT_EQ(abort_status, want);
}

TEST(bad_magic_is_a_protocol_error) {
  wire_hdr h = matching_header();
  h.magic = 0xdeadbeefu;
  expect_rejected(&h, COHORT_ERR_PROTOCOL, "bad magic 0xdeadbeef");
}

TEST(unknown_kind_is_a_protocol_error) {
  wire_hdr h = matching_header();
  h.kind = 7;
  expect_rejected(&h, COHORT_ERR_PROTOCOL, "kind 7");
}

TEST(frame_of_an_earlier_call_is_a_protocol_error) {
  wire_hdr h = matching_header();
  h.seq = 0xffffffffu;
  expect_rejected(&h, COHORT_ERR_PROTOCOL, "call #4294967295 during call #0");
}

TEST(abort_frame_too_short_for_its_status_is_a_protocol_error) {
  wire_hdr h = {.magic = FRAME_MAGIC, .kind = KIND_ABORT, .bytes = 2};
  expect_rejected(&h, COHORT_ERR_PROTOCOL, "malformed abort frame");
}

TEST(huge_payload_length_is_a_protocol_error_without_allocating) {
  wire_hdr h = matching_header();
  h.bytes = 1ull << 50;
  expect_rejected(&h, COHORT_ERR_PROTOCOL, "1125899906842624 bytes");
}

TEST(early_frame_larger_than_its_call_is_refused_before_allocating) {
  /* A frame of the next call is kept in memory until its receive is posted: its size must be bounded by its call's
   * own count before anything is allocated for it. */
  wire_hdr h = matching_header();
  h.seq = 1;
  h.bytes = 1ull << 33;
  expect_rejected(&h, COHORT_ERR_PROTOCOL, "8589934592 bytes for a call of 1000 elements");
}

TEST(frame_of_another_call_is_a_mismatch) {
  wire_hdr h = matching_header();
  h.count = COUNT - 1;
  h.bytes = (COUNT - 1) * sizeof(float);
  expect_rejected(&h, COHORT_ERR_MISMATCH, "count=999");
  ASSERT_CONTAINS(the_job.msg, "count=1000");
}

/* Sends the first n bytes of a correct frame and closes: rank 0 must report rank 1 gone within a second. */
static void expect_truncation_reported(size_t n) {
  job *j = &the_job;
  JOIN(j);
  uint8_t frame[HDR_BYTES + COUNT * sizeof(float)];
  wire_hdr h = matching_header();
  encode(&h, frame);
  for (int i = 0; i < COUNT; i++)
    memcpy(frame + HDR_BYTES + i * sizeof(float), &(float){RANK1_VALUE}, sizeof(float));
  int sent = send_bytes(j->fd, frame, n) == 0;
  usleep(20000); /* let rank 0 take the partial frame in before the close */
  double closed_at = cohort__now_s();
  close(j->fd);
  j->fd = -1;
  finish(j);
  ASSERT_TRUE(sent);
  ASSERT_TRUE(j->have);
  ASSERT_STATUS((cohort_status)j->status, COHORT_ERR_REMOTE);
  ASSERT_CONTAINS(j->msg, "rank 1");
  ASSERT_CONTAINS(j->msg, "closed its connection");
  fprintf(stderr, "  reported %.3f s after the close\n", j->t - closed_at);
  ASSERT_TRUE(j->t - closed_at < 1.0);
}

TEST(truncated_payload_then_close_is_reported_within_a_second) { expect_truncation_reported(HDR_BYTES + 100); }

TEST(truncated_header_then_close_is_reported_within_a_second) { expect_truncation_reported(20); }

TEST(other_signature_is_refused_before_data_moves_without_an_abort) {
  job *j = &the_job;
  const char *step = join_as_rank1_claiming(j, COUNT - 1);
  if (step) {
    finish(j);
    TEST_FAIL_("joining as rank 1 failed at: %s (%s)", step, cohort_last_error());
  }
  ASSERT_EQ(j->first.count, COUNT); /* rank 0's vector came along, in a frame of its own call */
  /* Our signature names an rd allreduce too, so rank 0 reads our vector along (and drops it): send it. */
  wire_hdr ours = matching_header();
  ours.count = COUNT - 1;
  ours.bytes = (COUNT - 1) * sizeof(float);
  float payload[COUNT - 1];
  for (int i = 0; i < COUNT - 1; i++)
    payload[i] = RANK1_VALUE;
  ASSERT_TRUE(send_header(j->fd, &ours) == 0 && send_bytes(j->fd, payload, sizeof payload) == 0);
  /* Rank 0 refuses the call and ends (its child runs one call): its link closes with nothing more on it. */
  wire_hdr h;
  int more = read_frame_header(j->fd, &h) == 0;
  finish(j);
  ASSERT_TRUE(!more);
  ASSERT_TRUE(j->have);
  ASSERT_STATUS((cohort_status)j->status, COHORT_ERR_MISMATCH);
  ASSERT_CONTAINS(j->msg, "rank 0 called allreduce(count=1000, f32, sum, rd) [call #0] but rank 1 called "
                          "allreduce(count=999, f32, sum, rd)");
  ASSERT_CONTAINS(j->msg, "before any data moved");
  ASSERT_TRUE(j->value == RANK0_VALUE); /* its buffer untouched */
}

int main(int argc, char **argv) {
  self_path = argv[0];
  if (argc >= 2 && !strcmp(argv[1], "--child")) return child();
  signal(SIGPIPE, SIG_IGN);
  static const cohort_test_case cases[] = {
      TEST_CASE(control_a_correct_frame_completes_the_allreduce),
      TEST_CASE(bad_magic_is_a_protocol_error),
      TEST_CASE(unknown_kind_is_a_protocol_error),
      TEST_CASE(frame_of_an_earlier_call_is_a_protocol_error),
      TEST_CASE(abort_frame_too_short_for_its_status_is_a_protocol_error),
      TEST_CASE(huge_payload_length_is_a_protocol_error_without_allocating),
      TEST_CASE(early_frame_larger_than_its_call_is_refused_before_allocating),
      TEST_CASE(frame_of_another_call_is_a_mismatch),
      TEST_CASE(truncated_payload_then_close_is_reported_within_a_second),
      TEST_CASE(truncated_header_then_close_is_reported_within_a_second),
      TEST_CASE(other_signature_is_refused_before_data_moves_without_an_abort),
  };
  return cohort_test_run(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}
