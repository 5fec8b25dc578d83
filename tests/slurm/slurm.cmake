# cohort under a real Slurm (test_slurm.sh): a private slurmctld and two slurmd (node01, node02, each in network and
# UTS namespaces of its own) brought up and torn down by each case. Needs root, slurm-wlm and munge
# (scripts/setup.sh); skipped (77), with the reason, only where that cluster cannot start.
foreach(case srun sbatch salloc faults)
  add_test(NAME slurm.${case} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_slurm.sh ${case})
  set_tests_properties(slurm.${case} PROPERTIES LABELS "slurm;mp" TIMEOUT 300 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                       ENVIRONMENT
                       "PYTHONPATH=${CMAKE_BINARY_DIR}/python;COHORT_TEST_COLLECTIVES=$<TARGET_FILE:test_collectives>;COHORT_TEST_JOB_VALUE=$<TARGET_FILE:job_value>;COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_PYTHON=${COHORT_PYTHON};COHORT_TEST_SLURM_TASK=${CMAKE_CURRENT_LIST_DIR}/slurm_task.py")
endforeach()
