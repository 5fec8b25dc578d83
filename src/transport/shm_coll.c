/*
 * shm_coll.c: the node allreduce of the shared-memory transport. Every rank of the job maps every other rank's
 * segment, so a rank reads its peers' data where it lies instead of receiving it through a ring.
 *
 * Each segment holds two staging buffers of COHORT_SHM_CHUNK_BYTES (double buffering) and its owner's flags
 * (shm_impl.h: in, out, done, each a cache line of its own with a single writer). Chunks are numbered by a counter
 * k that every rank advances alike, call after call; chunk k uses staging buffer k % 2.
 *
 * Large vectors (more than COHORT_SHM_SMALL_BYTES), chunk by chunk:
 *   1. wait until every peer's done >= k - 2: nobody reads my buffer k % 2 any more;
 *   2. copy my input chunk into it, except my own 1/n slice (nobody else reads it); publish in = k;
 *   3. wait for every peer's in >= k; on a call's first chunk, compare every peer's call with mine (MISMATCH);
 *   4. reduce my slice of the chunk in one pass over all n inputs (operands in rank order: the peers' from their
 *      buffers, mine from sendbuf), piece by piece through a buffer in L1, and write each piece of the result both
 *      into my buffer's slice, which step 2 left free, and into recvbuf; AVG divides here, once; publish out = k
 *      (a hierarchical call reduces into my buffer only, runs its inter-node step there, then copies to recvbuf);
 *   5. copy every other slice into recvbuf as soon as its owner's out >= k; publish done = k.
 * A rank may be a chunk ahead of the slowest (step 1 waits for k - 2, not k - 1): while one copies chunk k out,
 * another may already copy chunk k + 1 in. There is no barrier: each rank waits only on the flags it needs.
 * Each element is computed by one rank and copied by the others, so every rank holds bitwise the same result.
 *
 * Memory traffic per rank, per byte of the vector (n ranks, s = 1/n): copy in (1-s) read + (1-s) write, reduce 1
 * read + 2s write, the others' out (1-s) read + (1-s) write: 5 - 2s bytes (4 for two ranks). Of these, the sendbuf
 * reads (1) and the recvbuf writes (1) go to main memory for large vectors; the staging buffers stay in cache
 * (docs/performance.md derives the limit from this).
 *
 * Small vectors (up to COHORT_SHM_SMALL_BYTES, at most COHORT__SHM_SMALL_BYTES): one chunk; every rank copies its whole
 * input in, publishes in, and, once every peer's in is there, reduces the whole vector itself from all n buffers in
 * rank order (the same operations in the same order everywhere: bitwise the same result), then publishes done. Two flag
 * waits instead of three, and no second round of copies.
 *
 * Zero copy (sendbuf and recvbuf in the rank's arena, cohort_alloc): the rank publishes their offsets with its
 * call and stages nothing; the peers read its input and its slice's result in place. When every rank is zero copy,
 * the first chunk's handshake is followed by push_allreduce() instead: no chunks, no gather.
 *
 * Waiting (cohort__shm_await in shm.c): pause-spin, then yield, then futex sleep; always watching abort slots,
 * interrupts, the liveness of the awaited peer, frames of this call in the rings (a peer in another collective)
 * and COHORT_OP_TIMEOUT.
 *
 * Thread-safety: as transport.h says (one driving thread).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/copy.h"
#include "core/error.h"
#include "core/reduce.h"
#include "transport/shm.h"
#include "transport/shm_impl.h"

enum { FLAG_IN, FLAG_OUT, FLAG_DONE };

static _Atomic uint64_t *flag_of(seg_hdr *s, int which) {
  return which == FLAG_IN ? &s->node.in : which == FLAG_OUT ? &s->node.out : &s->node.done;
}

static seg_hdr *seg_of(shm_transport *t, int q) { return q == t->base.rank ? t->me : t->peers[q].seg; }

static cohort_status wait_all(shm_transport *t, int which, uint64_t want) {
  for (int p = 0; p < t->base.size; p++)
    if (p != t->base.rank) COHORT_CHECK(cohort__shm_await(t, p, flag_of(t->peers[p].seg, which), want));
  return COHORT_OK;
}

/* Publishes our call for the chunk k that starts it (and where our buffers are, zero copy), before its in. */
static void post_call(shm_transport *t, uint64_t k, int64_t zc_in, int64_t zc_out) {
  int b = (int)(k & 1);
  t->me->node.zc_in[b] = zc_in;
  t->me->node.zc_out[b] = zc_out;
  t->me->node.call[b] = t->call;
  atomic_store_explicit(&t->me->node.call_seq[b], t->call.seq + 1, memory_order_release);
}

