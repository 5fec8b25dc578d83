# The training stack on CUDA (src/nn_cuda, fmnist-train --device cuda). The tests that need a GPU exit 77 with
# "SKIP: <reason>" where there is none (or the plugin was not built): ctest reports them skipped, never passed.

cohort_add_test_binary(test_nn_cuda SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nn_cuda.c
                       ${CMAKE_SOURCE_DIR}/src/nn_cuda/host.c)
add_test(NAME gpu.nn COMMAND test_nn_cuda)
set_tests_properties(gpu.nn PROPERTIES SKIP_RETURN_CODE 77 FIXTURES_REQUIRED nn_golden LABELS "gpu"
                     ENVIRONMENT "NN_GOLDEN_FILE=${COHORT_TEST_DIR}/nn_golden.bin")

# --device cuda on any machine: without a usable GPU exactly one line on stderr saying why and exit 1; with one, a
# short run that ends with the final line. Runs everywhere (CPU CI included).
add_test(NAME gpu.fmnist_device COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_fmnist_device.sh
                                        $<TARGET_FILE:fmnist-train>)
set_tests_properties(gpu.fmnist_device PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77)
