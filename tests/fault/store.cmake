cohort_add_test_binary(test_store_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store_fault.c LAYERS core store)
add_test(NAME fault.store COMMAND test_store_fault)
set_tests_properties(fault.store PROPERTIES LABELS "fault;sanitize" TIMEOUT 60)
