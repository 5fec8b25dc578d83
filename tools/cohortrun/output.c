/* output.c: relaying a worker's pipe to cohortrun's stdout or stderr, one whole prefixed line at a time.
 *
 * Each pump reads one chunk (up to RELAY_CHUNK bytes) straight into the buffer behind the held partial line,
 * builds every complete line of it, prefixed, in a second buffer, and hands that to the kernel in one write. So a
 * chatty worker costs one read, one memchr pass, one copy and one write per 64 KiB, and since cohortrun's loop is
 * single-threaded and each write holds whole lines, lines of different workers can never interleave.
 *
 * Live lines: when cohortrun's stdout is a terminal, a worker may redraw one line in place with carriage returns
 * (fmnist-train's progress line; cohortrun sets COHORT_TTY=1 for it). The relay then shows the newest
 * carriage-return segment of the unfinished line at once, prefixed, as the terminal's live line; any complete line
 * (of any worker) first erases it and then draws it again below, so the live line stays at the bottom. A finished
 * line with carriage returns is written as its last drawn segment. Logs and tails keep the raw bytes.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "launcher.h"

#define RELAY_CHUNK 65536

struct cohort__relay {
  int rank;
  int in_fd; /* -1 once closed */
  int out_fd;
  int sink_broken;  /* the destination went away: drop output from now on */
  int log_fd;       /* -1: none; not owned */
  int log_broken;   /* the log file failed (disk full?): said once, then no more logging */
  int log_mid_line; /* the last byte logged was not a newline: the next bytes continue a stamped line */
  char *tail;       /* NULL unless the tail is kept */
  size_t tail_len;
  char prefix[24];
  size_t prefix_len;
  char *held; /* the partial line so far, then room to read the next chunk */
  size_t held_len, held_cap;
  char *out; /* the prefixed lines of one chunk */
  size_t out_len, out_cap;
  int live;       /* out_fd is a terminal: carriage-return lines are drawn in place */
  uint64_t bytes; /* read from the pipe so far: a sign of life for the hang watch (watch.c) */
};

/* The one live line on the terminal (cohortrun's loop is single-threaded): who drew it, and its prefixed text. */
static struct {
  const cohort__relay *owner; /* NULL: none shown */
  int fd;
  char text[512];
  size_t len;
} live_line;

#define ERASE_LINE "\r\033[K"

/* The text a carriage-return line shows: the last segment after a '\r' that is not empty. */
static void last_drawn(const char *line, size_t len, const char **seg, size_t *seg_len) {
  const char *end = line + len;
  while (end > line) {
    const char *cr = memrchr(line, '\r', (size_t)(end - line));
    const char *start = cr ? cr + 1 : line;
    if (end > start || !cr) {
      *seg = start;
      *seg_len = (size_t)(end - start);
      return;
    }
    end = cr;
  }
  *seg = line;
  *seg_len = 0;
}

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
  if (r->live && memchr(line, '\r', len)) { /* a finished live line: what it last showed */
    int had_newline = len > 0 && line[len - 1] == '\n';
    last_drawn(line, len - (size_t)had_newline, &line, &len);
    add_newline = 1;
  }
  memcpy(r->out + r->out_len, r->prefix, r->prefix_len);
  memcpy(r->out + r->out_len + r->prefix_len, line, len);
  r->out_len += r->prefix_len + len;
  if (add_newline) r->out[r->out_len++] = '\n';
}

static void draw_live(void) {
  if (live_line.owner && write(live_line.fd, live_line.text, live_line.len) < 0) live_line.owner = NULL;
}

static void erase_live(void) {
  if (live_line.owner && write(live_line.fd, ERASE_LINE, sizeof ERASE_LINE - 1) < 0) live_line.owner = NULL;
}

/* Complete lines go above the live line: erase it, write them, draw it again. */
static void write_lines(cohort__relay *r, const char *buf, size_t len) {
  erase_live();
  write_all(r, buf, len);
  draw_live();
}

/* The unfinished line of r (rest bytes) holds carriage returns: it becomes the live line. */
static void show_live(cohort__relay *r, const char *rest, size_t len) {
  const char *seg;
  size_t seg_len;
  last_drawn(rest, len, &seg, &seg_len);
  if (seg_len == 0) return;
  size_t room = sizeof live_line.text - (sizeof ERASE_LINE - 1) - r->prefix_len;
  if (seg_len > room) seg_len = room;
  erase_live();
  memcpy(live_line.text, ERASE_LINE, sizeof ERASE_LINE - 1);
  memcpy(live_line.text + sizeof ERASE_LINE - 1, r->prefix, r->prefix_len);
  memcpy(live_line.text + sizeof ERASE_LINE - 1 + r->prefix_len, seg, seg_len);
  live_line.len = sizeof ERASE_LINE - 1 + r->prefix_len + seg_len;
  live_line.owner = r;
  live_line.fd = r->out_fd;
  draw_live();
}

