/*
 * job.h: the state of one cohortrun (its workers, and what happened to them), shared by the files of
 * tools/cohortrun/ that run a job. main.c reads as the outline; each step lives in a file of its own:
 *   setup.c        before any worker: signals, the job secret, the store, the other nodes (ssh), the cluster
 *   workers.c      starting one generation of workers: log files, heartbeat pages, spawn, output relays
 *   loop.c         the poll loop of one generation: output, signals, deaths, hangs, the stop, news from other nodes
 *   generations.c  generation after generation: restarts, elastic regroups, the end of a cluster
 *   report.c       what the user reads at the end: the root cause, the summary line, the exit code
 * Everything runs on cohortrun's main thread.
 */
#ifndef COHORT_TOOLS_COHORTRUN_JOB_H
#define COHORT_TOOLS_COHORTRUN_JOB_H

#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "comm/heartbeat.h"
#include "launcher.h"
#include "metrics_http.h"
#include "store/store.h"

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
  /* COHORT_HEARTBEAT_S for a program that never maps its page (watch.c): its process tree's CPU time and output */
  uint64_t cpu_ticks, out_bytes;
  int64_t quiet_since_ns; /* when either last moved; 0 until first looked at */
} worker;

typedef struct job {
  cohort__launch_opts opts;
  worker *workers;
  cpu_set_t *cpus; /* --bind: local rank r's CPUs, the same in every generation; NULL when not bound */
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
  int forced_by;     /* the second signal that sent SIGKILL at once, 0 when the grace ran out */
  int64_t drain_until_ns;
  char host[256];                /* this host's name, for the report */
  int rank0;                     /* the global rank of this node's first worker */
  cohortrun_job_figures figures; /* --metrics-port: what the serving thread reads of the job (generations.c) */
  int world;                     /* ranks in the whole job */
  cohort__cluster *cluster;      /* NULL on one node */
  int64_t next_poll_ns;          /* when the cluster is polled next */
  int64_t next_watch_ns;         /* when the workers' CPU time is read next (COHORT_HEARTBEAT_S, watch.c) */
  char *remote_report;           /* why another node (or the loss of one) stopped this node; malloc'd */
  int remote_code;
  int root_is_job_root; /* this node's failure is the whole job's root cause (always so on one node) */
  double heartbeat_s;   /* COHORT_HEARTBEAT_S; 0: off */
  double timeout_s;     /* COHORT_TIMEOUT: how long the nodes of a cluster wait for each other */
  char hang[1200];      /* the root is a worker that made no progress: what it was doing ("" otherwise) */
  int worker_port;      /* the workers' MASTER_PORT: free on node 0's host, for the program's own store */
  /* Waits outside the poll loop (setup.c, cohort__job_wait_check) answer signals and, while the nodes join, the
   * death of an ssh that starts one. */
  cohort__launch_waiter waiter;
  pid_t *ssh_pids;  /* -H: the ssh of node n at [n] (0 once reaped); NULL without -H */
  int joining;      /* the cluster is being formed: an ssh that exits now means its node never comes */
  int in_loop;      /* inside cohort__job_run_loop: a signal a wait reads is the loop's to handle */
  int signals_read; /* SIGINT and SIGTERM read by cohort__job_wait_check outside the loop */
  /* TORCHELASTIC_ERROR_FILE: where each worker's torch @record writes its error (errors.c) */
  char err_dir[4200];
  int err_dir_owned; /* a temporary directory of cohortrun's, removed at the end (else --log-dir) */
  int devnull;       /* --local-ranks-filter: the console of the ranks left out; -1 until needed */
} job;

/* How often a node's cohortrun bumps its heartbeat and looks at the others: 5 per second keeps a full stop of
 * every node well within 5 s of a failure anywhere. */
#define CLUSTER_POLL_NS 200000000LL

/* setup.c. Each returns 0 when the job can go on; else it has said why on stderr, sets *rc to cohortrun's exit
 * code, and returns -1. */
/* Blocks SIGCHLD, SIGINT and SIGTERM (in every thread to come) and reads them through j->sfd instead, and sets up
 * j->waiter (below) for the waits of the cluster. */
int cohort__job_take_signals(job *j, int *rc);
/* The check of j->waiter: reads the signals that came (inside the poll loop, hands them to it), and returns
 * 128 + the signal once SIGINT or SIGTERM came, or 1 once an ssh that starts a node has exited while the nodes
 * join; 0 otherwise. why says which. */
