# Communicator failures between real processes: kills, mismatches, missing and silent peers, strangers, abort.
cohort_add_test_binary(test_comm_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm_fault.c)
add_test(NAME fault.comm COMMAND test_comm_fault)
set_tests_properties(fault.comm PROPERTIES LABELS "fault;sanitize" TIMEOUT 300 ENVIRONMENT "COHORT_TRANSPORT=tcp")
