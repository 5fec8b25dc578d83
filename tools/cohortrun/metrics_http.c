/* metrics_http.c: the job's live metrics over HTTP for Prometheus (metrics_http.h). */
#include "metrics_http.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"

struct cohortrun_metrics {
  int fd;
  char dir[256];
  char host[128];
  int rank0;
  const cohortrun_job_figures *figures;
  pthread_t thread;
  _Atomic int stop;
};

/* The counters a rank's engine writes (src/ddp/counters.c), as metric families. Others are gauges cohort_<name>. */
static const struct family {
  const char *file_name, *metric, *type, *help;
} families[] = {
    {"steps_total", "cohort_steps", "counter", "synchronized DDP steps of the rank"},
    {"compute_seconds_total", "cohort_compute_seconds", "counter", "seconds in forward and backward"},
    {"allreduce_seconds_total", "cohort_allreduce_seconds", "counter", "seconds the gradient allreduces took"},
    {"exposed_comm_seconds_total", "cohort_exposed_comm_seconds", "counter",
     "seconds the rank waited for communication after backward"},
    {"allreduce_bytes_total", "cohort_allreduce_bytes", "counter", "gradient bytes reduced"},
    {"step_seconds", "cohort_step_seconds", "gauge", "wall seconds of the rank's last step"},
    {"stalls_total", "cohort_stalls", "counter", "the stall inspector's warnings (a bucket waited COHORT_STALL_S)"},
    {"img_per_s", "cohort_img_per_second", "gauge", "the program's last throughput figure (images per second)"},
    {"loss", "cohort_loss", "gauge", "the program's last loss"},
    {"lr", "cohort_learning_rate", "gauge", "the program's last learning rate"},
};
#define NFAMILIES (sizeof families / sizeof families[0])

typedef struct sample {
  int rank;
  double value;
} sample;

/* A growing text buffer. */
typedef struct text {
  char *s;
  size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (t->s && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap * 2 : 4096;
    while (cap < t->len + (size_t)n + 1)
      cap *= 2;
    char *s = realloc(t->s, cap);
    if (!s) return;
    t->s = s;
    t->cap = cap;
  }
}

/* Every rank's "name value" lines, for one name. */
static int read_samples(const char *dir, const char *name, sample *out, int max) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max) {
    int rank;
    char tail;
    if (sscanf(e->d_name, "rank-%d.tx%c", &rank, &tail) != 2 || tail != 't') continue;
    char path[512], line[256];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    while (fgets(line, sizeof line, f)) {
      char key[64];
      double v;
      if (sscanf(line, "%63s %lf", key, &v) == 2 && strcmp(key, name) == 0) {
        out[n].rank = rank;
        out[n++].value = v;
        break;
      }
    }
    fclose(f);
  }
  closedir(d);
  return n;
}

char *cohortrun_metrics_page(cohortrun_metrics *m) {
  text t = {0};
  sample samples[1024];
  for (size_t i = 0; i < NFAMILIES; i++) {
    const struct family *fam = &families[i];
    int n = read_samples(m->dir, fam->file_name, samples, 1024);
    if (!n) continue;
    put(&t, "# TYPE %s %s\n# HELP %s %s\n", fam->metric, fam->type, fam->metric, fam->help);
    for (int k = 0; k < n; k++)
      put(&t, "%s%s{rank=\"%d\",host=\"%s\"} %.9g\n", fam->metric, strcmp(fam->type, "counter") ? "" : "_total",
          samples[k].rank, m->host, samples[k].value);
  }
  const cohortrun_job_figures *j = m->figures;
  put(&t,
      "# TYPE cohortrun_ranks_running gauge\n# HELP cohortrun_ranks_running workers of this node running\n"
      "cohortrun_ranks_running{host=\"%s\",first_rank=\"%d\"} %d\n",
      m->host, m->rank0, j ? j->ranks_running : 0);
  put(&t,
      "# TYPE cohortrun_generation gauge\n# HELP cohortrun_generation restarts so far (COHORT_RESTART_COUNT)\n"
      "cohortrun_generation{host=\"%s\"} %d\n",
      m->host, j ? j->generation : 0);
  put(&t,
      "# TYPE cohortrun_failures counter\n# HELP cohortrun_failures generations that ended in a failure\n"
      "cohortrun_failures_total{host=\"%s\"} %d\n# EOF\n",
      m->host, j ? j->failures : 0);
  return t.s;
}

