/*
 * test_shm_fault.c: failures between real processes over the shared-memory transport (COHORT_TRANSPORT=shm).
 *
 * The parent plays the launcher, as in test_comm_fault.c: it serves the store, starts each rank as a child (this
 * binary with --child MODE and the torchrun environment) and reads one RESULT line from each; cohortrun would stop
 * the survivors, and here we want to see what they report. Every child also says which transport it got and how
 * many /dev/shm entries of its own it still sees after cohort_init (the segments must be unlinked by then). After
 * every job the parent checks that /dev/shm holds no entry of any of the job's processes.
 *
 *   killed_peer     rank 1 SIGKILLs itself during allreduce: every survivor gets COHORT_ERR_REMOTE naming rank 1
 *                   within 2 s of the kill; once during the node allreduce of 1 MiB (chunked; survivors wait on a
 *                   flag of rank 1's), once during its small-message path (killed_small, 4 KB), once on buffers
 *                   from cohort_alloc (killed_zc: zero copy; on one host the push), killed from a thread mid-call.
 *   mismatch_count  rank 2 allreduces half the count: every rank gets COHORT_ERR_MISMATCH naming both counts (large
 *                   and small node allreduce).
 *   mismatch_coll   rank 2 broadcasts while the others run the node allreduce: MISMATCH on every rank, whichever
 *                   side (flags or rings) each waits on.
 *   exact(_zc)      the node allreduce over every dtype and op, sizes around the small-path limit and the chunk
 *                   size, in place and not: every rank's result must be bitwise the reference (the inputs of all
 *                   ranks regenerated locally and combined in rank order), hence bitwise the same on all ranks;
 *                   also with buffers from cohort_alloc (zero copy; on all ranks, on some, and with an arena
 *                   too small, where it falls back to malloc).
 *   auto            COHORT_TRANSPORT=auto picks shm for ranks on one host and tcp for ranks with different
 *                   COHORT_NODE_ID.
 *   abort           rank 2 calls cohort_comm_abort(): the others get COHORT_ERR_REMOTE with its reason.
 *   silent_peer     rank 1 stops (SIGSTOP) during broadcasts from it: both survivors time out after COHORT_OP_TIMEOUT
 *                   naming it.
 *   small_rings     a clean job with 300-byte rings and 1000-byte segments: frames and headers wrap around the ring
 *                   all the time; the allreduced values are checked.
 *   another host    the parent publishes a rank 1 from a foreign host: rank 0 refuses shm (COHORT_ERR_INVALID).
 *
 * Hierarchical allreduce (src/coll/hier.c): TEST_RANKS_PER_NODE=k gives rank r COHORT_NODE_ID=sim<r / k>, so that
 * COHORT_TRANSPORT=auto makes a layered transport ("tcp+shm": TCP across the simulated nodes, shm within each).
 *   hier_killed     rank TEST_VICTIM (one of each node in turn) SIGKILLs itself during allreduce, large, small and
 *                   zero copy: every survivor, on its node or the other, gets COHORT_ERR_REMOTE naming it within 2 s.
 *   hier_exact      every dtype and op on 2 nodes x 2 ranks: bitwise the reference combined as the algorithm does,
 *                   (r0 op r1) op (r2 op r3), then AVG divided by 4; and bitwise the same on every rank (3 x 2);
 *                   also on cohort_alloc buffers (hier_exact_zc, and _mixed: one rank per node zero copy).
 *   mismatches      counts that differ between the nodes, or within one, or the algorithm (one node forces the flat
 *                   ring): COHORT_ERR_MISMATCH everywhere, at once.
 *   node_setup      rank 3's COHORT_SHM_CHUNK_BYTES differs from rank 2's (node 1): cohort_init fails on all four
 *                   ranks with the same status, naming ranks 2 and 3.
 *   knobs           node 1's COHORT_SHM_CHUNK_BYTES or COHORT_SMALL_BYTES differs from node 0's: cohort_init fails on
 *                   every rank, naming the knob and both values.
 *   transport       rank 3 runs COHORT_TRANSPORT=tcp (then shm), the others auto: every rank fails cohort_init at once,
 * naming the rank and the transport it runs. destroyed_peer  rank 1 destroys its communicator and lives on while the
 * others allreduce: rank 0, waiting on its shm flags, hears of it through TCP (rank 3's abort) within 2 s.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll/coll.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/reduce.h"
#include "store/store.h"
#include "test.h"
#include "transport/shm.h"

#define SECRET "0123456789abcdef0123456789abcdef"
#define MAX_RANKS 8

static const char *self_path;

/* /dev/shm entries made by process pid (the transport names them /cohort-shm-<pid>-<random>). */
static int shm_entries_of(int pid) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "cohort-shm-%d-", pid);
  DIR *d = opendir("/dev/shm");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

/* ---------------- children ---------------- */

static void result(int rank, cohort_status st, const char *transport, int leftover, const char *msg) {
  printf("RESULT rank=%d status=%d t=%.6f transport=%s leftover=%d msg=%s\n", rank, (int)st, cohort__now_s(), transport,
         leftover, msg ? msg : "");
  fflush(stdout);
}

/* Rank r's element i of a test vector: small values, so that sums and products stay exact in integers and vary in
 * the low bits of floats. */
