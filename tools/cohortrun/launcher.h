/*
 * launcher.h: the pieces of cohortrun, the local launcher (docs/cohortrun.md).
 *
 * cohortrun starts N workers on this host, serves their rendezvous store, relays their output line by line with a
 * "[rank] " prefix, and turns the first worker failure into a clean stop of the whole job. It is split into:
 *  - flags.c:  command line parsing and the program lookup (everything that can be refused before anything runs);
 *  - spawn.c:  the worker environment and fork/exec of one worker (own process group, parent-death signal);
 *  - bind.c:   --bind: the CPUs cohortrun may use, their sockets and cores (sysfs), and each worker's share;
 *  - output.c: the relay from one worker pipe to cohortrun's stdout or stderr, whole lines only;
 *  - main.c:   the job: store, spawn, the poll loop over pipes and signals, shutdown and the summary line.
 *
 * Everything runs on cohortrun's main thread except the store server (its own thread), so none of these pieces
 * is thread-safe, and none needs to be.
 */
#ifndef COHORT_TOOLS_COHORTRUN_LAUNCHER_H
#define COHORT_TOOLS_COHORTRUN_LAUNCHER_H

#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cohort/cohort.h"

/* -H and --hostfile list at most this many hosts. */
#define COHORT_LAUNCH_HOSTS_MAX 64
/* More workers than this would need more descriptors (two pipes each) than a default ulimit -n grants. */
#define COHORT_LAUNCH_NP_MAX 256
#define COHORT_LAUNCH_GRACE_DEFAULT_S 3.0
#define COHORT_LAUNCH_LAST_CALL_DEFAULT_S 3.0
/* The secret is this many random bytes, written as twice as many hex digits. */
#define COHORT_LAUNCH_SECRET_BYTES 32
#define COHORT_LAUNCH_NODE_RANK_AUTO (-1) /* --node-rank auto */
#define COHORT_LAUNCH_SECRET_MAX 1024     /* characters of an exported COHORT_SECRET */

typedef struct cohort__launch_opts {
  int np;
  int master_port; /* 0: any free port */
  int master_port_given;
  const char *master_addr;
  double grace_s;      /* between SIGTERM (or a forwarded signal) and SIGKILL */
  const char *log_dir; /* --log-dir: DIR/rank-N.log per rank; NULL for none */
  int max_restarts;    /* --max-restarts K: generations after the first that a failure may start */
  int nnodes;          /* --nnodes: cohortruns in the job, one per node (1: this host only); MAX of MIN:MAX */
  int nnodes_min;      /* MIN of --nnodes MIN:MAX (= nnodes when fixed) */
  int elastic;         /* nnodes_min < nnodes: membership may change between generations (elastic.c) */
  double last_call_s;  /* --rdzv-last-call: with MIN..MAX-1 nodes, start once no newcomer came for this long */
  int node_rank;       /* --node-rank: this node; its ranks are node_rank*np .. node_rank*np+np-1; or
                        * COHORT_LAUNCH_NODE_RANK_AUTO until the store is served or joined (setup.c, cluster.c) */
  int nhosts;          /* -H / --hostfile: this cohortrun is node 0 and starts the others over ssh */
  char hosts[COHORT_LAUNCH_HOSTS_MAX][256];
  int master_addr_given;
  int bind;              /* --bind: COHORT_LAUNCH_BIND_NONE, _CORE or _SOCKET (bind.c) */
  int metrics_port;      /* --metrics-port [ADDR:]PORT: live metrics for Prometheus (metrics_http.c); -1: none */
  char metrics_addr[64]; /* its ADDR; "" for every interface */
  int help;
  int version;
  char **argv; /* the program and its arguments, NULL-terminated; into main()'s argv, or python_argv */
  /* torchrun's command line (flags.c): */
  int python;             /* the program runs under the interpreter (PYTHON_EXEC, else python3): a .py script, -m
                           * (COHORT_LAUNCH_PYTHON_MODULE) or --run-path; --no-python turns it off */
  char **python_argv;     /* malloc'd: interpreter, -u, [-m], the script and its arguments; NULL unless python */
  const char *role;       /* --role: ROLE_NAME */
  const char *run_id;     /* --rdzv-id: TORCHELASTIC_RUN_ID ("none"; --standalone: a fresh uuid) */
  char run_id_buf[40];    /* --standalone's uuid */
  const char *local_addr; /* --local-addr: the workers' COHORT_BIND_ADDR */
  double join_timeout_s;  /* --rdzv-conf join_timeout: how long the nodes wait for each other; < 0: COHORT_TIMEOUT */
  int console_filter;     /* --local-ranks-filter given: only the local ranks in console_ranks print to the console */
  unsigned char console_ranks[COHORT_LAUNCH_NP_MAX];
} cohort__launch_opts;
#define COHORT_LAUNCH_PYTHON_SCRIPT 1
#define COHORT_LAUNCH_PYTHON_MODULE 2

