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
# Ranks that call different collectives (every rank its own broadcast root, counts, dtypes, ops, a barrier against an
# allreduce) are refused with COHORT_ERR_MISMATCH on every rank before data moves, and the communicator goes on
# (src/coll/agree.c): over tcp and shm between processes, and inproc between threads, at 2, 3 and 4 ranks (4: the recursive doubling of the signatures, with an rd allreduce riding on it).
cohort_add_test_binary(mismatch_refused SOURCES ${CMAKE_CURRENT_LIST_DIR}/mismatch_refused.c
                                        ${CMAKE_SOURCE_DIR}/tests/rank_main.c)
foreach(np 2 3 4)
  foreach(transport tcp shm)
    add_test(NAME fault.mismatch.${transport}.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np}
                                                              $<TARGET_FILE:mismatch_refused>)
    set_tests_properties(fault.mismatch.${transport}.np${np} PROPERTIES LABELS "fault;sanitize" TIMEOUT 120
                         ENVIRONMENT "COHORT_TRANSPORT=${transport}" PASS_REGULAR_EXPRESSION "PASS \\(${transport}")
  endforeach()
  add_test(NAME fault.mismatch.inproc.np${np} COMMAND mismatch_refused --inproc ${np})
  set_tests_properties(fault.mismatch.inproc.np${np} PROPERTIES LABELS "fault;sanitize" TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "PASS \\(inproc")
endforeach()
