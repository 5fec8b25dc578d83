# fmnist-train, the main job, end to end on the real Fashion-MNIST files: 2 ranks under cohortrun (test_train.sh).
# The CNN runs are a few seconds each; under ASan+UBSan (Debug) they are much slower, so only the cases that do not
# train carry the sanitize label.
set(COHORT_TRAIN_TEST_ENV "COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_FMNIST_TRAIN=$<TARGET_FILE:fmnist-train>")
foreach(case usage determinism loss resume equivalence kernels uneven zero preempt)
  add_test(NAME mp.train.${case} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_train.sh ${case})
  set_tests_properties(mp.train.${case} PROPERTIES LABELS "mp" TIMEOUT 300 ENVIRONMENT "${COHORT_TRAIN_TEST_ENV}")
endforeach()
set_tests_properties(mp.train.usage PROPERTIES LABELS "mp;sanitize")
# The cases whose results hang on float32 rounding, which depends on the BLAS kernels; .ci/run repeats the "numeric"
# label under the oldest and newest OpenBLAS core type the CPU can run (scripts/openblas-cores.sh).
set_tests_properties(mp.train.determinism mp.train.resume mp.train.equivalence mp.train.zero mp.train.preempt PROPERTIES LABELS
                     "mp;numeric")
# equivalence trains the most (several runs of each sync mode): 87 s in CI under AVX2 kernels, 209-231 s on a
# loaded 2-core machine, and more under the SSE4.1 oneDNN cap of .ci/run's loop; 300 s was too tight there.
set_tests_properties(mp.train.equivalence PROPERTIES TIMEOUT 600)