/* Every peer has published in >= k, the first chunk of our call: its slot for buffer k % 2 holds the call it ran
 * that chunk under, and stays until we publish done = k. Also takes the peers' zero-copy offsets, checked against
 * their arenas (bytes: the vector's size). */
static cohort_status check_calls(shm_transport *t, uint64_t k, size_t bytes) {
  int b = (int)(k & 1);
  for (int p = 0; p < t->base.size; p++) {
    if (p == t->base.rank) continue;
    node_flags *f = &t->peers[p].seg->node;
    uint32_t seq1 = atomic_load_explicit(&f->call_seq[b], memory_order_acquire);
    cohort__call theirs = f->call[b];
    if (seq1 != t->call.seq + 1 || !cohort__call_equal(&theirs, &t->call)) {
      char a[256], c[256];
      cohort__call_describe(&t->call, a, sizeof a);
      cohort__call_describe(&theirs, c, sizeof c);
      return cohort__shm_fail(t, COHORT_ERR_MISMATCH, "ranks disagree: rank %d called %s but rank %d called %s",
                              WORLD(t, t->base.rank), a, WORLD(t, p), c);
    }
    peer *pe = &t->peers[p];
    pe->zc_in = f->zc_in[b];
    pe->zc_out = f->zc_out[b];
    uint64_t arena = pe->seg->arena_bytes;
    for (int i = 0; i < 2; i++) {
      int64_t o = i ? pe->zc_out : pe->zc_in;
      if (o < -1 || (o >= 0 && (bytes > arena || (uint64_t)o > arena - bytes)))
        return cohort__shm_fail(
            t, COHORT_ERR_PROTOCOL,
            "rank %d published a zero-copy buffer at offset %lld of its %llu-byte arena for %zu bytes", WORLD(t, p),
            (long long)o, (unsigned long long)arena, bytes);
    }
  }
  return COHORT_OK;
}

/* Frees staging buffer k % 2 for chunk k (its previous user was chunk k - 2). */
static cohort_status claim(shm_transport *t, uint64_t k) { return k > 2 ? wait_all(t, FLAG_DONE, k - 2) : COHORT_OK; }

/* dst = x[0] op x[1] op ... op x[n-1] over len elements, in rank order. dst may be x[0] or x[1] (the first step
 * reads them before it writes); when it is a later operand the result is built piece by piece in a small buffer. */
static void reduce_ranks(shm_transport *t, void *dst, const void *const *x, size_t len, cohort_dtype dtype,
                         cohort_op op) {
  int n = t->base.size, alias = 0;
  for (int q = 2; q < n; q++)
    alias |= x[q] == dst;
  if (!alias) {
    cohort__reduce(dst, x[0], x[1], len, dtype, op);
    for (int q = 2; q < n; q++)
      cohort__reduce(dst, dst, x[q], len, dtype, op);
    return;
  }
  _Alignas(64) char tmp[8192];
  size_t es = cohort_dtype_size(dtype), piece = sizeof tmp / es;
  for (size_t i = 0; i < len; i += piece) {
    size_t m = len - i < piece ? len - i : piece, o = i * es;
    cohort__reduce(tmp, (const char *)x[0] + o, (const char *)x[1] + o, m, dtype, op);
    for (int q = 2; q < n; q++)
      cohort__reduce(tmp, tmp, (const char *)x[q] + o, m, dtype, op);
    cohort__copy((char *)dst + o, tmp, m * es);
  }
}

/* Staged, my slice: its result goes both into my staging buffer (dst, where the peers copy it from) and into
 * recvbuf (out), piece by piece through a small buffer that stays in L1, instead of into staging and then copied to
 * recvbuf. out may be my input slice (in place): each piece is read before it is written. x_all is the first half of
 * the operands' table; the second half holds a piece's operands. */
