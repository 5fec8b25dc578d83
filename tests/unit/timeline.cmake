# The DDP engine's observability: the Chrome trace (timeline.c) and, in an in-process group, the stall inspector
# (stall.c); the multi-process stall test is in tests/mp/stall.cmake.
cohort_add_test_binary(test_timeline SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_timeline.c LAYERS core store transport coll gpu comm ddp nn)
add_test(NAME unit.timeline COMMAND test_timeline)
set_tests_properties(unit.timeline PROPERTIES LABELS "unit;sanitize" TIMEOUT 120)
cohort_add_test_binary(test_stall_inproc SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_stall_inproc.c LAYERS core store transport coll gpu comm ddp nn)
add_test(NAME unit.stall_inproc COMMAND test_stall_inproc)
set_tests_properties(unit.stall_inproc PROPERTIES LABELS "unit;sanitize" TIMEOUT 120)
