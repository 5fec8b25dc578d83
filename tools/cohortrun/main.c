/* main.c: cohortrun, the local launcher: store, workers, output, and one clean stop when anything fails.
 *
 * The job is one poll loop on the main thread over the workers' pipes and a signalfd (SIGCHLD, SIGINT, SIGTERM),
 * so that a worker's death, a Ctrl-C and output are handled in one place, in order, with no signal-handler races.
 * The first worker that fails is the root cause: the others get SIGTERM, then SIGKILL after the grace, and the
 * loop goes on relaying their last words until every worker is reaped and every pipe is closed; only then is the
 * one summary line printed, so that it is the last thing on stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/env.h"
#include "core/error.h"
#include "comm/heartbeat.h"
#include "launcher.h"
#include "store/store.h"

/* After the last worker is reaped, how long its pipes may stay open (held by something it started) before
 * cohortrun stops reading them. */
#define DRAIN_AFTER_EXIT_NS 1000000000LL

typedef struct worker {
  int rank;
  pid_t pid; /* 0: never started */
  int running;
  int wait_status;
  int got_sigkill; /* still running at the end of the grace */
  int group_gone;  /* its process group has no member left (kill said ESRCH) */
  cohort__relay *out, *err;
  cohort__heartbeat_page *hb; /* COHORT_HEARTBEAT_S: the page the worker counts its collectives in; NULL if off */
  uint64_t hb_started, hb_completed; /* the counters when last seen */
  int64_t hb_change_ns;              /* when they last moved */
  int hb_armed;                      /* it has completed a collective: from now on, silence counts */
} worker;

typedef struct job {
  cohort__launch_opts opts;
  worker *workers;
  int started, running;
  int sfd;
  sigset_t child_mask;
  int stopping; /* the others were told to stop; SIGKILL follows at kill_at_ns */
  int64_t kill_at_ns;
  int killed;        /* SIGKILL was sent */
  int root;          /* rank of the first failure, -1 for none */
  int interrupted;   /* the signal cohortrun got, 0 for none */
  int stopped_count; /* ranks still running when the stop began */
  int sigkill_count; /* ranks that needed SIGKILL */
  int64_t drain_until_ns;
  char host[256];           /* this host's name, for the report */
  int rank0;                /* the global rank of this node's first worker */
  int world;                /* ranks in the whole job */
  cohort__cluster *cluster; /* NULL on one node */
  int64_t next_poll_ns;     /* when the cluster is polled next */
  char *remote_report;      /* why another node (or the loss of one) stopped this node; malloc'd */
  int remote_code;
  int root_is_job_root; /* this node's failure is the whole job's root cause (always so on one node) */
  double heartbeat_s;   /* COHORT_HEARTBEAT_S; 0: off */
  double timeout_s;     /* COHORT_TIMEOUT: how long the nodes of a cluster wait for each other */
  char hang[600];       /* the root is a worker that made no progress: what it was doing ("" otherwise) */
} job;

/* How often the heartbeat pages are looked at, at most. */
#define HEARTBEAT_CHECK_NS 100000000LL

/* How often a node's cohortrun bumps its heartbeat and looks at the others: 5 per second keeps a full stop of
 * every node well within 5 s of a failure anywhere. */
#define CLUSTER_POLL_NS 200000000LL

static void publish_failure(job *j);
static void poll_cluster(job *j);

static void ensure_std_fds(void) {
  /* A launcher started with a closed stdout would hand a pipe that very number, and dup2 onto itself keeps
   * CLOEXEC: give the standard descriptors something first. */
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0) {
      int nfd = open("/dev/null", O_RDWR);
      if (nfd >= 0 && nfd != fd) close(nfd);
    }
}

static const char *signal_name(int sig, char *buf, size_t len) {
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev)
    snprintf(buf, len, "SIG%s", abbrev);
  else
    snprintf(buf, len, "signal %d", sig);
  return buf;
}

static cohort_status make_secret(char *hex, size_t hex_len) {
  unsigned char raw[COHORT_LAUNCH_SECRET_BYTES];
  if (hex_len < 2 * sizeof raw + 1) return cohort__error(COHORT_ERR_INTERNAL, "secret buffer too small");
  if (RAND_bytes(raw, (int)sizeof raw) != 1)
    return cohort__error(COHORT_ERR_SYSTEM, "RAND_bytes failed to make the job secret");
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < sizeof raw; i++) {
    hex[2 * i] = digits[raw[i] >> 4];
    hex[2 * i + 1] = digits[raw[i] & 15];
  }
  hex[2 * sizeof raw] = '\0';
  return COHORT_OK;
}

