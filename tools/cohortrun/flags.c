/* flags.c: cohortrun's command line and the program lookup; all that can be refused before anything starts. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "launcher.h"

void cohort__launch_usage(FILE *out) {
  fprintf(
      out,
      "usage: cohortrun -np N [--master-port P] [--master-addr A] [--standalone] [--grace S]\n"
      "                 [--bind core|socket|none] [--log-dir DIR] [--max-restarts K] [--] PROGRAM [ARGS...]\n"
      "       cohortrun [torchrun's flags] SCRIPT.py [ARGS...]     (torchrun's whole command line)\n"
      "\n"
      "Starts N copies of PROGRAM on this host as the ranks of one cohort job, serves their rendezvous store,\n"
      "and prefixes every line they print with \"[rank] \" (stdout to stdout, stderr to stderr).\n"
      "\n"
      "options:\n"
      "  -np N, -n N, --np N   number of workers (1 to %d; default 1, as torchrun's)\n"
      "  --master-port P       port of the store cohortrun serves (node 0) and the other nodes join (default\n"
      "                        0: any free port); the workers' MASTER_PORT is another port (see below)\n"
      "  --master-addr A       address that store listens on and workers dial, the workers' MASTER_ADDR\n"
      "                        (default 127.0.0.1)\n"
      "  --standalone          torchrun's: one node, the store on a free port (what cohortrun does anyway)\n"
      "  --grace S             seconds between SIGTERM and SIGKILL when stopping workers (default %g)\n"
      "  --bind core|socket|none\n"
      "                        core: each worker is bound to its own equal share of the CPUs cohortrun may use\n"
      "                        (as mpirun's --bind-to core: a socket's cores before the next socket's, a core's\n"
      "                        hyperthreads together), so ranks never share or swap cores; socket: each worker\n"
      "                        to every CPU of one socket, in blocks: of N workers on S sockets, local rank r\n"
      "                        on socket floor(r*S/N), ranks 0..N/S-1 on the first (as mpirun's --bind-to\n"
      "                        socket); none (default): no binding. Every thread of the program (BLAS,\n"
      "                        cohort's own) inherits the binding\n"
      "  --metrics-port [ADDR:]PORT  serve the job's live metrics (per rank: steps, compute, allreduce and\n"
      "                        exposed seconds, bytes, loss, img/s; restarts, failures) for Prometheus at\n"
      "                        http://HOST:PORT/metrics (OpenMetrics); ADDR limits it to one interface\n"
      "  --log-dir DIR         also write each rank's stdout and stderr to DIR/rank-N.log, each line\n"
      "                        stamped with the UTC time it was read\n"
      "                        (DIR is created if missing; each run starts the files afresh)\n"
      "  --max-restarts K      when a worker fails, stop all and start all again, up to K times, with\n"
      "                        COHORT_RESTART_COUNT=1..K (a fresh rendezvous generation; default 0); with\n"
      "                        several nodes, all nodes restart together (give every node the same K)\n"
      "  --nnodes N            nodes in the job, one cohortrun each (default 1); with N > 1 also:\n"
      "  --node-rank I         this node, 0..N-1; node 0 serves the store at --master-addr:--master-port\n"
      "  --node-rank auto      node 0 is the one that can serve that address (the first there to try), the\n"
      "                        others number themselves 1, 2, ... in the order they reach its store\n"
      "  --nnodes MIN:MAX      elastic: node 0 starts a generation with MAX nodes, or with at least MIN once\n"
      "                        no other node came for --rdzv-last-call S seconds (default %g); a node that\n"
      "                        leaves (silent 2 s) or joins later makes a new generation (new WORLD_SIZE,\n"
      "                        RANK, COHORT_RESTART_COUNT) without using up --max-restarts; below MIN the\n"
      "                        job ends (exit 1); losing node 0 (it serves the store) ends it too.\n"
      "                        Node ranks follow --node-rank order among the generation's nodes.\n"
      "  --nproc-per-node K    workers on this node (the same as -np; RANK = I*K + LOCAL_RANK); multi-node\n"
      "                        needs COHORT_SECRET exported, the same on every node; --master-port defaults to\n"
      "                        29500 and --node-rank to 0 there (auto with c10d or MIN:MAX), as torchrun's\n"
      "  -H H1:K,H2:K,...      start the job on these hosts: this cohortrun is node 0 (run it on H1), the\n"
      "                        others are started over ssh (BatchMode) with the same cohortrun path, program\n"
      "                        and working directory; K workers per host (all equal); store on H1\n"
      "  --hostfile F          the same, one host per line: 'HOST:K' or 'HOST slots=K' ('#' comments)\n"
      "torchrun's flags, with torchrun's meanings ('-' or '_' alike):\n"
      "  --nproc-per-node N|auto|cpu|gpu   workers on this node (auto: the GPUs, else the CPUs)\n"
      "  --rdzv-backend static|c10d  --rdzv-endpoint HOST[:PORT]  --rdzv-id ID  --rdzv-conf K=V,...\n"
      "                        the rendezvous: node 0 serves it at the endpoint (c10d: the node that can bind\n"
      "                        it, the others number themselves; port 29400 by default); ID is the workers'\n"
      "                        TORCHELASTIC_RUN_ID; join_timeout and last_call_timeout of --rdzv-conf count\n"
      "  --role NAME           ROLE_NAME;   --local-addr A   the workers' COHORT_BIND_ADDR\n"
      "  -m, --module          PROGRAM is a Python module: python3 -u -m PROGRAM\n"
      "  --no-python           run PROGRAM itself; without it a PROGRAM ending in .py (and --run-path's) runs\n"
      "                        as PYTHON_EXEC (default python3) -u PROGRAM, as torchrun runs it\n"
      "  --local-ranks-filter 0,2   only these local ranks print to the console (all go to --log-dir)\n"
      "  --monitor-interval S, --start-method M, -r/--redirects, -t/--tee, --logs-specs: accepted; cohortrun\n"
      "                        always relays both streams, prefixed, and watches the workers continuously\n"
      "  -V, --version         the version\n"
      "  -h, --help            this text\n"
      "  --                    ends the options (for a PROGRAM whose name starts with '-')\n"
      "\n"
      "Each worker gets the parent environment plus torchrun's variables, with torchrun's meanings, so that\n"
      "a torchrun program (torch.distributed with init_method='env://', say) runs unchanged:\n"
      "  RANK=0..N-1  WORLD_SIZE=N  LOCAL_RANK  LOCAL_WORLD_SIZE=K  GROUP_RANK=<node>  GROUP_WORLD_SIZE=<nodes>\n"
      "  ROLE_RANK=RANK  ROLE_WORLD_SIZE=N  ROLE_NAME=default  TORCHELASTIC_RESTART_COUNT  TORCHELASTIC_MAX_RESTARTS\n"
      "  MASTER_ADDR=A  MASTER_PORT=<a port node 0 found free and keeps free: the program's rank 0 may serve\n"
      "  its own store there>  TORCHELASTIC_USE_AGENT_STORE=False  TORCHELASTIC_RUN_ID=<--rdzv-id, none>\n"
      "  TORCHELASTIC_ERROR_FILE=<where torch's @record writes the worker's error; the root cause's is shown>\n"
      "  OMP_NUM_THREADS=1 (with several workers, unless set)\n"
      "and cohort's (a cohort program meets the others at cohortrun's store):\n"
      "  COHORT_STORE_ADDR=A  COHORT_STORE_PORT=<cohortrun's store>  COHORT_LAUNCHER_STORE=1\n"
      "  COHORT_SECRET=<64 hex digits, fresh for every run>  COHORT_RESTART_COUNT=0\n"
      "Workers read stdin from /dev/null, run in their own process groups, and are killed if cohortrun dies.\n"
      "\n"
      "If a worker exits non-zero or dies by a signal, the others get SIGTERM (SIGKILL after the grace), and\n"
      "cohortrun prints the last lines of that rank's stderr and one line naming it and its host, and exits\n"
      "with its code (128+signal for a signal). With --max-restarts, the job is restarted instead, while\n"
      "restarts remain.\n"
      "COHORT_HEARTBEAT_S=S (exported to cohortrun; default 0, off): a worker whose collectives make no\n"
      "progress for S seconds after its first one is reported by rank and treated as a failed worker.\n"
      "SIGINT and SIGTERM to cohortrun are forwarded to the workers (a second one kills them at once).\n"
      "exit codes: 0 all workers succeeded; 1 cohortrun itself failed; 2 bad command line or program;\n"
      "otherwise the failing worker's code, or 128+signal.\n"
      "The COHORT_* knobs the library reads are listed in docs/env.md.\n",
      COHORT_LAUNCH_NP_MAX, COHORT_LAUNCH_GRACE_DEFAULT_S, COHORT_LAUNCH_LAST_CALL_DEFAULT_S);
}

static cohort_status parse_long(const char *flag, const char *text, long min, long max, const char *what, long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  /* strtol skips leading blanks and takes a sign: "-np ' 2'" and "+2" are no numbers here. */
  if (!isdigit((unsigned char)text[0]) || *end != '\0' || errno == ERANGE || v < min || v > max)
    return cohort__error(COHORT_ERR_INVALID, "%s needs %s (%ld to %ld), got '%s'", flag, what, min, max, text);
  *out = v;
  return COHORT_OK;
}

