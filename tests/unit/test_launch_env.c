/* test_launch_env.c: rank, size and master from torchrun, Open MPI, MPICH (PMI) and Slurm variables. */
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
                                       "SLURM_STEP_ID"};

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
  ASSERT_TRUE(e.master_port >= 29500 && e.master_port < 39500);
  setenv("PMIX_NAMESPACE", "1573191681", 1); /* PMIx's name wins */
  ASSERT_OK(cohort__launch_env_read(&f));
  ASSERT_STREQ(f.job_var, "PMIX_NAMESPACE");
  ASSERT_STREQ(f.job_id, "1573191681");
  ASSERT_TRUE(f.master_port >= 29500 && f.master_port < 39500);
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
  cohort__launch_env e;
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.source, "slurm");
  ASSERT_EQ(e.rank, 7);
  ASSERT_EQ(e.size, 8);
  ASSERT_EQ(e.local_rank, 3);
  ASSERT_EQ(e.local_size, 4);
  ASSERT_STREQ(e.master_addr, "gpu07");
  ASSERT_EQ(e.master_port, 29500 + 123456 % 10000);
  ASSERT_STREQ(e.job_id, "123456.0");
  setenv("SLURM_STEP_ID", "3", 1); /* another srun of the same allocation is another job to the rendezvous */
  ASSERT_OK(cohort__launch_env_read(&e));
  ASSERT_STREQ(e.job_id, "123456.3");
  ASSERT_EQ(e.master_port, 29500 + 123456 % 10000);
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
                 TEST_CASE(slurm_hostlists), TEST_CASE(half_a_layout_is_an_error_that_names_the_variables))
