/*
 * job.c: the job's identity and its store.
 *
 * cohort__job_open() opens the store (COHORT_STORE: TCP at COHORT_STORE_ADDR:COHORT_STORE_PORT, else MASTER_ADDR and
 * MASTER_PORT, served by rank 0 unless the launcher serves it; or a directory) and gives the rest of the rendezvous
 * the job's key space only: a view of the store under "cohort/<run id>/<generation>/<open>/" (job_store(), the one
 * place that names it). The run id (COHORT_RUN_ID, else derived from COHORT_SECRET and the launcher's job identity)
 * keeps jobs sharing a store apart, and the generation (COHORT_RESTART_COUNT) keeps a restarted job from meeting stale
 * addresses. A store that rank 0 serves says whose it is, and the other ranks check that before they publish
 * anything (check_owner). cohort__store_place_open() reconnects to the same place, for sub-communicators.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "comm/comm.h"
#include "core/clock.h"
#include "core/error.h"

typedef struct job {
  const cohort__launch_env *env;
  const cohort__config *cfg;
  const char *master_addr;
  long master_port;
  long timeout_s;
  char *where; /* "the store at host:port (why that port)", for messages */
  size_t where_len;
} job;

/* The TCP store is at COHORT_STORE_ADDR:COHORT_STORE_PORT, each defaulting to MASTER_ADDR and MASTER_PORT. A
 * launcher that serves the store itself (cohortrun) sets both, and leaves MASTER_ADDR:MASTER_PORT to the program, as
 * torchrun does: that is where a torch program's rank 0 serves its own (c10d) store. Under torchrun's static
 * rendezvous its agent already serves a store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), which speaks
 * torch's protocol, not ours; rank 0 then serves cohort's on the next port, MASTER_PORT+1, which every rank derives
 * alike from the same variables. */
static cohort_status open_store(job *j, int rank, const char *secret, cohort__store **store,
                                cohort__store_server **server) {
  const char *port_from = j->env->port_why[0] ? j->env->port_why : "MASTER_PORT";
  j->master_port = j->env->master_port;
  if (j->cfg->store_port) {
    j->master_port = j->cfg->store_port;
    port_from = "COHORT_STORE_PORT";
  } else if (j->env->agent_store && j->master_port > 0) {
    if (j->master_port == 65535)
      return cohort__error(COHORT_ERR_INVALID, "MASTER_PORT=65535 is torchrun's agent store, and cohort's goes on "
                                               "MASTER_PORT+1, which does not exist: set COHORT_STORE_PORT to a free "
                                               "port, the same on every rank");
    j->master_port++;
    port_from = "MASTER_PORT+1, beside torchrun's agent store on MASTER_PORT";
  }
  if (j->cfg->store_addr[0]) j->master_addr = j->cfg->store_addr;
  const char *kind = j->cfg->store;
  if (strncmp(kind, "file:", 5) == 0) {
    snprintf(j->where, j->where_len, "the file store in %s", kind + 5);
    return cohort__store_open_file(kind + 5, store);
  }
  if (strcmp(kind, "tcp") != 0)
    return cohort__error(COHORT_ERR_INVALID, "COHORT_STORE='%s' is not 'tcp' or 'file:DIR'", kind);
  if (j->master_port == 0)
    return cohort__error(COHORT_ERR_INVALID, "MASTER_PORT is not set: run under cohortrun, or set MASTER_ADDR and "
                                             "MASTER_PORT to where rank 0 (or the launcher) serves the store");
  snprintf(j->where, j->where_len, "the store at %s:%ld (%s)", j->master_addr, j->master_port, port_from);
  if (rank == 0 && !j->cfg->launcher_store) {
    cohort_status st = cohort__store_server_start(j->master_addr, (int)j->master_port, secret, server);
    if (st != COHORT_OK && j->env->agent_store && !j->cfg->store_port)
      return cohort__error_prefix(st,
                                  "rank 0 cannot serve the rendezvous store on %s:%ld (MASTER_PORT+1, beside "
                                  "torchrun's agent store on MASTER_PORT): set COHORT_STORE_PORT to a free port, "
                                  "the same on every rank, or run torchrun with --standalone",
                                  j->master_addr, j->master_port);
    if (st != COHORT_OK) return cohort__error_prefix(st, "rank 0 cannot serve %s", j->where);
  }
  cohort_status st =
      cohort__store_connect_tcp(j->master_addr, (int)j->master_port, secret, (double)j->timeout_s, store);
  if (st != COHORT_OK) return cohort__error_prefix(st, "rendezvous");
  return COHORT_OK;
}

/* The run id scoping every key: COHORT_RUN_ID, else a tag derived from the secret (an HMAC, so the store never
 * holds the secret itself) and one derived from the launcher's job identity (mpirun's, Slurm's: a hash, as it may be
 * long), joined by '-', else "default". Jobs that share a secret (an exported one) but not a launch stay apart. */
