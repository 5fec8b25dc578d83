/* progress.c: rank 0's progress report. On a terminal one line is rewritten in place (\r) a few times a second; on
 * a pipe or a file (CI logs) a plain line every --log-every steps, since carriage returns there only make one
 * enormous line. Under cohortrun stdout is a pipe, but COHORT_TTY=1 says cohortrun's own stdout is a terminal: its
 * relay draws the carriage-return line in place there. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"
#include <time.h>

struct train_progress {
  int enabled;
  int live;          /* stdout is a terminal, or cohortrun's is */
  int line_open;     /* a live line is on screen without its newline */
  int64_t log_every; /* plain mode */
  int64_t total_steps;
  int epochs;
  double global_batch; /* images per step, all ranks together: turns img/s into an ETA */
  double last_draw;    /* live mode: seconds of the last redraw */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Whether a redrawn line (\r) reaches a person's terminal. cohortrun says so in COHORT_TTY. mpirun and srun relay
 * the workers' output through a pseudo-terminal of their own even when their own output goes to a file, so a
 * worker's isatty() says nothing there: under them, whole lines only (the \r redraws once filled log files). */
static int stdout_is_the_users_terminal(void) {
  const char *relayed_tty = getenv("COHORT_TTY");
  if (relayed_tty) return strcmp(relayed_tty, "1") == 0;
  static const char *const relaying_launchers[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof relaying_launchers / sizeof relaying_launchers[0]; i++)
    if (getenv(relaying_launchers[i])) return 0;
  return isatty(STDOUT_FILENO);
}

train_progress *train_progress_create(int enabled, int64_t log_every, int64_t total_steps, int epochs,
                                      int64_t global_batch) {
  train_progress *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->enabled = enabled;
  p->live = enabled && stdout_is_the_users_terminal();
  p->log_every = log_every > 0 ? log_every : 50;
  p->total_steps = total_steps;
  p->epochs = epochs;
  p->global_batch = (double)global_batch;
  p->last_draw = -1.0;
  return p;
}

void train_progress_destroy(train_progress *p) {
  if (!p) return;
  if (p->line_open) {
    fputc('\n', stdout);
    fflush(stdout);
  }
  free(p);
}

static void format_eta(double seconds, char *buf, size_t len) {
  if (!(seconds >= 0) || seconds > 1e7) {
    snprintf(buf, len, "--:--");
    return;
  }
  long s = (long)(seconds + 0.5);
  if (s >= 3600)
    snprintf(buf, len, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    snprintf(buf, len, "%02ld:%02ld", s / 60, s % 60);
}

void train_progress_step(train_progress *p, int64_t step, int epoch, double loss, double img_per_s) {
  if (!p || !p->enabled) return;
  const int last = step >= p->total_steps;
  if (p->live) {
    double now = now_s();
    if (!last && p->last_draw >= 0 && now - p->last_draw < 0.2) return;
    p->last_draw = now;
  } else if (step % p->log_every != 0 && !last) {
    return;
  }
  /* The ETA assumes the throughput so far holds for the steps left (evaluations not counted). */
  char eta[32];
  format_eta(img_per_s > 0 ? (double)(p->total_steps - step) * p->global_batch / img_per_s : -1, eta, sizeof eta);
  if (p->live) {
    fprintf(stdout, "\repoch %d/%d  step %lld/%lld  loss %.4f  %.0f img/s  ETA %s   ", epoch, p->epochs,
            (long long)step, (long long)p->total_steps, loss, img_per_s, eta);
    p->line_open = 1;
  } else {
    fprintf(stdout, "epoch %d/%d step %lld/%lld loss %.4f img/s %.0f eta %s\n", epoch, p->epochs, (long long)step,
            (long long)p->total_steps, loss, img_per_s, eta);
  }
  fflush(stdout);
}

void train_progress_eval(train_progress *p, int64_t step, int epoch, double loss, double test_acc, double img_per_s,
                         double seconds) {
  if (!p || !p->enabled) return;
  if (p->line_open) {
    fputc('\n', stdout);
    p->line_open = 0;
  }
  fprintf(stdout, "epoch %d/%d step %lld/%lld: train_loss %.4f test_acc %.4f img/s %.0f (%.1f s)\n", epoch, p->epochs,
          (long long)step, (long long)p->total_steps, loss, test_acc, img_per_s, seconds);
  fflush(stdout);
}

void train_progress_note(train_progress *p, const char *fmt, ...) {
  if (!p || !p->enabled) return;
  if (p->line_open) {
    fputc('\n', stdout);
    p->line_open = 0;
  }
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
}
