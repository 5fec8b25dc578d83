/* test_launch_env.c: rank, size and master from torchrun, Open MPI, MPICH (PMI) and Slurm variables. */
#include <stdio.h>
#include <stdlib.h>

#include "comm/launch_env.h"
#include "test.h"

static const char *const all_vars[] = {"RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "OMPI_COMM_WORLD_LOCAL_SIZE",
                                       "PMI_RANK",
                                       "PMI_SIZE",
                                       "MPI_LOCALRANKID",
                                       "MPI_LOCALNRANKS",
                                       "SLURM_PROCID",
                                       "SLURM_NTASKS",
                                       "SLURM_LOCALID",
                                       "SLURM_TASKS_PER_NODE",
                                       "SLURM_JOB_NODELIST",
                                       "SLURM_JOB_ID",
                                       "TORCHELASTIC_USE_AGENT_STORE",
                                       "PMIX_NAMESPACE",
                                       "OMPI_MCA_ess_base_jobid",
                                       "SLURM_STEP_ID",
                                       "SLURM_STEPID",
                                       "SLURM_STEP_NUM_TASKS",
                                       "SLURM_STEP_TASKS_PER_NODE",
                                       "SLURM_STEP_NODELIST",
                                       "SLURM_STEP_NUM_NODES",
                                       "SLURM_NODEID",
                                       "SLURM_NNODES",
                                       "SLURM_NPROCS",
                                       "SLURM_NODELIST",
                                       "SLURMD_NODENAME",
                                       "GROUP_RANK",
                                       "GROUP_WORLD_SIZE"};

static void clear_env(void) {
  for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++)
    unsetenv(all_vars[i]);
}

TEST(no_launcher_means_one_rank) {
  clear_env();
  cohort__launch_env e;
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.source, "none");
  ASSERT_EQ(e.size, 1);
  ASSERT_EQ(e.master_port, 0);
}

TEST(torchrun_variables_win_over_mpi_ones) {
  clear_env();
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "1234", 1);
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  cohort__launch_env e;
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.source, "torchrun");
  ASSERT_EQ(e.rank, 3);
  ASSERT_EQ(e.size, 8);
  ASSERT_EQ(e.local_rank, 1);
  ASSERT_EQ(e.local_size, 2);
  ASSERT_STREQ(e.master_addr, "10.1.2.3");
  ASSERT_EQ(e.master_port, 1234);
  ASSERT_EQ(e.agent_store, 0);
  /* torchrun's static rendezvous: its agent holds MASTER_PORT (torch writes str(True)). */
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_EQ(e.agent_store, 1);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_EQ(e.agent_store, 0);
}

TEST(open_mpi_layout_with_default_master) {
  clear_env();
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "6", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
  cohort__launch_env e;
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.source, "openmpi");
  ASSERT_EQ(e.rank, 5);
  ASSERT_EQ(e.size, 6);
  ASSERT_EQ(e.local_rank, 2);
  ASSERT_EQ(e.local_size, 3);
  ASSERT_STREQ(e.master_addr, "127.0.0.1");
  ASSERT_EQ(e.master_port, 29500);
}

/* Two mpirun jobs on one host get different default ports (and run ids: rendezvous.c) from their identities. */
TEST(open_mpi_job_identity_spreads_the_port) {
  clear_env();
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_MCA_ess_base_jobid", "1573126145", 1);
  cohort__launch_env e, f;
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.job_var, "OMPI_MCA_ess_base_jobid");
  ASSERT_STREQ(e.job_id, "1573126145");
  ASSERT_TRUE(e.master_port >= 20000 && e.master_port < 30000);
  setenv("PMIX_NAMESPACE", "1573191681", 1); /* PMIx's name wins */
  ASSERT_OK(cohort__launch_env_read(&f));
  ASSERT_STREQ(f.job_var, "PMIX_NAMESPACE");
  ASSERT_STREQ(f.job_id, "1573191681");
  ASSERT_TRUE(f.master_port >= 20000 && f.master_port < 30000);
  ASSERT_TRUE(f.master_port != e.master_port);
  ASSERT_CONTAINS(f.port_why, "PMIX_NAMESPACE=1573191681");
  setenv("MASTER_PORT", "4000", 1); /* a port given is a port taken */
  ASSERT_OK(cohort__launch_env_read(&f));
  ASSERT_EQ(f.master_port, 4000);
  ASSERT_STREQ(f.port_why, "");
  ASSERT_STREQ(f.job_id, "1573191681");
}

