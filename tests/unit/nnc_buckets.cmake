# Where the CUDA training stack cuts its gradients into buckets (src/nn_cuda/buckets.c): plain C, tested on the CPU.
cohort_add_test_binary(test_nnc_buckets SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nnc_buckets.c
                       ${CMAKE_SOURCE_DIR}/src/nn_cuda/buckets.c LAYERS core)
add_test(NAME unit.nnc_buckets COMMAND test_nnc_buckets)
set_tests_properties(unit.nnc_buckets PROPERTIES LABELS "unit;sanitize" TIMEOUT 30)
