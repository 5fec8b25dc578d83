# A forked child and its parent's communicator (src/comm/comm.h, cohort__fork_generation).
cohort_add_test_binary(test_comm_fork SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm_fork.c)
add_test(NAME unit.comm_fork COMMAND test_comm_fork)
set_tests_properties(unit.comm_fork PROPERTIES LABELS "unit;sanitize" TIMEOUT 60)
