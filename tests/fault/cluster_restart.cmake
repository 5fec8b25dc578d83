# cohortrun --max-restarts over fmnist-train --resume auto: a worker SIGKILLed mid-run, the job restarted to the same
# parameters as an uninterrupted run (test_cluster_restart.sh). ~20 s of training: not run under the sanitizers.
add_test(NAME fault.cluster_restart COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_cluster_restart.sh)
set_tests_properties(fault.cluster_restart PROPERTIES LABELS "fault" TIMEOUT 120 ENVIRONMENT
                     "COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_FMNIST_TRAIN=$<TARGET_FILE:fmnist-train>")
