# cohortrun --metrics-port scraped by a real Prometheus during a 2-rank training run (docs/cohortrun.md).
add_test(NAME unit.prometheus COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_prometheus.sh $<TARGET_FILE:cohortrun>
         $<TARGET_FILE:fmnist-train>)
set_tests_properties(unit.prometheus PROPERTIES LABELS "unit" TIMEOUT 300 SKIP_RETURN_CODE 77)
