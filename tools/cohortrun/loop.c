/* loop.c: the poll loop of one generation (job.h).
 *
 * The job is one poll loop on the main thread over the workers' pipes and a signalfd (SIGCHLD, SIGINT, SIGTERM),
 * so that a worker's death, a Ctrl-C and output are handled in one place, in order, with no signal-handler races.
 * The first worker that fails is the root cause: the others get SIGTERM, then SIGKILL after the grace, and the
 * loop goes on relaying their last words until every worker is reaped and every pipe is closed; only then is the
 * one summary line printed, so that it is the last thing on stderr.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/proc.h"
#include "job.h"

/* After the last worker is reaped, how long its pipes may stay open (held by something it started) before
 * cohortrun stops reading them. */
#define DRAIN_AFTER_EXIT_NS 1000000000LL

/* How often the heartbeat pages are looked at, at most. */
#define HEARTBEAT_CHECK_NS 100000000LL

static void publish_failure(job *j);
static void stop_for_hang(job *j, int culprit);

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
void cohort__job_begin_stop(job *j, int sig) {
  j->stopping = 1;
  j->stopped_count = j->running;
  j->kill_at_ns = cohort__now_ns() + (int64_t)(j->opts.grace_s * 1e9);
  for (int i = 0; i < j->started; i++) {
    signal_worker(&j->workers[i], sig);
    /* A stopped worker (SIGSTOP, Ctrl-Z) acts on the signal only once it runs again: as a shell's kill does. */
    signal_worker(&j->workers[i], SIGCONT);
  }
}

/* forced_by: the signal that asked for it (a second Ctrl-C), 0 when the grace ran out. */
static void kill_all(job *j, int forced_by) {
  if (!j->killed) j->forced_by = forced_by;
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
    j->figures.ranks_running = j->running;
    if (j->running == 0) j->drain_until_ns = cohort__now_ns() + DRAIN_AFTER_EXIT_NS;
    /* Once a stop has begun, deaths are its consequences, not causes. */
    if (!j->stopping && failed(status)) {
      j->root = (int)(w - j->workers);
      cohort__job_begin_stop(j, SIGTERM);
      publish_failure(j);
    }
  }
}

void cohort__job_on_signal(job *j, int sig) {
  if (sig == SIGCHLD) {
    reap(j);
  } else if (!j->stopping) {
    j->interrupted = sig;
    cohort__job_begin_stop(j, sig);
    if (j->cluster) {
      /* Every node stops with this one, and says why, instead of waiting to lose node 0's store (or for a node that
       * will not come back). */
      char name[32], text[400];
      snprintf(text, sizeof text, "cohortrun: node %d (host %s) was interrupted by %s, so every node stops\n",
               j->opts.node_rank, j->host, cohort__job_signal_name(sig, name, sizeof name));
      cohort__cluster_publish_failure(j->cluster, text, 128 + sig);
    }
  } else {
    /* A second Ctrl-C (or one during a failure stop): the user does not want to wait for the grace. */
    if (!j->interrupted) j->interrupted = sig;
    kill_all(j, sig);
  }
}

