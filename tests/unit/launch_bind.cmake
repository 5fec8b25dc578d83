# cohortrun --bind core|socket: each worker's CPUs on fake sysfs topologies (tools/cohortrun/bind.c, built in here).
cohort_add_test_binary(test_launch_bind SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch_bind.c
                       ${CMAKE_SOURCE_DIR}/tools/cohortrun/bind.c LAYERS core)
target_include_directories(test_launch_bind PRIVATE ${CMAKE_SOURCE_DIR}/tools/cohortrun)
add_test(NAME unit.launch_bind COMMAND test_launch_bind)
set_tests_properties(unit.launch_bind PROPERTIES LABELS "unit;sanitize")