/* The version of cohort that cohortrun (and the library) comes from, e.g. "0.4.0". */
#ifndef COHORT_VERSION_STRING
#define COHORT_VERSION_STRING "unknown"
#endif

/* Parses argv into opts: cohortrun's flags and the whole of torchrun's (torch 1.13's and 2.x's, with '-' or '_'),
 * with torchrun's meanings. A bad command line is COHORT_ERR_INVALID with a one-line message. Free with the call
 * below. */
cohort_status cohort__launch_parse(int argc, char **argv, cohort__launch_opts *opts);
void cohort__launch_opts_free(cohort__launch_opts *opts);
void cohort__launch_usage(FILE *out);
/* Finds the program as execvp would (a name with a '/' is a path, else it is searched in PATH) and checks that it
 * is an executable regular file. *path_out is malloc'd; the caller frees it. */
cohort_status cohort__launch_resolve_program(const char *name, char **path_out);
/* A Python script the interpreter is to run (torchrun's way) must be a readable regular file. */
cohort_status cohort__launch_check_script(const char *path);

/* What one worker is told about the job. */
typedef struct cohort__launch_worker_env {
  int rank, world_size;
  int local_rank, local_world_size;
  const char *master_addr; /* where cohortrun's store listens (node 0's host, where rank 0 runs too) */
  int master_port;         /* MASTER_PORT: a free port for the program's own store, kept free by cohortrun */
  int store_port;          /* COHORT_STORE_PORT: cohortrun's store */
  const char *secret;
  int restart_count;      /* COHORT_RESTART_COUNT: the generation, 0 for the first */
  int max_restarts;       /* TORCHELASTIC_MAX_RESTARTS */
  int heartbeat_fd;       /* COHORT_HEARTBEAT_FD, -1 for none (then set empty) */
  const char *role;       /* ROLE_NAME (--role; NULL: "default") */
  const char *run_id;     /* TORCHELASTIC_RUN_ID (--rdzv-id; NULL: "none", torchrun's default) */
  const char *error_file; /* TORCHELASTIC_ERROR_FILE, where torch's @record writes the worker's error; NULL: none */
  const char *local_addr; /* --local-addr: COHORT_BIND_ADDR unless the environment has one; NULL: none */
} cohort__launch_worker_env;

/* The parent's environment with the job variables (RANK, ..., COHORT_SECRET) replacing any inherited ones.
 * Built before fork, because the child of a threaded process may not allocate. Free with the call below. */
cohort_status cohort__launch_env_build(const cohort__launch_worker_env *wenv, char ***envp_out);
void cohort__launch_env_free(char **envp);

/* Passes SIGINT, SIGTERM and SIGCHLD that reach a thread other than the main one on to the main thread, which
 * blocks them and reads them through its signalfd (spawn.c says why); the workers get the inherited dispositions
 * back. Called once, by the main thread, when it blocks them. */
void cohort__launch_forward_signals(void);

/* Unlinks what a reaped worker may have left in /dev/shm: the library names its segment /cohort-shm-PID-..., and
 * unlinks it once every peer has mapped it, so only a worker killed in between leaves one. Returns how many. */
int cohort__launch_remove_segments(pid_t pid);

/* Starts one worker: stdout and stderr to fresh pipes (read ends returned non-blocking), stdin from /dev/null, its
 * own process group, SIGKILL when cohortrun dies, and child_mask as its signal mask. keep_fd >= 0 (a close-on-exec
 * descriptor of cohortrun's) is inherited by the program. Returns once the program has
 * been exec'd; a failed exec is COHORT_ERR_INVALID naming the program (the child is reaped). */
cohort_status cohort__launch_spawn(const char *path, char *const argv[], char *const envp[], const sigset_t *child_mask,
                                   const cpu_set_t *affinity, int keep_fd, pid_t *pid_out, int *out_fd, int *err_fd);

/* bind.c: --bind, the CPUs each worker may run on. */
enum { COHORT_LAUNCH_BIND_NONE, COHORT_LAUNCH_BIND_CORE, COHORT_LAUNCH_BIND_SOCKET };
typedef struct cohort__launch_cpu {
  int cpu;    /* its number (sched_setaffinity's) */
  int socket; /* physical_package_id; 0 where sysfs does not say */
  int core;   /* core_id within the socket; the CPU's number where sysfs does not say */
} cohort__launch_cpu;
/* The CPUs cohortrun may use, ordered by socket, then core (the hyperthreads of a core side by side), then number. */
typedef struct cohort__launch_topology {
  int n;       /* CPUs */
  int sockets; /* distinct sockets among them */
  cohort__launch_cpu cpus[CPU_SETSIZE];
} cohort__launch_topology;
/* Reads the socket and core of every CPU in allowed from SYSFS/devices/system/cpu/cpuN/topology/ (SYSFS is "/sys"
 * on a real host; a test passes a fake tree). Returns t->n. */
