# Collectives over the in-process transport (ranks as threads) and the reduction kernels.
cohort_add_test_binary(test_coll_inproc SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_coll_inproc.c ${CMAKE_CURRENT_LIST_DIR}/../coll_check.c
                       ${CMAKE_CURRENT_LIST_DIR}/../split_check.c)
add_test(NAME unit.coll_inproc COMMAND test_coll_inproc)
set_tests_properties(unit.coll_inproc PROPERTIES LABELS "unit;sanitize" TIMEOUT 600)
# The matrix at 16, 32 and 64 threads (oversubscribed), with the counts of the large-world process tests
# (tests/mp/large.cmake).
foreach(np 16 32 64)
  add_test(NAME unit.coll_inproc.np${np} COMMAND test_coll_inproc --world ${np})
  set_tests_properties(unit.coll_inproc.np${np} PROPERTIES LABELS "unit" TIMEOUT 600)
endforeach()