static void read_signals(job *j) {
  struct signalfd_siginfo si[16];
  for (;;) {
    ssize_t n = read(j->sfd, si, sizeof si);
    if (n <= 0) return;
    for (size_t k = 0; k < (size_t)n / sizeof si[0]; k++)
      cohort__job_on_signal(j, (int)si[k].ssi_signo);
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
  char state = cohort__proc_state(w->pid);
  if (state == 'T' || state == 't')
    /* Its silence is no hang of its own: someone stopped it. Waiting longer would not help; say what it is. */
    snprintf(j->hang, sizeof j->hang,
             "rank %d (pid %d, host %s) made no progress for %.1f s (COHORT_HEARTBEAT_S=%g): it is stopped "
             "(%s; SIGCONT resumes it), %s collective #%llu (%s)",
             w->rank, (int)w->pid, j->host, culprit_silent, j->heartbeat_s,
             state == 'T' ? "SIGSTOP or Ctrl-Z" : "held by a debugger or tracer",
             w->hb_started > w->hb_completed ? "inside" : "after", (unsigned long long)seq, kind);
  else if (w->hb_started > w->hb_completed)
    snprintf(j->hang, sizeof j->hang,
             "rank %d (pid %d, host %s) made no progress for %.1f s (COHORT_HEARTBEAT_S=%g): it has been waiting "
             "inside collective #%llu (%s) all that time, for a peer that does not come",
             w->rank, (int)w->pid, j->host, culprit_silent, j->heartbeat_s, (unsigned long long)seq, kind);
  else
    snprintf(j->hang, sizeof j->hang,
             "rank %d (pid %d, host %s) made no progress for %.1f s (COHORT_HEARTBEAT_S=%g): it is outside every "
             "collective, in its own code; its last completed collective was #%llu (%s)",
             w->rank, (int)w->pid, j->host, culprit_silent, j->heartbeat_s, (unsigned long long)seq, kind);
  stop_for_hang(j, culprit);
}

/* Waits in the kernel that are a worker's own doing (a sleep, a disk), as opposed to waiting for another process
 * (a futex, poll, a socket): of ranks that all stalled, one in such a wait is the likely culprit. */
static int own_wait(const char *wchan) {
  static const char *const own[] = {"nanosleep", "clock_nanosleep", "do_nanosleep",    "folio_wait", "io_schedule",
                                    "blk",       "sigsuspend",      "do_sigtimedwait", "pipe_wait",  "wait_woken"};
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
    if (strstr(wchan, own[i])) return 1;
  return 0;
}

#define WATCH_CHECK_NS 250000000LL

/* COHORT_HEARTBEAT_S for workers that never map their heartbeat page (a plain torch program, a script: anything
 * not built on libcohort). Their progress is their process tree's CPU time and their output (watch.c). A worker
 * whose tree used no CPU and wrote nothing for S seconds has stalled; once every worker of this node has, the job
 * is hung here. The culprit is the one whose wait in the kernel is its own (a sleep) while the others wait for a
 * peer, else the one whose wait differs from all the others', else the one that stalled first; the report says
 * which evidence named it. A node without that evidence gives the other nodes max(1, S/2) more to speak first. */
static void check_stalls(job *j) {
  if (!(j->heartbeat_s > 0) || j->stopping) return;
  int64_t now = cohort__now_ns();
  if (now < j->next_watch_ns) return;
  j->next_watch_ns = now + WATCH_CHECK_NS;
  int running = 0, stalled = 0;
  for (int i = 0; i < j->started; i++) {
    worker *w = &j->workers[i];
    if (!w->running) continue;
    /* A cohort program counts its collectives: check_heartbeats judges it, more precisely. */
    if (!w->hb || atomic_load_explicit(&w->hb->attached, memory_order_acquire)) return;
    running++;
    uint64_t cpu = cohort__launch_tree_activity(w->pid);
    uint64_t bytes = cohort__relay_bytes(w->out) + cohort__relay_bytes(w->err);
    if (!w->quiet_since_ns || cpu != w->cpu_ticks || bytes != w->out_bytes) {
      w->cpu_ticks = cpu;
      w->out_bytes = bytes;
      w->quiet_since_ns = now;
      continue;
    }
    if ((double)(now - w->quiet_since_ns) / 1e9 > j->heartbeat_s) stalled++;
  }
  if (running == 0 || stalled < running) return;
  char(*wchan)[64] = calloc((size_t)j->started, sizeof *wchan);
  if (!wchan) return;
  int culprit = -1, owns = 0, first = -1, stopped = 0, stopped_at = -1;
  for (int i = 0; i < j->started; i++) {
    worker *w = &j->workers[i];
    if (!w->running) continue;
    cohort__launch_wchan(w->pid, wchan[i], sizeof wchan[i]);
    if (own_wait(wchan[i])) owns++, culprit = owns == 1 ? i : -1;
    char state = cohort__proc_state(w->pid);
    if (state == 'T' || state == 't') stopped++, stopped_at = i;
    if (first < 0 || w->quiet_since_ns < j->workers[first].quiet_since_ns) first = i;
  }
  const char *how = "its wait in the kernel is its own (a sleep, a disk) while the others wait for a peer";
  if (stopped == 1) {
    /* A stopped rank (SIGSTOP, Ctrl-Z, a debugger) cannot go on whatever the others wait for: it is the culprit,
     * before any reading of waits (a stopped rank waits for no peer, and a sleeping one beside it is no culprit). */
    culprit = stopped_at;
    how = "it is the one rank the kernel shows stopped";
  } else if (owns != 1) {
    culprit = -1;
    /* The odd one out: every other stalled rank waits at one and the same place. */
    for (int i = 0; i < j->started && culprit < 0 && running >= 3; i++) {
      if (!j->workers[i].running) continue;
      int same_others = 1, differs = 1;
      const char *other = NULL;
      for (int k = 0; k < j->started; k++) {
        if (k == i || !j->workers[k].running) continue;
        if (other && strcmp(other, wchan[k]) != 0) same_others = 0;
        other = wchan[k];
        if (strcmp(wchan[i], wchan[k]) == 0) differs = 0;
      }
      if (same_others && differs) culprit = i;
    }
    how = "its wait in the kernel differs from the one all the other ranks share";
  }
  int evidence = culprit >= 0;
  if (!evidence) {
    culprit = first;
    how = "it went quiet first (no rank's wait tells more)";
    /* Without evidence, the culprit's own node (if another) may know better: give it time to say so first. */
    double extra = j->heartbeat_s / 2 > 1 ? j->heartbeat_s / 2 : 1;
    if (j->cluster && (double)(now - j->workers[culprit].quiet_since_ns) / 1e9 <= j->heartbeat_s + extra) {
      free(wchan);
      return;
    }
  }
  worker *w = &j->workers[culprit];
  double quiet = (double)(now - w->quiet_since_ns) / 1e9;
  char others[300] = "";
  size_t at = 0;
  for (int i = 0; i < j->started && at < sizeof others - 80; i++)
    if (j->workers[i].running && i != culprit)
      at += (size_t)snprintf(others + at, sizeof others - at, "%s%d at %s", at ? ", " : "", j->workers[i].rank,
                             wchan[i][0] ? wchan[i] : "(running)");
  char state = cohort__proc_state(w->pid);
  snprintf(j->hang, sizeof j->hang,
           "rank %d (pid %d, host %s) made no progress for %.1f s (COHORT_HEARTBEAT_S=%g; it does not count "
           "collectives for cohortrun, so its CPU time, I/O and output were watched: none%s), and no rank of this node "
           "did; it %s %s%s%s: %s",
           w->rank, (int)w->pid, j->host, quiet, j->heartbeat_s, running > 1 ? ", from any rank" : "",
           state == 'T' || state == 't' ? "is stopped (SIGCONT resumes it), waiting at" : "waits in the kernel at",
           wchan[culprit][0] ? wchan[culprit] : "(nothing)", others[0] ? "; the others: rank " : "", others, how);
  free(wchan);
  stop_for_hang(j, culprit);
}

/* The culprit of a hang is treated as a failed worker: reported, the job stopped (or restarted). */
static void stop_for_hang(job *j, int culprit) {
  fprintf(stderr, "cohortrun: %s; stopping the job\n", j->hang);
  j->root = culprit;
  cohort__job_begin_stop(j, SIGTERM);
  j->stopped_count--; /* the others: the culprit itself is counted apart */
  publish_failure(j);
}

/* This node's root cause, offered to the others (multi-node): the report every node will print. */
static void publish_failure(job *j) {
  j->root_is_job_root = 1;
  if (!j->cluster) return;
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) return;
  cohort__job_print_root_cause(j, mem);
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
            cohort__job_signal_name(WTERMSIG(w->wait_status), name, sizeof name));
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
  if (!j->stopping) cohort__job_begin_stop(j, SIGTERM);
}

/* Runs until every worker is reaped and their pipes are closed (or the drain time is over). */
void cohort__job_run_loop(job *j) {
  j->in_loop = 1;
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
    if (j->stopping && !j->killed && j->running > 0 && now >= j->kill_at_ns) kill_all(j, 0);
    if (j->running == 0 && (open_relays(j) == 0 || now >= j->drain_until_ns)) break;
    poll_cluster(j);
    check_heartbeats(j);
    check_stalls(j);
    if (!fds || !owners) {
      if (!j->stopping) cohort__job_begin_stop(j, SIGTERM);
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
  j->in_loop = 0;
  /* What the workers started may have outlived them; once the job is being stopped it goes too. (After a
   * success, it is left alone: it may be meant to outlive the job.) */
  if (j->stopping && !j->killed)
    for (int i = 0; i < j->started; i++)
      signal_worker(&j->workers[i], SIGKILL);
}
