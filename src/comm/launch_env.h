/*
 * launch_env.h: where this process sits in the job, read from whichever launcher started it.
 *
 * torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), set by cohortrun,
 * win. Without them, the ones mpirun (Open MPI: OMPI_COMM_WORLD_*; MPICH/Hydra: PMI_RANK, PMI_SIZE,
 * MPI_LOCALRANKID, MPI_LOCALNRANKS) and Slurm's srun (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID,
 * SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST; the job's SLURM_NTASKS, SLURM_TASKS_PER_NODE and
 * SLURM_JOB_NODELIST where a step's are missing) set are used, so a worker needs no cohortrun under those launchers;
 * srun --mpi=pmi2's PMI_RANK and PMI_SIZE are srun's (Slurm's variables are read), and a batch script without srun
 * (SLURM_PROCID but no SLURM_STEP_ID, SLURM_NTASKS > 1) is refused, saying so.
 * MASTER_ADDR defaults to the first host of the step's nodes under Slurm and to 127.0.0.1 otherwise; MASTER_PORT
 * defaults to 20000 + (SLURM_JOB_ID + 7919 x SLURM_STEP_ID) % 10000 under Slurm (jobs sharing a node, and the steps of
 * one job, get different ports) and to 29500 otherwise (torchrun's default), except under Open MPI: 20000 + a hash of
 * the job's identity % 10000 (the spread ports stay below Linux's ephemeral range). That identity
 * (job_id: PMIX_NAMESPACE, else OMPI_MCA_ess_base_jobid; under Slurm SLURM_JOB_ID.SLURM_STEP_ID) also scopes the
 * rendezvous keys and is checked against the store's owner (rendezvous.c), so that two jobs on one host never mix.
 * Under torchrun's default (static) rendezvous, torchrun's agent serves its own store
 * on MASTER_PORT and says so with TORCHELASTIC_USE_AGENT_STORE=True (agent_store): cohort's store then goes beside it
 * (rendezvous.c). Pure: reads the environment, changes nothing.
 */
#ifndef COHORT_COMM_LAUNCH_ENV_H
#define COHORT_COMM_LAUNCH_ENV_H

#include "cohort/cohort.h"

typedef struct cohort__launch_env {
  const char *source; /* "torchrun", "openmpi", "pmi", "slurm" or "none" (a 1-rank job) */
  int rank, size, local_rank, local_size;
  int node_rank, nodes; /* this host's place among the job's hosts and their number, where the launcher says
                         * (Slurm: SLURM_NODEID of the step's nodes; torchrun: GROUP_RANK); -1 where it does not */
  char master_addr[256];
  int master_port;     /* 0: none given and none needed (1 rank) */
  int agent_store;     /* torchrun's agent holds MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True) */
  char port_why[240];  /* how master_port was chosen when MASTER_PORT is unset ("" when it is set), for messages */
  char job_id[160];    /* the launcher's identity of this job, "" when it gives none (torchrun, MPICH) */
  const char *job_var; /* where job_id came from, e.g. "PMIX_NAMESPACE"; NULL when job_id is "" */
} cohort__launch_env;

cohort_status cohort__launch_env_read(cohort__launch_env *out);
/* The first host of a Slurm hostlist: "node[07-09,12],gpu3" gives "node07". */
cohort_status cohort__slurm_first_host(const char *nodelist, char *out, size_t out_len);
/* Node `node`'s count in a Slurm task list ("2(x3),1": 2 tasks on each of 3 nodes, then 1), and the number of nodes
 * it lists (nodes may be NULL). */
cohort_status cohort__slurm_tasks_on_node(const char *tasks_per_node, long node, long *count, long *nodes);

#endif
