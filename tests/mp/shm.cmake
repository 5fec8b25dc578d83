# The collective matrix over the shared-memory transport (COHORT_TRANSPORT=shm), between real processes started by
# cohortrun. A run that silently fell back to TCP would print "(tcp)", which fails it.
foreach(np 2 3 5)
  add_test(NAME mp.shm.np${np} COMMAND $<TARGET_FILE:cohortrun> -np ${np} $<TARGET_FILE:test_collectives>)
  set_tests_properties(mp.shm.np${np} PROPERTIES LABELS "mp;sanitize" TIMEOUT 900 ENVIRONMENT "COHORT_TRANSPORT=shm"
                       FAIL_REGULAR_EXPRESSION "\\(tcp\\)")
endforeach()
# Tiny pipeline segments through tiny rings: frames, and the headers in front of them, wrap around all the time.
add_test(NAME mp.shm.tiny_rings COMMAND $<TARGET_FILE:cohortrun> -np 3 $<TARGET_FILE:test_collectives> --quick)
set_tests_properties(mp.shm.tiny_rings PROPERTIES LABELS "mp;sanitize" FAIL_REGULAR_EXPRESSION "\\(tcp\\)"
                     ENVIRONMENT
                     "COHORT_TRANSPORT=shm;COHORT_ALGO=ring;COHORT_SEGMENT_BYTES=1000;COHORT_SHM_RING_BYTES=4096")
