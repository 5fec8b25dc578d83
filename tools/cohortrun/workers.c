/* workers.c: starting one generation of workers (job.h): their log files, heartbeat pages, processes and output
 * relays. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "job.h"

/* Over every slot, not only the started ones: a worker whose spawn failed may hold a heartbeat page already. */
void cohort__job_free_relays(job *j) {
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
cohort_status cohort__job_start_workers(job *j, const char *program, const char *secret, int port, int gen,
                                        const int *log_fds, char *spawn_error, size_t error_len) {
  cohort__job_free_relays(j);
  memset(j->workers, 0, (size_t)j->opts.np * sizeof *j->workers);
  j->started = j->running = 0;
  j->stopping = j->killed = 0;
  j->root = -1;
  j->stopped_count = j->sigkill_count = j->forced_by = 0;
  j->drain_until_ns = 0;
  j->hang[0] = '\0';
  for (int r = 0; r < j->opts.np; r++) {
    worker *w = &j->workers[r];
    w->rank = j->rank0 + r;
    int hb_fd = -1;
    if (j->heartbeat_s > 0 && open_heartbeat(&hb_fd, &w->hb) != COHORT_OK) {
      snprintf(spawn_error, error_len, "cannot start rank %d: %s", j->rank0 + r, cohort_last_error());
      if (!j->stopping) cohort__job_begin_stop(j, SIGTERM);
      return COHORT_ERR_SYSTEM;
    }
    cohort__launch_worker_env wenv = {.rank = j->rank0 + r,
                                      .world_size = j->world,
                                      .local_rank = r,
                                      .local_world_size = j->opts.np,
                                      .master_addr = j->opts.master_addr,
                                      .master_port = j->worker_port,
                                      .store_port = port,
                                      .secret = secret,
                                      .restart_count = gen,
                                      .max_restarts = j->opts.max_restarts,
                                      .heartbeat_fd = hb_fd,
                                      .role = j->opts.role,
                                      .run_id = j->opts.run_id,
                                      .local_addr = j->opts.local_addr};
    /* torch's @record writes here; a file of an earlier generation must not be taken for this one's. */
    char error_file[4400];
    cohort__job_error_file(j, r, error_file, sizeof error_file);
    if (error_file[0]) {
      unlink(error_file);
      wenv.error_file = error_file;
    }
    char **envp = NULL;
    int out_fd = -1, err_fd = -1;
    cohort_status st = cohort__launch_env_build(&wenv, &envp);
    if (st == COHORT_OK) {
      st = cohort__launch_spawn(program, j->opts.argv, envp, &j->child_mask, j->cpus ? &j->cpus[r] : NULL, hb_fd,
                                &w->pid, &out_fd, &err_fd);
      cohort__launch_env_free(envp);
    }
    if (hb_fd >= 0) close(hb_fd); /* the worker has its own; cohortrun keeps the mapping */
    if (st != COHORT_OK) {
      snprintf(spawn_error, error_len, "cannot start rank %d: %s", j->rank0 + r, cohort_last_error());
      if (!j->stopping) cohort__job_begin_stop(j, SIGTERM);
      return st;
    }
    w->running = 1;
    j->running++;
    j->figures.ranks_running = j->running;
    j->started++;
    /* The relays take the pipes; if one cannot be made, its pipe is closed and that output is lost, but the
     * worker is still watched (a worker whose stdout is closed gets EPIPE, which is its own to handle). */
    int out_to = 1, err_to = 2;
    if (j->opts.console_filter && !j->opts.console_ranks[r]) {
      /* --local-ranks-filter: not on the console (still in its log, and its stderr still in the report). */
      if (j->devnull < 0) j->devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (j->devnull >= 0) out_to = err_to = j->devnull;
    }
    if (cohort__relay_create(w->rank, out_fd, out_to, log_fds[r], 0, &w->out) != COHORT_OK) close(out_fd);
    if (cohort__relay_create(w->rank, err_fd, err_to, log_fds[r], 1, &w->err) != COHORT_OK) close(err_fd);
  }
  return COHORT_OK;
}

int cohort__job_prepare_workers(job *j, int **log_fds_out, int *rc) {
  j->workers = calloc((size_t)j->opts.np, sizeof *j->workers);
  int *log_fds = *log_fds_out = malloc((size_t)j->opts.np * sizeof *log_fds);
  if (!j->workers || !log_fds) {
    fprintf(stderr, "cohortrun: out of memory for %d workers\n", j->opts.np);
    *rc = 1;
    return -1;
  }
  for (int r = 0; r < j->opts.np; r++)
    log_fds[r] = -1;
  if (j->opts.log_dir && open_logs(j->opts.log_dir, j->rank0, j->opts.np, j->opts.elastic ? j->opts.node_rank : -1,
                                   log_fds) != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
    *rc = 2;
    return -1;
  }
  if (j->opts.bind != COHORT_LAUNCH_BIND_NONE) {
    cohort__launch_topology *t = malloc(sizeof *t);
    cpu_set_t *cpus = malloc((size_t)j->opts.np * sizeof *cpus);
    if (!t || !cpus || !cohort__launch_topology_here(t)) {
      fprintf(stderr, "cohortrun: --bind: cannot tell which CPUs this process may use; the workers are not bound\n");
    } else if (!cohort__launch_bind_share(t, j->opts.bind, 0, j->opts.np, &cpus[0])) {
      fprintf(stderr, "cohortrun: --bind core: %d workers but only %d CPUs; the workers are not bound\n", j->opts.np,
              t->n);
    } else {
      for (int r = 1; r < j->opts.np; r++)
        cohort__launch_bind_share(t, j->opts.bind, r, j->opts.np, &cpus[r]);
      j->cpus = cpus;
      cpus = NULL;
    }
    free(cpus);
    free(t);
  }
  return 0;
}

void cohort__job_mark_logs(const job *j, const int *log_fds, const char *mark) {
  size_t n = strlen(mark);
  for (int r = 0; r < j->opts.np; r++)
    if (log_fds[r] >= 0 && write(log_fds[r], mark, n) != (ssize_t)n) { /* the relay reports a failing log when it next
                                                                          writes */
    }
}
