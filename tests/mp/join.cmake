# cohort_join (Horovod's hvd.join() for collectives; test_join.c): a joined rank adds zeros to the others' allreduces
# and reduce-scatters, their other calls are refused naming it, and every rank learns the same last rank; over tcp
# and shm between processes and inproc between threads, at 2, 3 and 4 ranks (4: the signatures' recursive doubling
# with an rd allreduce riding on it, which a joined rank's signature must not complete). With COHORT_CALL_CHECK=off
# cohort_join refuses clearly.
cohort_add_test_binary(test_join SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_join.c)
foreach(np 2 3 4)
  foreach(transport tcp shm)
    add_test(NAME mp.join.${transport}.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_join>)
    set_tests_properties(mp.join.${transport}.np${np} PROPERTIES LABELS "mp;sanitize" TIMEOUT 120
                         ENVIRONMENT "COHORT_TRANSPORT=${transport}" PASS_REGULAR_EXPRESSION "PASS \\(${transport}")
  endforeach()
  add_test(NAME mp.join.inproc.np${np} COMMAND test_join --inproc ${np})
  set_tests_properties(mp.join.inproc.np${np} PROPERTIES LABELS "mp;sanitize" TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "PASS \\(inproc")
endforeach()
add_test(NAME mp.join.no_call_check COMMAND $<TARGET_FILE:cohortrun> -np 2 $<TARGET_FILE:test_join>)
set_tests_properties(mp.join.no_call_check PROPERTIES LABELS "mp" TIMEOUT 60
                     ENVIRONMENT "COHORT_CALL_CHECK=off" PASS_REGULAR_EXPRESSION "PASS \\(")
