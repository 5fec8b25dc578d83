# Communicator failures between real processes: kills, mismatches, missing and silent peers, strangers, abort.
cohort_add_test_binary(test_comm_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm_fault.c)
add_test(NAME fault.comm COMMAND test_comm_fault)
set_tests_properties(fault.comm PROPERTIES LABELS "fault;sanitize" TIMEOUT 300 ENVIRONMENT "COHORT_TRANSPORT=tcp")
# An ABORT frame stuck behind a half-written large frame that the peer does not read: the peer still gets the reason
# (the note the aborting rank leaves in the store).
cohort_add_test_binary(abort_behind_frame SOURCES ${CMAKE_CURRENT_LIST_DIR}/abort_behind_frame.c)
add_test(NAME fault.comm.abort_behind_frame COMMAND $<TARGET_FILE:cohortrun> -np 2 $<TARGET_FILE:abort_behind_frame>)
set_tests_properties(fault.comm.abort_behind_frame PROPERTIES LABELS "fault;sanitize" TIMEOUT 60
                     ENVIRONMENT "COHORT_TRANSPORT=tcp;COHORT_ALGO=ring")
