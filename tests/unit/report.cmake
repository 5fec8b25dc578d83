# cohort-report (tools/cohort-report): the HTML report of a real 2-rank run's metrics, rendered in headless Chromium.
add_test(NAME unit.report COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_report.sh $<TARGET_FILE:cohortrun>
         $<TARGET_FILE:fmnist-train> ${CMAKE_SOURCE_DIR}/tools/cohort-report/cohort-report)
set_tests_properties(unit.report PROPERTIES LABELS "unit" TIMEOUT 300 SKIP_RETURN_CODE 77)