static cohort_status parse_seconds(const char *flag, const char *text, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (text[0] == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v) || v < 0 || v > 3600)
    return cohort__error(COHORT_ERR_INVALID, "%s needs a number of seconds (0 to 3600), got '%s'", flag, text);
  *out = v;
  return COHORT_OK;
}

/* Whether arg starts with flag's n characters, where a '-' of flag after its leading "--" may also be written '_'
 * (torchrun takes --nproc-per-node and --nproc_per_node alike). */
static int flag_prefix(const char *arg, const char *flag, size_t n) {
  for (size_t k = 0; k < n; k++) {
    if (arg[k] == flag[k]) continue;
    if (k >= 2 && flag[0] == '-' && flag[1] == '-' && flag[k] == '-' && arg[k] == '_') continue;
    return 0;
  }
  return 1;
}

/* Matches argv[*i] against a flag without a value (either spelling). */
static int match_flag(const char *arg, const char *flag) {
  size_t n = strlen(flag);
  return strlen(arg) == n && flag_prefix(arg, flag, n);
}

/* Matches argv[*i] against a flag that takes a value, as "flag value" or "flag=value" (either spelling). */
static int match_valued(int argc, char **argv, int *i, const char *flag, const char **value, cohort_status *st) {
  const char *arg = argv[*i];
  size_t n = strlen(flag);
  if (strlen(arg) < n || !flag_prefix(arg, flag, n)) return 0;
  if (arg[n] == '=') {
    *value = arg + n + 1;
    return 1;
  }
  if (arg[n] != '\0') return 0;
  if (*i + 1 >= argc) {
    *st = cohort__error(COHORT_ERR_INVALID, "%s needs a value", flag);
    return 1;
  }
  *value = argv[++*i];
  return 1;
}