int cohort__launch_topology_read(const char *sysfs, const cpu_set_t *allowed, cohort__launch_topology *t);
/* The same for the CPUs this process may run on (sched_getaffinity) and the host's /sys. */
int cohort__launch_topology_here(cohort__launch_topology *t);
/* Worker `rank` of `np`'s CPUs under mode, into *set; returns 1, or 0 when the worker is not to be bound.
 *  core:   the rank-th of np equal, disjoint blocks of t's CPUs in t's order (a socket's cores before the next
 *          socket's, and the hyperthreads of one core together); n/np CPUs each, the remainder unused. Fewer CPUs
 *          than workers: 0 (nothing sensible to bind).
 *  socket: every CPU of one socket: worker r on the floor(r * S / np)-th of t's S sockets, so that consecutive
 *          workers fill a socket before the next (np/S per socket; where S does not divide np, some sockets get
 *          one fewer). Any np.
 *  none:   0. */
int cohort__launch_bind_share(const cohort__launch_topology *t, int mode, int rank, int np, cpu_set_t *set);

/* A relay copies one worker pipe to one of cohortrun's descriptors, prefixing each line with "[rank] ". Partial lines
 * are held until their newline arrives (or the pipe closes), so lines of different workers never mix. A line
 * longer than COHORT_RELAY_LINE_MAX is cut there, so that a worker that never writes a newline cannot exhaust
 * memory. If the destination is gone (EPIPE), output is dropped and the workers are left alone. */
#define COHORT_RELAY_LINE_MAX (1u << 20)
typedef struct cohort__relay cohort__relay;
/* Takes ownership of in_fd (closed at EOF or by destroy). log_fd >= 0 also gets every byte read, unprefixed (it is
 * not owned: a rank's stdout and stderr relays share one log file). keep_tail: remember the last
 * COHORT_RELAY_TAIL_BYTES read, for the root-cause report. */
#define COHORT_RELAY_TAIL_BYTES 4096
cohort_status cohort__relay_create(int rank, int in_fd, int out_fd, int log_fd, int keep_tail, cohort__relay **out);
/* The last bytes read (at most COHORT_RELAY_TAIL_BYTES; empty unless keep_tail), oldest first. */
const char *cohort__relay_tail(const cohort__relay *relay, size_t *len);
/* Reads what the pipe holds now and writes out every complete line. At EOF writes the trailing partial line,
 * closes the pipe and sets *open to 0. */
cohort_status cohort__relay_pump(cohort__relay *relay, int *open);
/* The pipe descriptor, or -1 once closed. */
int cohort__relay_fd(const cohort__relay *relay);
/* Bytes read from the pipe so far (0 for NULL). */
uint64_t cohort__relay_bytes(const cohort__relay *relay);

/* watch.c: how a program that does not count its collectives for cohortrun (the heartbeat page) shows progress: the
 * CPU time and the system-call I/O of the worker and everything it started, read from /proc. */
/* A number that grows whenever pid or one of its descendants (at most 256 processes, found through
 * /proc/PID/task/TID/children) uses CPU (utime + stime, in ticks) or reads or writes bytes (rchar + wchar); 0 when
 * pid is gone. */
uint64_t cohort__launch_tree_activity(pid_t pid);
/* Where pid's main thread waits in the kernel (/proc/PID/wchan: "futex_wait_queue", "hrtimer_nanosleep", ...), or ""
 * when it is running or that cannot be read; for a shell waiting for its child, where that child waits. */
void cohort__launch_wchan(pid_t pid, char *out, size_t len);
/* Writes a held partial line (if any), closes the pipe and frees. Safe on NULL. */
void cohort__relay_destroy(cohort__relay *relay);

/* -H host1:2,host2:2 and --hostfile F (hosts.c): the hosts, each with its number of workers (all equal). */
cohort_status cohort__launch_parse_hosts(const char *list, cohort__launch_opts *opts);
cohort_status cohort__launch_read_hostfile(const char *path, cohort__launch_opts *opts);
/* Starts node `node`'s cohortrun on opts->hosts[node] over ssh (the secret goes to its stdin). */
cohort_status cohort__launch_ssh_node(const cohort__launch_opts *opts, int node, int port, const char *secret,
                                      pid_t *pid_out);

