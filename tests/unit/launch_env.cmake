cohort_add_test_binary(test_launch_env SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch_env.c)
add_test(NAME unit.launch_env COMMAND test_launch_env)
set_tests_properties(unit.launch_env PROPERTIES LABELS "unit;sanitize")