int cohort__job_wait_check(void *arg, char *why, size_t len);
/* The exit code after a wait that the waiter stopped (cohort__cluster_stopped_by_waiter), or `otherwise`. */
int cohort__job_waiter_code(const job *j, int otherwise);
/* The job secret: COHORT_SECRET where the nodes must share one, else a fresh random one. */
int cohort__job_choose_secret(job *j, char *secret, size_t len, int *rc);
/* Node 0 serves the rendezvous store (*server; NULL on the other nodes); *port is where it listens. */
int cohort__job_serve_store(job *j, const char *secret, cohort__store_server **server, int *port, int *rc);
/* -H: starts cohortrun on every other host over ssh (their pids in ssh_pids[1..]). */
int cohort__job_start_nodes(job *j, int port, const char *secret, pid_t *ssh_pids, int *rc);
/* --nnodes > 1: this node joins the others through node 0's store (j->cluster). */
int cohort__job_join_cluster(job *j, int port, const char *secret, int serving, int *rc);
/* The workers' MASTER_PORT (j->worker_port), as torchrun hands it out: a port that node 0 finds free on its host and
 * leaves free, for the program's rank 0 to serve its own store on (torch's c10d store); the other nodes read it from
 * node 0's store. */
int cohort__job_choose_worker_port(job *j, int *rc);
/* Waits (up to the grace) for the ssh sessions of -H, which end with their cohortrun; at_once (the nodes never
 * formed a job, or a signal came) kills them without waiting. A SIGINT or SIGTERM during the wait does too. */
void cohort__job_wait_nodes(job *j, int at_once);

/* workers.c */
/* The worker slots and the log files of --log-dir (*log_fds: one per local rank, -1 without a log). */
int cohort__job_prepare_workers(job *j, int **log_fds, int *rc);
/* Starts generation gen of all np workers. On failure, the ranks already started are being stopped and
 * spawn_error says why. */
cohort_status cohort__job_start_workers(job *j, const char *program, const char *secret, int port, int gen,
                                        const int *log_fds, char *spawn_error, size_t error_len);
/* Frees every worker's relays and heartbeat page. */
void cohort__job_free_relays(job *j);
/* Appends a line to every log file (a mark between generations). */
void cohort__job_mark_logs(const job *j, const int *log_fds, const char *mark);

/* loop.c */
/* Runs until every worker is reaped and their pipes are closed (or the drain time is over). */
void cohort__job_run_loop(job *j);
/* Tells every worker (and what it started) to stop with sig; SIGKILL follows after the grace. */
void cohort__job_begin_stop(job *j, int sig);
/* What the loop does with a signal read from j->sfd (SIGCHLD: reap; SIGINT/SIGTERM: stop, then kill). */
void cohort__job_on_signal(job *j, int sig);

/* generations.c */
/* Runs generation after generation until one succeeds, restarts run out, or the job ends; returns the exit code. */
int cohort__job_run_generations(job *j, const char *program, const char *secret, int port, const int *log_fds);
/* Multi-node: tells the other nodes this one is done with rc and, on node 0, keeps the store up until they are
 * done too; returns the exit code (a failure elsewhere makes a success a failure). */
int cohort__job_end_cluster(job *j, int rc);

/* errors.c: torchrun's error files. */
/* Makes the directory the workers' error files go in (--log-dir, else a fresh temporary one). */
int cohort__job_error_files_begin(job *j, int *rc);
/* Local rank r's TORCHELASTIC_ERROR_FILE (into out); "" when there is none. */
void cohort__job_error_file(const job *j, int local_rank, char *out, size_t len);
/* The message and the Python call stack torch's @record wrote for local rank r (malloc'd; returns 0 when it wrote
 * none or the file is not torch's JSON). */
int cohort__job_read_error_file(const job *j, int local_rank, char **message, char **callstack);
/* At the end: a failed job copies its root cause's error file (or, without one, its own words) to cohortrun's own
 * TORCHELASTIC_ERROR_FILE when it has one (cohortrun under another agent), as torchrun does, with the exit code as
 * errorCode; removes a temporary directory. */
void cohort__job_error_files_end(job *j, int rc);
/* Warns once for every COHORT_* variable of the environment that no knob declares, as cohort_init does (a typo in a
 * knob only cohortrun reads would otherwise pass silently). */
void cohort__job_warn_unknown_knobs(void);

/* report.c */
const char *cohort__job_signal_name(int sig, char *buf, size_t len);
/* The root cause's own words: the last lines of its stderr, repeated after everyone's shutdown noise. */
void cohort__job_print_root_cause(const job *j, FILE *out);
void cohort__job_print_summary(const job *j);
int cohort__job_exit_code(const job *j);

#endif
