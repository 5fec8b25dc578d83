# Collectives over the in-process transport (ranks as threads) and the reduction kernels.
cohort_add_test_binary(test_coll_inproc SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_coll_inproc.c ${CMAKE_CURRENT_LIST_DIR}/../coll_check.c
                       ${CMAKE_CURRENT_LIST_DIR}/../split_check.c)
add_test(NAME unit.coll_inproc COMMAND test_coll_inproc)
set_tests_properties(unit.coll_inproc PROPERTIES LABELS "unit;sanitize" TIMEOUT 600)
