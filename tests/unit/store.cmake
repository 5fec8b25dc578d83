cohort_add_test_binary(test_auth SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_auth.c LAYERS core store)
add_test(NAME unit.auth COMMAND test_auth)
set_tests_properties(unit.auth PROPERTIES LABELS "unit;sanitize" TIMEOUT 60)