static void run_id_of(const cohort__config *cfg, const cohort__launch_env *env, char *out, size_t len) {
  const char *secret = cfg->secret, *forced = cfg->run_id;
  if (forced[0]) {
    snprintf(out, len, "%.*s", (int)len - 1, forced); /* truncated as before */
    return;
  }
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  size_t n = 0;
  out[0] = '\0';
  if (secret[0]) {
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)"cohort-run-id", 13, mac, &mac_len);
    for (unsigned i = 0; i < 8 && n + 3 <= len; i++)
      n += (size_t)snprintf(out + n, len - n, "%02x", mac[i]);
  }
  if (env->job_id[0] && EVP_Digest(env->job_id, strlen(env->job_id), mac, &mac_len, EVP_sha256(), NULL) == 1) {
    n += (size_t)snprintf(out + n, len - n, "%sjob", n ? "-" : "");
    for (unsigned i = 0; i < 8 && n + 3 <= len; i++)
      n += (size_t)snprintf(out + n, len - n, "%02x", mac[i]);
  }
  if (n == 0) snprintf(out, len, "default");
}

/* What a message calls this job: the launcher's identity when there is one. */
static void job_name(const cohort__config *cfg, const cohort__launch_env *env, const char *run_id, char *out,
                     size_t len) {
  if (env->job_var)
    snprintf(out, len, "%s=%s", env->job_var, env->job_id);
  else if (cfg->run_id[0])
    snprintf(out, len, "COHORT_RUN_ID=%.200s", cfg->run_id);
  else
    snprintf(out, len, "run id %s", run_id);
}

/* Whose store is this? A store served by rank 0 (not the launcher's, not a file) says which job it belongs to
 * ("cohort/job" = "<run id> <name>"), and every other rank checks it before it publishes anything: a rank of another
 * job that reached it (two mpirun jobs on one port) is refused, naming both jobs, instead of joining this job's
 * collectives with its data. */
static cohort_status check_owner(job *j, cohort__store *store, int rank, const char *run_id, long open,
                                 int64_t deadline) {
  if (j->cfg->launcher_store || strncmp(j->cfg->store, "file:", 5) == 0) return COHORT_OK;
  char mine[400], opened[64];
  job_name(j->cfg, j->env, run_id, mine, sizeof mine);
  snprintf(opened, sizeof opened, "cohort/job/%ld", open);
  if (rank == 0) {
    char value[500];
    int n = snprintf(value, sizeof value, "%s %s", run_id, mine);
    cohort_status st = cohort__store_set(store, "cohort/job", value, (size_t)n);
    return st == COHORT_OK ? cohort__store_set(store, opened, "1", 1) : st;
  }
  char *got = NULL;
  size_t len = 0;
  double wait_s = (double)(deadline - cohort__now_ns()) / 1e9;
  cohort_status st = cohort__store_get(store, "cohort/job", wait_s > 0.001 ? wait_s : 0.001, (void **)&got, &len);
  if (st == COHORT_ERR_TIMEOUT)
    return cohort__error(st,
                         "rendezvous timed out after %ld s: rank 0 never said which job %s belongs to (is it a "
                         "cohort job?)",
                         j->timeout_s, j->where);
  if (st != COHORT_OK) return cohort__error_prefix(st, "rendezvous: reading the owner of %s", j->where);
  size_t id_len = strlen(run_id);
  int same = len > id_len && memcmp(got, run_id, id_len) == 0 && got[id_len] == ' ';
  if (!same) {
    const char *sp = memchr(got, ' ', len);
    size_t off = sp ? (size_t)(sp - got) + 1 : 0;
    st = cohort__error(COHORT_ERR_MISMATCH,
                       "rank %d of the job with %s reached %s, which rank 0 of another job serves (%.*s): two jobs "
                       "meet on one port; give each job its own MASTER_PORT (or COHORT_STORE_PORT)",
                       rank, mine, j->where, (int)(len - off < 300 ? len - off : 300), got + off);
  }
  free(got);
  if (st != COHORT_OK) return st;
  /* The job's, but is it this open's? After cohort_comm_destroy and cohort_init again, this rank may reach rank 0's
   * server of the earlier open before rank 0 has closed it: wait for rank 0's word of this open, which that server
   * never gets; when it stops, cohort__job_open dials again and finds rank 0's new one. */
  wait_s = (double)(deadline - cohort__now_ns()) / 1e9;
  st = cohort__store_get(store, opened, wait_s > 0.001 ? wait_s : 0.001, (void **)&got, &len);
  if (st == COHORT_OK) free(got);
  if (st == COHORT_ERR_TIMEOUT)
    return cohort__error(st, "rendezvous timed out after %ld s: rank 0 never opened the job at %s for cohort_init #%ld",
                         j->timeout_s, j->where, open + 1);
  return st == COHORT_OK ? st : cohort__error_prefix(st, "rendezvous: waiting for rank 0 at %s", j->where);
}

