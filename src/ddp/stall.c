/*
 * stall.c: the stall inspector (stall.h).
 *
 * The training thread only writes a few integers under the inspector's mutex. The inspector's own thread wakes
 * every min(stall_s / 4, 1 s), publishes this rank's progress when it changed, and, once the current wait is older
 * than stall_s, compares the other ranks' published progress with the bucket waited for and logs who is missing.
 *
 * Where progress is published: the communicator's notice board (comm/board.h), topic "stall", this rank's record
 * {step, bucket} as "<step> <bucket>": in the job's key space in the store for communicators made by cohort_init(),
 * in memory for in-process groups. The publication lags by at most one wake-up period, so a rank that submitted the
 * bucket just before the check may still be named; the warning repeats, and the next one is right.
 */
#include "ddp/stall.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/board.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

/* At most this many missing ranks are named in one warning (the log line has a bounded length). */
#define STALL_NAMED_MAX 16

/* ---- the inspector ---- */

struct cohort__stall {
  cohort_comm *comm;
  double stall_s;
  int64_t stall_ns, period_ns;

  pthread_mutex_t mu; /* guards everything below up to `thread` */
  pthread_cond_t cv;
  int stopping;
  int64_t step; /* last progress; bucket -1 while nothing was submitted */
  int bucket;
  int waiting;
  int64_t wait_step;
  int wait_bucket;
  int64_t wait_since_ns;
  uint64_t wait_gen; /* bumped by every wait_begin, so the thread can tell one wait from the next */

  atomic_int warnings;
  pthread_t thread;

  /* The thread's own state (no lock). */
  int published, published_bucket;
  int64_t published_step;
  int store_error_logged;
};

/* The progress of one rank as the inspector sees it. */
typedef struct stall_seen {
  int known; /* 0: the rank has published nothing yet */
  int64_t step;
  int bucket;
} stall_seen;

/* The board's topic, and the record this rank publishes there. */
#define STALL_TOPIC "stall"

/* A store failure is logged once: the inspector is advisory and must not drown the log. */
static void stall_store_failed(cohort__stall *s, const char *what) {
  if (s->store_error_logged) return;
  s->store_error_logged = 1;
  COHORT_LOG_WARN("stall: cannot %s the progress in the store (%s); the stall warnings may not name the missing ranks",
                  what, cohort_last_error());
}

static void stall_publish(cohort__stall *s, int64_t step, int bucket) {
  if (bucket < 0) return;
  if (s->published && s->published_step == step && s->published_bucket == bucket) return;
  if (!cohort__board_available(s->comm)) return;
  char value[48];
  snprintf(value, sizeof value, "%" PRId64 " %d", step, bucket);
  if (cohort__board_publish(s->comm, STALL_TOPIC, value) != COHORT_OK) {
    stall_store_failed(s, "publish");
    return; /* not marked published: tried again at the next wake-up */
  }
  s->published = 1;
  s->published_step = step;
  s->published_bucket = bucket;
}

/* Fills seen[0..size) with every rank's last published progress. Returns 0 when there is nowhere to read it. */
static int stall_read_all(cohort__stall *s, stall_seen *seen) {
  cohort_comm *c = s->comm;
  if (!cohort__board_available(c)) return 0;
  int size = cohort_size(c), me = cohort_rank(c);
  for (int r = 0; r < size; r++) {
    seen[r] = (stall_seen){0};
    if (r == me) continue;
    char value[COHORT__BOARD_VALUE_MAX];
    int found = 0;
    if (cohort__board_read(c, STALL_TOPIC, r, value, sizeof value, &found) != COHORT_OK) {
      stall_store_failed(s, "read");
      return 0;
    }
    long long step;
    int bucket;
    if (found && sscanf(value, "%lld %d", &step, &bucket) == 2)
      seen[r] = (stall_seen){.known = 1, .step = step, .bucket = bucket};
  }
  return 1;
}

/* A rank has not submitted (step, bucket) yet when its last submission comes before it (or it has none). */
static int stall_is_missing(const stall_seen *p, int64_t step, int bucket) {
  if (!p->known) return 1;
  return p->step < step || (p->step == step && p->bucket < bucket);
}