static double input(int r, size_t i, cohort_op op) {
  uint64_t h = (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  if (op == COHORT_PROD) return (double)(h % 3) + 1; /* no overflow to infinities */
  return (double)(int)(h % 2001) / 37.0 - 27.0;
}

static void fill(void *buf, size_t n, cohort_dtype d, int r, cohort_op op) {
  for (size_t i = 0; i < n; i++) {
    double v = input(r, i, op);
    switch (d) {
    case COHORT_F32:
      ((float *)buf)[i] = (float)v;
      break;
    case COHORT_F64:
      ((double *)buf)[i] = v;
      break;
    case COHORT_F16:
      ((uint16_t *)buf)[i] = cohort__f32_to_f16((float)v);
      break;
    case COHORT_BF16:
      ((uint16_t *)buf)[i] = cohort__f32_to_bf16((float)v);
      break;
    case COHORT_I32:
      ((int32_t *)buf)[i] = (int32_t)(v * 37);
      break;
    case COHORT_I64:
      ((int64_t *)buf)[i] = (int64_t)(v * 37);
      break;
    case COHORT_I16:
      ((int16_t *)buf)[i] = (int16_t)(v * 37);
      break;
    case COHORT_I8:
      ((int8_t *)buf)[i] = (int8_t)((int)(v * 37) % 100);
      break;
    case COHORT_BOOL:
      ((uint8_t *)buf)[i] = (uint8_t)((int)(v * 37) & 1);
      break;
    default:
      ((uint8_t *)buf)[i] = (uint8_t)((int)(v * 37) & 0xff);
      break;
    }
  }
}

/* A test buffer from the arena (cohort_alloc: zero copy where the transport has one) or from malloc. */
static void *buffer(cohort_comm *c, int arena, size_t bytes) { return arena ? cohort_alloc(c, bytes) : malloc(bytes); }

/* TEST_EXPECT_ARENA=1 (or 0): a buffer asked of cohort_alloc must (must not) lie in the shared arena, so that a
 * zero-copy test cannot pass on the staged path after a silent fallback to malloc, nor a fallback test in the arena.
 * Unset: no check. */
static cohort_status arena_as_expected(cohort_comm *c, const void *p, size_t bytes) {
  const char *expect = getenv("TEST_EXPECT_ARENA");
  if (!expect) return COHORT_OK;
  int in = cohort_in_arena(c, p, bytes);
  if (in == atoi(expect)) return COHORT_OK;
  return cohort__error(COHORT_ERR_INTERNAL, "a %zu-byte buffer from cohort_alloc lies %s the shared arena", bytes,
                       in ? "in" : "outside");
}

static void release(cohort_comm *c, int arena, void *p) {
  if (arena)
    cohort_free(c, p);
  else
    free(p);
}

/* The (dtype, op) pairs the library takes: the bitwise ops for the integer dtypes and bool only, and no AVG of bool. */
static int op_applies(cohort_dtype d, cohort_op op) {
  int is_float = d == COHORT_F32 || d == COHORT_F64 || d == COHORT_F16 || d == COHORT_BF16;
  if (op >= COHORT_BAND && is_float) return 0;
  return !(op == COHORT_AVG && d == COHORT_BOOL);
}

/* Every dtype and op, sizes around the small-path limit (64 KiB) and the chunk (COHORT_SHM_CHUNK_BYTES), against a
 * reference made here from every rank's input combined in rank order. Bitwise. */
static cohort_status exact(cohort_comm *c, int zero_copy) {
  int size = cohort_size(c), rank = cohort_rank(c);
  static const size_t counts[] = {0, 1, 31, 16383, 16384, 16385, 65536 + 7, 300001};
  size_t max = 300001 * 8;
  char *in = buffer(c, zero_copy, max), *out = buffer(c, zero_copy, max), *want = malloc(max), *other = malloc(max);
  cohort_status st = zero_copy ? arena_as_expected(c, in, max) : COHORT_OK;
  if (st == COHORT_OK && zero_copy) st = arena_as_expected(c, out, max);
  for (int d = 0; d < COHORT_DTYPE_COUNT && st == COHORT_OK; d++)
    for (int op = 0; op < COHORT_OP_COUNT && st == COHORT_OK; op++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0] && st == COHORT_OK; k++) {
        size_t n = counts[k], es = cohort_dtype_size((cohort_dtype)d);
        if (!op_applies((cohort_dtype)d, (cohort_op)op)) continue;
        if (d != COHORT_F32 && n > 70000 && op != COHORT_SUM) continue; /* keep it fast: the big ones once */
        int in_place = (int)(k % 2);
        fill(want, n, (cohort_dtype)d, 0, (cohort_op)op);
        for (int r = 1; r < size; r++) {
          fill(other, n, (cohort_dtype)d, r, (cohort_op)op);
          cohort__reduce(want, want, other, n, (cohort_dtype)d, (cohort_op)op);
        }
        if (op == COHORT_AVG) cohort__reduce_avg(want, n, (cohort_dtype)d, size);
        fill(in, n, (cohort_dtype)d, rank, (cohort_op)op);
        memset(out, 0xa5, n * es);
        st = cohort_allreduce(c, in, in_place ? in : out, n, (cohort_dtype)d, (cohort_op)op);
        const char *got = in_place ? in : out;
        if (st == COHORT_OK && n && memcmp(got, want, n * es) != 0) {
          size_t i = 0;
          while (memcmp(got + i * es, want + i * es, es) == 0)
            i++;
          st = cohort__error(COHORT_ERR_INTERNAL,
                             "allreduce(count=%zu, %s, %s%s): element %zu differs from the "
                             "reference",
                             n, cohort_dtype_name((cohort_dtype)d), cohort_op_name((cohort_op)op),
                             in_place ? ", in place" : "", i);
        }
      }
  release(c, zero_copy, in);
  release(c, zero_copy, out);
  free(want);
  free(other);
  return st;
}

/* 64-bit FNV-1a of a result, to compare results between ranks. */
static uint64_t fnv(const void *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
  return h;
}

/* The hierarchical allreduce over every dtype and op: every rank's result bitwise the same (hashes allgathered); on
 * 2 nodes x 2 ranks also bitwise the reference combined in the algorithm's order: each node's ranks in rank order,
 * then the two nodes' sums (a op b is b op a, bitwise, for every op), AVG divided once by the world size. */
static cohort_status hier_exact(cohort_comm *c, int zero_copy) {
  int size = cohort_size(c), rank = cohort_rank(c);
  static const size_t counts[] = {0, 1, 31, 16385, 65536 + 7, 300001};
  size_t max = 300001 * 8;
  char *in = buffer(c, zero_copy, max), *out = buffer(c, zero_copy, max);
  char *want = malloc(max), *node1 = malloc(max), *other = malloc(max);
  uint64_t *hashes = malloc((size_t)size * sizeof *hashes);
  cohort_status st = zero_copy ? arena_as_expected(c, in, max) : COHORT_OK;
  if (st == COHORT_OK && zero_copy) st = arena_as_expected(c, out, max);
  for (int d = 0; d < COHORT_DTYPE_COUNT && st == COHORT_OK; d++)
    for (int op = 0; op < COHORT_OP_COUNT && st == COHORT_OK; op++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0] && st == COHORT_OK; k++) {
        size_t n = counts[k], es = cohort_dtype_size((cohort_dtype)d);
        if (!op_applies((cohort_dtype)d, (cohort_op)op)) continue;
        if (d != COHORT_F32 && n > 70000 && op != COHORT_SUM) continue; /* keep it fast: the big ones once */
        int in_place = (int)(k % 2);
        if (size == 4) {
          fill(want, n, (cohort_dtype)d, 0, (cohort_op)op);
          fill(other, n, (cohort_dtype)d, 1, (cohort_op)op);
          cohort__reduce(want, want, other, n, (cohort_dtype)d, (cohort_op)op);
          fill(node1, n, (cohort_dtype)d, 2, (cohort_op)op);
          fill(other, n, (cohort_dtype)d, 3, (cohort_op)op);
          cohort__reduce(node1, node1, other, n, (cohort_dtype)d, (cohort_op)op);
          cohort__reduce(want, want, node1, n, (cohort_dtype)d, (cohort_op)op);
          if (op == COHORT_AVG) cohort__reduce_avg(want, n, (cohort_dtype)d, size);
        }
        fill(in, n, (cohort_dtype)d, rank, (cohort_op)op);
        memset(out, 0xa5, n * es);
        st = cohort_allreduce(c, in, in_place ? in : out, n, (cohort_dtype)d, (cohort_op)op);
        const char *got = in_place ? in : out;
        uint64_t h = fnv(got, n * es);
        if (st == COHORT_OK) st = cohort_allgather(c, &h, hashes, 1, COHORT_I64);
        for (int r = 0; r < size && st == COHORT_OK; r++)
          if (hashes[r] != h)
            st = cohort__error(COHORT_ERR_INTERNAL,
                               "allreduce(count=%zu, %s, %s): rank %d's result differs from rank %d's", n,
                               cohort_dtype_name((cohort_dtype)d), cohort_op_name((cohort_op)op), r, rank);
        if (st == COHORT_OK && size == 4 && n && memcmp(got, want, n * es) != 0)
          st = cohort__error(COHORT_ERR_INTERNAL, "allreduce(count=%zu, %s, %s%s) differs from the reference", n,
                             cohort_dtype_name((cohort_dtype)d), cohort_op_name((cohort_op)op),
                             in_place ? ", in place" : "");
      }
  release(c, zero_copy, in);
  release(c, zero_copy, out);
  free(want);
  free(node1);
  free(other);
  free(hashes);
  return st;
}