static void serve_one(cohortrun_metrics *m, int c) {
  /* The request's first line is all that is read (a bounded wait: a client that sends nothing is dropped). */
  char req[1024];
  size_t got = 0;
  while (got < sizeof req - 1 && !memchr(req, '\n', got)) {
    struct pollfd p = {.fd = c, .events = POLLIN};
    if (poll(&p, 1, 2000) <= 0) return;
    ssize_t n = recv(c, req + got, sizeof req - 1 - got, 0);
    if (n <= 0) return;
    got += (size_t)n;
  }
  req[got] = '\0';
  int ok = strncmp(req, "GET /metrics", 12) == 0 && (req[12] == ' ' || req[12] == '?');
  char *body = ok ? cohortrun_metrics_page(m) : NULL;
  const char *b = body ? body : "not found: the metrics are at /metrics\n";
  char head[256];
  int hn =
      snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
               ok ? "200 OK" : "404 Not Found",
               ok ? "application/openmetrics-text; version=1.0.0; charset=utf-8" : "text/plain", strlen(b));
  if (send(c, head, (size_t)hn, MSG_NOSIGNAL) == hn) (void)!send(c, b, strlen(b), MSG_NOSIGNAL);
  free(body);
}

static void *serve(void *arg) {
  cohortrun_metrics *m = arg;
  while (!atomic_load(&m->stop)) {
    struct pollfd p = {.fd = m->fd, .events = POLLIN};
    if (poll(&p, 1, 200) <= 0) continue;
    int c = accept(m->fd, NULL, NULL);
    if (c < 0) continue;
    serve_one(m, c);
    close(c);
  }
  return NULL;
}

cohort_status cohortrun_metrics_start(const char *addr, int port, const char *host, int rank0,
                                      const cohortrun_job_figures *figures, cohortrun_metrics **out, int *bound_port) {
  *out = NULL;
  cohortrun_metrics *m = calloc(1, sizeof *m);
  if (!m) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  m->figures = figures;
  m->rank0 = rank0;
  snprintf(m->host, sizeof m->host, "%s", host);
  for (char *p = m->host; *p; p++) /* a label value: no quote or backslash */
    if (*p == '"' || *p == '\\') *p = '_';
  snprintf(m->dir, sizeof m->dir, "%s/cohortrun-metrics-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(m->dir)) {
    cohort_status st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "--metrics-port: cannot make %s", m->dir);
    free(m);
    return st;
  }
  m->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  cohort_status st = COHORT_OK;
  if (addr && inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
    st = cohort__error(COHORT_ERR_INVALID, "--metrics-port: '%s' is not an IPv4 address", addr);
  else if (m->fd < 0 || setsockopt(m->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
           bind(m->fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(m->fd, 16) != 0)
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "--metrics-port: cannot listen on %s:%d", addr ? addr : "*",
                             port);
  socklen_t len = sizeof sa;
  if (st == COHORT_OK && getsockname(m->fd, (struct sockaddr *)&sa, &len) == 0) *bound_port = ntohs(sa.sin_port);
  if (st == COHORT_OK && setenv("COHORT_METRICS_DIR", m->dir, 1) != 0)
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "--metrics-port: setenv");
  if (st == COHORT_OK) {
    /* The thread takes no signal: cohortrun reads SIGCHLD and the others through its signalfd, and a thread that
     * did not block them would swallow them (the job then never saw its workers exit). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&m->thread, NULL, serve, m) != 0)
      st = cohort__error(COHORT_ERR_SYSTEM, "--metrics-port: cannot start the serving thread");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  if (st != COHORT_OK) {
    if (m->fd >= 0) close(m->fd);
    rmdir(m->dir);
    free(m);
    return st;
  }
  *out = m;
  return COHORT_OK;
}

void cohortrun_metrics_stop(cohortrun_metrics *m) {
  if (!m) return;
  atomic_store(&m->stop, 1);
  pthread_join(m->thread, NULL);
  close(m->fd);
  DIR *d = opendir(m->dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || (e->d_name[1] == '.' && e->d_name[2] == '\0'))) continue;
      char path[512];
      snprintf(path, sizeof path, "%s/%s", m->dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(m->dir);
  free(m);
}
