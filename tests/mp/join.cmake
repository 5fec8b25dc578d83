# cohort_join (Horovod's hvd.join() for collectives; test_join.c): a joined rank adds zeros to the others' allreduces
# and reduce-scatters, their other calls are refused naming it, and every rank learns the same last rank; over tcp
# and shm between processes and inproc between threads, at 2, 3 and 4 ranks (4: the signatures' recursive doubling
# with an rd allreduce riding on it, which a joined rank's signature must not complete). With COHORT_CALL_CHECK=off
# cohort_join refuses clearly. Each rank prints PASS or FAILED (a FAILED line fails the test whatever the others say).
cohort_add_test_binary(test_join SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_join.c ${CMAKE_SOURCE_DIR}/tests/rank_main.c)
foreach(np 2 3 4)
  foreach(transport tcp shm)
    add_test(NAME mp.join.${transport}.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_join>)
    set_tests_properties(mp.join.${transport}.np${np} PROPERTIES LABELS "mp;sanitize" TIMEOUT 120
                         ENVIRONMENT "COHORT_TRANSPORT=${transport}" PASS_REGULAR_EXPRESSION "PASS \\(${transport}"
                         FAIL_REGULAR_EXPRESSION "FAILED")
  endforeach()
  add_test(NAME mp.join.inproc.np${np} COMMAND test_join --inproc ${np})
  set_tests_properties(mp.join.inproc.np${np} PROPERTIES LABELS "mp;sanitize" TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "PASS \\(inproc" FAIL_REGULAR_EXPRESSION "FAILED")
endforeach()
# The node allreduce's small path below its most (COHORT_SHM_SMALL_BYTES): the others stage a small allreduce's input
# in the agreement only up to it, and a joined rank's zeros must be staged exactly when theirs are.
foreach(small 0 1000)
  add_test(NAME mp.join.shm.small_bytes.${small} COMMAND $<TARGET_FILE:cohortrun> -np 3 $<TARGET_FILE:test_join>)
  set_tests_properties(mp.join.shm.small_bytes.${small} PROPERTIES LABELS "mp" TIMEOUT 120 ENVIRONMENT
                       "COHORT_TRANSPORT=shm;COHORT_SHM_SMALL_BYTES=${small};COHORT_OP_TIMEOUT=20"
                       PASS_REGULAR_EXPRESSION "PASS \\(shm" FAIL_REGULAR_EXPRESSION "FAILED")
endforeach()
add_test(NAME mp.join.no_call_check COMMAND $<TARGET_FILE:cohortrun> -np 2 $<TARGET_FILE:test_join>)
set_tests_properties(mp.join.no_call_check PROPERTIES LABELS "mp" TIMEOUT 60 ENVIRONMENT "COHORT_CALL_CHECK=off"
                     PASS_REGULAR_EXPRESSION "PASS \\(" FAIL_REGULAR_EXPRESSION "FAILED")
# The layered transport (simulated nodes, tests/mp/hier.cmake: the hierarchical allreduce), and mpi under mpirun.
foreach(shape 2x2 3x2)
  string(REPLACE "x" ";" dims ${shape})
  list(GET dims 0 nodes)
  list(GET dims 1 per_node)
  math(EXPR np "${nodes} * ${per_node}")
  add_test(NAME mp.join.hier.${shape} COMMAND $<TARGET_FILE:cohortrun> -np ${np}
                                             ${CMAKE_CURRENT_LIST_DIR}/as_nodes.sh ${per_node} $<TARGET_FILE:test_join>)
  set_tests_properties(mp.join.hier.${shape} PROPERTIES LABELS "mp" TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "PASS \\(tcp\\+shm" FAIL_REGULAR_EXPRESSION "FAILED")
endforeach()
find_program(COHORT_MPIRUN mpirun)
if(COHORT_MPI_PC AND COHORT_MPIRUN) # where libcohort was built with MPI (tests/mp/collectives.cmake)
  add_test(NAME mp.join.mpi.np3 COMMAND ${COHORT_MPIRUN} --oversubscribe -np 3 $<TARGET_FILE:test_join>)
  set_tests_properties(mp.join.mpi.np3 PROPERTIES LABELS "mp" TIMEOUT 120 PASS_REGULAR_EXPRESSION "PASS \\(mpi"
                       FAIL_REGULAR_EXPRESSION "FAILED"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
