/* spawn.c: one worker's environment, and its fork/exec. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "launcher.h"

extern char **environ;

/* cohortrun reads SIGINT, SIGTERM and SIGCHLD through a signalfd with the signals blocked (setup.c). A thread made
 * before they were blocked does not block them (a library's constructor: OpenBLAS starts its thread pool when it is
 * loaded, as in the sanitizer builds, where the linker keeps it), and the kernel hands a process's signal to a
 * thread that does not block it: the default action or an inherited SIG_IGN then decided, not cohortrun. A handler
 * passes such a signal on to the main thread, which blocks it, so that the signalfd reads it whatever thread got it.
 * The workers get the dispositions cohortrun was started with back before exec. */
static const int forwarded_signals[] = {SIGINT, SIGTERM, SIGCHLD};
#define FORWARDED_COUNT (sizeof forwarded_signals / sizeof forwarded_signals[0])
static struct sigaction inherited_actions[FORWARDED_COUNT];
static pid_t main_tid;

static void forward_to_main(int sig) {
  int saved = errno;
  syscall(SYS_tgkill, getpid(), main_tid, sig);
  errno = saved;
}

void cohort__launch_forward_signals(void) {
  main_tid = (pid_t)syscall(SYS_gettid);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward_to_main;
  sa.sa_flags = SA_RESTART;
  sigfillset(&sa.sa_mask);
  for (size_t k = 0; k < FORWARDED_COUNT; k++)
    sigaction(forwarded_signals[k], &sa, &inherited_actions[k]);
}

int cohort__launch_remove_segments(pid_t pid) {
  char prefix[48], name[300];
  int n = snprintf(prefix, sizeof prefix, "cohort-shm-%d-", (int)pid), removed = 0;
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strncmp(e->d_name, prefix, (size_t)n) != 0) continue;
    snprintf(name, sizeof name, "/%s", e->d_name);
    removed += shm_unlink(name) == 0;
  }
  closedir(d);
  return removed;
}

/* The variables cohortrun sets; inherited copies of them are dropped so a worker never sees two values. torchrun's
 * first (the same names and meanings, so that any torchrun program runs unchanged: MASTER_ADDR:MASTER_PORT is where
 * the program's rank 0 may serve its own store, a port cohortrun keeps free), then cohort's: cohortrun's own store
 * is at COHORT_STORE_ADDR:COHORT_STORE_PORT. */
static const char *const job_vars[] = {"RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE",
                                       "GROUP_RANK",
                                       "GROUP_WORLD_SIZE",
                                       "ROLE_RANK",
                                       "ROLE_WORLD_SIZE",
                                       "ROLE_NAME",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "TORCHELASTIC_RESTART_COUNT",
                                       "TORCHELASTIC_MAX_RESTARTS",
                                       "TORCHELASTIC_USE_AGENT_STORE",
                                       "TORCHELASTIC_RUN_ID",
                                       "TORCHELASTIC_ERROR_FILE",
                                       "COHORT_STORE_ADDR",
                                       "COHORT_STORE_PORT",
                                       "COHORT_SECRET",
                                       "COHORT_LAUNCHER_STORE",
                                       "COHORT_RESTART_COUNT",
                                       "COHORT_HEARTBEAT_FD",
                                       "COHORT_TTY"};
#define JOB_VAR_COUNT (sizeof job_vars / sizeof job_vars[0])
/* Set only where the parent's environment has none (torchrun's OMP_NUM_THREADS=1 with several workers, --local-addr
 * as the address the workers listen on). */
#define DEFAULT_VAR_MAX 4

static int is_job_var(const char *entry) {
  size_t n = strcspn(entry, "=");
  for (size_t i = 0; i < JOB_VAR_COUNT; i++)
    if (strlen(job_vars[i]) == n && memcmp(job_vars[i], entry, n) == 0) return 1;
  return 0;
}

static char *format_var(const char *name, const char *value) {
  size_t len = strlen(name) + strlen(value) + 2;
  char *s = malloc(len);
  if (s) snprintf(s, len, "%s=%s", name, value);
  return s;
}

/* The variables cohortrun made come first in envp, each allocated here; their number is kept in the slot before
 * envp[0]. The rest belong to environ. */
