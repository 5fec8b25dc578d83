cohort_add_test_binary(test_data SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_data.c LAYERS core data)
add_test(NAME unit.data COMMAND test_data)
set_tests_properties(unit.data PROPERTIES LABELS "unit;sanitize")

# The real Fashion-MNIST: a separate binary so that the synthetic tests stay fast; skipped (exit 77) when the
# dataset-fashion-mnist package is not installed.
cohort_add_test_binary(test_data_fmnist SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_data.c LAYERS core data)
target_compile_definitions(test_data_fmnist PRIVATE COHORT_TEST_FMNIST)
add_test(NAME unit.data_fmnist COMMAND test_data_fmnist)
set_tests_properties(unit.data_fmnist PROPERTIES LABELS "unit;sanitize" SKIP_RETURN_CODE 77)