static void *kill_me_soon(void *arg) {
  (void)arg;
  usleep(50000);
  printf("KILLED t=%.6f\n", cohort__now_s());
  fflush(stdout);
  raise(SIGKILL);
  return NULL;
}

/* arena_outlives: a block of the arena that is still allocated when the communicator is destroyed stays mapped and
 * keeps its contents (torch's tensors outlive their process group: python/torch_ext/shared_alloc.cpp), and
 * cohort_arena_range says where the arena lies; madvise(MADV_REMOVE) then gives the block's pages back (zeros). */
static int arena_outlives(cohort_comm *c, int rank, int leftover) {
  size_t n = 1 << 18, bytes = n * sizeof(float);
  float *buf = cohort_alloc(c, bytes);
  void *base = NULL;
  size_t arena_bytes = 0;
  cohort_status st = COHORT_OK;
  if (!cohort_arena_range(c, &base, &arena_bytes) || (char *)buf < (char *)base ||
      (char *)buf + bytes > (char *)base + arena_bytes || !cohort_in_arena(c, buf, bytes))
    st = cohort__error(COHORT_ERR_INTERNAL, "block %p not within the arena's range %p + %zu", (void *)buf, base,
                       arena_bytes);
  for (size_t i = 0; i < n; i++)
    buf[i] = (float)(rank + 1);
  if (st == COHORT_OK) st = cohort_allreduce(c, buf, buf, n, COHORT_F32, COHORT_SUM); /* zero copy */
  char transport[32];
  snprintf(transport, sizeof transport, "%s", cohort_transport_name(c));
  float want = (float)(cohort_size(c) * (cohort_size(c) + 1) / 2);
  if (st == COHORT_OK) st = cohort_barrier(c); /* nobody reads buf in place any more */
  cohort_comm_destroy(c);
  for (size_t i = 0; i < n && st == COHORT_OK; i++) /* a fault here (the arena unmapped) kills the rank */
    if (buf[i] != want)
      st = cohort__error(COHORT_ERR_INTERNAL, "after destroy: element %zu is %g, expected %g", i, buf[i], want);
  buf[n - 1] = -1.0f; /* still writable */
  if (st == COHORT_OK && madvise(buf, bytes, MADV_REMOVE) != 0)
    st = cohort__error(COHORT_ERR_SYSTEM, "madvise(MADV_REMOVE) of the block: %s", strerror(errno));
  if (st == COHORT_OK && (buf[0] != 0.0f || buf[n - 1] != 0.0f))
    st = cohort__error(COHORT_ERR_INTERNAL, "after MADV_REMOVE the block reads %g, not 0", buf[0]);
  result(rank, st, transport, leftover, st == COHORT_OK ? "" : cohort_last_error());
  return 0;
}

