# Golden tests of the nn layer against PyTorch, and the nn throughput benchmark.
# nn_golden.py (Debian's python3-torch) writes weights, inputs and torch's outputs to a file at test time; the C
# test reads it (COHORT_PYTHON: tests/CMakeLists.txt). A missing python3 or torch fails the setup test, and with it
# golden.nn: never a silent skip.

cohort_add_test_binary(bench_nn SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_nn.c LAYERS core nn)

add_test(NAME golden.nn_data COMMAND ${COHORT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/nn_golden.py
         ${COHORT_TEST_DIR}/nn_golden.bin)
set_tests_properties(golden.nn_data PROPERTIES FIXTURES_SETUP nn_golden LABELS "golden;sanitize;numeric")

cohort_add_test_binary(test_nn_golden SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_nn_golden.c LAYERS core nn)
add_test(NAME golden.nn COMMAND test_nn_golden)
set_tests_properties(golden.nn PROPERTIES FIXTURES_REQUIRED nn_golden LABELS "golden;sanitize;numeric"
                     ENVIRONMENT "NN_GOLDEN_FILE=${COHORT_TEST_DIR}/nn_golden.bin")
# golden.nn on oneDNN where built in, golden.nn_reference on the reference kernels: both hold.
if(COHORT_HAVE_DNNL)
  set_property(TEST golden.nn APPEND PROPERTY ENVIRONMENT "COHORT_KERNELS=onednn")
endif()
add_test(NAME golden.nn_reference COMMAND test_nn_golden)
set_tests_properties(golden.nn_reference PROPERTIES FIXTURES_REQUIRED nn_golden LABELS "golden;sanitize;numeric"
                     ENVIRONMENT "NN_GOLDEN_FILE=${COHORT_TEST_DIR}/nn_golden.bin;COHORT_KERNELS=reference")
