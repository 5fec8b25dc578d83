/* errors.c: torchrun's error files (job.h), and cohortrun's word on unknown COHORT_* variables.
 *
 * torch's @record (torch.distributed.elastic.multiprocessing.errors) writes an uncaught exception to the file named by
 * TORCHELASTIC_ERROR_FILE as {"message": {"message": "Type: text", "extraInfo": {"py_callstack": "...", "timestamp":
 * "..."}}}. cohortrun gives each worker such a file (error-RANK.json, in --log-dir or a temporary directory), shows
 * the root cause's message in its report, and, when cohortrun itself was given a TORCHELASTIC_ERROR_FILE (it runs
 * under another agent), copies the root cause's file there with "errorCode" set, as torchrun's launcher does
 * (ErrorHandler.dump_error_file); without a file from the worker it writes its own report in the same format.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/env.h"
#include "job.h"

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char path[4600];
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* The PID namespace of this process (the inode of /proc/self/ns/pid), 0 where it cannot be read. */
static unsigned long long pid_namespace(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* A cohortrun that was SIGKILLed (a node lost, a kill storm, a test's timeout) leaves its directory of error files
 * behind. Each cohortrun removes those of its user whose cohortrun is gone: the name says which process made it and
 * in which PID namespace (cohortrun-errors-NS-PID-XXXXXX), and only a directory of this namespace whose process no
 * longer exists is removed, so that a job in another container sharing the directory keeps its own. */
static void remove_stale_error_dirs(const char *tmp, unsigned long long ns) {
  DIR *d = opendir(tmp);
  if (!d || !ns) {
    if (d) closedir(d);
    return;
  }
  char prefix[64], path[4200];
  int plen = snprintf(prefix, sizeof prefix, "cohortrun-errors-%llu-", ns);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strncmp(e->d_name, prefix, (size_t)plen) != 0) continue;
    char *end = NULL;
    long pid = strtol(e->d_name + plen, &end, 10);
    if (pid <= 0 || !end || *end != '-') continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* its cohortrun runs (EPERM: another user's) */
    snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid()) remove_tree(path);
  }
  closedir(d);
}

int cohort__job_error_files_begin(job *j, int *rc) {
  j->devnull = -1;
  if (j->opts.log_dir) {
    snprintf(j->err_dir, sizeof j->err_dir, "%s", j->opts.log_dir); /* made by prepare_workers */
    return 0;
  }
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !tmp[0]) tmp = "/tmp";
  unsigned long long ns = pid_namespace();
  remove_stale_error_dirs(tmp, ns);
  snprintf(j->err_dir, sizeof j->err_dir, "%s/cohortrun-errors-%llu-%ld-XXXXXX", tmp, ns, (long)getpid());
  if (!mkdtemp(j->err_dir)) {
    fprintf(stderr, "cohortrun: cannot make a directory for the workers' error files (%s): %s\n", j->err_dir,
            strerror(errno));
    j->err_dir[0] = '\0';
    *rc = 1;
    return -1;
  }
  j->err_dir_owned = 1;
  return 0;
}

void cohort__job_error_file(const job *j, int local_rank, char *out, size_t len) {
  out[0] = '\0';
  if (!j->err_dir[0]) return;
  if (j->opts.elastic)
    snprintf(out, len, "%s/error-node-%d-local-%d.json", j->err_dir, j->opts.node_rank, local_rank);
  else
    snprintf(out, len, "%s/error-rank-%d.json", j->err_dir, j->rank0 + local_rank);
}

static char *slurp(const char *path, size_t max) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char *buf = malloc(max + 1);
  size_t n = buf ? fread(buf, 1, max, f) : 0;
  fclose(f);
  if (!buf) return NULL;
  buf[n] = '\0';
  return buf;
}