static int child(const char *mode) {
  int rank = atoi(getenv("RANK"));
  const char *per_node = getenv("TEST_RANKS_PER_NODE"), *victim_env = getenv("TEST_VICTIM");
  int victim = victim_env ? atoi(victim_env) : 1;
  if (per_node) {
    char node[32];
    snprintf(node, sizeof node, "sim%d", rank / atoi(per_node));
    setenv("COHORT_NODE_ID", node, 1);
  }
  /* Node 1's two ranks disagree on the staging size (rank 3 differs): its shm setup fails. */
  if (!strcmp(mode, "node_setup_fails") && rank == 3) setenv("COHORT_SHM_CHUNK_BYTES", "131072", 1);
  /* Node 1 cuts the vector into other chunks, or picks the algorithm across nodes by another size, than node 0. */
  if (!strcmp(mode, "node_chunk_differs") && rank >= 2) setenv("COHORT_SHM_CHUNK_BYTES", "131072", 1);
  if (!strcmp(mode, "node_small_differs") && rank >= 2) setenv("COHORT_SMALL_BYTES", "0", 1);
  /* Rank 3 alone asks for plain TCP while the others leave COHORT_TRANSPORT=auto. */
  if (!strcmp(mode, "transport_differs") && rank == 3) setenv("COHORT_TRANSPORT", "tcp", 1);
  if (!strcmp(mode, "transport_differs_shm") && rank == 3) setenv("COHORT_TRANSPORT", "shm", 1);
  /* Node 1 forces the flat ring over the mesh while node 0 runs the hierarchical allreduce. */
  if (!strcmp(mode, "mismatch_node_algo") && rank >= 2) setenv("COHORT_ALGO", "ring", 1);
  cohort_comm *c = NULL;
  cohort_status st = cohort_init(&c);
  if (st != COHORT_OK) {
    result(rank, st, "none", -1, cohort_last_error());
    return 0;
  }
  int leftover = shm_entries_of((int)getpid());
  if (!strcmp(mode, "arena_outlives")) return arena_outlives(c, rank, leftover);
  size_t n = 1 << 18;
  /* killed_zc: the buffer from cohort_alloc on every rank, so that the survivors wait in the zero-copy allreduce. */
  int arena_buf = !strcmp(mode, "small_rings") || !strcmp(mode, "killed_zc");
  float *buf = buffer(c, arena_buf, n * sizeof *buf);
  for (size_t i = 0; i < n; i++)
    buf[i] = (float)(rank + 1);
  if (!strcmp(mode, "killed_zc")) st = arena_as_expected(c, buf, n * sizeof *buf);
  if (!strcmp(mode, "killed_peer") || !strcmp(mode, "killed_small") || !strcmp(mode, "killed_zc") ||
      !strcmp(mode, "silent_peer")) {
    int killed = strcmp(mode, "silent_peer") != 0;
    if (!strcmp(mode, "killed_small")) n = 1000;
    /* killed_zc: the victim dies from another thread 50 ms in, wherever its allreduce is then (most of a call's time
     * is the push, in which the survivors wait on its out flag), not between two calls. */
    pthread_t killer;
    if (!strcmp(mode, "killed_zc") && rank == victim) pthread_create(&killer, NULL, kill_me_soon, NULL);
    for (int it = 0; it < 100000 && st == COHORT_OK; it++) {
      if (rank == victim && it == 20 && strcmp(mode, "killed_zc") != 0) {
        printf("KILLED t=%.6f\n", cohort__now_s());
        fflush(stdout);
        raise(killed ? SIGKILL : SIGSTOP);
      }
      /* A small broadcast from rank 1 goes down a tree in which both other ranks receive from rank 1 itself, so
       * both wait on the silent rank and the timeout must name it on each. */
      st = killed ? cohort_allreduce(c, buf, buf, n, COHORT_F32, COHORT_MAX)
                  : cohort_broadcast(c, buf, 1000, COHORT_F32, 1);
    }
  } else if (!strcmp(mode, "destroyed_peer")) {
    /* The victim leaves after one allreduce: it destroys its communicator (its TCP links close) and lives on. */
    for (int it = 0; it < 2 && st == COHORT_OK; it++) {
      if (rank == victim && it == 1) {
        printf("KILLED t=%.6f\n", cohort__now_s());
        fflush(stdout);
        cohort_comm_destroy(c);
        sleep(60); /* the parent kills it once the others have answered */
        _exit(0);
      }
      st = cohort_allreduce(c, buf, buf, n, COHORT_F32, COHORT_SUM);
    }
  } else if (!strcmp(mode, "mismatch_count")) {
    st = cohort_allreduce(c, buf, buf, rank == 2 ? n / 2 : n, COHORT_F32, COHORT_SUM);
  } else if (!strcmp(mode, "mismatch_small")) {
    st = cohort_allreduce(c, buf, buf, rank == 2 ? 500 : 1000, COHORT_F32, COHORT_SUM);
  } else if (!strcmp(mode, "mismatch_node")) { /* all of node 1 (ranks 2 and 3 of 2 x 2) disagrees with node 0 */
    st = cohort_allreduce(c, buf, buf, rank >= 2 ? n / 2 : n, COHORT_F32, COHORT_SUM);
  } else if (!strcmp(mode, "mismatch_node_small")) {
    st = cohort_allreduce(c, buf, buf, rank >= 2 ? 500 : 1000, COHORT_F32, COHORT_SUM);
  } else if (!strcmp(mode, "node_chunk_differs") || !strcmp(mode, "node_small_differs")) {
    st = cohort_allreduce(c, buf, buf, n, COHORT_F32, COHORT_SUM);
    if (st == COHORT_OK) st = cohort_allreduce(c, buf, buf, 1000, COHORT_F32, COHORT_SUM);
  } else if (!strcmp(mode, "mismatch_node_algo")) {
    st = cohort_allreduce(c, buf, buf, 1000, COHORT_F32, COHORT_SUM);
  } else if (!strcmp(mode, "mismatch_node_op")) {
    st = cohort_allreduce(c, buf, buf, n, COHORT_F32, rank >= 2 ? COHORT_MAX : COHORT_SUM);
  } else if (!strcmp(mode, "mismatch_coll")) {
    st = rank == 2 ? cohort_broadcast(c, buf, n, COHORT_F32, 0)
                   : cohort_allreduce(c, buf, buf, n, COHORT_F32, COHORT_SUM);
  } else if (!strcmp(mode,
                     "mismatch_coll_last")) { /* on 2 x 2: rank 3 waits for rank 2's frames, rank 2 for its flags */
    st = rank == cohort_size(c) - 1 ? cohort_broadcast(c, buf, n, COHORT_F32, 0)
                                    : cohort_allreduce(c, buf, buf, n, COHORT_F32, COHORT_SUM);
  } else if (!strcmp(mode, "exact")) {
    st = exact(c, 0);
  } else if (!strcmp(mode, "hier_exact")) {
    st = hier_exact(c, 0);
  } else if (!strcmp(mode, "hier_exact_zc")) {
    st = hier_exact(c, 1);
  } else if (!strcmp(mode, "hier_exact_zc_mixed")) { /* on each node one rank zero copy, the other staged */
    st = hier_exact(c, rank % 2 == 0);
  } else if (!strcmp(mode, "exact_zc")) {
    st = exact(c, 1);
  } else if (!strcmp(mode, "exact_zc_mixed")) { /* ranks reading each other in place and through staging at once */
    st = exact(c, rank % 2 == 0);
  } else if (!strcmp(mode, "abort")) {
    st = cohort_barrier(c);
    if (rank == 2) {
      cohort_comm_abort(c, "loss became NaN at step 7");
      st = cohort_barrier(c);
    } else if (st == COHORT_OK) {
      st = cohort_allreduce(c, buf, buf, n, COHORT_F32, COHORT_SUM);
    }
  } else if (!strcmp(mode, "small_rings")) {
    int size = cohort_size(c); /* buf is from cohort_alloc: the arena over shm, malloc over tcp */
    for (int it = 0; it < 3 && st == COHORT_OK; it++) {
      for (size_t i = 0; i < n; i++)
        buf[i] = (float)((rank + 1) * (int)(i % 7 + 1));
      st = cohort_allreduce(c, buf, buf, n - (size_t)it * 1001, COHORT_F32, COHORT_SUM);
      for (size_t i = 0; i < n - (size_t)it * 1001 && st == COHORT_OK; i++) {
        float want = (float)(size * (size + 1) / 2 * (int)(i % 7 + 1));
        if (buf[i] != want)
          st = cohort__error(COHORT_ERR_INTERNAL, "iteration %d: element %zu is %g, expected %g", it, i, buf[i], want);
      }
      if (st == COHORT_OK) st = cohort_barrier(c);
    }
  }
  result(rank, st, cohort_transport_name(c), leftover, st == COHORT_OK ? "" : cohort_last_error());
  release(c, arena_buf, buf);
  cohort_comm_destroy(c); /* a survivor must be able to tear down its dead communicator without hanging */
  return 0;
}

/* ---------------- parent ---------------- */

typedef struct job {
  int size;
  pid_t pid[MAX_RANKS];
  FILE *out[MAX_RANKS];
  cohort__store_server *server;
  int port;
  int have[MAX_RANKS];
  int status[MAX_RANKS];
  int leftover[MAX_RANKS];
  double t[MAX_RANKS];
  char transport[MAX_RANKS][16];
  char msg[MAX_RANKS][1024];
  double killed_at;
  int left_in_dev_shm; /* entries of the job's processes still in /dev/shm once they are all gone */
} job;

static void start_rank(job *j, const char *mode, int rank, const char *extra_env) {
  int fds[2];
  if (pipe(fds) != 0) abort();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    char v[64];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", j->size);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", j->port);
    setenv("MASTER_PORT", v, 1);
    setenv("COHORT_SECRET", SECRET, 1);
    setenv("COHORT_LAUNCHER_STORE", "1", 1);
    setenv("COHORT_LOG_LEVEL", "error", 1);
    setenv("COHORT_TRANSPORT", "shm", 1);
    if (extra_env) {
      char buf[256];
      snprintf(buf, sizeof buf, "%s", extra_env);
      for (char *kv = strtok(buf, ";"); kv; kv = strtok(NULL, ";")) {
        char *eq = strchr(kv, '=');
        *eq = '\0';
        setenv(kv, eq + 1, 1);
      }
    }
    execl(self_path, self_path, "--child", mode, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  j->pid[rank] = pid;
  j->out[rank] = fdopen(fds[0], "r");
}

static void collect(job *j) {
  for (int r = 0; r < j->size; r++) {
    char line[2048];
    while (fgets(line, sizeof line, j->out[r])) {
      double t;
      if (sscanf(line, "KILLED t=%lf", &t) == 1) { /* it is dead or stopped: it will say nothing more */
        j->killed_at = t;
        break;
      }
      int rank, st, left;
      char transport[16];
      if (sscanf(line, "RESULT rank=%d status=%d t=%lf transport=%15s leftover=%d", &rank, &st, &t, transport, &left) ==
              5 &&
          rank == r) {
        j->have[r] = 1;
        j->status[r] = st;
        j->t[r] = t;
        j->leftover[r] = left;
        snprintf(j->transport[r], sizeof j->transport[r], "%s", transport);
        char *m = strstr(line, "msg=");
        snprintf(j->msg[r], sizeof j->msg[r], "%s", m ? m + 4 : "");
        j->msg[r][strcspn(j->msg[r], "\n")] = '\0';
        break;
      }
    }
  }
}