TEST(mpich_pmi_layout) {
  clear_env();
  setenv("PMI_RANK", "1", 1);
  setenv("PMI_SIZE", "4", 1);
  setenv("MPI_LOCALRANKID", "1", 1);
  setenv("MPI_LOCALNRANKS", "4", 1);
  setenv("MASTER_PORT", "4000", 1);
  cohort__launch_env e;
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.source, "pmi");
  ASSERT_EQ(e.rank, 1);
  ASSERT_EQ(e.local_size, 4);
  ASSERT_EQ(e.master_port, 4000);
}

TEST(slurm_layout_master_from_nodelist_and_port_from_job_id) {
  clear_env();
  setenv("SLURM_PROCID", "7", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "3", 1);
  setenv("SLURM_TASKS_PER_NODE", "4(x2)", 1);
  setenv("SLURM_JOB_NODELIST", "gpu[07-09,12],cpu1", 1);
  setenv("SLURM_JOB_ID", "123456", 1);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_NODEID", "1", 1);
  cohort__launch_env e;
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.source, "slurm");
  ASSERT_EQ(e.rank, 7);
  ASSERT_EQ(e.size, 8);
  ASSERT_EQ(e.local_rank, 3);
  ASSERT_EQ(e.local_size, 4);
  ASSERT_EQ(e.node_rank, 1);
  ASSERT_EQ(e.nodes, 2);
  ASSERT_STREQ(e.master_addr, "gpu07");
  ASSERT_EQ(e.master_port, 20000 + 123456 % 10000);
  ASSERT_STREQ(e.job_id, "123456.0");
  /* Another srun of the same allocation is another job to the rendezvous, and another port: two steps at once
   * (two sruns in one batch script) collided on one port (SLURM_JOB_ID % 10000 above the base) before. */
  setenv("SLURM_STEP_ID", "3", 1);
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.job_id, "123456.3");
  ASSERT_EQ(e.master_port, 20000 + (3456 + 7919 * 3) % 10000);
  int ports[64];
  for (int step = 0; step < 64; step++) {
    char text[16];
    snprintf(text, sizeof text, "%d", step);
    setenv("SLURM_STEP_ID", text, 1);
    ASSERT_OK(cohort__launch_env_read(&e));
    ports[step] = e.master_port;
    ASSERT_TRUE(ports[step] >= 20000 && ports[step] < 30000);
    for (int k = 0; k < step; k++)
      ASSERT_TRUE(ports[k] != ports[step]);
  }
}

/* What a task of a real srun step sees (Slurm 22.05, srun -N2 -n3 on node01 and node02 of a larger allocation):
 * the step's variables win over the job's. */
