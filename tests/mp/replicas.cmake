# fmnist-train --replicas N: the job's ranks as threads of one process (examples/fmnist-train/replicas.c).
# mp.replicas.runner: the runner itself with small jobs in place of training (ranks, worst exit code, a failing
# replica releasing the others at once); fast, so it also runs under ASan+UBSan.
# mp.replicas.{equal,sync,usage}: the real job (test_replicas.sh); the training cases are a few seconds each in a
# Release build and much slower under the sanitizers, so only usage carries the sanitize label.
cohort_add_test_binary(test_replicas_runner
                       SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_replicas_runner.c
                               ${CMAKE_SOURCE_DIR}/examples/fmnist-train/replicas.c
                       LAYERS core store transport coll gpu comm)
target_include_directories(test_replicas_runner PRIVATE ${CMAKE_SOURCE_DIR}/examples/fmnist-train)
add_test(NAME mp.replicas.runner COMMAND test_replicas_runner)
set_tests_properties(mp.replicas.runner PROPERTIES LABELS "mp;sanitize" TIMEOUT 120)

set(COHORT_REPLICAS_TEST_ENV
    "COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_FMNIST_TRAIN=$<TARGET_FILE:fmnist-train>")
foreach(case equal sync usage)
  add_test(NAME mp.replicas.${case} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_replicas.sh ${case})
  set_tests_properties(mp.replicas.${case} PROPERTIES LABELS "mp" TIMEOUT 300 ENVIRONMENT "${COHORT_REPLICAS_TEST_ENV}")
endforeach()
set_tests_properties(mp.replicas.usage PROPERTIES LABELS "mp;sanitize")
set_tests_properties(mp.replicas.equal mp.replicas.sync PROPERTIES LABELS "mp;numeric")