static job *run_job(const char *mode, int size, const char *extra_env) {
  static job j;
  memset(&j, 0, sizeof j);
  j.size = size;
  if (cohort__store_server_start("127.0.0.1", 0, SECRET, &j.server) != COHORT_OK) return NULL;
  j.port = cohort__store_server_port(j.server);
  for (int r = 0; r < size; r++)
    start_rank(&j, mode, r, extra_env);
  collect(&j);
  for (int r = 0; r < size; r++) {
    kill(j.pid[r], SIGKILL); /* the stopped or killed rank, and anything left */
    waitpid(j.pid[r], NULL, 0);
    fclose(j.out[r]);
  }
  cohort__store_server_stop(j.server);
  for (int r = 0; r < size; r++)
    j.left_in_dev_shm += shm_entries_of(j.pid[r]);
  for (int r = 0; r < size; r++)
    fprintf(stderr, "  rank %d: have=%d transport=%s leftover=%d status=%s msg=%s\n", r, j.have[r], j.transport[r],
            j.leftover[r], cohort_strerror((cohort_status)j.status[r]), j.msg[r]);
  return &j;
}

/* The transport that the jobs of the current test must run over: shm, or tcp+shm for the hierarchical ones. */
static const char *want_transport = "shm";

/* What every rank that answered must show: it ran over shm, and its segment was unlinked once everyone mapped it. */
static int ran_over_shm(const job *j, int r) {
  return j->have[r] && strcmp(j->transport[r], want_transport) == 0 && j->leftover[r] == 0;
}

static void check_killed(const char *mode, const char *call, const char *env) {
  job *j = run_job(mode, 4, env);
  ASSERT_TRUE(j != NULL);
  ASSERT_TRUE(j->killed_at > 0);
  for (int r = 0; r < 4; r++) {
    if (r == 1) continue;
    ASSERT_TRUE(ran_over_shm(j, r));
    ASSERT_EQ(j->status[r], COHORT_ERR_REMOTE);
    ASSERT_CONTAINS(j->msg[r], "rank 1 died");
    ASSERT_CONTAINS(j->msg[r], call);
    fprintf(stderr, "  rank %d reported it %.3f s after the kill\n", r, j->t[r] - j->killed_at);
    ASSERT_TRUE(j->t[r] - j->killed_at < 2.0);
  }
  ASSERT_EQ(j->left_in_dev_shm, 0);
}

TEST(killed_peer_is_reported_by_every_survivor_within_two_seconds) {
  check_killed("killed_peer", "allreduce(count=262144, f32, max, auto)", NULL);
}

TEST(killed_peer_in_the_small_path_is_reported_within_two_seconds) {
  check_killed("killed_small", "allreduce(count=1000, f32, max, auto)", NULL);
}

/* Every rank's buffer from cohort_alloc: the survivors wait in the zero-copy push, on the victim's out flag, while
 * they read and write its arena, which stays mapped after its death. (On tcp+shm, in hier_killed, there is no push:
 * node peers only read each other's arena.) */
TEST(killed_peer_in_the_zero_copy_allreduce_is_reported_within_two_seconds) {
  check_killed("killed_zc", "allreduce(count=262144, f32, max, auto)", "TEST_EXPECT_ARENA=1");
}

static void check_mismatch(const char *mode, const char *a, const char *b) {
  job *j = run_job(mode, 3, NULL);
  ASSERT_TRUE(j != NULL);
  for (int r = 0; r < 3; r++) {
    ASSERT_TRUE(ran_over_shm(j, r));
    ASSERT_EQ(j->status[r], COHORT_ERR_MISMATCH);
    ASSERT_CONTAINS(j->msg[r], a);
    ASSERT_CONTAINS(j->msg[r], b);
  }
  ASSERT_EQ(j->left_in_dev_shm, 0);
}

TEST(mismatched_counts_fail_on_every_rank) { check_mismatch("mismatch_count", "count=262144", "count=131072"); }

TEST(mismatched_small_counts_fail_on_every_rank) { check_mismatch("mismatch_small", "count=1000", "count=500"); }

TEST(a_broadcast_against_the_node_allreduce_fails_on_every_rank) {
  check_mismatch("mismatch_coll", "allreduce(count=262144, f32, sum, auto) [call #0]", "broadcast(count=262144");
}

static void check_exact(const char *mode, int size, const char *env) {
  job *j = run_job(mode, size, env);
  ASSERT_TRUE(j != NULL);
  for (int r = 0; r < size; r++) {
    ASSERT_TRUE(ran_over_shm(j, r));
    ASSERT_EQ(j->status[r], COHORT_OK);
  }
  ASSERT_EQ(j->left_in_dev_shm, 0);
}

/* Buffers from cohort_alloc: the peers read them in place; on 3 ranks, rank 2's own slice is an operand after
 * ranks 0 and 1 (in place, the result must not overwrite it first). */
TEST(zero_copy_allreduce_is_bitwise_the_reference) {
  check_exact("exact_zc", 2, "COHORT_SHM_CHUNK_BYTES=65536;TEST_EXPECT_ARENA=1");
  check_exact("exact_zc", 3, "COHORT_SHM_CHUNK_BYTES=65536;TEST_EXPECT_ARENA=1");
  check_exact("exact_zc_mixed", 3, "COHORT_SHM_CHUNK_BYTES=65536;TEST_EXPECT_ARENA=1");
  /* An arena too small for the buffers: cohort_alloc falls back to malloc, the staged path runs. */
  check_exact("exact_zc", 2, "COHORT_SHM_ARENA_BYTES=65536;TEST_EXPECT_ARENA=0");
  check_exact("exact_zc", 2, "COHORT_SHM_ARENA_BYTES=0;TEST_EXPECT_ARENA=0");
}

TEST(arena_block_outlives_its_communicator) { check_exact("arena_outlives", 2, ""); }

TEST(node_allreduce_is_bitwise_the_reference_on_every_rank) {
  for (int size = 2; size <= 3; size++) {
    job *j = run_job("exact", size, "COHORT_SHM_CHUNK_BYTES=65536");
    ASSERT_TRUE(j != NULL);
    for (int r = 0; r < size; r++) {
      ASSERT_TRUE(ran_over_shm(j, r));
      ASSERT_EQ(j->status[r], COHORT_OK);
    }
    ASSERT_EQ(j->left_in_dev_shm, 0);
  }
}

