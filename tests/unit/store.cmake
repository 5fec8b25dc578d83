cohort_add_test_binary(test_auth SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_auth.c LAYERS core store)
add_test(NAME unit.auth COMMAND test_auth)
set_tests_properties(unit.auth PROPERTIES LABELS "unit;sanitize" TIMEOUT 60)

cohort_add_test_binary(test_store SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store.c LAYERS core store)
add_test(NAME unit.store COMMAND test_store)
set_tests_properties(unit.store PROPERTIES LABELS "unit;sanitize" TIMEOUT 60)