TEST(slurm_step_variables_uneven_and_on_some_nodes) {
  clear_env();
  setenv("SLURM_JOB_ID", "42", 1);
  setenv("SLURM_STEP_ID", "1", 1);
  setenv("SLURM_NTASKS", "4", 1); /* the allocation's */
  setenv("SLURM_TASKS_PER_NODE", "2(x2)", 1);
  setenv("SLURM_JOB_NODELIST", "node[01-03]", 1);
  setenv("SLURM_STEP_NUM_TASKS", "3", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "2,1", 1);
  setenv("SLURM_STEP_NODELIST", "node[02-03]", 1);
  setenv("SLURM_STEP_NUM_NODES", "2", 1);
  setenv("SLURM_PROCID", "2", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("SLURM_NODEID", "1", 1);
  setenv("SLURMD_NODENAME", "node03", 1);
  cohort__launch_env e;
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_EQ(e.rank, 2);
  ASSERT_EQ(e.size, 3);
  ASSERT_EQ(e.local_rank, 0);
  ASSERT_EQ(e.local_size, 1); /* node03 runs 1 of the 3 tasks (it was 2, the first count, before) */
  ASSERT_EQ(e.node_rank, 1);
  ASSERT_EQ(e.nodes, 2);
  ASSERT_STREQ(e.master_addr, "node02"); /* the step's first node, where task 0 runs (was node01, the job's) */
  /* -m cyclic: node02 runs tasks 0 and 2, node03 task 1; its local ids still count from 0 on each node. */
  setenv("SLURM_PROCID", "1", 1);
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_EQ(e.rank, 1);
  ASSERT_EQ(e.local_size, 1);
  /* Task 0 on a node that is not the step's first: said, instead of a failed bind on the other host. */
  setenv("SLURM_PROCID", "0", 1);
  ASSERT_STATUS(cohort__launch_env_read(&e), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "rank 0 runs on node node03, not on node02");
  setenv("MASTER_ADDR", "node03", 1);
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.master_addr, "node03");
  setenv("SLURM_LOCALID", "1", 1);
  ASSERT_STATUS(cohort__launch_env_read(&e), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "SLURM_LOCALID=1 is not below this node's 1 tasks");
}

TEST(slurm_batch_script_without_srun_is_refused) {
  clear_env();
  /* sbatch --ntasks=2 running the program in the script itself: the batch step has no SLURM_STEP_ID. */
  setenv("SLURM_JOB_ID", "7", 1);
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "2", 1);
  setenv("SLURM_TASKS_PER_NODE", "1(x2)", 1);
  setenv("SLURM_JOB_NODELIST", "node[01-02]", 1);
  cohort__launch_env e;
  ASSERT_STATUS(cohort__launch_env_read(&e), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "SLURM_PROCID=0 and SLURM_NTASKS=2 are set but SLURM_STEP_ID is not: this "
                                       "process runs in the batch script of Slurm job 7 (sbatch), not as one of srun's "
                                       "tasks");
  ASSERT_CONTAINS(cohort_last_error(), "start it with srun");
  /* A 1-task batch job is a 1-rank job. */
  setenv("SLURM_NTASKS", "1", 1);
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.source, "none");
  ASSERT_EQ(e.size, 1);
  /* Under cohortrun in the batch script, cohortrun's variables win. */
  setenv("SLURM_NTASKS", "2", 1);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.source, "torchrun");
}

TEST(srun_pmi2_is_sruns_and_mpiexec_inside_slurm_is_mpis) {
  clear_env();
  /* srun --mpi=pmi2: PMI_RANK and PMI_SIZE are the step's own. */
  setenv("SLURM_JOB_ID", "9", 1);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_STEP_NUM_TASKS", "2", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "1(x2)", 1);
  setenv("SLURM_STEP_NODELIST", "node[01-02]", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("SLURM_NODEID", "1", 1);
  setenv("PMI_RANK", "1", 1);
  setenv("PMI_SIZE", "2", 1);
  cohort__launch_env e;
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.source, "slurm"); /* "pmi" before: cohort called MPI_Init_thread and Open MPI aborted */
  ASSERT_EQ(e.local_size, 1);
  ASSERT_STREQ(e.master_addr, "node01"); /* 127.0.0.1 before */
  /* Hydra's mpiexec inside an allocation starts one proxy per node with srun: its ranks are not the step's. */
  setenv("PMI_RANK", "3", 1);
  setenv("PMI_SIZE", "4", 1);
  setenv("MPI_LOCALRANKID", "1", 1);
  setenv("MPI_LOCALNRANKS", "2", 1);
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.source, "pmi");
  ASSERT_EQ(e.rank, 3);
  ASSERT_EQ(e.size, 4);
}