/* auto: shared memory between ranks of one host; TCP as soon as one rank's COHORT_NODE_ID differs. */
TEST(auto_transport_follows_the_host_identity) {
  static const char *const node_ids[2][2] = {
      {"COHORT_TRANSPORT=auto", "COHORT_TRANSPORT=auto"},
      {"COHORT_TRANSPORT=auto;COHORT_NODE_ID=a", "COHORT_TRANSPORT=auto;COHORT_NODE_ID=b"}};
  for (int kind = 0; kind < 2; kind++) {
    static job j;
    memset(&j, 0, sizeof j);
    j.size = 2;
    ASSERT_TRUE(cohort__store_server_start("127.0.0.1", 0, SECRET, &j.server) == COHORT_OK);
    j.port = cohort__store_server_port(j.server);
    for (int r = 0; r < 2; r++)
      start_rank(&j, "small_rings", r, node_ids[kind][r]);
    collect(&j);
    for (int r = 0; r < 2; r++) {
      kill(j.pid[r], SIGKILL);
      waitpid(j.pid[r], NULL, 0);
      fclose(j.out[r]);
    }
    cohort__store_server_stop(j.server);
    for (int r = 0; r < 2; r++) {
      fprintf(stderr, "  %s rank %d: transport=%s status=%s msg=%s\n", node_ids[kind][r], r, j.transport[r],
              cohort_strerror((cohort_status)j.status[r]), j.msg[r]);
      ASSERT_TRUE(j.have[r]);
      ASSERT_EQ(j.status[r], COHORT_OK);
      ASSERT_STREQ(j.transport[r], kind == 0 ? "shm" : "tcp");
      ASSERT_EQ(shm_entries_of(j.pid[r]), 0);
    }
  }
}

TEST(abort_reaches_every_rank_with_its_reason) {
  job *j = run_job("abort", 3, NULL);
  ASSERT_TRUE(j != NULL);
  for (int r = 0; r < 3; r++) {
    ASSERT_TRUE(ran_over_shm(j, r));
    ASSERT_EQ(j->status[r], COHORT_ERR_REMOTE);
    ASSERT_CONTAINS(j->msg[r], "rank 2 aborted the job: loss became NaN at step 7");
  }
  ASSERT_EQ(j->left_in_dev_shm, 0);
}

TEST(silent_peer_times_out_naming_it) {
  double t0 = cohort__now_s();
  job *j = run_job("silent_peer", 3, "COHORT_OP_TIMEOUT=2");
  ASSERT_TRUE(j != NULL);
  ASSERT_TRUE(j->killed_at > 0);
  int named = 0;
  for (int r = 0; r < 3; r++) {
    if (r == 1) continue;
    ASSERT_TRUE(ran_over_shm(j, r));
    /* Each survivor times out naming rank 1 (or takes the other's report, which names it too). */
    ASSERT_EQ(j->status[r], COHORT_ERR_TIMEOUT);
    ASSERT_CONTAINS(j->msg[r], "broadcast(count=1000, f32, root=1");
    ASSERT_CONTAINS(j->msg[r], "no progress for 2 s waiting on rank(s) 1 (COHORT_OP_TIMEOUT)");
    named++;
    ASSERT_TRUE(j->t[r] - j->killed_at > 1.9);
    ASSERT_TRUE(j->t[r] - j->killed_at < 4.0);
  }
  ASSERT_EQ(named, 2);
  ASSERT_TRUE(cohort__now_s() - t0 < 15.0);
  ASSERT_EQ(j->left_in_dev_shm, 0);
}

TEST(tiny_rings_wrap_frames_and_headers_correctly) {
  job *j = run_job("small_rings", 3, "COHORT_SHM_RING_BYTES=300;COHORT_SEGMENT_BYTES=1000;COHORT_ALGO=ring");
  ASSERT_TRUE(j != NULL);
  for (int r = 0; r < 3; r++) {
    ASSERT_TRUE(ran_over_shm(j, r));
    ASSERT_EQ(j->status[r], COHORT_OK);
  }
  ASSERT_EQ(j->left_in_dev_shm, 0);
}

/* COHORT_SHM_RING_BYTES=auto: 4 MiB rings up to 9 ranks; from 10 on a rank's rings total at most 32 MiB (whole
 * pages), never less than 256 KiB a ring. 64 ranks used to reserve 63 x 4 MiB each, 15.75 GiB for the host. */
TEST(auto_rings_keep_each_rank_to_32_mib_from_10_ranks_on) {
  ASSERT_EQ(cohort__shm_auto_ring_bytes(1), 4L << 20);
  ASSERT_EQ(cohort__shm_auto_ring_bytes(2), 4L << 20);
  ASSERT_EQ(cohort__shm_auto_ring_bytes(9), 4L << 20);
  for (int n = 10; n <= 129; n++) {
    long ring = cohort__shm_auto_ring_bytes(n);
    ASSERT_TRUE(ring < 4L << 20);
    ASSERT_TRUE(ring >= 256L << 10);
    ASSERT_EQ(ring % 4096, 0);
    ASSERT_TRUE(ring * (n - 1) <= 32L << 20);
    ASSERT_TRUE((ring + 4096) * (n - 1) > 32L << 20 || ring == 256L << 10);
  }
  ASSERT_EQ(cohort__shm_auto_ring_bytes(64), 520L << 10);
  ASSERT_EQ(cohort__shm_auto_ring_bytes(1000), 256L << 10);
}

#define HIER_ENV "COHORT_TRANSPORT=auto;TEST_RANKS_PER_NODE=2"

/* 2 nodes x 2 ranks; rank 1 (node 0) and rank 2 (node 1) killed in turn, in the chunked and the small path. The
 * survivor on the victim's node waits on its shm flags or on TCP, those of the other node on TCP or on their node
 * peer: each must name the victim, whichever transport told it. */
TEST(hier_killed_rank_on_either_node_is_reported_within_two_seconds) {
  want_transport = "tcp+shm";
  static const char *const modes[] = {"killed_peer", "killed_small", "killed_zc"};
  for (int victim = 1; victim <= 2; victim++)
    for (int m = 0; m < 3; m++) {
      char env[128], named[32];
      snprintf(env, sizeof env, "%s;TEST_VICTIM=%d;TEST_EXPECT_ARENA=1", HIER_ENV, victim);
      snprintf(named, sizeof named, "rank %d ", victim);
      job *j = run_job(modes[m], 4, env);
      ASSERT_TRUE(j != NULL);
      ASSERT_TRUE(j->killed_at > 0);
      for (int r = 0; r < 4; r++) {
        if (r == victim) continue;
        ASSERT_TRUE(ran_over_shm(j, r));
        ASSERT_EQ(j->status[r], COHORT_ERR_REMOTE);
        ASSERT_CONTAINS(j->msg[r], named);
        fprintf(stderr, "  rank %d reported it %.3f s after the kill\n", r, j->t[r] - j->killed_at);
        ASSERT_TRUE(j->t[r] - j->killed_at < 2.0);
      }
      ASSERT_EQ(j->left_in_dev_shm, 0);
    }
}

/* Rank 1 destroys its communicator after one allreduce and lives on, while the others run a second one. Rank 3
 * (its peer across) sees its TCP links close; rank 0 waits on its shm flags, which will never move: it must learn
 * of the failure from the TCP side within 2 s, not after COHORT_OP_TIMEOUT. */