/* errno of binding host:port ourselves: tells "port in use" apart from the store's other failures. */
static int bind_errno(const char *host, int port) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
  struct addrinfo *ai = NULL;
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  if (getaddrinfo(host, service, &hints, &ai) != 0) return EINVAL;
  int err = EINVAL;
  for (struct addrinfo *a = ai; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    err = bind(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    close(fd);
    if (err == 0 || err == EADDRINUSE) break;
  }
  freeaddrinfo(ai);
  return err;
}

static worker *find_worker(job *j, pid_t pid) {
  for (int i = 0; i < j->started; i++)
    if (j->workers[i].pid == pid) return &j->workers[i];
  return NULL;
}

/* To the worker's whole process group, so that what it started stops too, also when the worker itself has
 * already exited (the group lives on while any member does). A running worker that moved to another group is
 * signalled itself as well; one that did not gets the signal once, since a handler may count them (a second
 * SIGINT often means "force"). */
static void signal_worker(worker *w, int sig) {
  int in_group = !w->running || getpgid(w->pid) == w->pid;
  if (!w->group_gone && kill(-w->pid, sig) != 0 && errno == ESRCH) w->group_gone = 1;
  if (!in_group) kill(w->pid, sig);
}

/* Tells every worker (and what it started) to stop with sig; SIGKILL follows after the grace. */
static void begin_stop(job *j, int sig) {
  j->stopping = 1;
  j->stopped_count = j->running;
  j->kill_at_ns = cohort__now_ns() + (int64_t)(j->opts.grace_s * 1e9);
  for (int i = 0; i < j->started; i++)
    signal_worker(&j->workers[i], sig);
}

static void kill_all(job *j) {
  j->killed = 1;
  for (int i = 0; i < j->started; i++) {
    worker *w = &j->workers[i];
    if (w->running && !w->got_sigkill) {
      j->sigkill_count++;
      w->got_sigkill = 1;
    }
    signal_worker(w, SIGKILL);
  }
}

static int failed(int wait_status) { return !(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0); }

static void reap(job *j) {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    worker *w = find_worker(j, pid);
    if (!w || !w->running) continue;
    cohort__launch_remove_segments(pid); /* a rank killed while its peers were still mapping its segment */
    w->running = 0;
    w->wait_status = status;
    j->running--;
    if (j->running == 0) j->drain_until_ns = cohort__now_ns() + DRAIN_AFTER_EXIT_NS;
    /* Once a stop has begun, deaths are its consequences, not causes. */
    if (!j->stopping && failed(status)) {
      j->root = (int)(w - j->workers);
      begin_stop(j, SIGTERM);
      publish_failure(j);
    }
  }
}

static void on_signal(job *j, int sig) {
  if (sig == SIGCHLD) {
    reap(j);
  } else if (!j->stopping) {
    j->interrupted = sig;
    begin_stop(j, sig);
  } else {
    /* A second Ctrl-C (or one during a failure stop): the user does not want to wait for the grace. */
    if (!j->interrupted) j->interrupted = sig;
    kill_all(j);
  }
}

static void read_signals(job *j) {
  struct signalfd_siginfo si[16];
  for (;;) {
    ssize_t n = read(j->sfd, si, sizeof si);
    if (n <= 0) return;
    for (size_t k = 0; k < (size_t)n / sizeof si[0]; k++)
      on_signal(j, (int)si[k].ssi_signo);
  }
}

static int open_relays(const job *j) {
  int n = 0;
  for (int i = 0; i < j->started; i++) {
    if (j->workers[i].out && cohort__relay_fd(j->workers[i].out) >= 0) n++;
    if (j->workers[i].err && cohort__relay_fd(j->workers[i].err) >= 0) n++;
  }
  return n;
}

static void pump(cohort__relay *r) {
  int open = 1;
  if (cohort__relay_pump(r, &open) != COHORT_OK) fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
}

/* COHORT_HEARTBEAT_S: a worker whose collective counters have not moved for that long is hung. One that is outside
 * every collective is the culprit (its own code hangs); one that waits inside a collective is more likely waiting
 * for the culprit (on this node or another), so it is given a little longer, for the culprit to be named first. */
