# Sub-communicators between real processes (tests/split_check.c): groups of odd and even sizes and a rank in none at
# world 5 and 8, over TCP (forced), shm (the default on one host) and, on simulated nodes of 2 ranks, tcp+shm: there
# the halves of the job are 2 (or 2 + 2) nodes of 2 ranks each, so their sub-communicators are layered too.
cohort_add_test_binary(test_split SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_split.c ${CMAKE_CURRENT_LIST_DIR}/../split_check.c
                       ${CMAKE_CURRENT_LIST_DIR}/../coll_check.c)
foreach(np 5 8)
  add_test(NAME mp.split.tcp.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_split> --quick)
  set_tests_properties(mp.split.tcp.np${np} PROPERTIES LABELS "mp" TIMEOUT 600 ENVIRONMENT "COHORT_TRANSPORT=tcp"
                       FAIL_REGULAR_EXPRESSION "half: (shm|tcp\\+shm)")
  add_test(NAME mp.split.shm.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_split> --quick)
  set_tests_properties(mp.split.shm.np${np} PROPERTIES LABELS "mp" TIMEOUT 600 FAIL_REGULAR_EXPRESSION "half: tcp")
endforeach()
add_test(NAME mp.split.hier.np8 COMMAND $<TARGET_FILE:cohortrun> -np 8 ${CMAKE_CURRENT_LIST_DIR}/as_nodes.sh 2
                                        $<TARGET_FILE:test_split> --quick)
set_tests_properties(mp.split.hier.np8 PROPERTIES LABELS "mp" TIMEOUT 600 FAIL_REGULAR_EXPRESSION "half: (tcp|shm):")
# Over the MPI transport, under Open MPI's mpirun, where libcohort was built with MPI: splits (contexts of one
# duplicate of MPI_COMM_WORLD, src/transport/mpi.c), and twins of the job's communicator and of a split.
find_program(COHORT_MPIRUN mpirun)
if(COHORT_MPI_PC AND COHORT_MPIRUN)
  foreach(np 5 8)
    add_test(NAME mp.split.mpi.np${np} COMMAND ${COHORT_MPIRUN} --oversubscribe -np ${np} -x COHORT_TRANSPORT
             $<TARGET_FILE:test_split> --quick)
    set_tests_properties(mp.split.mpi.np${np} PROPERTIES LABELS "mp" TIMEOUT 300 FAIL_REGULAR_EXPRESSION
                         "FAILED|half: (tcp|shm|none)"
                         ENVIRONMENT "COHORT_TRANSPORT=mpi;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endforeach()
  foreach(np 2 4)
    add_test(NAME mp.twin.mpi.np${np} COMMAND ${COHORT_MPIRUN} --oversubscribe -np ${np} -x COHORT_TRANSPORT
             $<TARGET_FILE:test_split> --twin)
    set_tests_properties(mp.twin.mpi.np${np} PROPERTIES LABELS "mp" TIMEOUT 120 FAIL_REGULAR_EXPRESSION "FAILED"
                         ENVIRONMENT "COHORT_TRANSPORT=mpi;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endforeach()
endif()