static void reduce_twice(shm_transport *t, char *dst, char *out, const void **x_all, size_t len, cohort_dtype dtype,
                         cohort_op op) {
  int n = t->base.size;
  _Alignas(64) char tmp[8192];
  const void **x = x_all + n;
  size_t es = cohort_dtype_size(dtype), piece = sizeof tmp / es;
  for (size_t i = 0; i < len; i += piece) {
    size_t m = len - i < piece ? len - i : piece, o = i * es;
    for (int q = 0; q < n; q++)
      x[q] = (const char *)x_all[q] + o;
    reduce_ranks(t, tmp, x, m, dtype, op);
    if (op == COHORT_AVG) cohort__reduce_avg(tmp, m, dtype, n);
    cohort__copy(dst + o, tmp, m * es);
    cohort__copy(out + o, tmp, m * es);
  }
}

/* The operands' table: n inputs, then n outputs (kept across calls). */
static const void **operands(shm_transport *t) {
  if (!t->operands) t->operands = malloc(2 * (size_t)t->base.size * sizeof *t->operands);
  return t->operands;
}

/* Slice q of a chunk of m elements: whole cache lines, so that the slices' results never share a line. */
static void slice(size_t m, size_t es, int q, int n, size_t *lo, size_t *hi);

/* Zero copy on every rank (chunk k was the handshake: every peer's call and buffers are known). Nothing needs
 * staging and every buffer is mapped everywhere, so each rank reduces its slice of the whole vector, piece by piece
 * through a small buffer, from all n inputs in place, and writes the result into all n recvbufs: 2 bytes moved per
 * byte, whatever n, and no gather. A piece is read from every input before it is written anywhere, so in place is
 * safe (only the slice's owner reads or writes that slice of anyone's buffers). out = k says "I wrote my slice
 * everywhere and read nothing more of yours"; once every peer's out is there, the call is over for us. */
static cohort_status push_allreduce(shm_transport *t, const char *in, char *out, size_t count, cohort_dtype dtype,
                                    cohort_op op, uint64_t k) {
  int n = t->base.size, r = t->base.rank;
  size_t es = cohort_dtype_size(dtype), lo, hi;
  const void **x = operands(t);
  char **dst = (char **)(x + n);
  slice(count, es, r, n, &lo, &hi);
  _Alignas(64) char tmp[16384];
  size_t piece = sizeof tmp / es;
  for (size_t i = lo; i < hi; i += piece) {
    size_t m = hi - i < piece ? hi - i : piece;
    for (int q = 0; q < n; q++) {
      peer *pe = &t->peers[q];
      x[q] = q == r ? in + i * es : cohort__shm_arena(pe->seg) + pe->zc_in + i * es;
      dst[q] = q == r ? out + i * es : cohort__shm_arena(pe->seg) + pe->zc_out + i * es;
    }
    reduce_ranks(t, tmp, x, m, dtype, op);
    if (op == COHORT_AVG) cohort__reduce_avg(tmp, m, dtype, n);
    for (int q = 0; q < n; q++)
      cohort__copy(dst[q], tmp, m * es);
  }
  cohort__shm_publish(t, &t->me->node.out, k);
  COHORT_CHECK(wait_all(t, FLAG_OUT, k));
  cohort__shm_publish(t, &t->me->node.done, k);
  return COHORT_OK;
}

static int all_zero_copy(shm_transport *t) {
  for (int p = 0; p < t->base.size; p++)
    if (p != t->base.rank && (t->peers[p].zc_in < 0 || t->peers[p].zc_out < 0)) return 0;
  return 1;
}

