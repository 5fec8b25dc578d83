# The 20-kill figure (tests/fault/kill_storm.sh, docs/cohortrun.md "Kill storm"): 40 two-node fmnist-train runs in
# network namespaces, ~7 minutes, root only. Not part of the default ctest run: run it with
#   cmake --build BUILD --target kill_storm
# or configure with -DCOHORT_KILL_STORM=ON to get the test bench.kill_storm (label "bench").
add_custom_target(kill_storm
                  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/kill_storm.sh ${CMAKE_BINARY_DIR} 20
                  DEPENDS cohortrun fmnist-train USES_TERMINAL)
option(COHORT_KILL_STORM "register the kill_storm.sh benchmark as the ctest bench.kill_storm" OFF)
if(COHORT_KILL_STORM)
  add_test(NAME bench.kill_storm COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/kill_storm.sh ${CMAKE_BINARY_DIR} 20)
  set_tests_properties(bench.kill_storm PROPERTIES LABELS "bench" TIMEOUT 1200 RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
endif()
