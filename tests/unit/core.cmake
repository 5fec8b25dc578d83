cohort_add_test_binary(test_core SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_core.c LAYERS core)
add_test(NAME unit.core COMMAND test_core)
set_tests_properties(unit.core PROPERTIES LABELS "unit;sanitize" ENVIRONMENT "COHORT_TEST_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
