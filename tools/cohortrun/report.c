/* report.c: what the user reads at the end of a generation: the root cause's last words, the one summary line, and
 * cohortrun's exit code (job.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "job.h"

const char *cohort__job_signal_name(int sig, char *buf, size_t len) {
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev)
    snprintf(buf, len, "SIG%s", abbrev);
  else
    snprintf(buf, len, "signal %d", sig);
  return buf;
}

/* The root cause's own words: the last lines of its stderr, repeated after everyone's shutdown noise. */
#define ROOT_CAUSE_LINES 10
/* What torch's @record wrote for the root cause (TORCHELASTIC_ERROR_FILE), when it did: the exception's one line. */
static void print_error_file(const job *j, FILE *out) {
  char *message = NULL, *callstack = NULL, path[4400];
  if (!cohort__job_read_error_file(j, j->root, &message, &callstack)) return;
  cohort__job_error_file(j, j->root, path, sizeof path);
  message[strcspn(message, "\n")] = '\0';
  fprintf(out, "cohortrun: rank %d's error file (torch's @record, %s): %s\n", j->workers[j->root].rank,
          j->err_dir_owned ? "TORCHELASTIC_ERROR_FILE" : path, message);
  free(message);
  free(callstack);
}

void cohort__job_print_root_cause(const job *j, FILE *out) {
  if (j->root < 0) return;
  const worker *w = &j->workers[j->root];
  size_t len = 0;
  const char *tail = w->err ? cohort__relay_tail(w->err, &len) : "";
  char where[4400] = "";
  if (j->opts.log_dir) snprintf(where, sizeof where, " (all of its output: %s/rank-%d.log)", j->opts.log_dir, w->rank);
  const char *end = tail + len;
  while (end > tail && (end[-1] == '\n' || end[-1] == '\r'))
    end--;
  if (end == tail) {
    fprintf(out, "cohortrun: root cause: rank %d on host %s; it wrote nothing to stderr%s\n", w->rank, j->host, where);
    print_error_file(j, out);
    return;
  }
  /* Back from the end over ROOT_CAUSE_LINES lines; a first line cut by the window is left out. */
  const char *start = end;
  int lines = 0;
  while (start > tail && lines < ROOT_CAUSE_LINES) {
    start--;
    if (*start == '\n') {
      lines++;
      if (lines == ROOT_CAUSE_LINES) {
        start++;
        break;
      }
    }
  }
  if (start == tail && len == COHORT_RELAY_TAIL_BYTES) {
    const char *nl = memchr(start, '\n', (size_t)(end - start));
    if (nl) start = nl + 1;
  }
  int count = 1;
  for (const char *p = start; p < end; p++)
    count += *p == '\n';
  fprintf(out, "cohortrun: root cause: rank %d on host %s; the last %d line%s of its stderr%s:\n", w->rank, j->host,
          count, count == 1 ? "" : "s", where);
  while (start < end) {
    const char *nl = memchr(start, '\n', (size_t)(end - start));
    const char *stop = nl ? nl : end;
    fprintf(out, "cohortrun: | %.*s\n", (int)(stop - start), start);
    start = stop + (nl ? 1 : 0);
  }
  print_error_file(j, out);
}

void cohort__job_print_summary(const job *j) {
  char name[32];
  char others[160] = "";
  int n = j->stopped_count;
  if (j->root >= 0) {
    if (n == 0)
      snprintf(others, sizeof others, "no other rank was running");
    else if (n == 1 && j->opts.np == 2)
      snprintf(others, sizeof others, "stopped the other rank");
    else if (n == j->opts.np - 1)
      snprintf(others, sizeof others, "stopped the other %d ranks", n);
    else
      snprintf(others, sizeof others, "stopped the %d other rank%s still running", n, n == 1 ? "" : "s");
  } else {
    snprintf(others, sizeof others, "forwarded it to %d running rank%s", n, n == 1 ? "" : "s");
  }
  char killed[96] = "";
  if (j->sigkill_count > 0 && j->forced_by)
    snprintf(killed, sizeof killed, " (%d got SIGKILL at once on a second %s)", j->sigkill_count,
             cohort__job_signal_name(j->forced_by, name, sizeof name));
  else if (j->sigkill_count > 0)
    snprintf(killed, sizeof killed, " (%d did not stop within %g s and got SIGKILL)", j->sigkill_count,
             j->opts.grace_s);
  if (j->root >= 0) {
    const worker *w = &j->workers[j->root];
    if (j->hang[0])
      fprintf(stderr, "cohortrun: %s; stopped it%s%s%s\n", j->hang, n > 0 ? " and " : "",
              n > 0 ? (n == 1 ? "the other rank" : "the other ranks") : "", killed);
    else if (WIFEXITED(w->wait_status))
      fprintf(stderr, "cohortrun: rank %d (pid %d, host %s) exited with code %d; %s%s\n", w->rank, (int)w->pid, j->host,
              WEXITSTATUS(w->wait_status), others, killed);
    else
      fprintf(stderr, "cohortrun: rank %d (pid %d, host %s) was killed by signal %d (%s)%s; %s%s\n", w->rank,
              (int)w->pid, j->host, WTERMSIG(w->wait_status),
              cohort__job_signal_name(WTERMSIG(w->wait_status), name, sizeof name),
              WCOREDUMP(w->wait_status) ? ", core dumped" : "", others, killed);
    if (j->interrupted)
      fprintf(stderr, "cohortrun: also interrupted by %s while stopping\n",
              cohort__job_signal_name(j->interrupted, name, sizeof name));
  } else if (j->interrupted) {
    fprintf(stderr, "cohortrun: interrupted by %s; %s%s\n", cohort__job_signal_name(j->interrupted, name, sizeof name),
            others, killed);
  }
}

int cohort__job_exit_code(const job *j) {
  if (j->root >= 0 && j->hang[0]) return 1; /* whatever the hung worker did with its SIGTERM */
  if (j->root >= 0) {
    int s = j->workers[j->root].wait_status;
    return WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
  }
  if (j->interrupted) return 128 + j->interrupted;
  return 0;
}