static void check_heartbeats(job *j) {
  if (!(j->heartbeat_s > 0) || j->stopping) return;
  int64_t now = cohort__now_ns();
  int culprit = -1;
  double culprit_silent = 0;
  for (int i = 0; i < j->started; i++) {
    worker *w = &j->workers[i];
    if (!w->running || !w->hb) continue;
    uint64_t started = atomic_load_explicit(&w->hb->started, memory_order_acquire);
    uint64_t completed = atomic_load_explicit(&w->hb->completed, memory_order_acquire);
    if (started != w->hb_started || completed != w->hb_completed || !w->hb_change_ns) {
      w->hb_started = started;
      w->hb_completed = completed;
      w->hb_change_ns = now;
      w->hb_armed = completed > 0;
      continue;
    }
    if (!w->hb_armed) continue; /* no collective yet: still setting up, which COHORT_TIMEOUT bounds */
    double silent = (double)(now - w->hb_change_ns) / 1e9;
    int inside = started > completed;
    double limit = j->heartbeat_s + (inside ? (j->heartbeat_s / 2 > 1 ? j->heartbeat_s / 2 : 1) : 0);
    if (silent <= limit) continue;
    int culprit_inside = culprit >= 0 && j->workers[culprit].hb_started > j->workers[culprit].hb_completed;
    if (culprit < 0 || (culprit_inside && !inside) || (culprit_inside == inside && silent > culprit_silent)) {
      culprit = i;
      culprit_silent = silent;
    }
  }
  if (culprit < 0) return;
  worker *w = &j->workers[culprit];
  uint64_t seq = atomic_load_explicit(&w->hb->last_seq, memory_order_relaxed);
  const char *kind = cohort__heartbeat_kind_name(atomic_load_explicit(&w->hb->last_kind, memory_order_relaxed));
  if (w->hb_started > w->hb_completed)
    snprintf(j->hang, sizeof j->hang,
             "rank %d (pid %d, host %s) made no progress for %.1f s (COHORT_HEARTBEAT_S=%g): it has been waiting "
             "inside collective #%llu (%s) all that time, for a peer that does not come",
             w->rank, (int)w->pid, j->host, culprit_silent, j->heartbeat_s, (unsigned long long)seq, kind);
  else
    snprintf(j->hang, sizeof j->hang,
             "rank %d (pid %d, host %s) made no progress for %.1f s (COHORT_HEARTBEAT_S=%g): it is outside every "
             "collective, in its own code; its last completed collective was #%llu (%s)",
             w->rank, (int)w->pid, j->host, culprit_silent, j->heartbeat_s, (unsigned long long)seq, kind);
  fprintf(stderr, "cohortrun: %s; stopping the job\n", j->hang);
  j->root = culprit;
  begin_stop(j, SIGTERM);
  j->stopped_count--; /* the others: the culprit itself is counted apart */
  publish_failure(j);
}

/* Runs until every worker is reaped and their pipes are closed (or the drain time is over). */
static void run_loop(job *j) {
  int cap = 1 + 2 * j->started;
  struct pollfd *fds = calloc((size_t)cap, sizeof *fds);
  cohort__relay **owners = calloc((size_t)cap, sizeof *owners);
  if (!fds || !owners) {
    /* Cannot watch the pipes: still stop and reap everything before leaving. */
    fprintf(stderr, "cohortrun: out of memory; stopping the workers\n");
    j->drain_until_ns = 0;
  }
  for (;;) {
    int64_t now = cohort__now_ns();
    if (j->stopping && !j->killed && j->running > 0 && now >= j->kill_at_ns) kill_all(j);
    if (j->running == 0 && (open_relays(j) == 0 || now >= j->drain_until_ns)) break;
    poll_cluster(j);
    check_heartbeats(j);
    if (!fds || !owners) {
      if (!j->stopping) begin_stop(j, SIGTERM);
      usleep(10000);
      read_signals(j);
      continue;
    }
    int n = 0;
    fds[n++] = (struct pollfd){.fd = j->sfd, .events = POLLIN};
    for (int i = 0; i < j->started; i++) {
      cohort__relay *rs[2] = {j->workers[i].out, j->workers[i].err};
      for (int k = 0; k < 2; k++)
        if (rs[k] && cohort__relay_fd(rs[k]) >= 0) {
          owners[n] = rs[k];
          fds[n++] = (struct pollfd){.fd = cohort__relay_fd(rs[k]), .events = POLLIN};
        }
    }
    int64_t wake = -1;
    if (j->stopping && !j->killed && j->running > 0) wake = j->kill_at_ns;
    if (j->running == 0) wake = j->drain_until_ns;
    if (j->cluster && (wake < 0 || j->next_poll_ns < wake)) wake = j->next_poll_ns;
    if (j->heartbeat_s > 0 && !j->stopping && (wake < 0 || now + HEARTBEAT_CHECK_NS < wake))
      wake = now + HEARTBEAT_CHECK_NS;
    int timeout_ms = -1;
    if (wake >= 0) timeout_ms = wake <= now ? 0 : (int)((wake - now + 999999) / 1000000);
    int ready = poll(fds, (nfds_t)n, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      fprintf(stderr, "cohortrun: poll: %s\n", strerror(errno));
      break;
    }
    if (ready <= 0) continue;
    /* Output first: a worker's last lines are read before its death is handled, so they come before the
     * summary and before the SIGTERM that its death triggers can cut the others short. */
    for (int i = 1; i < n; i++)
      if (fds[i].revents) pump(owners[i]);
    if (fds[0].revents) read_signals(j);
  }
  free(fds);
  free(owners);
  /* What the workers started may have outlived them; once the job is being stopped it goes too. (After a
   * success, it is left alone: it may be meant to outlive the job.) */
  if (j->stopping && !j->killed)
    for (int i = 0; i < j->started; i++)
      signal_worker(&j->workers[i], SIGKILL);
}