static cohort_status small_allreduce(shm_transport *t, const void *sendbuf, void *recvbuf, size_t count,
                                     cohort_dtype dtype, cohort_op op, cohort__slice_fn complete, void *arg) {
  size_t bytes = count * cohort_dtype_size(dtype);
  uint64_t k = ++t->node_k;
  int b = (int)(k & 1);
  const void **x = operands(t);
  if (!x) return cohort__shm_fail(t, COHORT_ERR_SYSTEM, "out of memory");
  if (t->staged) { /* the agreement staged every rank's input and compared the calls: reduce at once */
    t->staged = 0;
  } else {
    COHORT_CHECK(claim(t, k));
    post_call(t, k, -1, -1);
    if (bytes) cohort__copy(cohort__shm_stage(t->me, b), sendbuf, bytes);
    cohort__shm_publish(t, &t->me->node.in, k);
    COHORT_CHECK(wait_all(t, FLAG_IN, k));
    COHORT_CHECK(check_calls(t, k, bytes));
  }
  if (count) {
    for (int q = 0; q < t->base.size; q++)
      x[q] = cohort__shm_stage(seg_of(t, q), b);
    reduce_ranks(t, recvbuf, x, count, dtype, op);
    if (op == COHORT_AVG && !complete) cohort__reduce_avg(recvbuf, count, dtype, t->base.size);
  }
  /* Done before completing: we read nothing more of the peers' buffers, and they need not wait for our network. */
  cohort__shm_publish(t, &t->me->node.done, k);
  if (complete) COHORT_CHECK(complete(arg, recvbuf, 0, count));
  return COHORT_OK;
}

_Static_assert(COHORT__SHM_SMALL_BYTES <= COHORT__AGREE_STAGE_MAX,
               "a rank in cohort_join stages COHORT__AGREE_STAGE_MAX zeros: as many as any small node allreduce");

/* One round of flags: our signature into our slot, then every peer's from theirs. A small node allreduce that is to
 * follow stages its input first (into the buffer of chunk node_k + 1, claimed as small_allreduce would), so that
 * once the ranks agree it reduces at once: the agreement and the node allreduce's own round are one. Refused, the
 * staged bytes are never read and the chunk number was not taken: the next agreement starts afresh. */
