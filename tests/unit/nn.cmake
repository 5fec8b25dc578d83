cohort_add_test_binary(test_nn SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nn.c LAYERS core nn)
add_test(NAME unit.nn COMMAND test_nn)
set_tests_properties(unit.nn PROPERTIES LABELS "unit;sanitize;numeric")
