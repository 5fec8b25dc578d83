# Two "hosts" as network namespaces, each running cohortrun --nnodes 2 (test_cluster_netns.sh). Needs root and
# `ip netns`: skipped (77) otherwise. Not under the sanitizers (real training, several seconds each).
foreach(case collectives train kill-worker kill-node restart hang)
  add_test(NAME fault.cluster_netns.${case} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_cluster_netns.sh ${case})
  set_tests_properties(fault.cluster_netns.${case} PROPERTIES LABELS "fault" TIMEOUT 120 SKIP_RETURN_CODE 77
                       RUN_SERIAL TRUE ENVIRONMENT
                       "COHORT_TRANSPORT=tcp;COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_COLLECTIVES=$<TARGET_FILE:test_collectives>;COHORT_TEST_FMNIST_TRAIN=$<TARGET_FILE:fmnist-train>;COHORT_TEST_WORKER=$<TARGET_FILE:launcher_worker>")
endforeach()
