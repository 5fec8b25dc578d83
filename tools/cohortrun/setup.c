/* setup.c: what cohortrun sets up before any worker starts (job.h): signals read through a signalfd, the job secret,
 * the rendezvous store (node 0), the other nodes of -H (over ssh), and the cluster of --nnodes. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "core/clock.h"
#include "core/error.h"
#include "job.h"

int cohort__job_take_signals(job *j, int *rc) {
  /* Signals are read through the signalfd, so they must be blocked in every thread: block them before the
   * store starts its thread. Workers get the mask cohortrun started with. */
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, &j->child_mask);
  cohort__launch_forward_signals(); /* for threads started before this point (a library's) */
  /* A reader of our output that goes away must not kill the job (output.c drops the output instead). */
  signal(SIGPIPE, SIG_IGN);
  j->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (j->sfd < 0) {
    fprintf(stderr, "cohortrun: signalfd: %s\n", strerror(errno));
    *rc = 1;
    return -1;
  }
  j->waiter = (cohort__launch_waiter){.check = cohort__job_wait_check, .arg = j};
  return 0;
}

int cohort__job_wait_check(void *arg, char *why, size_t len) {
  job *j = arg;
  struct signalfd_siginfo si;
  while (j->sfd >= 0 && read(j->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
    int sig = (int)si.ssi_signo;
    if (j->in_loop)
      cohort__job_on_signal(j, sig); /* the loop's: a death to reap, a Ctrl-C that stops the workers */
    else if (sig == SIGINT || sig == SIGTERM)
      j->interrupted = sig, j->signals_read++;
    /* Outside the loop no worker runs; an ssh's end is looked at below, by its pid. */
  }
  char name[32];
  if (j->interrupted) {
    snprintf(why, len, "interrupted by %s", cohort__job_signal_name(j->interrupted, name, sizeof name));
    return 128 + j->interrupted;
  }
  for (int n = 1; j->joining && j->ssh_pids && n < j->opts.nhosts; n++) {
    int status = 0;
    if (j->ssh_pids[n] <= 0 || waitpid(j->ssh_pids[n], &status, WNOHANG) != j->ssh_pids[n]) continue;
    j->ssh_pids[n] = 0; /* reaped */
    if (WIFEXITED(status))
      snprintf(why, len,
               "`ssh %s`, which starts node %d, exited with code %d (its own words are above: is the host "
               "reachable, with a password-less login?)",
               j->opts.hosts[n], n, WEXITSTATUS(status));
    else
      snprintf(why, len, "`ssh %s`, which starts node %d, was killed by %s", j->opts.hosts[n], n,
               cohort__job_signal_name(WTERMSIG(status), name, sizeof name));
    return 1;
  }
  return 0;
}

int cohort__job_waiter_code(const job *j, int otherwise) {
  int code = cohort__cluster_stopped_by_waiter(j->cluster);
  if (code) return code;
  if (j->interrupted) return 128 + j->interrupted;
  return otherwise;
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

/* One rule, whatever the mode: an exported COHORT_SECRET is the job's secret (one node, --nnodes, -H alike); without
 * one, cohortrun makes a fresh one where it can hand it to every rank itself (one node; -H, over ssh's stdin), and
 * --nnodes N > 1 refuses to start, since only the user can put the same secret on every node. */
int cohort__job_choose_secret(job *j, char *secret, size_t len, int *rc) {
  *rc = 1;
  const char *given = getenv("COHORT_SECRET");
  if (given && given[0]) {
    if (strlen(given) >= len) {
      fprintf(stderr, "cohortrun: COHORT_SECRET is %zu characters long, more than %zu (64 hex digits are plenty)\n",
              strlen(given), len - 1);
      *rc = 2;
      return -1;
    }
    snprintf(secret, len, "%s", given);
  } else if (j->opts.nnodes > 1 && j->opts.nhosts == 0) {
    fprintf(stderr,
            "cohortrun: --nnodes %d needs COHORT_SECRET exported, the same on every node (e.g. export "
            "COHORT_SECRET=$(openssl rand -hex 32) and pass it to each node)\n",
            j->opts.nnodes);
    *rc = 2;
    return -1;
  } else if (make_secret(secret, len) != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
    return -1;
  }
  return 0;
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

/* --node-rank auto: this node is node 0 if it can serve --master-addr:--master-port, which only one cohortrun on the
 * host that has that address can (the first to bind it); the others find it taken, or not theirs, and join. */
static int claims_node_zero(job *j, const char *secret, cohort__store_server **server) {
  /* Two nodes started at once on one host race for the port, and each one's probe (bind_errno) holds it for an
   * instant: a node can fail to serve because of the other's probe, then find the port free in its own. Free means
   * try again; the race ends within a few rounds, with one node serving and the other finding the port taken. */
  for (int attempt = 0; attempt < 100; attempt++) {
    if (cohort__store_server_start(j->opts.master_addr, j->opts.master_port, secret, server) == COHORT_OK) {
      j->opts.node_rank = 0;
      fprintf(stderr, "cohortrun: --node-rank auto: this node serves %s:%d, so it is node 0\n", j->opts.master_addr,
              j->opts.master_port);
      return 1;
    }
    int err = bind_errno(j->opts.master_addr, j->opts.master_port);
    if (err == EADDRINUSE || err == EADDRNOTAVAIL) return 0;
    if (err != 0) return -1;
    struct timespec pause = {.tv_sec = 0, .tv_nsec = (long)(1 + attempt % 10) * 1000000L};
    nanosleep(&pause, NULL);
  }
  return -1;
}

int cohort__job_serve_store(job *j, const char *secret, cohort__store_server **server, int *port, int *rc) {
  *server = NULL;
  if (j->opts.node_rank == COHORT_LAUNCH_NODE_RANK_AUTO && claims_node_zero(j, secret, server) < 0) {
    fprintf(stderr, "cohortrun: --node-rank auto: cannot tell whether this node serves %s:%d: %s\n",
            j->opts.master_addr, j->opts.master_port, cohort_last_error());
    *rc = 1;
    return -1;
  }
  if (j->opts.node_rank == 0 && !*server &&
      cohort__store_server_start(j->opts.master_addr, j->opts.master_port, secret, server) != COHORT_OK) {
    if (j->opts.master_port != 0 && bind_errno(j->opts.master_addr, j->opts.master_port) == EADDRINUSE)
      fprintf(stderr,
              "cohortrun: --master-port %d is already in use on %s; stop whatever holds it, pick another port, or "
              "pass --master-port 0 for a free one\n",
              j->opts.master_port, j->opts.master_addr);
    else
      fprintf(stderr, "cohortrun: cannot start the rendezvous store on %s:%d: %s\n", j->opts.master_addr,
              j->opts.master_port, cohort_last_error());
    *rc = 1;
    return -1;
  }
  *port = *server ? cohort__store_server_port(*server) : j->opts.master_port;
  return 0;
}

int cohort__job_start_nodes(job *j, int port, const char *secret, pid_t *ssh_pids, int *rc) {
  j->ssh_pids = ssh_pids;
  for (int n = 1; n < j->opts.nhosts; n++) {
    if (cohort__launch_ssh_node(&j->opts, n, port, secret, &ssh_pids[n]) != COHORT_OK) {
      fprintf(stderr, "cohortrun: cannot start node %d on %s: %s\n", n, j->opts.hosts[n], cohort_last_error());
      *rc = 1;
      return -1;
    }
  }
  return 0;
}

int cohort__job_join_cluster(job *j, int port, const char *secret, int serving, int *rc) {
  if (j->opts.nnodes <= 1) return 0;
  int end_code = 1;
  j->joining = 1;
  cohort_status st = cohort__cluster_join(j->opts.master_addr, port, secret, j->timeout_s, &j->opts, j->host,
                                          &j->waiter, &end_code, &j->cluster);
  j->joining = 0;
  if (st == COHORT_OK) {
    j->opts.node_rank = cohort__cluster_node_rank(j->cluster); /* --node-rank auto: decided now */
    j->rank0 = j->opts.node_rank * j->opts.np;
    return 0;
  }
  fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
  /* Elastic: the job ended before a generation took this node in; it ends with the job's code. A signal or a failed
   * ssh stopped the wait: its code (end_code too). */
  *rc = st == COHORT_ERR_REMOTE ? end_code : 1;
  /* Node 0's store stays up a moment, so that the node that disagrees reads node 0's word and says so too,
   * instead of only losing its connection. */
  if (serving && st == COHORT_ERR_MISMATCH) usleep(1000000);
  return -1;
}

/* A port no socket is bound to on any address of this host (bound to the wildcard, so that a store listening on any
 * interface can take it), found as torchrun finds its MASTER_PORT: bind port 0, read the number, close. */
static cohort_status free_port(int *port) {
  int families[] = {AF_INET6, AF_INET}, err = 0;
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
    int fd = socket(families[i], SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    struct sockaddr_storage a = {.ss_family = (sa_family_t)families[i]};
    socklen_t len = families[i] == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (bind(fd, (struct sockaddr *)&a, len) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
      *port = ntohs(families[i] == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
                                            : ((struct sockaddr_in *)&a)->sin_port);
      close(fd);
      return COHORT_OK;
    }
    err = errno;
    close(fd);
  }
  return cohort__error_errno(COHORT_ERR_SYSTEM, err, "cannot find a free port for the workers' MASTER_PORT");
}

int cohort__job_choose_worker_port(job *j, int *rc) {
  cohort_status st = COHORT_OK;
  if (j->opts.node_rank == 0) st = free_port(&j->worker_port);
  if (st == COHORT_OK && j->cluster)
    st = cohort__cluster_share_number(j->cluster, "worker_port", &j->worker_port, j->timeout_s);
  if (st == COHORT_OK) return 0;
  fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
  *rc = cohort__job_waiter_code(j, 1);
  return -1;
}

void cohort__job_wait_nodes(job *j, int at_once) {
  /* The other nodes' ssh: they end with their cohortrun; one that does not within the grace is not waited for. */
  if (!j->ssh_pids) return;
  int64_t until = cohort__now_ns() + (int64_t)(j->opts.grace_s * 1e9) + 1000000000LL;
  char why[400];
  int signals = j->signals_read;
  for (int n = 1; n < j->opts.nhosts; n++) {
    pid_t pid = j->ssh_pids[n];
    if (pid <= 0) continue;
    while (waitpid(pid, NULL, WNOHANG) == 0) {
      cohort__job_wait_check(j, why, sizeof why);
      if (at_once || cohort__now_ns() >= until || j->signals_read != signals) {
        at_once = 1; /* and the others too */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        break;
      }
      usleep(20000);
    }
    j->ssh_pids[n] = 0;
  }
}