/* -np and --nproc-per-node name the same number (the workers on this node): given twice, they must agree, or which
 * one wins would be a guess. */
static cohort_status set_np(cohort__launch_opts *opts, const char **np_given, const char *flag, long v) {
  if (*np_given && opts->np != (int)v)
    return cohort__error(COHORT_ERR_INVALID, "%s %ld contradicts %s %d: both give the workers on this node; give one",
                         flag, v, *np_given, opts->np);
  opts->np = (int)v;
  *np_given = flag;
  return COHORT_OK;
}

/* --nproc-per-node auto|cpu|gpu, as torchrun counts them: gpu the GPUs (of the NVIDIA driver, which lists one
 * directory per GPU under /proc/driver/nvidia/gpus), cpu the CPUs online, auto the GPUs if there are any. */
static cohort_status count_workers(const char *what, long *out) {
  long gpus = 0;
  DIR *d = opendir("/proc/driver/nvidia/gpus");
  if (d) {
    for (struct dirent *e; (e = readdir(d)) != NULL;)
      gpus += e->d_name[0] != '.';
    closedir(d);
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (strcmp(what, "gpu") == 0 && gpus == 0)
    return cohort__error(COHORT_ERR_INVALID,
                         "--nproc-per-node gpu: this host has no GPU (no /proc/driver/nvidia/gpus)");
  *out = strcmp(what, "cpu") == 0 || gpus == 0 ? cpus : gpus;
  if (*out < 1) *out = 1;
  if (*out > COHORT_LAUNCH_NP_MAX) *out = COHORT_LAUNCH_NP_MAX;
  return COHORT_OK;
}

/* torchrun's --redirects/--tee: 0..3, or LOCAL_RANK:N,... (cohortrun always relays both streams, prefixed, and
 * writes them to --log-dir too: the values are checked and have nothing more to change). */
static cohort_status check_std(const char *flag, const char *v) {
  if (v[0] >= '0' && v[0] <= '3' && v[1] == '\0') return COHORT_OK;
  const char *p = v;
  for (;;) { /* LOCAL_RANK:N,... */
    char *end = NULL;
    strtol(p, &end, 10);
    if (end == p || *end != ':' || end[1] < '0' || end[1] > '3') break;
    p = end + 2;
    if (*p == '\0') return COHORT_OK;
    if (*p != ',') break;
    p++;
  }
  return cohort__error(COHORT_ERR_INVALID, "%s takes 0, 1, 2 or 3, or LOCAL_RANK:N,... (torchrun's), not '%s'", flag,
                       v);
}

/* --rdzv-conf key=value,...: join_timeout and last_call_timeout mean what they mean to torchrun's c10d rendezvous;
 * the others (close_timeout, read_timeout, timeout, is_host, ...) are accepted and have no counterpart here. */
static cohort_status parse_rdzv_conf(const char *conf, cohort__launch_opts *opts) {
  char buf[1024];
  if (strlen(conf) >= sizeof buf) return cohort__error(COHORT_ERR_INVALID, "--rdzv-conf is too long");
  snprintf(buf, sizeof buf, "%s", conf);
  for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
      return cohort__error(COHORT_ERR_INVALID, "--rdzv-conf takes key=value,... (e.g. join_timeout=900), not '%s'", kv);
    *eq = '\0';
    if (strcmp(kv, "join_timeout") == 0)
      COHORT_CHECK(parse_seconds("--rdzv-conf join_timeout", eq + 1, &opts->join_timeout_s));
    else if (strcmp(kv, "last_call_timeout") == 0)
      COHORT_CHECK(parse_seconds("--rdzv-conf last_call_timeout", eq + 1, &opts->last_call_s));
  }
  return COHORT_OK;
}

