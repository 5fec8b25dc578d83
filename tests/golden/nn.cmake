# Golden tests of the nn layer against PyTorch, and the nn throughput benchmark.
# nn_golden.py (Debian's python3-torch) writes weights, inputs and torch's outputs to a file at test time; the C
# test reads it. A missing python3 or torch fails the setup test, and with it golden.nn: never a silent skip.
set(COHORT_PYTHON "/usr/bin/python3" CACHE FILEPATH "Python 3 with torch, for the golden tests")

cohort_add_test_binary(bench_nn SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_nn.c LAYERS core nn)
