/* generations.c: generation after generation of workers (job.h). A generation that fails is followed by another while
 * --max-restarts allows, each under a new COHORT_RESTART_COUNT (which scopes every rendezvous key anew); with several
 * nodes they restart together, and an elastic job (--nnodes MIN:MAX) follows node 0's word on who is in the next. */
#include <stdlib.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "job.h"

/* The news of the last generation is spent once the next begins. */
static void forget_remote_failure(job *j) {
  free(j->remote_report);
  j->remote_report = NULL;
  j->remote_code = 0;
  j->root_is_job_root = 0;
}

/* Elastic: the generation's membership decides this node's ranks and the world size. */
static void enter_elastic_generation(job *j, int *gen, const int *log_fds) {
  *gen = cohort__cluster_gen(j->cluster);
  j->rank0 = cohort__cluster_rank(j->cluster) * j->opts.np;
  j->world = cohort__cluster_size(j->cluster) * j->opts.np;
  fprintf(stderr,
          "cohortrun: node %d: generation %d (COHORT_RESTART_COUNT=%d): %s; %d node%s, world size %d, this "
          "node runs ranks %d..%d\n",
          j->opts.node_rank, *gen, *gen, cohort__cluster_why(j->cluster), cohort__cluster_size(j->cluster),
          cohort__cluster_size(j->cluster) == 1 ? "" : "s", j->world, j->rank0, j->rank0 + j->opts.np - 1);
  if (*gen > 0) {
    char mark[96];
    snprintf(mark, sizeof mark, "---- cohortrun: generation %d, COHORT_RESTART_COUNT=%d ----\n", *gen, *gen);
    cohort__job_mark_logs(j, log_fds, mark);
  }
}

/* How the generation that just ended is reported on this node, and with what exit code. */
static int report_generation(job *j, int changed) {
  if (changed && !(j->root >= 0 && j->root_is_job_root)) {
    /* Elastic: a node left or joined. Not a failure: a new generation follows (node 0 decides it). */
    if (j->remote_report) fputs(j->remote_report, stderr);
    fprintf(stderr, "cohortrun: node %d: stopped its %d rank%s for a new generation\n", j->opts.node_rank,
            j->stopped_count, j->stopped_count == 1 ? "" : "s");
    return 1;
  }
  if (j->remote_report && !(j->root >= 0 && j->root_is_job_root)) {
    /* Another node's failure (or loss) stopped this one: its report, after this node's shutdown noise. */
    fputs(j->remote_report, stderr);
    fprintf(stderr, "cohortrun: node %d: stopped its %d rank%s because of the failure above\n", j->opts.node_rank,
            j->stopped_count, j->stopped_count == 1 ? "" : "s");
    return j->remote_code ? j->remote_code : 1;
  }
  cohort__job_print_root_cause(j, stderr);
  cohort__job_print_summary(j);
  return cohort__job_exit_code(j);
}

