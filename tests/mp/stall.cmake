# The stall inspector across real processes, progress published through the store (cohortrun -np 3, ~6 s).
cohort_add_test_binary(test_stall SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_stall.c LAYERS core store transport coll gpu comm ddp nn)
add_test(NAME mp.stall COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_stall.sh $<TARGET_FILE:cohortrun> $<TARGET_FILE:test_stall>)
set_tests_properties(mp.stall PROPERTIES LABELS "mp;sanitize" TIMEOUT 60)
