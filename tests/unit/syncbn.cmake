# SyncBatchNorm: replicas as threads of an in-process group against one model on the whole batch.
cohort_add_test_binary(test_syncbn SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_syncbn.c
                       LAYERS core store transport coll gpu comm ddp nn)
add_test(NAME unit.syncbn COMMAND test_syncbn)
set_tests_properties(unit.syncbn PROPERTIES LABELS "unit;sanitize;numeric")
