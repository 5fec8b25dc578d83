# The suite's crash report (tests/test.c): a case that dies of a signal, or overflows its stack, names itself.
cohort_add_test_binary(test_crash_report SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_crash_report.c LAYERS core)
add_test(NAME unit.crash_report COMMAND test_crash_report)
set_tests_properties(unit.crash_report PROPERTIES LABELS "unit" TIMEOUT 60)