/* The string value of the first "key": "..." in text (JSON escapes decoded, \uXXXX as '?' past ASCII), malloc'd. */
static char *json_string(const char *text, const char *key) {
  char quoted[64];
  snprintf(quoted, sizeof quoted, "\"%s\"", key);
  for (const char *p = strstr(text, quoted); p; p = strstr(p + 1, quoted)) {
    const char *q = p + strlen(quoted);
    q += strspn(q, " \t\r\n");
    if (*q != ':') continue;
    q++;
    q += strspn(q, " \t\r\n");
    if (*q != '"') continue;
    q++;
    size_t cap = strlen(q) + 1, n = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    for (; *q && *q != '"'; q++) {
      if (*q != '\\') {
        out[n++] = *q;
        continue;
      }
      q++;
      switch (*q) {
      case 'n':
        out[n++] = '\n';
        break;
      case 't':
        out[n++] = '\t';
        break;
      case 'r':
        out[n++] = '\r';
        break;
      case 'b':
      case 'f':
        break;
      case 'u': {
        unsigned v = 0;
        if (sscanf(q + 1, "%4x", &v) == 1) q += 4;
        out[n++] = v < 128 ? (char)v : '?';
        break;
      }
      case '\0':
        q--;
        break;
      default:
        out[n++] = *q;
      }
    }
    out[n] = '\0';
    return out;
  }
  return NULL;
}

int cohort__job_read_error_file(const job *j, int local_rank, char **message, char **callstack) {
  char path[4400];
  *message = *callstack = NULL;
  cohort__job_error_file(j, local_rank, path, sizeof path);
  if (!path[0]) return 0;
  char *text = slurp(path, 1 << 20);
  if (!text) return 0;
  *message = json_string(text, "message");
  *callstack = json_string(text, "py_callstack");
  free(text);
  if (!*message) {
    free(*callstack);
    *callstack = NULL;
    return 0;
  }
  return 1;
}

static void json_escaped(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", f);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

void cohort__job_error_files_end(job *j, int rc) {
  const char *mine = getenv("TORCHELASTIC_ERROR_FILE");
  if (rc != 0 && mine && mine[0]) {
    char *message = NULL, *callstack = NULL;
    int local = j->root >= 0 && j->workers ? j->root : -1;
    if (local >= 0) cohort__job_read_error_file(j, local, &message, &callstack);
    char fallback[1400];
    if (!message) {
      /* No file from the worker: cohortrun's own words, with the worker's last stderr lines as the call stack. */
      if (local >= 0 && j->hang[0])
        snprintf(fallback, sizeof fallback, "cohortrun: %s", j->hang);
      else if (local >= 0)
        snprintf(fallback, sizeof fallback, "cohortrun: rank %d (host %s) failed with exit code %d",
                 j->workers[local].rank, j->host, rc);
      else
        snprintf(fallback, sizeof fallback, "cohortrun: the job failed with exit code %d%s", rc,
                 j->interrupted ? " (interrupted)" : "");
      message = strdup(fallback);
      size_t len = 0;
      const char *tail = local >= 0 && j->workers[local].err ? cohort__relay_tail(j->workers[local].err, &len) : "";
      callstack = strndup(tail, len);
    }
    FILE *f = fopen(mine, "w");
    if (f) {
      fputs("{\"message\": {\"message\": ", f);
      json_escaped(f, message ? message : "");
      fputs(", \"extraInfo\": {\"py_callstack\": ", f);
      json_escaped(f, callstack ? callstack : "");
      fprintf(f, ", \"timestamp\": \"%lld\"}, \"errorCode\": %d}}\n", (long long)time(NULL), rc);
      fclose(f);
    }
    free(message);
    free(callstack);
  }
  if (j->err_dir_owned) remove_tree(j->err_dir);
  j->err_dir_owned = 0;
  if (j->devnull >= 0) close(j->devnull);
  j->devnull = -1;
}

typedef struct knob_search {
  const char *name;
  size_t len;
  int known;
} knob_search;

static void note_knob(const char *name, const char *def, const char *desc, void *arg) {
  (void)def;
  (void)desc;
  knob_search *k = arg;
  if (strlen(name) == k->len && strncmp(name, k->name, k->len) == 0) k->known = 1;
}

extern char **environ;

void cohort__job_warn_unknown_knobs(void) {
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "COHORT_", 7) != 0 || strncmp(*e, "COHORT_TEST_", 12) == 0) continue;
    knob_search k = {.name = *e, .len = strcspn(*e, "=")};
    cohort__env_each(note_knob, &k);
    if (!k.known)
      fprintf(stderr, "cohortrun: unknown variable %.*s is ignored (a typo? docs/env.md lists them)\n", (int)k.len, *e);
  }
}