/* What every wait of cohortrun outside its poll loop answers to (joining the cluster, restarts, regroups, the end):
 * check() is called at least every COHORT_LAUNCH_WAIT_SLICE_S; a non-zero return ends the wait at once, with that
 * code as cohortrun's exit code and why[] saying what stopped it ("interrupted by SIGINT", "the ssh that starts node
 * 1 on host h exited with code 255"). A NULL check never stops a wait. */
#define COHORT_LAUNCH_WAIT_SLICE_S 0.2
typedef struct cohort__launch_waiter {
  int (*check)(void *arg, char *why, size_t len);
  void *arg;
} cohort__launch_waiter;

/* A multi-node job (cluster.c): every node's cohortrun joins node 0's store, announces itself, checks that all
 * agree on --nnodes and --nproc-per-node, and then watches the others (heartbeats, a shared root cause). */
typedef struct cohort__cluster cohort__cluster;
/* Connects (within timeout_s), announces this node and waits for all nnodes (elastic: for a generation that takes
 * it in; one that ends the job first is COHORT_ERR_REMOTE with the job's exit code in *end_code, else 1). A wrong
 * secret, an unreachable store, a node that never comes, and mismatched --nnodes are each one clear error. Every
 * wait, in the join and in the calls below, answers waiter (copied; may be NULL): a stop is COHORT_ERR_REMOTE with
 * the waiter's code in *end_code, naming what was waited for. */
cohort_status cohort__cluster_join(const char *addr, int port, const char *secret, double timeout_s,
                                   const cohort__launch_opts *opts, const char *host,
                                   const cohort__launch_waiter *waiter, int *end_code, cohort__cluster **out);
/* The waiter's code once a wait was stopped by it (0 otherwise). */
int cohort__cluster_stopped_by_waiter(const cohort__cluster *c);
/* The current generation: this node's place among its nodes, how many nodes, and its number (COHORT_RESTART_COUNT).
 * With a fixed --nnodes: --node-rank, --nnodes and the restarts so far. */
int cohort__cluster_rank(const cohort__cluster *c);
/* This node's id (--node-rank, or the one --node-rank auto got when it joined). */
int cohort__cluster_node_rank(const cohort__cluster *c);
int cohort__cluster_size(const cohort__cluster *c);
int cohort__cluster_gen(const cohort__cluster *c);
/* Elastic: 1 when the current generation was stopped for a change of membership (not a failure). */
int cohort__cluster_changed(const cohort__cluster *c);
/* Elastic: why the current generation started (node 0's words, e.g. "node 2 (host h) left the job; ..."). */
const char *cohort__cluster_why(const cohort__cluster *c);
/* Elastic, once this node's workers of the current generation are reaped after a stop: node 0 decides the next
 * generation (who is in it, whether the stop was a failure that uses up one of --max-restarts), the others wait
 * for its decision. Returns 1 with the next generation current, or 0 when the job ends: *end_code is the exit
 * code and *message (malloc'd, one line without "cohortrun: ", may be NULL) says why. */
int cohort__cluster_regroup(cohort__cluster *c, double timeout_s, int *end_code, char **message);
/* Elastic, node 0, once it starts no more generations: tells the nodes that wait for one (after a failure of
 * theirs, or to be taken in) that the job is over, with code (or the generation's failure code if code is 0). */
void cohort__cluster_finish(cohort__cluster *c, int code);
/* A number node 0 decides for the whole job (e.g. the workers' MASTER_PORT): node 0 publishes *value under name, the
 * other nodes wait (up to timeout_s) and read it into *value. */
cohort_status cohort__cluster_share_number(cohort__cluster *c, const char *name, int *value, double timeout_s);
/* Offers this node's failure as the job's root cause. Returns 1 if it is (the first), 0 if another node's was. */
int cohort__cluster_publish_failure(cohort__cluster *c, const char *report, int code);
/* Bumps this node's heartbeat and looks for a reason to stop: another node's root cause, a node gone silent, the
 * store gone. Returns 1 once, with *report (malloc'd text of whole lines, for stderr) and *code (the exit code). */
int cohort__cluster_poll(cohort__cluster *c, char **report, int *code);
/* --max-restarts: called once this node's workers of the current generation are all reaped after a failure.
 * Waits (beating) until every node is there too, then moves to the next generation, whose failure keys are fresh.
 * A node that ended, went silent or did not come within timeout_s, or the loss of the store, is an error: the job
 * cannot go on with fewer nodes. */
cohort_status cohort__cluster_restart(cohort__cluster *c, double timeout_s);
/* Says this node's workers are finished (code: its exit code), so that its silence from now on is no failure. */
void cohort__cluster_done(cohort__cluster *c, int code);
/* 1 when every other node has said done. */
int cohort__cluster_all_done(cohort__cluster *c);
/* Closes the connection and frees. Safe on NULL. */
void cohort__cluster_leave(cohort__cluster *c);

#endif