static void print_root_cause(const job *j, FILE *out);

/* This node's root cause, offered to the others (multi-node): the report every node will print. */
static void publish_failure(job *j) {
  j->root_is_job_root = 1;
  if (!j->cluster) return;
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) return;
  print_root_cause(j, mem);
  const worker *w = &j->workers[j->root];
  char name[32];
  if (j->hang[0])
    fprintf(mem, "cohortrun: node %d: %s\n", j->opts.node_rank, j->hang);
  else if (WIFEXITED(w->wait_status))
    fprintf(mem, "cohortrun: rank %d (pid %d, host %s, node %d) exited with code %d\n", w->rank, (int)w->pid, j->host,
            j->opts.node_rank, WEXITSTATUS(w->wait_status));
  else
    fprintf(mem, "cohortrun: rank %d (pid %d, host %s, node %d) was killed by signal %d (%s)\n", w->rank, (int)w->pid,
            j->host, j->opts.node_rank, WTERMSIG(w->wait_status),
            signal_name(WTERMSIG(w->wait_status), name, sizeof name));
  fclose(mem);
  int s = w->wait_status;
  int code = j->hang[0] ? 1 : WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
  j->root_is_job_root = cohort__cluster_publish_failure(j->cluster, text, code);
  free(text);
}

/* Also after a stop began: the heartbeat goes on, so that the other nodes do not take a node that is still
 * stopping (or about to restart) for a dead one. */
static void poll_cluster(job *j) {
  if (!j->cluster) return;
  int64_t now = cohort__now_ns();
  if (now < j->next_poll_ns) return;
  j->next_poll_ns = now + CLUSTER_POLL_NS;
  char *report = NULL;
  int code = 1;
  if (!cohort__cluster_poll(j->cluster, &report, &code)) return;
  if (j->remote_report) {
    free(report);
    return;
  }
  j->remote_report = report ? report : strdup("cohortrun: another node failed\n");
  j->remote_code = code;
  if (!j->stopping) begin_stop(j, SIGTERM);
}

/* Over every slot, not only the started ones: a worker whose spawn failed may hold a heartbeat page already. */
static void free_relays(job *j) {
  for (int i = 0; i < j->opts.np; i++) {
    cohort__relay_destroy(j->workers[i].out);
    cohort__relay_destroy(j->workers[i].err);
    j->workers[i].out = j->workers[i].err = NULL;
    if (j->workers[i].hb) munmap(j->workers[i].hb, COHORT_HEARTBEAT_PAGE_BYTES);
    j->workers[i].hb = NULL;
  }
}

/* DIR/rank-N.log for every rank, truncated: a log holds one run of cohortrun (restarts included, marked). In an
 * elastic job a node's ranks change from one generation to the next, so its files are named by node and local rank
 * instead (node >= 0): DIR/node-I-local-L.log. */
static cohort_status open_logs(const char *dir, int rank0, int np, int node, int *fds) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return cohort__error_errno(COHORT_ERR_INVALID, errno, "--log-dir: cannot create directory '%s'", dir);
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return cohort__error(COHORT_ERR_INVALID, "--log-dir: '%s' is not a directory", dir);
  for (int r = 0; r < np; r++) {
    char path[4200];
    if (node >= 0)
      snprintf(path, sizeof path, "%s/node-%d-local-%d.log", dir, node, r);
    else
      snprintf(path, sizeof path, "%s/rank-%d.log", dir, rank0 + r);
    fds[r] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0666);
    if (fds[r] < 0) return cohort__error_errno(COHORT_ERR_INVALID, errno, "--log-dir: cannot open '%s'", path);
  }
  return COHORT_OK;
}

/* One worker's heartbeat page: a memfd (no name in /dev/shm, so a kill leaves nothing behind), close-on-exec
 * except in that worker (spawn.c), mapped here for reading. */
static cohort_status open_heartbeat(int *fd_out, cohort__heartbeat_page **page_out) {
  *fd_out = -1;
  *page_out = NULL;
  int fd = memfd_create("cohortrun-heartbeat", MFD_CLOEXEC);
  if (fd < 0) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "memfd_create for the heartbeat page");
  if (ftruncate(fd, COHORT_HEARTBEAT_PAGE_BYTES) != 0) {
    int e = errno;
    close(fd);
    return cohort__error_errno(COHORT_ERR_SYSTEM, e, "ftruncate of the heartbeat page");
  }
  void *p = mmap(NULL, COHORT_HEARTBEAT_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return cohort__error_errno(COHORT_ERR_SYSTEM, e, "mmap of the heartbeat page");
  }
  cohort__heartbeat_page *page = p;
  atomic_store_explicit(&page->magic, COHORT_HEARTBEAT_MAGIC, memory_order_release);
  *fd_out = fd;
  *page_out = page;
  return COHORT_OK;
}

