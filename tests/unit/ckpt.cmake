cohort_add_test_binary(test_ckpt SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ckpt.c LAYERS core data ckpt)
add_test(NAME unit.ckpt COMMAND test_ckpt)
set_tests_properties(unit.ckpt PROPERTIES LABELS "unit;sanitize")
