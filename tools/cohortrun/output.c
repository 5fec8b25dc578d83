/* output.c: relaying a worker's pipe to cohortrun's stdout or stderr, one whole prefixed line at a time.
 *
 * Each pump reads one chunk (up to RELAY_CHUNK bytes) straight into the buffer behind the held partial line,
 * builds every complete line of it, prefixed, in a second buffer, and hands that to the kernel in one write. So a
 * chatty worker costs one read, one memchr pass, one copy and one write per 64 KiB, and since cohortrun's loop is
 * single-threaded and each write holds whole lines, lines of different workers can never interleave.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "launcher.h"

#define RELAY_CHUNK 65536

struct cohort__relay {
  int rank;
  int in_fd; /* -1 once closed */
  int out_fd;
  int sink_broken; /* the destination went away: drop output from now on */
  int log_fd;      /* -1: none; not owned */
  int log_broken;  /* the log file failed (disk full?): said once, then no more logging */
  char *tail;      /* NULL unless the tail is kept */
  size_t tail_len;
  char prefix[24];
  size_t prefix_len;
  char *held; /* the partial line so far, then room to read the next chunk */
  size_t held_len, held_cap;
  char *out; /* the prefixed lines of one chunk */
  size_t out_len, out_cap;
};

static cohort_status reserve(char **buf, size_t *cap, size_t need, int rank) {
  if (need <= *cap) return COHORT_OK;
  size_t cap2 = *cap ? *cap : 4096;
  while (cap2 < need)
    cap2 *= 2;
  char *b = realloc(*buf, cap2);
  if (!b) return cohort__error(COHORT_ERR_SYSTEM, "out of memory relaying the output of rank %d", rank);
  *buf = b;
  *cap = cap2;
  return COHORT_OK;
}

/* Writes everything, waiting if the destination is a full non-blocking pipe; a closed destination only stops
 * the output (cohortrun | head must not kill the job). */
