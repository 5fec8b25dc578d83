# Corrupt, truncated and half-written data files and checkpoints, and writers killed mid-save.
cohort_add_test_binary(test_ckpt_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_fault.c LAYERS core ckpt)
add_test(NAME fault.ckpt COMMAND test_ckpt_fault)
set_tests_properties(fault.ckpt PROPERTIES LABELS "fault;sanitize" TIMEOUT 60)

cohort_add_test_binary(test_data_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_data_fault.c LAYERS core data)
add_test(NAME fault.data COMMAND test_data_fault)
set_tests_properties(fault.data PROPERTIES LABELS "fault;sanitize" TIMEOUT 60)