static void stall_warn(cohort__stall *s, int64_t step, int bucket, int64_t waited_ns) {
  cohort_comm *c = s->comm;
  char list[1100];
  size_t len = 0;
  list[0] = '\0';
  int size = cohort_size(c), me = cohort_rank(c);
  stall_seen *seen = calloc((size_t)size, sizeof *seen);
  if (!seen || !stall_read_all(s, seen)) {
    snprintf(list, sizeof list, "unknown (%s)",
             !seen                        ? "out of memory"
             : cohort__board_available(c) ? "the store could not be read"
                                          : "no store to compare progress with");
  } else {
    int named = 0, more = 0;
    for (int r = 0; r < size; r++) {
      if (r == me || !stall_is_missing(&seen[r], step, bucket)) continue;
      if (named == STALL_NAMED_MAX) {
        more++;
        continue;
      }
      char last[96];
      if (seen[r].known)
        snprintf(last, sizeof last, "last submitted: bucket %d of step %" PRId64, seen[r].bucket, seen[r].step);
      else
        snprintf(last, sizeof last, "nothing submitted yet");
      int n = snprintf(list + len, sizeof list - len, "%srank %d (%s)", named ? ", " : "", r, last);
      if (n > 0) len += (size_t)n < sizeof list - len ? (size_t)n : sizeof list - len - 1;
      named++;
    }
    if (more) snprintf(list + len, sizeof list - len, " and %d more", more);
    if (!named)
      snprintf(list, sizeof list,
               "none that this rank can see (every rank has published it; the reduction itself is slow, or a rank "
               "submitted it in the last %.2g s)",
               (double)s->period_ns * 1e-9);
  }
  free(seen);
  double waited = (double)waited_ns * 1e-9;
  COHORT_LOG_WARN("stall: waited %.*f s for bucket %d of step %" PRId64 "; missing: %s", waited < 10 ? 1 : 0, waited,
                  bucket, step, list);
  atomic_fetch_add(&s->warnings, 1);
}

static void *stall_main(void *arg) {
  cohort__stall *s = arg;
  uint64_t gen_seen = 0;
  int64_t next_warn_ns = 0;
  pthread_mutex_lock(&s->mu);
  while (!s->stopping) {
    int64_t wake_ns = cohort__now_ns() + s->period_ns;
    struct timespec ts = {.tv_sec = wake_ns / 1000000000, .tv_nsec = wake_ns % 1000000000};
    while (!s->stopping && cohort__now_ns() < wake_ns)
      pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    if (s->stopping) break;
    int64_t step = s->step, wait_step = s->wait_step, since = s->wait_since_ns;
    int bucket = s->bucket, wait_bucket = s->wait_bucket, waiting = s->waiting;
    uint64_t gen = s->wait_gen;
    pthread_mutex_unlock(&s->mu);

    /* Published before any warning, so that two stalled ranks never name each other. */
    stall_publish(s, step, bucket);
    if (waiting) {
      if (gen != gen_seen) {
        gen_seen = gen;
        next_warn_ns = since + s->stall_ns;
      }
      int64_t now = cohort__now_ns();
      if (now >= next_warn_ns) {
        stall_warn(s, wait_step, wait_bucket, now - since);
        while (next_warn_ns <= now)
          next_warn_ns += s->stall_ns;
      }
    }
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

cohort_status cohort__stall_create(cohort_comm *comm, double stall_s, cohort__stall **out) {
  if (!comm || !out) return cohort__error(COHORT_ERR_INVALID, "cohort__stall_create: comm and out must be given");
  *out = NULL;
  if (!(stall_s > 0) || cohort_size(comm) <= 1) return COHORT_OK; /* off; one rank can never miss another */
  if (stall_s > 1e6)
    return cohort__error(COHORT_ERR_INVALID, "stall inspector: %g s is beyond the 1e6 s the inspector accepts",
                         stall_s);
  cohort__stall *s = calloc(1, sizeof *s);
  if (!s) return cohort__error(COHORT_ERR_SYSTEM, "stall inspector: out of memory");
  s->comm = comm;
  s->stall_s = stall_s;
  s->stall_ns = (int64_t)(stall_s * 1e9);
  s->period_ns = s->stall_ns / 4 < 1000000000 ? s->stall_ns / 4 : 1000000000;
  if (s->period_ns < 1000000) s->period_ns = 1000000;
  s->bucket = -1;
  pthread_mutex_init(&s->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* the deadlines are cohort__now_ns() times */
  pthread_cond_init(&s->cv, &attr);
  pthread_condattr_destroy(&attr);
  atomic_init(&s->warnings, 0);
  if (pthread_create(&s->thread, NULL, stall_main, s) != 0) {
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return cohort__error(COHORT_ERR_SYSTEM, "stall inspector: cannot start its thread");
  }
  *out = s;
  return COHORT_OK;
}

void cohort__stall_progress(cohort__stall *s, int64_t step, int bucket) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->step = step;
  s->bucket = bucket;
  pthread_mutex_unlock(&s->mu);
}

void cohort__stall_wait_begin(cohort__stall *s, int64_t step, int bucket) {
  if (!s) return;
  int64_t now = cohort__now_ns();
  pthread_mutex_lock(&s->mu);
  s->waiting = 1;
  s->wait_step = step;
  s->wait_bucket = bucket;
  s->wait_since_ns = now;
  s->wait_gen++;
  pthread_mutex_unlock(&s->mu);
}

void cohort__stall_wait_end(cohort__stall *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->waiting = 0;
  pthread_mutex_unlock(&s->mu);
}

int cohort__stall_warnings(const cohort__stall *s) { return s ? atomic_load(&((cohort__stall *)s)->warnings) : 0; }

void cohort__stall_destroy(cohort__stall *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}
