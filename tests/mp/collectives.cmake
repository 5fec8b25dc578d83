# Multi-rank tests: real processes started by cohortrun, talking over TCP on loopback.
cohort_add_test_binary(test_collectives SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_collectives.c ${CMAKE_CURRENT_LIST_DIR}/../coll_check.c)
set(COHORTRUN $<TARGET_FILE:cohortrun>)
foreach(np 1 2 3 4 5)
  add_test(NAME mp.collectives.np${np} COMMAND ${COHORTRUN} -np ${np} $<TARGET_FILE:test_collectives>)
  set_tests_properties(mp.collectives.np${np} PROPERTIES LABELS "mp;sanitize" TIMEOUT 900 ENVIRONMENT "COHORT_TRANSPORT=tcp")
endforeach()
# The other code paths: each algorithm forced, tiny segments, and several sockets per peer (striping).
add_test(NAME mp.collectives.ring_tiny_segments COMMAND ${COHORTRUN} -np 3 $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.collectives.ring_tiny_segments PROPERTIES LABELS "mp;sanitize"
                     ENVIRONMENT "COHORT_TRANSPORT=tcp;COHORT_ALGO=ring;COHORT_SEGMENT_BYTES=1000")
add_test(NAME mp.collectives.rd COMMAND ${COHORTRUN} -np 5 $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.collectives.rd PROPERTIES LABELS "mp;sanitize" ENVIRONMENT "COHORT_TRANSPORT=tcp;COHORT_ALGO=rd")
add_test(NAME mp.collectives.striped COMMAND ${COHORTRUN} -np 3 $<TARGET_FILE:test_collectives>)
set_tests_properties(mp.collectives.striped PROPERTIES LABELS "mp" TIMEOUT 900
                     ENVIRONMENT "COHORT_TRANSPORT=tcp;COHORT_SOCKETS_PER_PEER=3;COHORT_SEGMENT_BYTES=65536")
# No launcher: rank 0 serves the store (MASTER_ADDR/MASTER_PORT set by hand, as under torchrun-style scripts).
add_test(NAME mp.collectives.rank0_store COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_rank0_store.sh 3 $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.collectives.rank0_store PROPERTIES LABELS "mp;sanitize" TIMEOUT 300 ENVIRONMENT "COHORT_TRANSPORT=tcp")
# Under Open MPI's mpirun, no cohortrun: the layout comes from OMPI_COMM_WORLD_*.
add_test(NAME mp.collectives.mpirun COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_mpirun.sh $<TARGET_FILE:test_collectives> 3)
set_tests_properties(mp.collectives.mpirun PROPERTIES LABELS "mp" TIMEOUT 300 ENVIRONMENT "COHORT_TRANSPORT=tcp")
# fmnist-train under mpirun, output to a file: whole progress lines, no \r redraws through mpirun's terminal.
add_test(NAME mp.train.mpirun_log COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_mpirun_log.sh $<TARGET_FILE:fmnist-train>)
set_tests_properties(mp.train.mpirun_log PROPERTIES LABELS "mp" TIMEOUT 120)
# Two mpirun jobs on one host, with no MASTER_PORT and no COHORT_SECRET, each keep to their own ranks (the rendezvous
# id and port come from the MPI job's identity), and a rank of another job that reaches a job's store is refused.
cohort_add_test_binary(job_value SOURCES ${CMAKE_CURRENT_LIST_DIR}/job_value.c)
foreach(mode two_jobs stranger)
  add_test(NAME mp.mpirun.${mode} COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_mpirun_jobs.sh $<TARGET_FILE:job_value>
                                          ${mode})
  # tcp: these check the store's rendezvous under mpirun, which the mpi transport (auto there) does not use.
  set_tests_properties(mp.mpirun.${mode} PROPERTIES LABELS "mp" TIMEOUT 180 ENVIRONMENT "COHORT_TRANSPORT=tcp"
                                                    PASS_REGULAR_EXPRESSION "PASS \\(mpirun ${mode}\\)")
endforeach()
# The MPI transport under mpirun (COHORT_TRANSPORT=mpi; auto there): the matrix, its failures, and fmnist-train
# bitwise equal to the tcp run. Only where libcohort was built with MPI.
if(COHORT_MPI_PC)
  cohort_add_test_binary(mpi_check SOURCES ${CMAKE_CURRENT_LIST_DIR}/mpi_check.c)
  foreach(mode matrix faults train)
    add_test(NAME mp.mpi.${mode} COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_mpi_transport.sh ${mode}
                                         $<TARGET_FILE:test_collectives> $<TARGET_FILE:mpi_check> ${COHORTRUN}
                                         $<TARGET_FILE:fmnist-train>)
    set_tests_properties(mp.mpi.${mode} PROPERTIES LABELS "mp" TIMEOUT 300 PASS_REGULAR_EXPRESSION
                                                   "PASS \\(mpi ${mode}\\)")
  endforeach()
endif()
# cohortrun --bind core gives each worker its own CPUs, --bind socket a whole socket each.
add_test(NAME mp.launcher.bind COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_bind.sh ${COHORTRUN})
set_tests_properties(mp.launcher.bind PROPERTIES LABELS "mp;sanitize" TIMEOUT 60)
# ... and every thread of fmnist-train --threads 2 (progress, loader, stall inspector, OpenBLAS) stays in its share.
add_test(NAME mp.launcher.bind_threads COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_bind_threads.sh ${COHORTRUN}
                                              $<TARGET_FILE:fmnist-train>)
set_tests_properties(mp.launcher.bind_threads PROPERTIES LABELS "mp" TIMEOUT 180 SKIP_RETURN_CODE 77)
# cohortrun on a terminal draws a worker's carriage-return line in place (tools/cohortrun/output.c).
add_test(NAME mp.launcher.live_line COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_live_line.sh ${COHORTRUN}
                                            $<TARGET_FILE:fmnist-train>)
set_tests_properties(mp.launcher.live_line PROPERTIES LABELS "mp;sanitize" TIMEOUT 120)
