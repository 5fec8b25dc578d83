/* launch_env.c: see launch_env.h. */
#include "comm/launch_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/error.h"

#define DEFAULT_MASTER_PORT 29500
/* The ports spread by a job's identity (mpirun, srun): 20000 to 29999, below Linux's ephemeral range (32768 to
 * 60999), where an outgoing connection may hold any port at any moment (29500 + the spread reached 39499: mpirun's
 * two-jobs test once found its port taken so). */
#define SPREAD_PORT_BASE 20000

typedef struct scheme {
  const char *source;
  const char *rank, *size, *local_rank, *local_size;
} scheme;

/* In order of precedence; Slurm's own reader (read_slurm) comes after them, and before PMI when srun set both. */
static const scheme schemes[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

/* The first variable of names that is set and not empty, or NULL. */
static const char *first_var(const char *const *names, size_t n, const char **which) {
  for (size_t i = 0; i < n; i++) {
    const char *v = getenv(names[i]);
    if (v && v[0]) {
      if (which) *which = names[i];
      return v;
    }
  }
  return NULL;
}

cohort_status cohort__slurm_tasks_on_node(const char *tasks_per_node, long node, long *count, long *nodes) {
  /* "2(x3),1": 2 tasks on each of the first 3 nodes, then 1. */
  long seen = 0, found = -1;
  const char *p = tasks_per_node;
  while (*p) {
    char *end = NULL;
    long tasks = strtol(p, &end, 10), times = 1;
    if (end == p || tasks < 0) goto bad;
    p = end;
    if (*p == '(') {
      if (p[1] != 'x') goto bad;
      times = strtol(p + 2, &end, 10);
      if (end == p + 2 || times < 1 || *end != ')') goto bad;
      p = end + 1;
    }
    if (found < 0 && node >= seen && node < seen + times) found = tasks;
    seen += times;
    if (*p == ',')
      p++;
    else if (*p)
      goto bad;
  }
  if (seen == 0) goto bad;
  if (nodes) *nodes = seen;
  if (found < 0)
    return cohort__error(COHORT_ERR_INVALID, "SLURM_NODEID=%ld is past the %ld nodes of '%s'", node, seen,
                         tasks_per_node);
  *count = found;
  return COHORT_OK;
bad:
  return cohort__error(COHORT_ERR_INVALID, "'%s' is not a Slurm task count list (e.g. '2(x3),1')", tasks_per_node);
}

/* A task of an srun step: SLURM_PROCID of SLURM_STEP_NUM_TASKS, SLURM_LOCALID of this node's count in
 * SLURM_STEP_TASKS_PER_NODE (by SLURM_NODEID, which numbers the step's nodes), the step's first node as the
 * master. The step's variables, not the job's: a step may run on some of the job's nodes (-w node02) or with
 * fewer tasks. A batch script (or salloc's shell) has SLURM_PROCID but no step: it is no task of a step, and taking
 * SLURM_PROCID=0 of SLURM_NTASKS=N for a rank would wait for N-1 ranks that never come. */
static cohort_status read_slurm(cohort__launch_env *e, int *found) {
  long r = 0, n = 1, lr = 0, node = 0, ln = 1, nodes = 1, ntasks = 0;
  int has_rank = 0, has = 0;
  *found = 0;
  COHORT_CHECK(cohort__env_long_var("SLURM_PROCID", 0, 1 << 24, &r, &has_rank));
  if (!has_rank) return COHORT_OK;
  static const char *const step_vars[] = {"SLURM_STEP_ID", "SLURM_STEPID"};
  const char *step = first_var(step_vars, 2, NULL);
  if (!step) {
    COHORT_CHECK(cohort__env_long_var("SLURM_NTASKS", 1, 1 << 24, &ntasks, &has));
    if (!has || ntasks <= 1) return COHORT_OK; /* a 1-task batch job: a 1-rank job, as without Slurm */
    const char *job = getenv("SLURM_JOB_ID");
    return cohort__error(COHORT_ERR_INVALID,
                         "SLURM_PROCID=%ld and SLURM_NTASKS=%ld are set but SLURM_STEP_ID is not: this process runs in "
                         "the batch script of Slurm job %s (sbatch), not as one of srun's tasks, so the other %ld "
                         "ranks would never come; start it with srun (srun PROGRAM runs the job's %ld tasks), or "
                         "with cohortrun -np N PROGRAM, or set RANK and WORLD_SIZE",
                         r, ntasks, job && job[0] ? job : "?", ntasks - 1, ntasks);
  }
  static const char *const size_vars[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"};
  const char *size_var = NULL, *size_text = first_var(size_vars, 3, &size_var);
  if (!size_text)
    return cohort__error(COHORT_ERR_INVALID, "SLURM_PROCID is set but none of SLURM_STEP_NUM_TASKS, SLURM_NTASKS is");
  COHORT_CHECK(cohort__env_long_var(size_var, 1, 1 << 24, &n, &has));
  if (r >= n) return cohort__error(COHORT_ERR_INVALID, "SLURM_PROCID=%ld is not below %s=%ld", r, size_var, n);
  COHORT_CHECK(cohort__env_long_var("SLURM_LOCALID", 0, 1 << 24, &lr, &has));
  if (!has) lr = r;
  COHORT_CHECK(cohort__env_long_var("SLURM_NODEID", 0, 1 << 24, &node, &has));
  static const char *const tpn_vars[] = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};
  const char *tpn_var = NULL, *tpn = first_var(tpn_vars, 2, &tpn_var);
  if (tpn) {
    cohort_status st = cohort__slurm_tasks_on_node(tpn, node, &ln, &nodes);
    if (st != COHORT_OK) return cohort__error_prefix(st, "%s", tpn_var);
  } else {
    ln = n;
  }
  if (lr >= ln)
    return cohort__error(COHORT_ERR_INVALID,
                         "SLURM_LOCALID=%ld is not below this node's %ld tasks (node %ld of %s='%s')", lr, ln, node,
                         tpn_var ? tpn_var : "SLURM_NTASKS", tpn ? tpn : "");
  e->rank = (int)r;
  e->size = (int)n;
  e->local_rank = (int)lr;
  e->local_size = (int)ln;
  e->node_rank = (int)node;
  e->nodes = (int)nodes;
  e->source = "slurm";
  *found = 1;
  return COHORT_OK;
}

/* srun --mpi=pmi2 (a common site default) also sets PMI_RANK and PMI_SIZE; when they are the step's own
 * (PMI_RANK = SLURM_PROCID of as many tasks), the task is srun's, not mpiexec's: Slurm's variables say more (the
 * local size, the master) and cohort has no MPI launch to join. An mpiexec started inside an allocation (Hydra
 * starts its proxies with srun) sets PMI_RANK and PMI_SIZE of its own, which differ: MPI then. */
static int pmi_is_sruns(void) {
  static const char *const step_vars[] = {"SLURM_STEP_ID", "SLURM_STEPID"};
  static const char *const size_vars[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"};
  const char *step = first_var(step_vars, 2, NULL), *size = first_var(size_vars, 2, NULL);
  const char *procid = getenv("SLURM_PROCID"), *pmi_rank = getenv("PMI_RANK"), *pmi_size = getenv("PMI_SIZE");
  return step && size && procid && pmi_rank && pmi_size && strcmp(procid, pmi_rank) == 0 && strcmp(size, pmi_size) == 0;
}

cohort_status cohort__slurm_first_host(const char *nodelist, char *out, size_t out_len) {
  /* The first entry ends at a comma outside brackets; inside brackets the first range start is the host's suffix. */
  size_t n = 0;
  const char *p = nodelist;
  while (*p && *p != ',' && *p != '[') {
    if (n + 1 >= out_len) return cohort__error(COHORT_ERR_INVALID, "SLURM_JOB_NODELIST entry too long");
    out[n++] = *p++;
  }
  if (*p == '[') {
    p++;
    while (*p && *p != '-' && *p != ',' && *p != ']') {
      if (n + 1 >= out_len) return cohort__error(COHORT_ERR_INVALID, "SLURM_JOB_NODELIST entry too long");
      out[n++] = *p++;
    }
    if (!strchr(p, ']'))
      return cohort__error(COHORT_ERR_INVALID, "SLURM_JOB_NODELIST='%s' has an unclosed '['", nodelist);
  }
  out[n] = '\0';
  if (n == 0) return cohort__error(COHORT_ERR_INVALID, "SLURM_JOB_NODELIST='%s' names no host", nodelist);
  return COHORT_OK;
}

static cohort_status read_scheme(const scheme *s, cohort__launch_env *e, int *found) {
  long r = 0, n = 1, lr = 0, ln = 1;
  int has_rank, has_size, has_lr = 0, has_ln = 0;
  COHORT_CHECK(cohort__env_long_var(s->size, 1, 1 << 24, &n, &has_size));
  COHORT_CHECK(cohort__env_long_var(s->rank, 0, 1 << 24, &r, &has_rank));
  *found = has_rank || has_size;
  if (!*found) return COHORT_OK;
  if (has_rank != has_size)
    return cohort__error(COHORT_ERR_INVALID, "%s is set but %s is not: set both (or run under cohortrun)",
                         has_rank ? s->rank : s->size, has_rank ? s->size : s->rank);
  if (r >= n) return cohort__error(COHORT_ERR_INVALID, "%s=%ld is not below %s=%ld", s->rank, r, s->size, n);
  COHORT_CHECK(cohort__env_long_var(s->local_rank, 0, 1 << 24, &lr, &has_lr));
  COHORT_CHECK(cohort__env_long_var(s->local_size, 1, 1 << 24, &ln, &has_ln));
  if (!has_lr) lr = r;
  if (!has_ln) ln = n;
  if (lr >= ln)
    return cohort__error(COHORT_ERR_INVALID, "local rank %ld is not below the local size %ld (from %s)", lr, ln,
                         s->source);
  e->rank = (int)r;
  e->size = (int)n;
  e->local_rank = (int)lr;
  e->local_size = (int)ln;
  e->source = s->source;
  if (strcmp(s->source, "torchrun") == 0) { /* GROUP_RANK/GROUP_WORLD_SIZE: torchrun's (and cohortrun's) node */
    long g = -1, gn = -1;
    int has_g = 0, has_gn = 0;
    COHORT_CHECK(cohort__env_long_var("GROUP_RANK", 0, 1 << 24, &g, &has_g));
    COHORT_CHECK(cohort__env_long_var("GROUP_WORLD_SIZE", 1, 1 << 24, &gn, &has_gn));
    if (has_g && has_gn && g < gn) e->node_rank = (int)g, e->nodes = (int)gn;
  }
  return COHORT_OK;
}

/* The job's identity as its launcher gives it, the same on every rank of the job and different between two jobs that
 * run at once: Open MPI's PMIx namespace (4.x: the job id as a number; 5.x: "prterun-HOST-PID@1"), else its job id;
 * Slurm's job and step (two sruns in one allocation are two steps of one job). */
static void read_job_id(cohort__launch_env *e) {
  e->job_id[0] = '\0';
  e->job_var = NULL;
  const char *v;
  if (strcmp(e->source, "openmpi") == 0) {
    static const char *const vars[] = {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0] && !e->job_var; i++)
      if ((v = getenv(vars[i])) && v[0]) {
        snprintf(e->job_id, sizeof e->job_id, "%s", v);
        e->job_var = vars[i];
      }
  } else if (strcmp(e->source, "slurm") == 0 && (v = getenv("SLURM_JOB_ID")) && v[0]) {
    static const char *const step_vars[] = {"SLURM_STEP_ID", "SLURM_STEPID"};
    const char *step = first_var(step_vars, 2, NULL);
    snprintf(e->job_id, sizeof e->job_id, "%s.%s", v, step ? step : "0");
    e->job_var = "SLURM_JOB_ID.SLURM_STEP_ID";
  }
}

/* FNV-1a: a port spread over the job identities, the same on every rank. */
static unsigned long hash_text(const char *s) {
  unsigned long h = 2166136261u;
  for (; *s; s++)
    h = ((h ^ (unsigned char)*s) * 16777619u) & 0xffffffffu;
  return h;
}

cohort_status cohort__launch_env_read(cohort__launch_env *e) {
  *e = (cohort__launch_env){
      .source = "none", .rank = 0, .size = 1, .local_rank = 0, .local_size = 1, .node_rank = -1, .nodes = -1};
  int found = 0;
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0] && !found; i++) {
    if (strcmp(schemes[i].source, "pmi") == 0 && pmi_is_sruns()) continue; /* srun --mpi=pmi2: Slurm's, below */
    COHORT_CHECK(read_scheme(&schemes[i], e, &found));
  }
  if (!found) COHORT_CHECK(read_slurm(e, &found));
  int slurm = strcmp(e->source, "slurm") == 0;
  read_job_id(e);
  const char *addr = getenv("MASTER_ADDR");
  static const char *const list_vars[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
  const char *list_var = NULL, *list = slurm ? first_var(list_vars, 3, &list_var) : NULL;
  if (addr && addr[0]) {
    snprintf(e->master_addr, sizeof e->master_addr, "%s", addr);
  } else if (list) {
    /* Task 0 runs on the step's first node (block, cyclic and plane distributions alike). */
    cohort_status st = cohort__slurm_first_host(list, e->master_addr, sizeof e->master_addr);
    if (st != COHORT_OK) return cohort__error_prefix(st, "%s", list_var);
    const char *here = getenv("SLURMD_NODENAME");
    if (e->rank == 0 && here && here[0] && strcmp(here, e->master_addr) != 0)
      return cohort__error(COHORT_ERR_INVALID,
                           "rank 0 runs on node %s, not on %s, the first node of %s='%s' that the other ranks will "
                           "dial (an arbitrary distribution?): set MASTER_ADDR to rank 0's host",
                           here, e->master_addr, list_var, list);
  } else {
    snprintf(e->master_addr, sizeof e->master_addr, "127.0.0.1");
  }
  long port = 0, job = 0, step = 0;
  int has_port = 0, has_job = 0, has_step = 0;
  COHORT_CHECK(cohort__env_long_var("MASTER_PORT", 1, 65535, &port, &has_port));
  if (!has_port && strcmp(e->source, "torchrun") != 0 && e->size > 1) {
    /* Under mpirun and srun nobody hands out a port: one spread by the job's identity so that two jobs on one host
     * do not meet (SPREAD_PORT_BASE). Slurm: by the job id and the step, so that two steps of one allocation that
     * run at once (two sruns in a batch script) differ too; 7919 is prime to 10000, so the steps of one job never
     * meet, and step 0 keeps 20000 + SLURM_JOB_ID % 10000. Without a job's identity: torchrun's default, 29500. */
    if (slurm) {
      COHORT_CHECK(cohort__env_long_var("SLURM_JOB_ID", 0, 1L << 40, &job, &has_job));
      static const char *const step_vars[] = {"SLURM_STEP_ID", "SLURM_STEPID"};
      const char *step_var = NULL;
      if (first_var(step_vars, 2, &step_var))
        COHORT_CHECK(cohort__env_long_var(step_var, 0, 1L << 40, &step, &has_step));
      job = (job % 10000 + 7919 * (step % 10000)) % 10000;
    }
    if (!slurm && e->job_var) {
      job = (long)(hash_text(e->job_id) % 10000);
      has_job = 1;
    }
    port = has_job ? SPREAD_PORT_BASE + job % 10000 : DEFAULT_MASTER_PORT;
    has_port = 1;
    if (has_job && slurm)
      snprintf(e->port_why, sizeof e->port_why,
               "MASTER_PORT unset: 20000 + (SLURM_JOB_ID + 7919 x SLURM_STEP_ID) %% 10000");
    else if (has_job)
      snprintf(e->port_why, sizeof e->port_why, "MASTER_PORT unset: 20000 + a hash of %s=%.120s %% 10000", e->job_var,
               e->job_id);
    else
      snprintf(e->port_why, sizeof e->port_why, "MASTER_PORT unset: 29500");
  }
  e->master_port = has_port ? (int)port : 0;
  /* torch writes str(True) or str(False). */
  const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
  e->agent_store = agent && strcmp(agent, "True") == 0;
  return COHORT_OK;
}