cohort_status cohort__shm_agree(cohort__transport *base, const void *mine, size_t bytes, void *all, const void *stage,
                                size_t stage_bytes) {
  shm_transport *t = (shm_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  if (bytes > COHORT__AGREE_MAX)
    return cohort__shm_fail(t, COHORT_ERR_INTERNAL, "a %zu-byte signature (at most %d)", bytes, COHORT__AGREE_MAX);
  int n = t->base.size, r = t->base.rank;
  uint64_t k = ++t->agree_k;
  t->staged = 0;
  /* A joined rank's zeros: as many as the largest input the others stage (at small_bytes 0, only an empty one). */
  if (stage == cohort__agree_zeros && stage_bytes > t->small_bytes) stage_bytes = (size_t)t->small_bytes;
  if (stage && stage_bytes <= t->small_bytes) {
    uint64_t nk = t->node_k + 1;
    COHORT_CHECK(claim(t, nk));
    if (stage_bytes) cohort__copy(cohort__shm_stage(t->me, (int)(nk & 1)), stage, stage_bytes);
    t->staged = 1;
  }
  memcpy(t->me->agree.sig[k & 1], mine, bytes);
  cohort__shm_publish(t, &t->me->agree.k, k);
  for (int p = 0; p < n; p++) {
    unsigned char *to = (unsigned char *)all + (size_t)p * bytes;
    if (p == r) {
      memcpy(to, mine, bytes);
      continue;
    }
    agree_slot *s = &t->peers[p].seg->agree;
    COHORT_CHECK(cohort__shm_await(t, p, &s->k, k));
    memcpy(to, s->sig[k & 1], bytes);
  }
  return COHORT_OK;
}

static void slice(size_t m, size_t es, int q, int n, size_t *lo, size_t *hi) {
  size_t per_line = CACHE_LINE / es, lines = (m + per_line - 1) / per_line;
  *lo = lines * (size_t)q / (size_t)n * per_line;
  *hi = lines * (size_t)(q + 1) / (size_t)n * per_line;
  if (*lo > m) *lo = m;
  if (*hi > m) *hi = m;
}

cohort_status cohort__shm_node_allreduce(cohort__transport *base, const void *sendbuf, void *recvbuf, size_t count,
                                         cohort_dtype dtype, cohort_op op, cohort__slice_fn complete, void *arg) {
  shm_transport *t = (shm_transport *)base;
  if (t->failure.status != COHORT_OK) return cohort__failure_raise(&t->failure);
  int n = t->base.size, r = t->base.rank;
  size_t es = cohort_dtype_size(dtype);
  if (count * es <= t->small_bytes) return small_allreduce(t, sendbuf, recvbuf, count, dtype, op, complete, arg);

  /* Zero copy: with both buffers in our arena, the peers read our input and our slice's result where they are. */
  size_t bytes = count * es;
  int64_t zc_in = cohort__shm_arena_offset(t, sendbuf, bytes), zc_out = cohort__shm_arena_offset(t, recvbuf, bytes);
  int zc = zc_in >= 0 && zc_out >= 0;
  if (!zc) zc_in = zc_out = -1;
  const void **x = operands(t);
  if (!x) return cohort__shm_fail(t, COHORT_ERR_SYSTEM, "out of memory");
  size_t per_chunk = (size_t)t->me->stage_bytes / es;
  uint64_t k = 0;
  for (size_t off = 0; off < count; off += per_chunk) {
    size_t m = count - off < per_chunk ? count - off : per_chunk;
    k = ++t->node_k;
    int b = (int)(k & 1);
    char *mine = cohort__shm_stage(t->me, b);
    const char *in = (const char *)sendbuf + off * es;
    char *out = (char *)recvbuf + off * es;
    size_t lo, hi, my_lo, my_hi;
    slice(m, es, r, n, &my_lo, &my_hi);
    if (!zc) COHORT_CHECK(claim(t, k));
    if (off == 0) post_call(t, k, zc_in, zc_out);
    if (!zc) { /* the peers need every slice of my input but mine: I read that one where it is */
      cohort__copy(mine, in, my_lo * es);
      cohort__copy(mine + my_hi * es, in + my_hi * es, (m - my_hi) * es);
    }
    cohort__shm_publish(t, &t->me->node.in, k);
    COHORT_CHECK(wait_all(t, FLAG_IN, k));
    if (off == 0) COHORT_CHECK(check_calls(t, k, bytes));
    if (off == 0 && zc && !complete && all_zero_copy(t))
      return push_allreduce(t, sendbuf, recvbuf, count, dtype, op, k);

    /* My slice: staged, its result goes where my input slice would have been staged; zero copy, into recvbuf. */
    char *dst = zc ? out + my_lo * es : mine + my_lo * es;
    const int dual = !zc && !complete;
    if (my_hi > my_lo) {
      for (int q = 0; q < n; q++) {
        peer *pe = &t->peers[q];
        x[q] = q == r           ? in + my_lo * es
               : pe->zc_in >= 0 ? cohort__shm_arena(pe->seg) + pe->zc_in + (off + my_lo) * es
                                : cohort__shm_stage(pe->seg, b) + my_lo * es;
      }
      if (dual)
        reduce_twice(t, dst, out + my_lo * es, x, my_hi - my_lo, dtype, op);
      else {
        reduce_ranks(t, dst, x, my_hi - my_lo, dtype, op);
        if (op == COHORT_AVG && !complete) cohort__reduce_avg(dst, my_hi - my_lo, dtype, n);
      }
    }
    if (complete) COHORT_CHECK(complete(arg, dst, off + my_lo, my_hi - my_lo));
    cohort__shm_publish(t, &t->me->node.out, k);
    /* Only now may recvbuf change: in place, my input slice was an operand until the reduction above. */
    if (!zc && !dual) cohort__copy(out + my_lo * es, dst, (my_hi - my_lo) * es);
    for (int i = 1; i < n; i++) {
      int q = (r + i) % n;
      peer *pe = &t->peers[q];
      slice(m, es, q, n, &lo, &hi);
      COHORT_CHECK(cohort__shm_await(t, q, &pe->seg->node.out, k));
      const char *src = pe->zc_out >= 0 ? cohort__shm_arena(pe->seg) + pe->zc_out + (off + lo) * es
                                        : cohort__shm_stage(pe->seg, b) + lo * es;
      cohort__copy(out + lo * es, src, (hi - lo) * es);
    }
    cohort__shm_publish(t, &t->me->node.done, k);
  }
  /* Zero copy: the peers read our buffers until their done; the caller may rewrite them once we return. */
  if (zc) COHORT_CHECK(wait_all(t, FLAG_DONE, k));
  return COHORT_OK;
}