void cohort__launch_env_free(char **envp) {
  if (!envp) return;
  size_t owned = (size_t)(uintptr_t)envp[-1];
  for (size_t i = 0; i < owned; i++)
    free(envp[i]);
  free(envp - 1);
}

cohort_status cohort__launch_env_build(const cohort__launch_worker_env *wenv, char ***envp_out) {
  *envp_out = NULL;
  size_t inherited = 0;
  for (char **e = environ; *e; e++)
    inherited++;
  /* One slot before the array holds how many entries at its start are ours to free. */
  char **slots = calloc(1 + JOB_VAR_COUNT + DEFAULT_VAR_MAX + inherited + 1, sizeof *slots);
  if (!slots) return cohort__error(COHORT_ERR_SYSTEM, "out of memory building the environment of rank %d", wenv->rank);
  char **envp = slots + 1;
  /* One node is one worker group of torchrun's, and every worker has the one role (--role, "default"). */
  const int group_size = wenv->local_world_size, groups = wenv->world_size / wenv->local_world_size;
  const int numbers[] = {wenv->rank,
                         wenv->world_size,
                         wenv->local_rank,
                         wenv->local_world_size,
                         wenv->rank / group_size,
                         groups,
                         wenv->rank,
                         wenv->world_size,
                         wenv->master_port,
                         wenv->restart_count,
                         wenv->max_restarts,
                         wenv->store_port,
                         wenv->restart_count,
                         wenv->heartbeat_fd};
  char num[sizeof numbers / sizeof numbers[0]][24];
  for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
    snprintf(num[i], sizeof num[i], "%d", numbers[i]);
  /* COHORT_TTY: the worker's stdout is a pipe to cohortrun, but when cohortrun's own stdout is a terminal the relay
   * shows carriage-return lines live (output.c), so a progress line may be drawn in place. Same order as job_vars. */
  const char *tty = isatty(STDOUT_FILENO) ? "1" : "0";
  const char *values[JOB_VAR_COUNT] = {num[0],
                                       num[1],
                                       num[2],
                                       num[3],
                                       num[4],
                                       num[5],
                                       num[6],
                                       num[7],
                                       wenv->role && wenv->role[0] ? wenv->role : "default",
                                       wenv->master_addr,
                                       num[8],
                                       num[9],
                                       num[10],
                                       "False", /* the program's rank 0 serves its own store, not cohortrun */
                                       wenv->run_id && wenv->run_id[0] ? wenv->run_id : "none",
                                       wenv->error_file ? wenv->error_file : "",
                                       wenv->master_addr,
                                       num[11],
                                       wenv->secret,
                                       "1",
                                       num[12],
                                       wenv->heartbeat_fd >= 0 ? num[13] : "",
                                       tty};
  size_t n = 0;
  for (size_t i = 0; i < JOB_VAR_COUNT; i++) {
    if (strcmp(job_vars[i], "TORCHELASTIC_ERROR_FILE") == 0 && !wenv->error_file) continue;
    if (!(envp[n++] = format_var(job_vars[i], values[i]))) goto oom;
  }
  const char *defaults[DEFAULT_VAR_MAX][2] = {{"OMP_NUM_THREADS", wenv->local_world_size > 1 ? "1" : NULL},
                                              {"COHORT_BIND_ADDR", wenv->local_addr},
                                              {NULL, NULL},
                                              {NULL, NULL}};
  for (size_t d = 0; d < DEFAULT_VAR_MAX; d++) {
    if (!defaults[d][0] || !defaults[d][1] || !defaults[d][1][0]) continue;
    const char *have = getenv(defaults[d][0]);
    if (have && have[0]) continue;
    if (!(envp[n++] = format_var(defaults[d][0], defaults[d][1]))) goto oom;
  }
  const size_t owned = n;
  slots[0] = (char *)(uintptr_t)owned;
  for (char **e = environ; *e; e++) {
    int ours = 0; /* a job variable, or an empty default we replaced */
    size_t name_len = strcspn(*e, "=");
    for (size_t k = 0; k < owned && !ours; k++)
      ours = strncmp(envp[k], *e, name_len) == 0 && envp[k][name_len] == '=';
    if (!ours && !is_job_var(*e)) envp[n++] = *e;
  }
  envp[n] = NULL;
  *envp_out = envp;
  return COHORT_OK;
oom:
  slots[0] = (char *)(uintptr_t)n;
  cohort__launch_env_free(envp);
  return cohort__error(COHORT_ERR_SYSTEM, "out of memory building the environment of rank %d", wenv->rank);
}