int cohort__job_run_generations(job *j, const char *program, const char *secret, int port, const int *log_fds) {
  int rc = 1;
  char spawn_error[1100] = "";
  for (int gen = 0;; gen++) {
    if (j->opts.elastic) enter_elastic_generation(j, &gen, log_fds);
    j->figures.generation = gen;
    cohort_status spawn_status =
        cohort__job_start_workers(j, program, secret, port, gen, log_fds, spawn_error, sizeof spawn_error);
    cohort__job_run_loop(j);
    if (spawn_status != COHORT_OK) {
      fprintf(stderr, "cohortrun: %s; stopped the %d rank%s already started\n", spawn_error, j->started,
              j->started == 1 ? "" : "s");
      return spawn_status == COHORT_ERR_INVALID ? 2 : 1;
    }
    int changed = j->cluster && cohort__cluster_changed(j->cluster);
    rc = report_generation(j, changed);
    int job_failed = j->root >= 0 || j->remote_report || changed;
    if (job_failed) j->figures.failures++;
    if (!job_failed || j->interrupted) break;
    if (j->opts.elastic) {
      /* Whether this was a failure (which uses up a restart) or a change of membership (which does not), and who
       * is in the next generation, is node 0's decision; every node follows it. A signal during the stop still
       * counts: it was read by the loop and leaves j->interrupted set. */
      int end_code = 1;
      char *why = NULL;
      if (!cohort__cluster_regroup(j->cluster, j->timeout_s, &end_code, &why)) {
        fprintf(stderr, "cohortrun: node %d: %s\n", j->opts.node_rank, why ? why : "the job ended");
        free(why);
        rc = cohort__job_waiter_code(j, end_code ? end_code : rc);
        break;
      }
      free(why);
      forget_remote_failure(j);
      continue;
    }
    if (gen >= j->opts.max_restarts) {
      if (j->opts.max_restarts > 0) /* the end of restarts, said in words */
        fprintf(stderr,
                "cohortrun: no restart left: all %d of --max-restarts were used; the job ends with the failure "
                "above\n",
                j->opts.max_restarts);
      break;
    }
    if (j->cluster) {
      /* Every node starts the next generation together, once all of them have stopped this one: a node whose
       * workers came up early would only wait for the others at the workers' rendezvous, and a node that cannot
       * come back (its cohortrun or host gone) ends the job instead. */
      if (cohort__cluster_restart(j->cluster, j->timeout_s) != COHORT_OK) {
        fprintf(stderr, "cohortrun: node %d: no restart: %s\n", j->opts.node_rank, cohort_last_error());
        rc = cohort__job_waiter_code(j, rc);
        break;
      }
      forget_remote_failure(j);
      fprintf(stderr,
              "cohortrun: restart %d of %d: node %d starts its %d rank%s (%d..%d of %d) again with "
              "COHORT_RESTART_COUNT=%d, with all %d nodes\n",
              gen + 1, j->opts.max_restarts, j->opts.node_rank, j->opts.np, j->opts.np == 1 ? "" : "s", j->rank0,
              j->rank0 + j->opts.np - 1, j->world, gen + 1, j->opts.nnodes);
    } else {
      /* A failure with restarts left: everything of this generation is stopped and reaped (the loop returned), so
       * the next one starts clean, under a new COHORT_RESTART_COUNT, which scopes every rendezvous key anew. */
      fprintf(stderr, "cohortrun: restart %d of %d: starting all %d ranks again with COHORT_RESTART_COUNT=%d\n",
              gen + 1, j->opts.max_restarts, j->opts.np, gen + 1);
    }
    char mark[96];
    snprintf(mark, sizeof mark, "---- cohortrun: restart %d, COHORT_RESTART_COUNT=%d ----\n", gen + 1, gen + 1);
    cohort__job_mark_logs(j, log_fds, mark);
  }
  return rc;
}

int cohort__job_end_cluster(job *j, int rc) {
  if (!j->cluster) return rc;
  /* Node 0's store must outlive the other nodes' use of it: wait until every node is done (or gone). */
  cohort__cluster_done(j->cluster, rc);
  /* Elastic: no generation follows; the nodes waiting for one (a failure elsewhere, newcomers) end now. */
  cohort__cluster_finish(j->cluster, rc);
  int signals = j->signals_read;
  while (j->opts.node_rank == 0 && !cohort__cluster_all_done(j->cluster)) {
    usleep(CLUSTER_POLL_NS / 1000);
    /* Every worker is reaped; a SIGINT or SIGTERM now only ends this wait (a node that neither finishes nor goes
     * silent would otherwise hold node 0 forever, deaf to signals: they are blocked for the signalfd). One that came
     * before (the job was interrupted) does not: the others were told, and stop. */
    char why[400];
    cohort__job_wait_check(j, why, sizeof why);
    if (j->signals_read != signals) {
      fprintf(stderr, "cohortrun: node 0: %s while waiting for the other nodes to finish\n", why);
      if (rc == 0) rc = 128 + j->interrupted;
      break;
    }
    char *report = NULL;
    int code = 1;
    if (cohort__cluster_poll(j->cluster, &report, &code) && rc == 0) {
      /* This node succeeded, another failed after it: the job did not. */
      if (report) fputs(report, stderr);
      rc = code ? code : 1;
    }
    free(report);
  }
  /* Newcomers read the end record within a step of their wait: keep the store up for them. */
  if (j->opts.elastic && j->opts.node_rank == 0) usleep(300000);
  return rc;
}