/* Starts generation gen of all np workers. On failure, the ranks already started are being stopped and
 * spawn_error says why. */
static cohort_status start_workers(job *j, const char *program, const char *secret, int port, int gen,
                                   const int *log_fds, char *spawn_error, size_t error_len) {
  free_relays(j);
  memset(j->workers, 0, (size_t)j->opts.np * sizeof *j->workers);
  j->started = j->running = 0;
  j->stopping = j->killed = 0;
  j->root = -1;
  j->stopped_count = j->sigkill_count = 0;
  j->drain_until_ns = 0;
  j->hang[0] = '\0';
  for (int r = 0; r < j->opts.np; r++) {
    worker *w = &j->workers[r];
    w->rank = j->rank0 + r;
    int hb_fd = -1;
    if (j->heartbeat_s > 0 && open_heartbeat(&hb_fd, &w->hb) != COHORT_OK) {
      snprintf(spawn_error, error_len, "cannot start rank %d: %s", j->rank0 + r, cohort_last_error());
      if (!j->stopping) begin_stop(j, SIGTERM);
      return COHORT_ERR_SYSTEM;
    }
    cohort__launch_worker_env wenv = {.rank = j->rank0 + r,
                                      .world_size = j->world,
                                      .local_rank = r,
                                      .local_world_size = j->opts.np,
                                      .master_addr = j->opts.master_addr,
                                      .master_port = port,
                                      .secret = secret,
                                      .restart_count = gen,
                                      .heartbeat_fd = hb_fd};
    char **envp = NULL;
    int out_fd = -1, err_fd = -1;
    cohort_status st = cohort__launch_env_build(&wenv, &envp);
    if (st == COHORT_OK) {
      cpu_set_t share;
      int bound = j->opts.bind_cores && cohort__launch_cpu_share(r, j->opts.np, &share);
      st = cohort__launch_spawn(program, j->opts.argv, envp, &j->child_mask, bound ? &share : NULL, hb_fd, &w->pid,
                                &out_fd, &err_fd);
      cohort__launch_env_free(envp);
    }
    if (hb_fd >= 0) close(hb_fd); /* the worker has its own; cohortrun keeps the mapping */
    if (st != COHORT_OK) {
      snprintf(spawn_error, error_len, "cannot start rank %d: %s", j->rank0 + r, cohort_last_error());
      if (!j->stopping) begin_stop(j, SIGTERM);
      return st;
    }
    w->running = 1;
    j->running++;
    j->started++;
    /* The relays take the pipes; if one cannot be made, its pipe is closed and that output is lost, but the
     * worker is still watched (a worker whose stdout is closed gets EPIPE, which is its own to handle). */
    if (cohort__relay_create(w->rank, out_fd, 1, log_fds[r], 0, &w->out) != COHORT_OK) close(out_fd);
    if (cohort__relay_create(w->rank, err_fd, 2, log_fds[r], 1, &w->err) != COHORT_OK) close(err_fd);
  }
  return COHORT_OK;
}

/* The root cause's own words: the last lines of its stderr, repeated after everyone's shutdown noise. */
#define ROOT_CAUSE_LINES 10
static void print_root_cause(const job *j, FILE *out) {
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
}

static void print_summary(const job *j) {
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
  if (j->sigkill_count > 0)
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
              (int)w->pid, j->host, WTERMSIG(w->wait_status), signal_name(WTERMSIG(w->wait_status), name, sizeof name),
              WCOREDUMP(w->wait_status) ? ", core dumped" : "", others, killed);
    if (j->interrupted)
      fprintf(stderr, "cohortrun: also interrupted by %s while stopping\n",
              signal_name(j->interrupted, name, sizeof name));
  } else if (j->interrupted) {
    fprintf(stderr, "cohortrun: interrupted by %s; %s%s\n", signal_name(j->interrupted, name, sizeof name), others,
            killed);
  }
}

static int exit_code(const job *j) {
  if (j->root >= 0 && j->hang[0]) return 1; /* whatever the hung worker did with its SIGTERM */
  if (j->root >= 0) {
    int s = j->workers[j->root].wait_status;
    return WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
  }
  if (j->interrupted) return 128 + j->interrupted;
  return 0;
}

