# Malformed and truncated frames from an authenticated peer: the test plays rank 1 by hand against a real rank 0.
cohort_add_test_binary(test_frames_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_frames_fault.c)
add_test(NAME fault.frames COMMAND test_frames_fault)
set_tests_properties(fault.frames PROPERTIES LABELS "fault;sanitize" TIMEOUT 120 ENVIRONMENT "COHORT_TRANSPORT=tcp")
