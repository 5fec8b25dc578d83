# The shared-memory transport under real failures: a rank killed mid-allreduce (large and small node allreduce),
# mismatched counts and collectives, an abort, a stopped rank, rings so small that every frame wraps; the node
# allreduce bitwise against a reference; COHORT_TRANSPORT=auto against COHORT_NODE_ID. After each job /dev/shm must
# hold nothing of it.
cohort_add_test_binary(test_shm_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shm_fault.c)
add_test(NAME fault.shm COMMAND test_shm_fault)
set_tests_properties(fault.shm PROPERTIES LABELS "fault;sanitize" TIMEOUT 120)