/* --local-ranks-filter 0,2: only these local ranks print to the console (all of them to --log-dir). */
static cohort_status parse_filter(const char *v, cohort__launch_opts *opts) {
  memset(opts->console_ranks, 0, sizeof opts->console_ranks);
  opts->console_filter = 1;
  const char *p = v;
  for (;;) {
    char *end = NULL;
    long r = strtol(p, &end, 10);
    if (end == p || r < 0 || r >= COHORT_LAUNCH_NP_MAX || (*end && *end != ','))
      return cohort__error(COHORT_ERR_INVALID, "--local-ranks-filter takes local ranks like 0,2, not '%s'", v);
    opts->console_ranks[r] = 1;
    if (!*end) return COHORT_OK;
    p = end + 1;
  }
}

/* A version 4 uuid, as torchrun's --standalone makes for its rendezvous id. */
static void make_uuid(char *out, size_t len) {
  unsigned char b[16] = {0};
  FILE *f = fopen("/dev/urandom", "r");
  if (!f || fread(b, 1, sizeof b, f) != sizeof b) {
    for (size_t k = 0; k < sizeof b; k++)
      b[k] = (unsigned char)(rand() ^ getpid() ^ (int)k);
  }
  if (f) fclose(f);
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, len, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* "host", "host:port", "[v6]:port" of --rdzv-endpoint. */
static cohort_status parse_endpoint(const char *v, cohort__launch_opts *opts, char *host, size_t host_len, int *port) {
  const char *colon = strrchr(v, ':');
  const char *close = strchr(v, ']');
  if (v[0] == '[' && close) {
    snprintf(host, host_len, "%.*s", (int)(close - v - 1), v + 1);
    colon = close[1] == ':' ? close + 1 : NULL;
  } else if (colon && strchr(v, ':') != colon) {
    colon = NULL; /* a bare IPv6 address */
    snprintf(host, host_len, "%s", v);
  } else {
    snprintf(host, host_len, "%.*s", colon ? (int)(colon - v) : (int)strlen(v), v);
  }
  *port = -1;
  if (colon) {
    long p = 0;
    COHORT_CHECK(parse_long("--rdzv-endpoint", colon + 1, 0, 65535, "HOST:PORT with a port", &p));
    *port = (int)p;
  }
  if (!host[0]) return cohort__error(COHORT_ERR_INVALID, "--rdzv-endpoint needs HOST[:PORT], got '%s'", v);
  (void)opts;
  return COHORT_OK;
}

cohort_status cohort__launch_parse(int argc, char **argv, cohort__launch_opts *opts) {
  memset(opts, 0, sizeof *opts);
  opts->master_addr = "127.0.0.1";
  opts->grace_s = COHORT_LAUNCH_GRACE_DEFAULT_S;
  opts->metrics_port = -1;
  opts->join_timeout_s = -1;
  opts->run_id = "none";
  const char *np_given = NULL; /* the flag that gave opts->np */
  int node_rank_given = 0, standalone = 0, no_python = 0, run_path = 0, module = 0;
  const char *rdzv_backend = "static";
  static char endpoint_host[256];
  int endpoint_port = -1, endpoint_given = 0;
  opts->nnodes = opts->nnodes_min = 1;
  opts->last_call_s = COHORT_LAUNCH_LAST_CALL_DEFAULT_S;
  int i = 1;
  for (; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) {
      i++;
      break;
    }
    if (arg[0] != '-' || arg[1] == '\0') break; /* the program */
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      opts->help = 1;
      return COHORT_OK;
    }
    if (strcmp(arg, "--version") == 0 || strcmp(arg, "-V") == 0) {
      opts->version = 1;
      return COHORT_OK;
    }
    const char *value = NULL;
    cohort_status st = COHORT_OK;
    long v = 0;
    if (match_valued(argc, argv, &i, "-np", &value, &st) || match_valued(argc, argv, &i, "--np", &value, &st) ||
        match_valued(argc, argv, &i, "-n", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(parse_long("-np", value, 1, COHORT_LAUNCH_NP_MAX, "a positive number of workers", &v));
      COHORT_CHECK(set_np(opts, &np_given, "-np", v));
    } else if (match_valued(argc, argv, &i, "--nproc-per-node", &value, &st)) {
      COHORT_CHECK(st);
      if (strcmp(value, "auto") == 0 || strcmp(value, "cpu") == 0 || strcmp(value, "gpu") == 0)
        COHORT_CHECK(count_workers(value, &v));
      else
        COHORT_CHECK(parse_long("--nproc-per-node", value, 1, COHORT_LAUNCH_NP_MAX,
                                "a positive number of workers, or auto, cpu, gpu", &v));
      COHORT_CHECK(set_np(opts, &np_given, "--nproc-per-node", v));
    } else if (match_valued(argc, argv, &i, "-H", &value, &st) ||
               match_valued(argc, argv, &i, "--hosts", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(cohort__launch_parse_hosts(value, opts));
    } else if (match_valued(argc, argv, &i, "--hostfile", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(cohort__launch_read_hostfile(value, opts));
    } else if (match_valued(argc, argv, &i, "--nnodes", &value, &st)) {
      COHORT_CHECK(st);
      const char *colon = strchr(value, ':');
      if (colon) {
        /* torchrun's MIN:MAX: an elastic job of MIN to MAX nodes (2:2 is simply 2). */
        char min_text[32];
        snprintf(min_text, sizeof min_text, "%.*s", (int)(colon - value) < 31 ? (int)(colon - value) : 31, value);
        long max = 0;
        if (parse_long("--nnodes", min_text, 1, 4096, "a number of nodes", &v) != COHORT_OK ||
            parse_long("--nnodes", colon + 1, 1, 4096, "a number of nodes", &max) != COHORT_OK)
          return cohort__error(COHORT_ERR_INVALID,
                               "--nnodes needs N or MIN:MAX with 1 <= MIN <= MAX <= 4096 (e.g. --nnodes 2:4), got '%s'",
                               value);
        if (v > max)
          return cohort__error(COHORT_ERR_INVALID,
                               "--nnodes %s: MIN (%ld) is larger than MAX (%ld); write MIN:MAX, e.g. --nnodes %ld:%ld",
                               value, v, max, max, v);
        opts->nnodes_min = (int)v;
        v = max;
      } else {
        COHORT_CHECK(parse_long("--nnodes", value, 1, 4096, "a number of nodes", &v));
        opts->nnodes_min = (int)v;
      }
      opts->nnodes = (int)v;
    } else if (match_valued(argc, argv, &i, "--rdzv-last-call", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(parse_seconds("--rdzv-last-call", value, &opts->last_call_s));
    } else if (match_valued(argc, argv, &i, "--node-rank", &value, &st)) {
      COHORT_CHECK(st);
      if (strcmp(value, "auto") == 0) {
        opts->node_rank = COHORT_LAUNCH_NODE_RANK_AUTO;
      } else {
        COHORT_CHECK(parse_long("--node-rank", value, 0, 4095, "a node rank or auto", &v));
        opts->node_rank = (int)v;
      }
      node_rank_given = 1;
    } else if (match_valued(argc, argv, &i, "--master-port", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(parse_long("--master-port", value, 0, 65535, "a port number", &v));
      opts->master_port = (int)v;
      opts->master_port_given = 1;
    } else if (match_valued(argc, argv, &i, "--master-addr", &value, &st)) {
      COHORT_CHECK(st);
      if (value[0] == '\0') return cohort__error(COHORT_ERR_INVALID, "--master-addr needs a non-empty address");
      opts->master_addr = value;
      opts->master_addr_given = 1;
    } else if (match_flag(arg, "--standalone")) {
      standalone = 1;
    } else if (match_valued(argc, argv, &i, "--bind", &value, &st)) {
      COHORT_CHECK(st);
      if (strcmp(value, "core") == 0)
        opts->bind = COHORT_LAUNCH_BIND_CORE;
      else if (strcmp(value, "socket") == 0)
        opts->bind = COHORT_LAUNCH_BIND_SOCKET;
      else if (strcmp(value, "none") == 0)
        opts->bind = COHORT_LAUNCH_BIND_NONE;
      else
        return cohort__error(COHORT_ERR_INVALID, "--bind takes 'core', 'socket' or 'none', not '%s'", value);
    } else if (match_valued(argc, argv, &i, "--metrics-port", &value, &st)) {
      COHORT_CHECK(st);
      const char *colon = strrchr(value, ':');
      if (colon) {
        size_t n = (size_t)(colon - value);
        if (n == 0 || n >= sizeof opts->metrics_addr)
          return cohort__error(COHORT_ERR_INVALID, "--metrics-port takes PORT or ADDR:PORT, not '%s'", value);
        memcpy(opts->metrics_addr, value, n);
        opts->metrics_addr[n] = '\0';
      }
      long port;
      COHORT_CHECK(parse_long("--metrics-port", colon ? colon + 1 : value, 0, 65535, "a port", &port));
      opts->metrics_port = (int)port;
    } else if (match_valued(argc, argv, &i, "--log-dir", &value, &st)) {
      COHORT_CHECK(st);
      if (value[0] == '\0') return cohort__error(COHORT_ERR_INVALID, "--log-dir needs a non-empty directory");
      opts->log_dir = value;
    } else if (match_valued(argc, argv, &i, "--max-restarts", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(parse_long("--max-restarts", value, 0, 1000, "a number of restarts", &v));
      opts->max_restarts = (int)v;
    } else if (match_valued(argc, argv, &i, "--grace", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(parse_seconds("--grace", value, &opts->grace_s));
      /* torchrun's own flags, with torchrun's meanings (docs/cohortrun.md, "torchrun's command line"). */
    } else if (match_valued(argc, argv, &i, "--rdzv-backend", &value, &st)) {
      COHORT_CHECK(st);
      if (strcmp(value, "static") != 0 && strcmp(value, "c10d") != 0)
        return cohort__error(COHORT_ERR_INVALID,
                             "--rdzv-backend %s: cohortrun's node 0 serves the rendezvous itself, as torchrun's "
                             "static and c10d backends do; give static or c10d (an etcd server is not used)",
                             value);
      rdzv_backend = value;
    } else if (match_valued(argc, argv, &i, "--rdzv-endpoint", &value, &st)) {
      COHORT_CHECK(st);
      if (value[0]) {
        COHORT_CHECK(parse_endpoint(value, opts, endpoint_host, sizeof endpoint_host, &endpoint_port));
        endpoint_given = 1;
      }
    } else if (match_valued(argc, argv, &i, "--rdzv-id", &value, &st)) {
      COHORT_CHECK(st);
      opts->run_id = value;
    } else if (match_valued(argc, argv, &i, "--rdzv-conf", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(parse_rdzv_conf(value, opts));
    } else if (match_valued(argc, argv, &i, "--monitor-interval", &value, &st)) {
      COHORT_CHECK(st);
      double ignored = 0;
      COHORT_CHECK(parse_seconds("--monitor-interval", value, &ignored)); /* cohortrun watches continuously */
    } else if (match_valued(argc, argv, &i, "--start-method", &value, &st)) {
      COHORT_CHECK(st);
      if (strcmp(value, "spawn") != 0 && strcmp(value, "fork") != 0 && strcmp(value, "forkserver") != 0)
        return cohort__error(COHORT_ERR_INVALID, "--start-method takes spawn, fork or forkserver, not '%s'", value);
    } else if (match_valued(argc, argv, &i, "--role", &value, &st)) {
      COHORT_CHECK(st);
      opts->role = value;
    } else if (match_flag(arg, "--module") || strcmp(arg, "-m") == 0) {
      module = 1;
    } else if (match_flag(arg, "--no-python")) {
      no_python = 1;
    } else if (match_flag(arg, "--run-path")) {
      run_path = 1;
    } else if (match_valued(argc, argv, &i, "--redirects", &value, &st) ||
               match_valued(argc, argv, &i, "-r", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(check_std("--redirects", value));
    } else if (match_valued(argc, argv, &i, "--tee", &value, &st) || match_valued(argc, argv, &i, "-t", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(check_std("--tee", value));
    } else if (match_valued(argc, argv, &i, "--local-addr", &value, &st)) {
      COHORT_CHECK(st);
      opts->local_addr = value;
    } else if (match_valued(argc, argv, &i, "--local-ranks-filter", &value, &st)) {
      COHORT_CHECK(st);
      COHORT_CHECK(parse_filter(value, opts));
    } else if (match_valued(argc, argv, &i, "--logs-specs", &value, &st)) {
      COHORT_CHECK(st); /* torch 2's log handler plugin: cohortrun has its own (--log-dir) */
    } else if (match_flag(arg, "--use-env")) {
      /* torch.distributed.launch's: the environment is always how workers learn their place */
    } else {
      return cohort__error(COHORT_ERR_INVALID, "unknown flag '%s'", arg);
    }
  }
  if (no_python && (module || run_path))
    return cohort__error(COHORT_ERR_INVALID, "--no-python runs the program itself: leave out %s",
                         module ? "-m/--module" : "--run-path");
  /* torchrun's --standalone: one node, its store on a free port, which is what cohortrun does by default. */
  if (standalone && (opts->nhosts > 0 || opts->nnodes > 1 || node_rank_given || opts->master_port != 0))
    return cohort__error(COHORT_ERR_INVALID, "--standalone is one node with its store on a free port: leave out "
                                             "--nnodes, --node-rank, --master-port and -H/--hostfile");
  if (standalone) {
    make_uuid(opts->run_id_buf, sizeof opts->run_id_buf);
    opts->run_id = opts->run_id_buf;
  }
  int c10d = strcmp(rdzv_backend, "c10d") == 0;
  if (endpoint_given && !standalone) {
    /* Where the rendezvous is: node 0's store (static), or the store the first node to bind it serves (c10d). */
    opts->master_addr = endpoint_host;
    opts->master_addr_given = 1;
    if (endpoint_port >= 0 || c10d) {
      opts->master_port = endpoint_port >= 0 ? endpoint_port : 29400; /* torch's c10d default */
      opts->master_port_given = 1;
    }
  }
  if (i < argc && !no_python &&
      (module || run_path || (strlen(argv[i]) > 3 && strcmp(argv[i] + strlen(argv[i]) - 3, ".py") == 0))) {
    /* torchrun runs `python -u [-m] SCRIPT ARGS`: the interpreter of PYTHON_EXEC, else python3 from PATH. */
    opts->python = module ? COHORT_LAUNCH_PYTHON_MODULE : COHORT_LAUNCH_PYTHON_SCRIPT;
    int n = argc - i;
    opts->python_argv = calloc((size_t)n + 4, sizeof *opts->python_argv);
    if (!opts->python_argv) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    const char *exec = getenv("PYTHON_EXEC");
    int k = 0;
    opts->python_argv[k++] = (char *)(exec && exec[0] ? exec : "python3");
    opts->python_argv[k++] = (char *)"-u";
    if (module) opts->python_argv[k++] = (char *)"-m";
    for (int j = 0; j < n; j++)
      opts->python_argv[k++] = argv[i + j];
  }
  if (opts->nhosts > 0) {
    /* The host list says it all: this is node 0 of nhosts, and the workers per node are the slots. */
    if (np_given || opts->nnodes > 1 || node_rank_given)
      return cohort__error(COHORT_ERR_INVALID, "-H/--hostfile give the nodes and their workers: leave out -np, "
                                               "--nproc-per-node, --nnodes and --node-rank");
    opts->nnodes = opts->nnodes_min = opts->nhosts;
    if (!opts->master_addr_given) opts->master_addr = opts->hosts[0];
    if (i >= argc) return cohort__error(COHORT_ERR_INVALID, "no program given: cohortrun -H HOSTS PROGRAM [ARGS...]");
    opts->argv = opts->python_argv ? opts->python_argv : argv + i;
    return COHORT_OK;
  }
  if (!np_given) opts->np = 1; /* torchrun's default: one worker */
  opts->elastic = opts->nnodes_min < opts->nnodes;
  /* Without --node-rank, torchrun's c10d rendezvous (and an elastic job) numbers the nodes itself: the node that can
   * serve the endpoint is node 0. The static rendezvous's default is node 0. */
  if (!node_rank_given && opts->nnodes > 1 && (c10d || opts->elastic)) {
    opts->node_rank = COHORT_LAUNCH_NODE_RANK_AUTO;
    node_rank_given = 1;
  }
  if (opts->node_rank >= opts->nnodes) {
    if (opts->elastic)
      return cohort__error(COHORT_ERR_INVALID, "--node-rank %d is outside 0..%d (--nnodes %d:%d)", opts->node_rank,
                           opts->nnodes - 1, opts->nnodes_min, opts->nnodes);
    return cohort__error(COHORT_ERR_INVALID, "--node-rank %d is outside 0..%d (--nnodes %d)", opts->node_rank,
                         opts->nnodes - 1, opts->nnodes);
  }
  if (opts->node_rank == COHORT_LAUNCH_NODE_RANK_AUTO && opts->nnodes <= 1)
    return cohort__error(COHORT_ERR_INVALID, "--node-rank auto numbers the nodes of a job of several: give --nnodes");
  if (opts->nnodes > 1) {
    /* torchrun's default: --master-port 29500 (c10d: the endpoint's port, 29400 by default). */
    if (!opts->master_port_given) {
      opts->master_port = 29500;
      opts->master_port_given = 1;
    }
    if (opts->master_port == 0)
      return cohort__error(COHORT_ERR_INVALID,
                           "--nnodes %d needs a fixed --master-port P (the same on every node; 0 cannot be shared)",
                           opts->nnodes);
    if (opts->nnodes * opts->np > 1 << 20)
      return cohort__error(COHORT_ERR_INVALID, "--nnodes x --nproc-per-node is too large");
  }
  if (i >= argc) return cohort__error(COHORT_ERR_INVALID, "no program given: cohortrun -np N PROGRAM [ARGS...]");
  opts->argv = opts->python_argv ? opts->python_argv : argv + i;
  return COHORT_OK;
}

void cohort__launch_opts_free(cohort__launch_opts *opts) {
  free(opts->python_argv);
  opts->python_argv = NULL;
}

/* Why path cannot be run, or COHORT_OK when it is an executable regular file. */
static cohort_status check_executable(const char *name, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return cohort__error_errno(COHORT_ERR_INVALID, errno, "program '%s'", name);
  if (S_ISDIR(st.st_mode)) return cohort__error(COHORT_ERR_INVALID, "program '%s' is a directory", name);
  if (!S_ISREG(st.st_mode)) return cohort__error(COHORT_ERR_INVALID, "program '%s' is not a regular file", name);
  if (access(path, X_OK) != 0)
    return cohort__error(COHORT_ERR_INVALID, "program '%s' is not executable (chmod +x it?)", name);
  return COHORT_OK;
}

cohort_status cohort__launch_resolve_program(const char *name, char **path_out) {
  *path_out = NULL;
  if (name[0] == '\0') return cohort__error(COHORT_ERR_INVALID, "the program name is empty");
  if (strchr(name, '/')) {
    COHORT_CHECK(check_executable(name, name));
    *path_out = strdup(name);
    if (!*path_out) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    return COHORT_OK;
  }
  /* The PATH search of execvp, done here so that a typo is one clear line before any worker starts. */
  const char *path = getenv("PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  size_t name_len = strlen(name);
  const char *dir = path;
  int found_unusable = 0;
  for (;;) {
    const char *colon = strchr(dir, ':');
    size_t dir_len = colon ? (size_t)(colon - dir) : strlen(dir);
    char *candidate = malloc(dir_len + name_len + 3);
    if (!candidate) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    if (dir_len == 0) /* an empty PATH entry means the current directory */
      snprintf(candidate, dir_len + name_len + 3, "./%s", name);
    else
      snprintf(candidate, dir_len + name_len + 3, "%.*s/%s", (int)dir_len, dir, name);
    struct stat st;
    if (stat(candidate, &st) == 0) {
      if (S_ISREG(st.st_mode) && access(candidate, X_OK) == 0) {
        *path_out = candidate;
        return COHORT_OK;
      }
      found_unusable = 1;
    }
    free(candidate);
    if (!colon) break;
    dir = colon + 1;
  }
  if (found_unusable)
    return cohort__error(COHORT_ERR_INVALID, "program '%s' was found in PATH but is not an executable file", name);
  return cohort__error(COHORT_ERR_INVALID, "program '%s' not found in PATH (give a path like ./%s?)", name, name);
}

cohort_status cohort__launch_check_script(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return cohort__error_errno(COHORT_ERR_INVALID, errno, "Python script '%s'", path);
  if (!S_ISREG(st.st_mode)) return cohort__error(COHORT_ERR_INVALID, "Python script '%s' is not a regular file", path);
  if (access(path, R_OK) != 0) return cohort__error_errno(COHORT_ERR_INVALID, errno, "Python script '%s'", path);
  return COHORT_OK;
}
