/*
 * timeline.c: the Chrome trace of the training loop (timeline.h).
 *
 * Each rank keeps its spans in one growing array (bounded: beyond TIMELINE_MAX_SPANS they are only counted) and
 * turns them into JSON text at write time. Rank 0 then receives every rank's text by broadcasts, one rank after the
 * other in chunks, and streams them into "<path>.tmp", which it fsyncs and renames over path. Streaming keeps
 * rank 0's memory at one chunk plus its own text, however many ranks there are; the other ranks receive the texts
 * too (there is no gather in the public API) and throw them away, which is cheap next to a training run.
 */
#include "ddp/timeline.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

/* About 40 MB of spans per rank: hours of training at a handful of spans per step. */
#define TIMELINE_MAX_SPANS 1000000
/* Bytes of JSON text one broadcast carries to rank 0. */
#define TIMELINE_CHUNK_BYTES (4u << 20)
/* Room for a copy of cohort_last_error() kept across later calls. */
#define TIMELINE_MESSAGE_MAX 1024

typedef struct timeline_span {
  const char *name;
  int64_t begin_ns, end_ns; /* relative to the timeline's creation */
  int64_t bytes;
  int32_t bucket;
  int32_t lane;
} timeline_span;

struct cohort__timeline {
  cohort_comm *comm;
  char *path;
  int64_t t0_ns;
  pthread_mutex_t mu; /* guards spans, count, cap, dropped */
  timeline_span *spans;
  size_t count, cap;
  int64_t dropped;
};

/* A growing text buffer; `failed` sticks once an allocation fails so that callers check once at the end. */
typedef struct text {
  char *data;
  size_t len, cap;
  int failed;
} text;

static void text_reserve(text *t, size_t extra) {
  if (t->failed || t->len + extra + 1 <= t->cap) return;
  size_t cap = t->cap ? t->cap : 4096;
  while (cap < t->len + extra + 1)
    cap *= 2;
  char *p = realloc(t->data, cap);
  if (!p) {
    t->failed = 1;
    return;
  }
  t->data = p;
  t->cap = cap;
}

static void text_printf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    t->failed = 1;
    return;
  }
  text_reserve(t, (size_t)n);
  if (t->failed) return;
  va_start(ap, fmt);
  vsnprintf(t->data + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  t->len += (size_t)n;
}

/* A JSON string literal: the engine passes literals, but a name with a quote must not break the file. */
static void text_json_string(text *t, const char *s) {
  text_printf(t, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      text_printf(t, "\\%c", c);
    else if (c < 0x20)
      text_printf(t, "\\u%04x", c);
    else
      text_printf(t, "%c", c);
  }
  text_printf(t, "\"");
}

/* Microseconds with three decimals, from nanoseconds (exact, no floating point). */
static void text_us(text *t, int64_t ns) { text_printf(t, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000); }

static const char *lane_name(int lane) { return lane == COHORT__LANE_COMM ? "comm" : "compute"; }

/* This rank's events, comma-separated (a fragment of the traceEvents array): the lane names, then the spans in
 * the order they were recorded. */
static void timeline_serialize(cohort__timeline *tl, text *t) {
  int rank = cohort_rank(tl->comm);
  text_printf(t, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}},\n",
              rank, rank);
  text_printf(t, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
              rank, rank);
  for (int lane = COHORT__LANE_COMPUTE; lane <= COHORT__LANE_COMM; lane++) {
    text_printf(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", rank,
                lane, lane_name(lane));
    text_printf(t,
                ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                rank, lane, lane);
  }
  pthread_mutex_lock(&tl->mu);
  for (size_t i = 0; i < tl->count && !t->failed; i++) {
    const timeline_span *s = &tl->spans[i];
    text_printf(t, ",\n{\"name\":");
    text_json_string(t, s->name);
    text_printf(t, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", lane_name(s->lane), rank, s->lane);
    text_us(t, s->begin_ns);
    text_printf(t, ",\"dur\":");
    text_us(t, s->end_ns - s->begin_ns);
    if (s->bucket >= 0) text_printf(t, ",\"args\":{\"bucket\":%d,\"bytes\":%" PRId64 "}", s->bucket, s->bytes);
    text_printf(t, "}");
  }
  int64_t dropped = tl->dropped;
  pthread_mutex_unlock(&tl->mu);
  if (dropped > 0)
    COHORT_LOG_WARN("timeline: %" PRId64 " spans were dropped (a rank keeps at most %d); %s holds the first ones",
                    dropped, TIMELINE_MAX_SPANS, tl->path);
}

cohort_status cohort__timeline_create(cohort_comm *comm, const char *path, cohort__timeline **out) {
  if (!comm || !path || !path[0] || !out)
    return cohort__error(COHORT_ERR_INVALID, "cohort__timeline_create: comm, path and out must be given");
  *out = NULL;
  cohort__timeline *tl = calloc(1, sizeof *tl);
  if (!tl || !(tl->path = strdup(path))) {
    free(tl);
    return cohort__error(COHORT_ERR_SYSTEM, "timeline: out of memory");
  }
  tl->comm = comm;
  pthread_mutex_init(&tl->mu, NULL);
  /* Every rank takes its zero right after the same barrier, so that the lanes line up. */
  cohort_status st = cohort_barrier(comm);
  if (st != COHORT_OK) {
    cohort__timeline_destroy(tl);
    return cohort__error_prefix(st, "timeline: barrier at creation");
  }
  tl->t0_ns = cohort__now_ns();
  *out = tl;
  return COHORT_OK;
}

