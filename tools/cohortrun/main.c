/* main.c: cohortrun, the local launcher: store, workers, output, and one clean stop when anything fails.
 *
 * main() is the outline of a run; job.h says which file holds each step. A failure before the workers start ends
 * the run at once with its own message (exit code 2 for a usage error, 1 otherwise).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "job.h"

static void ensure_std_fds(void) {
  /* A launcher started with a closed stdout would hand a pipe that very number, and dup2 onto itself keeps
   * CLOEXEC: give the standard descriptors something first. */
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0) {
      int nfd = open("/dev/null", O_RDWR);
      if (nfd >= 0 && nfd != fd) close(nfd);
    }
}

/* The knobs cohortrun itself uses, checked against the table (core/env_knobs.h) as the workers check theirs. */
static int read_knobs(job *j) {
  static cohort__config knobs;
  if (cohort__config_load_one(&knobs, "COHORT_HEARTBEAT_S") != COHORT_OK ||
      cohort__config_load_one(&knobs, "COHORT_TIMEOUT") != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
    return -1;
  }
  j->heartbeat_s = knobs.heartbeat_s;
  j->timeout_s = (double)knobs.timeout_s;
  return 0;
}

int main(int argc, char **argv) {
  ensure_std_fds();
  job j;
  memset(&j, 0, sizeof j);
  j.root = -1;
  j.sfd = -1;
  j.devnull = -1;
  if (cohort__launch_parse(argc, argv, &j.opts) != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s (see cohortrun --help)\n", cohort_last_error());
    return 2;
  }
  if (j.opts.help) {
    cohort__launch_usage(stdout);
    return 0;
  }
  if (j.opts.version) {
    printf("cohortrun (cohort) %s\n", COHORT_VERSION_STRING);
    return 0;
  }
  char *program = NULL;
  if (cohort__launch_resolve_program(j.opts.argv[0], &program) != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s%s\n", cohort_last_error(),
            j.opts.python ? " (the interpreter for a Python program: set PYTHON_EXEC, or give --no-python)" : "");
    cohort__launch_opts_free(&j.opts);
    return 2;
  }
  if (j.opts.python == COHORT_LAUNCH_PYTHON_SCRIPT && cohort__launch_check_script(j.opts.argv[2]) != COHORT_OK) {
    fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
    free(program);
    cohort__launch_opts_free(&j.opts);
    return 2;
  }
  if (read_knobs(&j) != 0) {
    free(program);
    cohort__launch_opts_free(&j.opts);
    return 2;
  }
  if (j.opts.join_timeout_s >= 0) j.timeout_s = j.opts.join_timeout_s; /* --rdzv-conf join_timeout */
  cohort__job_warn_unknown_knobs();
  gethostname(j.host, sizeof j.host - 1);
  j.rank0 = j.opts.node_rank * j.opts.np;
  j.world = j.opts.nnodes * j.opts.np;

  int rc = 1, port = 0;
  int *log_fds = NULL;
  pid_t ssh_pids[COHORT_LAUNCH_HOSTS_MAX] = {0};
  cohort__store_server *server = NULL;
  char secret[COHORT_LAUNCH_SECRET_MAX + 1];
  cohortrun_metrics *metrics = NULL;
  if (j.opts.metrics_port >= 0) {
    int bound = 0;
    if (cohortrun_metrics_start(j.opts.metrics_addr[0] ? j.opts.metrics_addr : NULL, j.opts.metrics_port, j.host,
                                j.rank0, &j.figures, &metrics, &bound) != COHORT_OK) {
      fprintf(stderr, "cohortrun: %s\n", cohort_last_error());
      free(program);
      return 1;
    }
    fprintf(stderr, "cohortrun: live metrics at http://%s:%d/metrics\n",
            j.opts.metrics_addr[0] ? j.opts.metrics_addr : j.host, bound);
  }
  if (cohort__job_take_signals(&j, &rc) == 0 && cohort__job_choose_secret(&j, secret, sizeof secret, &rc) == 0 &&
      cohort__job_serve_store(&j, secret, &server, &port, &rc) == 0 &&
      cohort__job_start_nodes(&j, port, secret, ssh_pids, &rc) == 0 &&
      cohort__job_join_cluster(&j, port, secret, server != NULL, &rc) == 0 &&
      cohort__job_choose_worker_port(&j, &rc) == 0 && cohort__job_prepare_workers(&j, &log_fds, &rc) == 0 &&
      cohort__job_error_files_begin(&j, &rc) == 0) {
    rc = cohort__job_run_generations(&j, program, secret, port, log_fds);
    rc = cohort__job_end_cluster(&j, rc);
  }

  int formed = j.cluster != NULL;
  cohort__cluster_leave(j.cluster);
  j.cluster = NULL;
  cohort__job_wait_nodes(&j, !formed);
  free(j.remote_report);
  if (j.workers) {
    cohort__job_free_relays(&j);
    free(j.workers);
  }
  free(j.cpus);
  cohort__store_server_stop(server);
  cohortrun_metrics_stop(metrics);
  if (j.sfd >= 0) close(j.sfd);
  if (log_fds) {
    for (int r = 0; r < j.opts.np; r++)
      if (log_fds[r] >= 0) close(log_fds[r]);
    free(log_fds);
  }
  cohort__job_error_files_end(&j, rc);
  free(program);
  cohort__launch_opts_free(&j.opts);
  return rc;
}