TEST(slurm_task_lists) {
  long count = 0, nodes = 0;
  ASSERT_OK(cohort__slurm_tasks_on_node("2(x3),1", 0, &count, &nodes));
  ASSERT_EQ(count, 2);
  ASSERT_EQ(nodes, 4);
  ASSERT_OK(cohort__slurm_tasks_on_node("2(x3),1", 2, &count, NULL));
  ASSERT_EQ(count, 2);
  ASSERT_OK(cohort__slurm_tasks_on_node("2(x3),1", 3, &count, NULL));
  ASSERT_EQ(count, 1);
  ASSERT_OK(cohort__slurm_tasks_on_node("5", 0, &count, &nodes));
  ASSERT_EQ(count, 5);
  ASSERT_EQ(nodes, 1);
  ASSERT_STATUS(cohort__slurm_tasks_on_node("2(x3),1", 4, &count, NULL), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "past the 4 nodes");
  const char *bad[] = {"", "x", "2(3)", "2(x0)", "2(x3", "2,,1", "2;1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ASSERT_STATUS(cohort__slurm_tasks_on_node(bad[i], 0, &count, NULL), COHORT_ERR_INVALID);
}

TEST(torchrun_group_is_the_node) {
  clear_env();
  setenv("RANK", "5", 1);
  setenv("WORLD_SIZE", "6", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  setenv("GROUP_RANK", "2", 1);
  setenv("GROUP_WORLD_SIZE", "3", 1);
  setenv("MASTER_PORT", "1234", 1);
  cohort__launch_env e;
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_EQ(e.node_rank, 2);
  ASSERT_EQ(e.nodes, 3);
}

TEST(slurm_hostlists) {
  char host[64];
  ASSERT_OK(cohort__slurm_first_host("node1", host, sizeof host));
  ASSERT_STREQ(host, "node1");
  ASSERT_OK(cohort__slurm_first_host("a,b", host, sizeof host));
  ASSERT_STREQ(host, "a");
  ASSERT_OK(cohort__slurm_first_host("rack[3,5]-n", host, sizeof host));
  ASSERT_STREQ(host, "rack3");
  ASSERT_STATUS(cohort__slurm_first_host("bad[1-2", host, sizeof host), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "unclosed");
}

TEST(half_a_layout_is_an_error_that_names_the_variables) {
  clear_env();
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  cohort__launch_env e;
  ASSERT_STATUS(cohort__launch_env_read(&e), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
  clear_env();
  setenv("RANK", "4", 1);
  setenv("WORLD_SIZE", "4", 1);
  ASSERT_STATUS(cohort__launch_env_read(&e), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "RANK=4 is not below WORLD_SIZE=4");
}

COHORT_TEST_MAIN(TEST_CASE(no_launcher_means_one_rank), TEST_CASE(torchrun_variables_win_over_mpi_ones),
                 TEST_CASE(open_mpi_layout_with_default_master), TEST_CASE(open_mpi_job_identity_spreads_the_port),
                 TEST_CASE(mpich_pmi_layout), TEST_CASE(slurm_layout_master_from_nodelist_and_port_from_job_id),
                 TEST_CASE(slurm_step_variables_uneven_and_on_some_nodes),
                 TEST_CASE(slurm_batch_script_without_srun_is_refused),
                 TEST_CASE(srun_pmi2_is_sruns_and_mpiexec_inside_slurm_is_mpis), TEST_CASE(slurm_task_lists),
                 TEST_CASE(torchrun_group_is_the_node), TEST_CASE(slurm_hostlists),
                 TEST_CASE(half_a_layout_is_an_error_that_names_the_variables))
