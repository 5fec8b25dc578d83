/* launch_env.c: see launch_env.h. */
#include "comm/launch_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/error.h"

#define DEFAULT_MASTER_PORT 29500

typedef struct scheme {
  const char *source;
  const char *rank, *size, *local_rank, *local_size;
} scheme;

/* In order of precedence. Slurm's local size comes from SLURM_TASKS_PER_NODE (see below). */
static const scheme schemes[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
};

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
  if (s->local_size) {
    COHORT_CHECK(cohort__env_long_var(s->local_size, 1, 1 << 24, &ln, &has_ln));
  } else { /* Slurm: "2(x3),1" means 2 tasks on each of 3 nodes, then 1; the first count is this layout's local size */
    const char *tpn = getenv("SLURM_TASKS_PER_NODE");
    if (tpn && atol(tpn) > 0) {
      ln = atol(tpn);
      has_ln = 1;
    }
  }
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
    const char *step = getenv("SLURM_STEP_ID");
    snprintf(e->job_id, sizeof e->job_id, "%s.%s", v, step && step[0] ? step : "0");
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
  *e = (cohort__launch_env){.source = "none", .rank = 0, .size = 1, .local_rank = 0, .local_size = 1};
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
    int found = 0;
    COHORT_CHECK(read_scheme(&schemes[i], e, &found));
    if (found) break;
  }
  int slurm = strcmp(e->source, "slurm") == 0;
  read_job_id(e);
  const char *addr = getenv("MASTER_ADDR");
  if (addr && addr[0]) {
    snprintf(e->master_addr, sizeof e->master_addr, "%s", addr);
  } else if (slurm && getenv("SLURM_JOB_NODELIST")) {
    COHORT_CHECK(cohort__slurm_first_host(getenv("SLURM_JOB_NODELIST"), e->master_addr, sizeof e->master_addr));
  } else {
    snprintf(e->master_addr, sizeof e->master_addr, "127.0.0.1");
  }
  long port = 0, job = 0;
  int has_port = 0, has_job = 0;
  COHORT_CHECK(cohort__env_long_var("MASTER_PORT", 1, 65535, &port, &has_port));
  if (!has_port && strcmp(e->source, "torchrun") != 0 && e->size > 1) {
    /* Under mpirun and srun nobody hands out a port: take torchrun's default, spread by the job's identity so that
     * two jobs on one host do not meet (Slurm: by the job id, as documented before Open MPI's was used). */
    if (slurm) COHORT_CHECK(cohort__env_long_var("SLURM_JOB_ID", 0, 1L << 40, &job, &has_job));
    if (!slurm && e->job_var) {
      job = (long)(hash_text(e->job_id) % 10000);
      has_job = 1;
    }
    port = DEFAULT_MASTER_PORT + (has_job ? job % 10000 : 0);
    has_port = 1;
    if (has_job && slurm)
      snprintf(e->port_why, sizeof e->port_why, "MASTER_PORT unset: 29500 + SLURM_JOB_ID %% 10000");
    else if (has_job)
      snprintf(e->port_why, sizeof e->port_why, "MASTER_PORT unset: 29500 + a hash of %s=%.120s %% 10000", e->job_var,
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