/* The child between fork and exec. cohortrun has a store thread, so only async-signal-safe calls are allowed
 * here: everything the child needs was prepared before fork. */
static void child_exec(pid_t parent, const char *path, char *const argv[], char *const envp[],
                       const sigset_t *child_mask, const cpu_set_t *affinity, int keep_fd, int out_w, int err_w,
                       int exec_w) {
  /* Before exec, so that every thread the program starts inherits it (a plain system call: safe here). */
  if (affinity) sched_setaffinity(0, sizeof *affinity, affinity);
  /* Its own process group, so that a signal to the group reaches whatever the worker starts, and a Ctrl-C at
   * the terminal reaches cohortrun alone, which forwards it (once) to every worker. */
  setpgid(0, 0);
  /* No worker outlives cohortrun; if cohortrun is already gone, the signal would never come, so leave now. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != 0) {
    dup2(devnull, 0);
    close(devnull);
  }
  if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) {
    int e = errno;
    if (write(exec_w, &e, sizeof e) < 0) _exit(127);
    _exit(127);
  }
  /* The one descriptor the program inherits on purpose (the heartbeat page); all others are close-on-exec. */
  if (keep_fd >= 0) fcntl(keep_fd, F_SETFD, 0);
  /* cohortrun ignores SIGPIPE and blocks the signals it reads through signalfd; the program gets neither. */
  signal(SIGPIPE, SIG_DFL);
  if (main_tid)
    for (size_t k = 0; k < FORWARDED_COUNT; k++)
      sigaction(forwarded_signals[k], &inherited_actions[k], NULL);
  sigprocmask(SIG_SETMASK, child_mask, NULL);
  execve(path, argv, envp);
  int e = errno;
  if (write(exec_w, &e, sizeof e) < 0) _exit(127);
  _exit(127);
}

cohort_status cohort__launch_spawn(const char *path, char *const argv[], char *const envp[], const sigset_t *child_mask,
                                   const cpu_set_t *affinity, int keep_fd, pid_t *pid_out, int *out_fd, int *err_fd) {
  int out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, exec_p[2] = {-1, -1};
  cohort_status st = COHORT_OK;
  if (pipe2(out_p, O_CLOEXEC) != 0 || pipe2(err_p, O_CLOEXEC) != 0 || pipe2(exec_p, O_CLOEXEC) != 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "pipe for '%s'", argv[0]);
    goto fail;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "fork for '%s'", argv[0]);
    goto fail;
  }
  if (pid == 0) child_exec(parent, path, argv, envp, child_mask, affinity, keep_fd, out_p[1], err_p[1], exec_p[1]);
  /* Also from this side: a signal sent to the group right after fork must not miss the worker (or hit us). */
  setpgid(pid, pid);
  close(out_p[1]);
  close(err_p[1]);
  close(exec_p[1]);
  out_p[1] = err_p[1] = exec_p[1] = -1;
  /* The exec pipe closes on a successful exec (CLOEXEC); before that, the child reports why exec failed. */
  int child_errno = 0;
  ssize_t got;
  do {
    got = read(exec_p[0], &child_errno, sizeof child_errno);
  } while (got < 0 && errno == EINTR);
  if (got == (ssize_t)sizeof child_errno) {
    waitpid(pid, NULL, 0);
    st = cohort__error_errno(COHORT_ERR_INVALID, child_errno, "cannot run program '%s'", argv[0]);
    goto fail;
  }
  close(exec_p[0]);
  fcntl(out_p[0], F_SETFL, fcntl(out_p[0], F_GETFL) | O_NONBLOCK);
  fcntl(err_p[0], F_SETFL, fcntl(err_p[0], F_GETFL) | O_NONBLOCK);
  *pid_out = pid;
  *out_fd = out_p[0];
  *err_fd = err_p[0];
  return COHORT_OK;
fail:
  for (int i = 0; i < 2; i++) {
    if (out_p[i] >= 0) close(out_p[i]);
    if (err_p[i] >= 0) close(err_p[i]);
    if (exec_p[i] >= 0) close(exec_p[i]);
  }
  return st;
}