int main(int argc, char **argv) {
  ensure_std_fds();
  job j;
  memset(&j, 0, sizeof j);
  j.root = -1;
  j.sfd = -1;
  if (cohort__launch_parse(argc, argv, &j.opts) != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s (see cohortrun --help)\n", cohort_last_error());
    return 2;
  }
  if (j.opts.help) {
    cohort__launch_usage(stdout);
    return 0;
  }
  char *program = NULL;
  if (cohort__launch_resolve_program(j.opts.argv[0], &program) != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
    return 2;
  }

  /* The knobs cohortrun itself uses, checked against the table (core/env_knobs.h) as the workers check theirs. */
  static cohort__config knobs;
  if (cohort__config_load_one(&knobs, "COHORT_HEARTBEAT_S") != COHORT_OK ||
      cohort__config_load_one(&knobs, "COHORT_TIMEOUT") != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
    free(program);
    return 2;
  }
  j.heartbeat_s = knobs.heartbeat_s;
  j.timeout_s = (double)knobs.timeout_s;
  int rc = 1;
  int *log_fds = NULL;
  pid_t ssh_pids[COHORT_LAUNCH_HOSTS_MAX] = {0};
  cohort__store_server *server = NULL;
  char spawn_error[1100] = "";
  cohort_status spawn_status = COHORT_OK;
  /* Signals are read through the signalfd, so they must be blocked in every thread: block them before the
   * store starts its thread. Workers get the mask cohortrun started with. */
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, &j.child_mask);
  /* A reader of our output that goes away must not kill the job (output.c drops the output instead). */
  signal(SIGPIPE, SIG_IGN);
  j.sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (j.sfd < 0) {
    fprintf(stderr, "cohortrun: signalfd: %s\n", strerror(errno));
    goto done;
  }

  char secret[2 * COHORT_LAUNCH_SECRET_BYTES + 1];
  gethostname(j.host, sizeof j.host - 1);
  j.rank0 = j.opts.node_rank * j.opts.np;
  j.world = j.opts.nnodes * j.opts.np;
  const char *given = getenv("COHORT_SECRET");
  if (j.opts.nhosts > 0 && given && given[0] && strlen(given) < sizeof secret) {
    snprintf(secret, sizeof secret, "%s", given);
  } else if (j.opts.nhosts > 0) {
    /* -H: this cohortrun hands the secret to every node itself (over ssh's stdin). */
    if (make_secret(secret, sizeof secret) != COHORT_OK) {
      fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
      goto done;
    }
  } else if (j.opts.nnodes > 1) {
    /* Every node must hold the same secret, and only the user can put it there. */
    if (!given || !given[0] || strlen(given) >= sizeof secret) {
      fprintf(stderr,
              "cohortrun: --nnodes %d needs COHORT_SECRET exported, the same on every node (e.g. export "
              "COHORT_SECRET=$(openssl rand -hex 32) and pass it to each node)\n",
              j.opts.nnodes);
      rc = 2;
      goto done;
    }
    snprintf(secret, sizeof secret, "%s", given);
  } else if (make_secret(secret, sizeof secret) != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
    goto done;
  }
  if (j.opts.node_rank == 0 &&
      cohort__store_server_start(j.opts.master_addr, j.opts.master_port, secret, &server) != COHORT_OK) {
    if (j.opts.master_port != 0 && bind_errno(j.opts.master_addr, j.opts.master_port) == EADDRINUSE)
      fprintf(stderr,
              "cohortrun: --master-port %d is already in use on %s; stop whatever holds it, pick another port, or "
              "pass --master-port 0 for a free one\n",
              j.opts.master_port, j.opts.master_addr);
    else
      fprintf(stderr, "cohortrun: cannot start the rendezvous store on %s:%d: %s\n", j.opts.master_addr,
              j.opts.master_port, cohort_last_error());
    goto done;
  }
  int port = server ? cohort__store_server_port(server) : j.opts.master_port;
  for (int n = 1; n < j.opts.nhosts; n++) {
    if (cohort__launch_ssh_node(&j.opts, n, port, secret, &ssh_pids[n]) != COHORT_OK) {
      fprintf(stderr, "cohortrun: cannot start node %d on %s: %s\n", n, j.opts.hosts[n], cohort_last_error());
      goto done;
    }
  }
  if (j.opts.nnodes > 1) {
    double timeout_s = j.timeout_s;
    int end_code = 1;
    cohort_status st =
        cohort__cluster_join(j.opts.master_addr, port, secret, timeout_s, &j.opts, j.host, &end_code, &j.cluster);
    if (st != COHORT_OK) {
      fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
      /* Elastic: the job ended before a generation took this node in; it ends with the job's code. */
      if (st == COHORT_ERR_REMOTE) rc = end_code;
      /* Node 0's store stays up a moment, so that the node that disagrees reads node 0's word and says so too,
       * instead of only losing its connection. */
      if (server && st == COHORT_ERR_MISMATCH) usleep(1000000);
      goto done;
    }
  }

  j.workers = calloc((size_t)j.opts.np, sizeof *j.workers);
  log_fds = malloc((size_t)j.opts.np * sizeof *log_fds);
  if (!j.workers || !log_fds) {
    fprintf(stderr, "cohortrun: out of memory for %d workers\n", j.opts.np);
    goto done;
  }
  for (int r = 0; r < j.opts.np; r++)
    log_fds[r] = -1;
  if (j.opts.log_dir &&
      open_logs(j.opts.log_dir, j.rank0, j.opts.np, j.opts.elastic ? j.opts.node_rank : -1, log_fds) != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
    rc = 2;
    goto done;
  }
  if (j.opts.bind_cores) {
    cpu_set_t probe;
    if (!cohort__launch_cpu_share(0, j.opts.np, &probe))
      fprintf(stderr, "cohortrun: --bind core: %d workers but only %ld CPUs; the workers are not bound\n", j.opts.np,
              sysconf(_SC_NPROCESSORS_ONLN));
  }
  for (int gen = 0;; gen++) {
    if (j.opts.elastic) {
      /* The generation's membership decides this node's ranks and the world size. */
      gen = cohort__cluster_gen(j.cluster);
      j.rank0 = cohort__cluster_rank(j.cluster) * j.opts.np;
      j.world = cohort__cluster_size(j.cluster) * j.opts.np;
      fprintf(stderr,
              "cohortrun: node %d: generation %d (COHORT_RESTART_COUNT=%d): %s; %d node%s, world size %d, this "
              "node runs ranks %d..%d\n",
              j.opts.node_rank, gen, gen, cohort__cluster_why(j.cluster), cohort__cluster_size(j.cluster),
              cohort__cluster_size(j.cluster) == 1 ? "" : "s", j.world, j.rank0, j.rank0 + j.opts.np - 1);
      for (int r = 0; gen > 0 && r < j.opts.np; r++)
        if (log_fds[r] >= 0) {
          char mark[96];
          int n =
              snprintf(mark, sizeof mark, "---- cohortrun: generation %d, COHORT_RESTART_COUNT=%d ----\n", gen, gen);
          if (write(log_fds[r], mark, (size_t)n) != n) { /* the relay reports a failing log when it next writes */
          }
        }
    }
    spawn_status = start_workers(&j, program, secret, port, gen, log_fds, spawn_error, sizeof spawn_error);
    run_loop(&j);
    if (spawn_status != COHORT_OK) {
      fprintf(stderr, "cohortrun: %s; stopped the %d rank%s already started\n", spawn_error, j.started,
              j.started == 1 ? "" : "s");
      rc = spawn_status == COHORT_ERR_INVALID ? 2 : 1;
      break;
    }
    int changed = j.cluster && cohort__cluster_changed(j.cluster);
    if (changed && !(j.root >= 0 && j.root_is_job_root)) {
      /* Elastic: a node left or joined. Not a failure: a new generation follows (node 0 decides it below). */
      if (j.remote_report) fputs(j.remote_report, stderr);
      fprintf(stderr, "cohortrun: node %d: stopped its %d rank%s for a new generation\n", j.opts.node_rank,
              j.stopped_count, j.stopped_count == 1 ? "" : "s");
      rc = 1;
    } else if (j.remote_report && !(j.root >= 0 && j.root_is_job_root)) {
      /* Another node's failure (or loss) stopped this one: its report, after this node's shutdown noise. */
      fputs(j.remote_report, stderr);
      fprintf(stderr, "cohortrun: node %d: stopped its %d rank%s because of the failure above\n", j.opts.node_rank,
              j.stopped_count, j.stopped_count == 1 ? "" : "s");
      rc = j.remote_code ? j.remote_code : 1;
    } else {
      print_root_cause(&j, stderr);
      print_summary(&j);
      rc = exit_code(&j);
    }
    int job_failed = j.root >= 0 || j.remote_report || changed;
    if (!job_failed || j.interrupted) break;
    if (j.opts.elastic) {
      /* Whether this was a failure (which uses up a restart) or a change of membership (which does not), and who
       * is in the next generation, is node 0's decision; every node follows it. */
      double timeout_s = j.timeout_s;
      int end_code = 1;
      char *why = NULL;
      if (!cohort__cluster_regroup(j.cluster, timeout_s, &end_code, &why)) {
        fprintf(stderr, "cohortrun: node %d: %s\n", j.opts.node_rank, why ? why : "the job ended");
        free(why);
        rc = end_code ? end_code : rc;
        break;
      }
      free(why);
      free(j.remote_report);
      j.remote_report = NULL;
      j.remote_code = 0;
      j.root_is_job_root = 0;
      goto next_generation;
    }
    if (gen >= j.opts.max_restarts) break;
    if (j.cluster) {
      /* Every node starts the next generation together, once all of them have stopped this one: a node whose
       * workers came up early would only wait for the others at the workers' rendezvous, and a node that cannot
       * come back (its cohortrun or host gone) ends the job instead. */
      double timeout_s = j.timeout_s;
      if (cohort__cluster_restart(j.cluster, timeout_s) != COHORT_OK) {
        fprintf(stderr, "cohortrun: node %d: no restart: %s\n", j.opts.node_rank, cohort_last_error());
        break;
      }
      free(j.remote_report);
      j.remote_report = NULL;
      j.remote_code = 0;
      j.root_is_job_root = 0;
      fprintf(stderr,
              "cohortrun: restart %d of %d: node %d starts its %d rank%s (%d..%d of %d) again with "
              "COHORT_RESTART_COUNT=%d, with all %d nodes\n",
              gen + 1, j.opts.max_restarts, j.opts.node_rank, j.opts.np, j.opts.np == 1 ? "" : "s", j.rank0,
              j.rank0 + j.opts.np - 1, j.world, gen + 1, j.opts.nnodes);
    } else {
      /* A failure with restarts left: everything of this generation is stopped and reaped (run_loop returned), so
       * the next one starts clean, under a new COHORT_RESTART_COUNT, which scopes every rendezvous key anew. */
      fprintf(stderr, "cohortrun: restart %d of %d: starting all %d ranks again with COHORT_RESTART_COUNT=%d\n",
              gen + 1, j.opts.max_restarts, j.opts.np, gen + 1);
    }
    for (int r = 0; r < j.opts.np; r++)
      if (log_fds[r] >= 0) {
        char mark[96];
        int n =
            snprintf(mark, sizeof mark, "---- cohortrun: restart %d, COHORT_RESTART_COUNT=%d ----\n", gen + 1, gen + 1);
        if (write(log_fds[r], mark, (size_t)n) != n) { /* the relay reports a failing log when it next writes */
        }
      }
  next_generation:
      /* A signal during the stop still counts: it was read by run_loop and leaves j.interrupted set. */
      ;
  }

  if (j.cluster) {
    /* Node 0's store must outlive the other nodes' use of it: wait until every node is done (or gone). */
    cohort__cluster_done(j.cluster, rc);
    /* Elastic: no generation follows; the nodes waiting for one (a failure elsewhere, newcomers) end now. */
    cohort__cluster_finish(j.cluster, rc);
    while (j.opts.node_rank == 0 && !cohort__cluster_all_done(j.cluster)) {
      usleep(CLUSTER_POLL_NS / 1000);
      /* Every worker is reaped; a SIGINT or SIGTERM now only ends this wait (a node that neither finishes nor goes
       * silent would otherwise hold node 0 forever, deaf to signals: they are blocked for the signalfd). */
      struct signalfd_siginfo si;
      int sig = 0;
      while (!sig && read(j.sfd, &si, sizeof si) == (ssize_t)sizeof si)
        if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM) sig = (int)si.ssi_signo;
      if (sig) {
        char name[32];
        fprintf(stderr, "cohortrun: node 0: interrupted by %s while waiting for the other nodes to finish\n",
                signal_name(sig, name, sizeof name));
        if (rc == 0) rc = 128 + sig;
        break;
      }
      char *report = NULL;
      int code = 1;
      if (cohort__cluster_poll(j.cluster, &report, &code) && rc == 0) {
        /* This node succeeded, another failed after it: the job did not. */
        if (report) fputs(report, stderr);
        rc = code ? code : 1;
      }
      free(report);
    }
    /* Newcomers read the end record within a step of their wait: keep the store up for them. */
    if (j.opts.elastic && j.opts.node_rank == 0) usleep(300000);
  }

done:
  cohort__cluster_leave(j.cluster);
  /* The other nodes' ssh: they end with their cohortrun; one that does not within the grace is not waited for. */
  for (int n = 1; n < j.opts.nhosts; n++) {
    if (ssh_pids[n] <= 0) continue;
    int64_t until = cohort__now_ns() + (int64_t)(j.opts.grace_s * 1e9) + 1000000000LL;
    while (waitpid(ssh_pids[n], NULL, WNOHANG) == 0) {
      if (cohort__now_ns() >= until) {
        kill(ssh_pids[n], SIGKILL);
        waitpid(ssh_pids[n], NULL, 0);
        break;
      }
      usleep(20000);
    }
  }
  free(j.remote_report);
  if (j.workers) {
    free_relays(&j);
    free(j.workers);
  }
  cohort__store_server_stop(server);
  if (j.sfd >= 0) close(j.sfd);
  if (log_fds) {
    for (int r = 0; r < j.opts.np; r++)
      if (log_fds[r] >= 0) close(log_fds[r]);
    free(log_fds);
  }
  free(program);
  return rc;
}