static void write_all(cohort__relay *r, const char *buf, size_t len) {
  while (len > 0 && !r->sink_broken) {
    ssize_t n = write(r->out_fd, buf, len);
    if (n > 0) {
      buf += n;
      len -= (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {.fd = r->out_fd, .events = POLLOUT};
      poll(&p, 1, -1);
    } else {
      r->sink_broken = 1;
    }
  }
}

static void append(cohort__relay *r, const char *line, size_t len, int add_newline) {
  memcpy(r->out + r->out_len, r->prefix, r->prefix_len);
  memcpy(r->out + r->out_len + r->prefix_len, line, len);
  r->out_len += r->prefix_len + len;
  if (add_newline) r->out[r->out_len++] = '\n';
}

cohort_status cohort__relay_create(int rank, int in_fd, int out_fd, int log_fd, int keep_tail, cohort__relay **out) {
  *out = NULL;
  cohort__relay *r = calloc(1, sizeof *r);
  if (!r) return cohort__error(COHORT_ERR_SYSTEM, "out of memory relaying the output of rank %d", rank);
  if (keep_tail && !(r->tail = malloc(COHORT_RELAY_TAIL_BYTES))) {
    free(r);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory relaying the output of rank %d", rank);
  }
  r->rank = rank;
  r->in_fd = in_fd;
  r->out_fd = out_fd;
  r->log_fd = log_fd;
  int n = snprintf(r->prefix, sizeof r->prefix, "[%d] ", rank);
  r->prefix_len = (size_t)n;
  *out = r;
  return COHORT_OK;
}

int cohort__relay_fd(const cohort__relay *relay) { return relay->in_fd; }

const char *cohort__relay_tail(const cohort__relay *relay, size_t *len) {
  *len = relay->tail ? relay->tail_len : 0;
  return relay->tail ? relay->tail : "";
}

/* The raw bytes, before any prefix or line cutting: the log is what the worker wrote, and the tail keeps the
 * newest bytes (a sliding window; memmove of at most 4 KiB per chunk, and only for stderr). */
static void keep_raw(cohort__relay *r, const char *data, size_t n) {
  if (r->log_fd >= 0 && !r->log_broken) {
    size_t done = 0;
    while (done < n) {
      ssize_t w = write(r->log_fd, data + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        r->log_broken = 1;
        COHORT_LOG_WARN("cohortrun: writing the log of rank %d failed (%s); its output is no longer logged", r->rank,
                        w < 0 ? strerror(errno) : "short write");
        break;
      }
      done += (size_t)w;
    }
  }
  if (!r->tail) return;
  if (n >= COHORT_RELAY_TAIL_BYTES) {
    memcpy(r->tail, data + n - COHORT_RELAY_TAIL_BYTES, COHORT_RELAY_TAIL_BYTES);
    r->tail_len = COHORT_RELAY_TAIL_BYTES;
    return;
  }
  if (r->tail_len + n > COHORT_RELAY_TAIL_BYTES) {
    size_t drop = r->tail_len + n - COHORT_RELAY_TAIL_BYTES;
    memmove(r->tail, r->tail + drop, r->tail_len - drop);
    r->tail_len -= drop;
  }
  memcpy(r->tail + r->tail_len, data, n);
  r->tail_len += n;
}

/* Writes the held partial line as a line of its own (at EOF, or when it grew past the limit). */
static cohort_status flush_held(cohort__relay *r) {
  if (r->held_len == 0) return COHORT_OK;
  COHORT_CHECK(reserve(&r->out, &r->out_cap, r->prefix_len + r->held_len + 1, r->rank));
  r->out_len = 0;
  append(r, r->held, r->held_len, 1);
  write_all(r, r->out, r->out_len);
  r->held_len = 0;
  return COHORT_OK;
}

static void close_input(cohort__relay *r) {
  if (r->in_fd >= 0) close(r->in_fd);
  r->in_fd = -1;
}

cohort_status cohort__relay_pump(cohort__relay *r, int *open) {
  *open = r->in_fd >= 0;
  if (r->in_fd < 0) return COHORT_OK;
  COHORT_CHECK(reserve(&r->held, &r->held_cap, r->held_len + RELAY_CHUNK, r->rank));
  ssize_t n = read(r->in_fd, r->held + r->held_len, RELAY_CHUNK);
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) return COHORT_OK;
    cohort_status st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "reading the output of rank %d", r->rank);
    close_input(r);
    *open = 0;
    return st;
  }
  if (n == 0) {
    close_input(r);
    *open = 0;
    return flush_held(r);
  }
  keep_raw(r, r->held + r->held_len, (size_t)n);
  /* The held part has no newline (else it would have been written), so the search starts at the new bytes. */
  size_t total = r->held_len + (size_t)n;
  char *scan = r->held + r->held_len;
  char *end = r->held + total;
  char *line = r->held;
  /* Worst case every new byte ends a line: that many prefixes, plus the bytes themselves. */
  COHORT_CHECK(reserve(&r->out, &r->out_cap, total + ((size_t)n + 1) * r->prefix_len + 1, r->rank));
  r->out_len = 0;
  char *nl;
  while (scan < end && (nl = memchr(scan, '\n', (size_t)(end - scan))) != NULL) {
    append(r, line, (size_t)(nl + 1 - line), 0);
    line = scan = nl + 1;
  }
  size_t rest = (size_t)(end - line);
  if (rest >= COHORT_RELAY_LINE_MAX) {
    append(r, line, rest, 1);
    rest = 0;
  }
  if (r->out_len) write_all(r, r->out, r->out_len);
  if (rest && line != r->held) memmove(r->held, line, rest);
  r->held_len = rest;
  return COHORT_OK;
}

void cohort__relay_destroy(cohort__relay *relay) {
  if (!relay) return;
  /* Nothing more can come; a half line is still the worker's output. */
  flush_held(relay);
  close_input(relay);
  free(relay->held);
  free(relay->out);
  free(relay->tail);
  free(relay);
}