void cohort__timeline_span(cohort__timeline *tl, cohort__timeline_lane lane, const char *name, int64_t begin_ns,
                           int64_t end_ns, int bucket, int64_t bytes) {
  if (!tl || !name) return;
  /* A span that began before the timeline (or a clock read in the wrong order) is clipped, never negative. */
  int64_t b = begin_ns - tl->t0_ns, e = end_ns - tl->t0_ns;
  if (b < 0) b = 0;
  if (e < b) e = b;
  pthread_mutex_lock(&tl->mu);
  if (tl->count == tl->cap && tl->cap < TIMELINE_MAX_SPANS) {
    size_t cap = tl->cap ? tl->cap * 2 : 1024;
    if (cap > TIMELINE_MAX_SPANS) cap = TIMELINE_MAX_SPANS;
    timeline_span *p = realloc(tl->spans, cap * sizeof *p);
    if (p) {
      tl->spans = p;
      tl->cap = cap;
    }
  }
  if (tl->count < tl->cap) {
    tl->spans[tl->count++] =
        (timeline_span){.name = name,
                        .begin_ns = b,
                        .end_ns = e,
                        .bytes = bucket >= 0 ? bytes : 0,
                        .bucket = bucket >= 0 ? bucket : -1,
                        .lane = lane == COHORT__LANE_COMM ? COHORT__LANE_COMM : COHORT__LANE_COMPUTE};
  } else {
    tl->dropped++;
  }
  pthread_mutex_unlock(&tl->mu);
}

static cohort_status write_all(int fd, const char *path, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "timeline: cannot write %s", path);
    p += n;
    len -= (size_t)n;
  }
  return COHORT_OK;
}

static cohort_status open_tmp(const char *tmp, int *fd) {
  *fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (*fd < 0) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "timeline: cannot create %s", tmp);
  return COHORT_OK;
}

/* fsync, close, rename over path, and fsync the directory so that the rename itself is durable. */
static cohort_status commit_tmp(int fd, const char *tmp, const char *path) {
  cohort_status st = COHORT_OK;
  if (fsync(fd) != 0) st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "timeline: cannot fsync %s", tmp);
  if (close(fd) != 0 && st == COHORT_OK)
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "timeline: cannot close %s", tmp);
  if (st == COHORT_OK && rename(tmp, path) != 0)
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "timeline: cannot rename %s to %s", tmp, path);
  if (st != COHORT_OK) {
    unlink(tmp);
    return st;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    dir[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    snprintf(dir, sizeof dir, ".");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) { /* best effort: some filesystems refuse to fsync a directory */
    (void)fsync(dfd);
    close(dfd);
  }
  return COHORT_OK;
}

static const char trace_head[] = "{\"traceEvents\":[\n";
static const char trace_tail[] = "\n],\n\"displayTimeUnit\":\"ms\"}\n";

/* Writes a whole trace holding `nparts` fragments to path, atomically. */
static cohort_status write_trace(const char *path, const text *parts, int nparts) {
  size_t tlen = strlen(path) + 8;
  char *tmp = malloc(tlen);
  if (!tmp) return cohort__error(COHORT_ERR_SYSTEM, "timeline: out of memory");
  snprintf(tmp, tlen, "%s.tmp", path);
  int fd = -1;
  cohort_status st = open_tmp(tmp, &fd);
  if (st != COHORT_OK) goto done;
  st = write_all(fd, tmp, trace_head, sizeof trace_head - 1);
  for (int i = 0; i < nparts && st == COHORT_OK; i++) {
    if (i > 0) st = write_all(fd, tmp, ",\n", 2);
    if (st == COHORT_OK) st = write_all(fd, tmp, parts[i].data, parts[i].len);
  }
  if (st == COHORT_OK) st = write_all(fd, tmp, trace_tail, sizeof trace_tail - 1);
  if (st != COHORT_OK) {
    close(fd);
    unlink(tmp);
    goto done;
  }
  st = commit_tmp(fd, tmp, path);
done:
  free(tmp);
  return st;
}

/* The communicator failed: this rank's own lane goes to "<path>.rank<N>", and the collective's error is returned
 * (a write failure here is only logged, since the first error is the one that explains what happened). */
