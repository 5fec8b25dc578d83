cohort_add_test_binary(test_nn SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nn.c LAYERS core nn)
add_test(NAME unit.nn COMMAND test_nn)
set_tests_properties(unit.nn PROPERTIES LABELS "unit;sanitize;numeric")

# Every kernel set against the reference (src/nn/backend.h): each layer within float32's gamma(k) bound, whole
# models and 10 training steps within the bounds of the arithmetic.
cohort_add_test_binary(test_nn_kernels SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nn_kernels.c LAYERS core nn)
add_test(NAME unit.nn_kernels COMMAND test_nn_kernels)
set_tests_properties(unit.nn_kernels PROPERTIES LABELS "unit;sanitize;numeric")
