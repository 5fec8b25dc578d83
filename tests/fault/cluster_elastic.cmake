# An elastic job (--nnodes 2:3) on three "hosts" as network namespaces behind a bridge (test_cluster_elastic.sh): a
# node that leaves, a node that joins, a lost node replaced under its --node-rank. Needs root and `ip netns`: skipped (77) otherwise. Not under the sanitizers
# (real training, 15-25 s each).
foreach(case leave join rejoin)
  add_test(NAME fault.cluster_elastic.${case} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_cluster_elastic.sh ${case})
  set_tests_properties(fault.cluster_elastic.${case} PROPERTIES LABELS "fault" TIMEOUT 120 SKIP_RETURN_CODE 77
                       RUN_SERIAL TRUE ENVIRONMENT
                       "COHORT_TRANSPORT=tcp;COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_FMNIST_TRAIN=$<TARGET_FILE:fmnist-train>")
endforeach()
