# cohortrun under real failures: exit codes, signals, stopping and reaping workers, bad command lines, output.
# launcher_worker is the program cohortrun runs; test_launcher drives cohortrun and checks what comes out.
cohort_add_test_binary(launcher_worker SOURCES ${CMAKE_CURRENT_LIST_DIR}/launcher_worker.c
                       LAYERS core store transport coll gpu comm)
cohort_add_test_binary(test_launcher SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launcher.c LAYERS core)
add_dependencies(test_launcher cohortrun launcher_worker)
add_test(NAME fault.launcher COMMAND test_launcher)
set_tests_properties(fault.launcher PROPERTIES LABELS "fault;sanitize" TIMEOUT 120
                     ENVIRONMENT "COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_WORKER=$<TARGET_FILE:launcher_worker>")
# A line longer than 1 MiB comes out as lines of exactly 1 MiB and the rest (cut after each read before: a piece
# could be up to one read, 64 KiB, longer).
add_test(NAME fault.launcher.long_line COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_long_line.sh $<TARGET_FILE:cohortrun>)
set_tests_properties(fault.launcher.long_line PROPERTIES LABELS "fault" TIMEOUT 60 PASS_REGULAR_EXPRESSION "PASS")

# cohortrun never waits forever: signals during every wait outside the poll loop, a failed ssh, a store that cannot
# answer, an interrupted node stopping the others (test_launcher_waits.sh). Loopback only, a few seconds each.
foreach(case ssh-fails join-signals silent-store silent-peer interrupted end-wait hang-any)
  add_test(NAME fault.launcher_waits.${case} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_launcher_waits.sh ${case})
  set_tests_properties(fault.launcher_waits.${case} PROPERTIES LABELS "fault;sanitize" TIMEOUT 90
                       ENVIRONMENT "COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>")
endforeach()

# torchrun's whole command line, its variables and its error files (test_torchrun_cli.sh); "errors" needs torch for
# @record (tests/python/python.cmake runs it with COHORT_PYTHON).
foreach(case flags python nodes leftovers)
  add_test(NAME fault.torchrun_cli.${case} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_torchrun_cli.sh ${case})
  set_tests_properties(fault.torchrun_cli.${case} PROPERTIES LABELS "fault;sanitize" TIMEOUT 120
                       ENVIRONMENT "COHORT_TEST_COHORTRUN=$<TARGET_FILE:cohortrun>;COHORT_TEST_PYTHON=${COHORT_PYTHON}")
endforeach()