TEST(hier_peer_that_left_is_reported_on_its_own_node_too) {
  want_transport = "tcp+shm";
  job *j = run_job("destroyed_peer", 4, HIER_ENV ";COHORT_OP_TIMEOUT=10");
  ASSERT_TRUE(j != NULL);
  ASSERT_TRUE(j->killed_at > 0);
  for (int r = 0; r < 4; r++) {
    if (r == 1) continue;
    ASSERT_TRUE(ran_over_shm(j, r));
    ASSERT_EQ(j->status[r], COHORT_ERR_REMOTE);
    ASSERT_CONTAINS(j->msg[r], "rank 1 ");
    fprintf(stderr, "  rank %d reported it %.3f s after rank 1 left\n", r, j->t[r] - j->killed_at);
    ASSERT_TRUE(j->t[r] - j->killed_at < 2.0);
  }
  ASSERT_EQ(j->left_in_dev_shm, 0);
}

/* The shm setup within node 1 fails (ranks 2 and 3 disagree on COHORT_SHM_CHUNK_BYTES): cohort_init must fail on
 * every rank alike, node 0's too (not hand them a layered transport whose other half is gone), and the message must
 * name the ranks as the job numbers them (2 and 3), not as node 1's shm transport does (0 and 1). */
TEST(hier_node_setup_failure_fails_init_everywhere_naming_job_ranks) {
  job *j = run_job("node_setup_fails", 4, HIER_ENV ";COHORT_TIMEOUT=20");
  ASSERT_TRUE(j != NULL);
  for (int r = 0; r < 4; r++) {
    ASSERT_TRUE(j->have[r]);
    ASSERT_EQ(j->status[r], COHORT_ERR_INVALID);
    ASSERT_CONTAINS(j->msg[r], "shared memory within node 1");
    ASSERT_CONTAINS(j->msg[r], "rank 3 uses 131072");
    ASSERT_CONTAINS(j->msg[r], "rank 2 uses 524288");
    ASSERT_TRUE(j->t[r] > 0);
  }
  ASSERT_EQ(j->left_in_dev_shm, 0);
}

/* The nodes disagree on a knob that shapes the exchange across nodes but is not part of the call stamped on its
 * frames (the chunking of COHORT_SHM_CHUNK_BYTES; the ring/rd choice of COHORT_SMALL_BYTES, under the one
 * algorithm "hier"). cohort_init must refuse it on every rank, naming the knob and both values, rather than let
 * the first allreduce fail with a frame size that blames COHORT_SEGMENT_BYTES. */
TEST(hier_nodes_that_disagree_on_chunk_or_small_bytes_are_refused) {
  static const char *const cases[][3] = {
      {"node_chunk_differs", "COHORT_SHM_CHUNK_BYTES", "uses 131072, rank 0 uses 524288"},
      {"node_small_differs", "COHORT_SMALL_BYTES", "uses 0, rank 0 uses 65536"}};
  for (int k = 0; k < 2; k++) {
    job *j = run_job(cases[k][0], 4, HIER_ENV ";COHORT_TIMEOUT=20");
    ASSERT_TRUE(j != NULL);
    for (int r = 0; r < 4; r++) {
      ASSERT_TRUE(j->have[r]);
      ASSERT_EQ(j->status[r], COHORT_ERR_INVALID);
      ASSERT_CONTAINS(j->msg[r], cases[k][1]);
      ASSERT_CONTAINS(j->msg[r], cases[k][2]);
    }
    ASSERT_EQ(j->left_in_dev_shm, 0);
  }
}

/* Rank 3 runs COHORT_TRANSPORT=tcp (then shm), the others auto: the auto ranks wait for a host identity that rank 3
 * never publishes, rank 3 for addresses (segments) that they publish only after the layout, or never. Every rank must
 * fail cohort_init at once saying that the transports differ (not "rank 3 never arrived" after COHORT_TIMEOUT, 20 s
 * here). */
TEST(ranks_that_disagree_on_the_transport_fail_init_at_once) {
  for (int shm = 0; shm < 2; shm++) { /* rank 3 runs tcp, then shm */
    double t0 = cohort__now_s();
    job *j = run_job(shm ? "transport_differs_shm" : "transport_differs", 4, HIER_ENV ";COHORT_TIMEOUT=20");
    ASSERT_TRUE(j != NULL);
    ASSERT_TRUE(cohort__now_s() - t0 < 5.0);
    for (int r = 0; r < 4; r++) {
      ASSERT_TRUE(j->have[r]);
      ASSERT_EQ(j->status[r], COHORT_ERR_INVALID);
      ASSERT_CONTAINS(j->msg[r], r == 3 ? "rank 0 runs with COHORT_TRANSPORT=auto"
                                 : shm  ? "rank 3 runs with COHORT_TRANSPORT=shm"
                                        : "rank 3 runs with COHORT_TRANSPORT=tcp");
    }
    ASSERT_EQ(j->left_in_dev_shm, 0);
  }
}

TEST(hier_allreduce_is_bitwise_the_same_on_every_rank) {
  want_transport = "tcp+shm";
  check_exact("hier_exact", 4, HIER_ENV ";COHORT_SHM_CHUNK_BYTES=65536");
  check_exact("hier_exact", 6, HIER_ENV ";COHORT_SHM_CHUNK_BYTES=65536");
  check_exact("hier_exact", 4, HIER_ENV ";COHORT_ALGO=hier");
  /* On cohort_alloc buffers (the node's arena): node peers read them in place, on all ranks or on one per node. */
  check_exact("hier_exact_zc", 4, HIER_ENV ";COHORT_SHM_CHUNK_BYTES=65536;TEST_EXPECT_ARENA=1");
  check_exact("hier_exact_zc_mixed", 4, HIER_ENV ";COHORT_SHM_CHUNK_BYTES=65536;TEST_EXPECT_ARENA=1");
  /* Forced on one node (no layers): refused by cohort_init, saying what it needs. */
  job *j = run_job("small_rings", 2, "COHORT_ALGO=hier");
  ASSERT_TRUE(j != NULL);
  for (int r = 0; r < 2; r++) {
    ASSERT_EQ(j->status[r], COHORT_ERR_INVALID);
    ASSERT_CONTAINS(j->msg[r], "COHORT_ALGO=hier: this 2-rank communicator (transport shm) is not layered");
  }
  ASSERT_EQ(j->left_in_dev_shm, 0);
}

/* Rank 2 (node 1) disagrees: its node peer finds out through the flags, node 0 through the frames across. Then the
 * whole of node 1 disagrees with node 0 (count, large and small, or op): only the frames across can tell. */