/* How many times this process has opened each job (a run id and generation): cohort_init after cohort_comm_destroy
 * (Horovod's shutdown() then init()), or a second communicator of the same job (torch's backend beside cohort.torch's
 * own, python/cohort/torch/_backend.py). Every rank of a job opens it as many times, so the count names the same key
 * space on every rank, and a later open never reads what an earlier one left in a store that outlives it (the
 * launcher's: the keys of the earlier shm setup named segments that are gone). Counted per job, not per process: a
 * process may also join other jobs (the torch backend's subgroups meet under run ids of their own) that only some
 * ranks join. */
#define JOB_OPENS_MAX 64
static struct {
  char job[384]; /* "cohort/<run id>/<generation>/" */
  long opens;
} job_opens[JOB_OPENS_MAX];
static int job_opens_used;
static pthread_mutex_t job_opens_lock = PTHREAD_MUTEX_INITIALIZER;

static long job_open_number(const char *job_key) {
  pthread_mutex_lock(&job_opens_lock);
  int i = 0;
  while (i < job_opens_used && strcmp(job_opens[i].job, job_key) != 0)
    i++;
  if (i == job_opens_used) {
    if (i == JOB_OPENS_MAX)
      i = JOB_OPENS_MAX - 1; /* more jobs than that in one process: reuse the last slot */
    else
      job_opens_used++;
    snprintf(job_opens[i].job, sizeof job_opens[i].job, "%s", job_key);
    job_opens[i].opens = 0;
  }
  long n = job_opens[i].opens++;
  pthread_mutex_unlock(&job_opens_lock);
  return n;
}

/* The job's key space: a view of the store under "cohort/<run id>/<generation>/<open>/" that owns it. The one place
 * that names the prefix: the rendezvous, the transports' setup and the communicator's board see only this view. */
static cohort_status job_store(const char *run_id, const cohort__config *cfg, long open, cohort__store *store,
                               cohort__store **out, cohort__store_place *place) {
  snprintf(place->prefix, sizeof place->prefix, "cohort/%s/%ld/", run_id, cfg->restart_count);
  size_t len = strlen(place->prefix);
  snprintf(place->prefix + len, sizeof place->prefix - len, "%ld/", open);
  return cohort__store_prefixed_owner(store, place->prefix, out);
}

cohort_status cohort__job_open(const cohort__launch_env *env, const cohort__config *cfg, int64_t deadline,
                               cohort__store **out, cohort__store_server **server_out, cohort__store_place *place,
                               char *where, size_t where_len) {
  job j = {.env = env,
           .cfg = cfg,
           .master_addr = env->master_addr,
           .timeout_s = cfg->timeout_s,
           .where = where,
           .where_len = where_len};
  int rank = env->rank;
  cohort__store *whole = NULL, *store = NULL;
  cohort__store_server *server = NULL;
  char run_id[64];
  run_id_of(cfg, env, run_id, sizeof run_id);
  char job_key[384];
  snprintf(job_key, sizeof job_key, "cohort/%s/%ld/", run_id, cfg->restart_count);
  long open = job_open_number(job_key);
  cohort_status st;
  for (;;) {
    st = open_store(&j, rank, cfg->secret, &whole, &server);
    if (st == COHORT_OK) st = check_owner(&j, whole, rank, run_id, open, deadline);
    /* The server of this job's earlier open went away under us (check_owner): dial again for rank 0's new one. */
    if (st != COHORT_OK && rank != 0 && cohort__store_tcp_gone(whole) && cohort__now_ns() < deadline) {
      cohort__store_close(whole);
      whole = NULL;
      continue;
    }
    break;
  }
  if (st != COHORT_OK) {
    if (whole) cohort__store_close(whole);
    cohort__store_server_stop(server);
    return st;
  }
  if ((st = job_store(run_id, cfg, open, whole, &store, place)) != COHORT_OK) { /* every key is the job's now */
    cohort__store_server_stop(server);
    return st;
  }
  /* Where a sub-communicator reconnects to the same store (cohort__rendezvous_sub). */
  snprintf(place->addr, sizeof place->addr, "%.*s", (int)sizeof place->addr - 1, j.master_addr);
  place->port = j.master_port;
  place->env = *env;
  *out = store;
  *server_out = server;
  return COHORT_OK;
}

cohort_status cohort__store_place_open(const cohort__store_place *place, const cohort__config *cfg, const char *suffix,
                                       cohort__store **out) {
  cohort__store *conn = NULL;
  cohort_status st =
      strncmp(cfg->store, "file:", 5) == 0
          ? cohort__store_open_file(cfg->store + 5, &conn)
          : cohort__store_connect_tcp(place->addr, (int)place->port, cfg->secret, (double)cfg->timeout_s, &conn);
  if (st != COHORT_OK) return cohort__error_prefix(st, "reconnecting to the store of the job");
  char prefix[sizeof place->prefix + 64];
  snprintf(prefix, sizeof prefix, "%s%s", place->prefix, suffix);
  return cohort__store_prefixed_owner(conn, prefix, out);
}