static cohort_status write_own_lane(cohort__timeline *tl, const text *mine, cohort_status st) {
  char message[TIMELINE_MESSAGE_MAX];
  snprintf(message, sizeof message, "%s", cohort_last_error());
  size_t plen = strlen(tl->path) + 32;
  char *own = malloc(plen);
  if (own) {
    snprintf(own, plen, "%s.rank%d", tl->path, cohort_rank(tl->comm));
    if (write_trace(own, mine, 1) == COHORT_OK)
      COHORT_LOG_WARN("timeline: the communicator failed, so this rank wrote its own lane to %s", own);
    else
      COHORT_LOG_WARN("timeline: the communicator failed and %s", cohort_last_error());
    free(own);
  }
  cohort__error_set_text(message);
  return cohort__error_prefix(st, "timeline: gathering the spans to rank 0");
}

cohort_status cohort__timeline_write(cohort__timeline *tl) {
  if (!tl) return cohort__error(COHORT_ERR_INVALID, "cohort__timeline_write: timeline is NULL");
  cohort_comm *comm = tl->comm;
  int rank = cohort_rank(comm), size = cohort_size(comm);
  text mine = {0};
  timeline_serialize(tl, &mine);
  if (mine.failed) {
    free(mine.data);
    return cohort__error(COHORT_ERR_SYSTEM, "timeline: out of memory serialising %s", tl->path);
  }
  cohort_status st = COHORT_OK;
  int64_t *lens = NULL;
  char *chunk = NULL, *tmp = NULL;
  int fd = -1;
  if (size == 1) {
    st = write_trace(tl->path, &mine, 1);
    goto done;
  }

  lens = malloc((size_t)size * sizeof *lens);
  chunk = malloc(TIMELINE_CHUNK_BYTES);
  if (!lens || !chunk) {
    /* Leaving now would leave the other ranks waiting in the collectives below: fail the communicator instead. */
    cohort_comm_abort(comm, "timeline: out of memory");
    st = cohort__error(COHORT_ERR_SYSTEM, "timeline: out of memory gathering %s", tl->path);
    goto done;
  }
  int64_t my_len = (int64_t)mine.len;
  st = cohort_allgather(comm, &my_len, lens, 1, COHORT_I64);
  if (st != COHORT_OK) {
    st = write_own_lane(tl, &mine, st);
    goto done;
  }

  /* Rank 0 keeps receiving even when its file cannot be written, so that every rank runs the same broadcasts;
   * the write error is returned at the end. */
  cohort_status write_st = COHORT_OK;
  if (rank == 0) {
    size_t tlen = strlen(tl->path) + 8;
    if (!(tmp = malloc(tlen))) {
      write_st = cohort__error(COHORT_ERR_SYSTEM, "timeline: out of memory");
    } else {
      snprintf(tmp, tlen, "%s.tmp", tl->path);
      write_st = open_tmp(tmp, &fd);
      if (write_st == COHORT_OK) write_st = write_all(fd, tmp, trace_head, sizeof trace_head - 1);
    }
  }
  /* The broadcasts below may reset cohort_last_error(), so the write error's text is kept aside. */
  char write_message[TIMELINE_MESSAGE_MAX] = "";
  if (write_st != COHORT_OK) snprintf(write_message, sizeof write_message, "%s", cohort_last_error());

  for (int r = 0; r < size && st == COHORT_OK; r++) {
    if (rank == 0 && r > 0 && write_st == COHORT_OK) {
      write_st = write_all(fd, tmp, ",\n", 2);
      if (write_st != COHORT_OK) snprintf(write_message, sizeof write_message, "%s", cohort_last_error());
    }
    for (int64_t off = 0; off < lens[r] && st == COHORT_OK; off += TIMELINE_CHUNK_BYTES) {
      size_t n = (size_t)(lens[r] - off < TIMELINE_CHUNK_BYTES ? lens[r] - off : TIMELINE_CHUNK_BYTES);
      if (rank == r) memcpy(chunk, mine.data + off, n);
      st = cohort_broadcast(comm, chunk, n, COHORT_U8, r);
      if (st == COHORT_OK && rank == 0 && write_st == COHORT_OK) {
        write_st = write_all(fd, tmp, chunk, n);
        if (write_st != COHORT_OK) snprintf(write_message, sizeof write_message, "%s", cohort_last_error());
      }
    }
  }
  if (st != COHORT_OK) {
    if (fd >= 0) {
      close(fd);
      unlink(tmp);
      fd = -1;
    }
    st = write_own_lane(tl, &mine, st);
    goto done;
  }
  if (rank == 0) {
    if (write_st == COHORT_OK) write_st = write_all(fd, tmp, trace_tail, sizeof trace_tail - 1);
    if (write_st == COHORT_OK) {
      write_st = commit_tmp(fd, tmp, tl->path);
      fd = -1;
    }
    if (write_st != COHORT_OK) {
      if (!write_message[0]) snprintf(write_message, sizeof write_message, "%s", cohort_last_error());
      if (fd >= 0) {
        close(fd);
        unlink(tmp);
        fd = -1;
      }
      cohort__error_set_text(write_message);
      st = write_st;
    }
  }
done:
  free(lens);
  free(chunk);
  free(tmp);
  free(mine.data);
  return st;
}

void cohort__timeline_destroy(cohort__timeline *tl) {
  if (!tl) return;
  pthread_mutex_destroy(&tl->mu);
  free(tl->spans);
  free(tl->path);
  free(tl);
}