TEST(hier_mismatched_counts_fail_on_every_rank) {
  want_transport = "tcp+shm";
  static const char *const modes[][3] = {
      {"mismatch_count", "count=262144", "rank 2 called allreduce(count=131072"},
      {"mismatch_small", "count=1000", "rank 2 called allreduce(count=500"},
      {"mismatch_node", "count=262144", "count=131072"},
      {"mismatch_node_small", "count=1000", "count=500"},
      {"mismatch_node_op", "allreduce(count=262144, f32, sum, hier)", "allreduce(count=262144, f32, max, hier)"},
      /* A broadcast against the hierarchical allreduce: rank 2 (node 1) gets frames of the allreduce from rank 0;
       * rank 3 gets none (its broadcast waits on rank 2, which waits on its flags): it must see rank 2's published
       * call, not wait for COHORT_OP_TIMEOUT (10 s here). */
      {"mismatch_coll", "allreduce(count=262144, f32, sum, hier)", "broadcast(count=262144"},
      {"mismatch_coll_last", "allreduce(count=262144, f32, sum, hier)", "broadcast(count=262144"},
      /* Node 1 runs the flat ring (COHORT_ALGO=ring): its frames reach ranks that expect nothing from their sender
       * (rank 3 sends to rank 0, which waits on rank 2); such a frame of this call must be compared at once, not
       * held until COHORT_OP_TIMEOUT (10 s here, the limit below is 5 s). */
      {"mismatch_node_algo", "allreduce(count=1000, f32, sum, hier)", "allreduce(count=1000, f32, sum, ring)"}};
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    double t0 = cohort__now_s();
    job *j = run_job(modes[m][0], 4, HIER_ENV ";COHORT_OP_TIMEOUT=10");
    ASSERT_TRUE(cohort__now_s() - t0 < 5.0);
    ASSERT_TRUE(j != NULL);
    for (int r = 0; r < 4; r++) {
      ASSERT_TRUE(ran_over_shm(j, r));
      ASSERT_EQ(j->status[r], COHORT_ERR_MISMATCH);
      ASSERT_CONTAINS(j->msg[r], modes[m][1]);
      ASSERT_CONTAINS(j->msg[r], modes[m][2]);
    }
    ASSERT_EQ(j->left_in_dev_shm, 0);
  }
}

/* Ranks 0 and 1 of a 3-rank job wait for rank 2, which never comes, and are killed meanwhile (as cohortrun stops a
 * job when another rank failed to start): nothing of theirs may stay in /dev/shm, where a segment would hold its
 * memory until the next reboot. */
TEST(ranks_killed_while_waiting_for_a_peer_leave_nothing_in_dev_shm) {
  static job j;
  memset(&j, 0, sizeof j);
  j.size = 3;
  ASSERT_TRUE(cohort__store_server_start("127.0.0.1", 0, SECRET, &j.server) == COHORT_OK);
  j.port = cohort__store_server_port(j.server);
  for (int r = 0; r < 2; r++)
    start_rank(&j, "small_rings", r, "COHORT_TIMEOUT=30");
  usleep(500000);
  for (int r = 0; r < 2; r++) {
    kill(j.pid[r], SIGKILL);
    waitpid(j.pid[r], NULL, 0);
    fclose(j.out[r]);
  }
  cohort__store_server_stop(j.server);
  for (int r = 0; r < 2; r++)
    ASSERT_EQ(shm_entries_of(j.pid[r]), 0);
}

/* The parent plays rank 1 from another host: it publishes a segment under a foreign host identity. The real rank 0
 * must refuse shm with COHORT_ERR_INVALID naming both hosts, tell the store why, and leave nothing in /dev/shm. */
TEST(a_rank_on_another_host_is_refused) {
  static job j;
  memset(&j, 0, sizeof j);
  j.size = 2;
  ASSERT_TRUE(cohort__store_server_start("127.0.0.1", 0, SECRET, &j.server) == COHORT_OK);
  j.port = cohort__store_server_port(j.server);
  cohort__store *store = NULL;
  ASSERT_OK(cohort__store_connect_tcp("127.0.0.1", j.port, SECRET, 10, &store));
  static const char foreign[] = "4242 /cohort-shm-4242-00000000000000000000000000000000 node-b/0000-boot/pid:[1]";
  ASSERT_OK(cohort__store_set(store, "cohort/shm-host-test/0/0/shm/1", foreign, strlen(foreign)));
  static const char foreign_host[] = "node-b/0000-boot/pid:[1]"; /* its arrival, which comes first */
  ASSERT_OK(cohort__store_set(store, "cohort/shm-host-test/0/0/shm/arrived/1", foreign_host, strlen(foreign_host)));
  start_rank(&j, "small_rings", 0, "COHORT_RUN_ID=shm-host-test;COHORT_TIMEOUT=10");
  j.size = 1; /* only rank 0 runs */
  collect(&j);
  void *why = NULL;
  size_t len = 0;
  cohort_status got_why = cohort__store_get(store, "cohort/shm-host-test/0/0/shm/error", 5, &why, &len);
  kill(j.pid[0], SIGKILL);
  waitpid(j.pid[0], NULL, 0);
  fclose(j.out[0]);
  cohort__store_close(store);
  cohort__store_server_stop(j.server);
  fprintf(stderr, "  rank 0: status=%s msg=%s\n  store: %s\n", cohort_strerror((cohort_status)j.status[0]), j.msg[0],
          why ? (char *)why : "(none)");
  ASSERT_TRUE(j.have[0]);
  ASSERT_EQ(j.status[0], COHORT_ERR_INVALID);
  ASSERT_CONTAINS(j.msg[0], "COHORT_TRANSPORT=shm needs every rank on one host");
  ASSERT_CONTAINS(j.msg[0], "rank 1 on node-b/0000-boot/pid:[1]");
  ASSERT_OK(got_why);
  ASSERT_TRUE(strncmp(why, "1 rank 0: COHORT_TRANSPORT=shm needs", 36) == 0);
  free(why);
  ASSERT_EQ(shm_entries_of(j.pid[0]), 0);
}

int main(int argc, char **argv) {
  self_path = argv[0];
  if (argc >= 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
  signal(SIGPIPE, SIG_IGN);
  static const cohort_test_case cases[] = {
      TEST_CASE(killed_peer_is_reported_by_every_survivor_within_two_seconds),
      TEST_CASE(killed_peer_in_the_small_path_is_reported_within_two_seconds),
      TEST_CASE(killed_peer_in_the_zero_copy_allreduce_is_reported_within_two_seconds),
      TEST_CASE(mismatched_counts_fail_on_every_rank),
      TEST_CASE(mismatched_small_counts_fail_on_every_rank),
      TEST_CASE(a_broadcast_against_the_node_allreduce_fails_on_every_rank),
      TEST_CASE(node_allreduce_is_bitwise_the_reference_on_every_rank),
      TEST_CASE(zero_copy_allreduce_is_bitwise_the_reference),
      TEST_CASE(arena_block_outlives_its_communicator),
      TEST_CASE(auto_transport_follows_the_host_identity),
      TEST_CASE(abort_reaches_every_rank_with_its_reason),
      TEST_CASE(silent_peer_times_out_naming_it),
      TEST_CASE(tiny_rings_wrap_frames_and_headers_correctly),
      TEST_CASE(auto_rings_keep_each_rank_to_32_mib_from_10_ranks_on),
      TEST_CASE(a_rank_on_another_host_is_refused),
      TEST_CASE(ranks_killed_while_waiting_for_a_peer_leave_nothing_in_dev_shm),
      TEST_CASE(hier_killed_rank_on_either_node_is_reported_within_two_seconds),
      TEST_CASE(hier_peer_that_left_is_reported_on_its_own_node_too),
      TEST_CASE(hier_node_setup_failure_fails_init_everywhere_naming_job_ranks),
      TEST_CASE(hier_nodes_that_disagree_on_chunk_or_small_bytes_are_refused),
      TEST_CASE(ranks_that_disagree_on_the_transport_fail_init_at_once),
      TEST_CASE(hier_allreduce_is_bitwise_the_same_on_every_rank),
      TEST_CASE(hier_mismatched_counts_fail_on_every_rank),
  };
  return cohort_test_run(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}
