# fmnist-train --resume against truncated, corrupted, missing and foreign checkpoints, and after a SIGKILL mid-run.
foreach(case corrupt killed outputs)
  add_test(NAME fault.train_resume.${case} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_train_resume.sh ${case})
  set_tests_properties(fault.train_resume.${case} PROPERTIES LABELS "fault" TIMEOUT 300 ENVIRONMENT
                       "COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_FMNIST_TRAIN=$<TARGET_FILE:fmnist-train>")
endforeach()
# The corrupt case trains an MLP for a few steps only: cheap enough to run under the sanitizers too.
set_tests_properties(fault.train_resume.corrupt fault.train_resume.outputs PROPERTIES LABELS "fault;sanitize")