/* r's live line is finished (its newline came, or r is gone): the next lines replace it. */
static void end_live(const cohort__relay *r) {
  if (live_line.owner != r) return;
  erase_live();
  live_line.owner = NULL;
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
  r->live = isatty(out_fd);
  *out = r;
  return COHORT_OK;
}

int cohort__relay_fd(const cohort__relay *relay) { return relay->in_fd; }

const char *cohort__relay_tail(const cohort__relay *relay, size_t *len) {
  *len = relay->tail ? relay->tail_len : 0;
  return relay->tail ? relay->tail : "";
}

static int write_log(cohort__relay *r, const char *data, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(r->log_fd, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      r->log_broken = 1;
      COHORT_LOG_WARN("cohortrun: writing the log of rank %d failed (%s); its output is no longer logged", r->rank,
                      w < 0 ? strerror(errno) : "short write");
      return -1;
    }
    done += (size_t)w;
  }
  return 0;
}

/* The log: the worker's bytes as it wrote them, each line stamped with the time cohortrun read its first bytes
 * (UTC, milliseconds: "2026-11-26T07:12:03.123Z "), so that a person reading rank-N.log sees when. */
static void log_stamped(cohort__relay *r, const char *data, size_t n) {
  char stamp[40];
  size_t stamp_len = 0;
  size_t start = 0;
  while (start < n && !r->log_broken) {
    if (!r->log_mid_line) {
      if (!stamp_len) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        stamp_len = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
        stamp_len += (size_t)snprintf(stamp + stamp_len, sizeof stamp - stamp_len, ".%03ldZ ", ts.tv_nsec / 1000000);
      }
      if (write_log(r, stamp, stamp_len) != 0) return;
    }
    const char *nl = memchr(data + start, '\n', n - start);
    size_t end = nl ? (size_t)(nl - data) + 1 : n;
    if (write_log(r, data + start, end - start) != 0) return;
    r->log_mid_line = !nl;
    start = end;
  }
}

/* The raw bytes, before any prefix or line cutting: the log is what the worker wrote (each line stamped with the
 * time), and the tail keeps the newest bytes (a sliding window; memmove of at most 4 KiB per chunk, and only for
 * stderr). */
static void keep_raw(cohort__relay *r, const char *data, size_t n) {
  if (r->log_fd >= 0 && !r->log_broken) log_stamped(r, data, n);
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
  end_live(r);
  write_lines(r, r->out, r->out_len);
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
  if (n > 0) r->bytes += (uint64_t)n;
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
  /* A line that reached COHORT_RELAY_LINE_MAX goes out as a line of exactly that many bytes; the rest (less than one
   * read: held was shorter than that before it) stays held. */
  if (rest >= COHORT_RELAY_LINE_MAX) {
    append(r, line, COHORT_RELAY_LINE_MAX, 1);
    line += COHORT_RELAY_LINE_MAX;
    rest -= COHORT_RELAY_LINE_MAX;
  }
  if (r->out_len && r->live && line != r->held) end_live(r); /* r's own line finished: it is in out now */
  if (r->out_len) write_lines(r, r->out, r->out_len);
  /* A line redrawn in place keeps only its newest segment: its held bytes stay small however long it lives. */
  const char *cr = r->live && rest ? memrchr(line, '\r', rest) : NULL;
  if (cr && cr + 1 == end && cr > line) { /* "text\r" style: the segment before the trailing '\r' is the newest */
    const char *before = memrchr(line, '\r', (size_t)(cr - line));
    cr = before ? before : cr;
  }
  if (cr && cr > line) {
    rest = (size_t)(end - cr);
    line = (char *)cr;
  }
  if (rest && line != r->held) memmove(r->held, line, rest);
  r->held_len = rest;
  if (cr) show_live(r, r->held, rest);
  return COHORT_OK;
}

void cohort__relay_destroy(cohort__relay *relay) {
  if (!relay) return;
  /* Nothing more can come; a half line is still the worker's output. */
  flush_held(relay);
  end_live(relay);
  close_input(relay);
  free(relay->held);
  free(relay->out);
  free(relay->tail);
  free(relay);
}

uint64_t cohort__relay_bytes(const cohort__relay *relay) { return relay ? relay->bytes : 0; }
