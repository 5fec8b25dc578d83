# The DDP engine's checks with ranks as threads (the same checks run between processes in tests/mp/ddp.cmake).
cohort_add_test_binary(test_ddp_inproc SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ddp_inproc.c ${CMAKE_CURRENT_LIST_DIR}/../ddp_check.c)
add_test(NAME unit.ddp_inproc COMMAND test_ddp_inproc)
set_tests_properties(unit.ddp_inproc PROPERTIES LABELS "unit;sanitize;numeric" TIMEOUT 300)
