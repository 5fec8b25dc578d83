# bench/collectives.sh and its table maker bench/compare.py.
# unit.bench_compare: compare.py's parsing, medians, ratios and ok/MISS flags on made-up runs, and the script's
# one-line refusals when mpicc, mpirun or torch is missing (needs only python3 and bash).
# bench.collectives_smoke: one real run up to 1 MiB against the real anchors (needs openmpi-bin, libopenmpi-dev,
# python3-torch: scripts/setup.sh), so that a change in cohort-bench's or an anchor's output shows up as a failure
# rather than as a wrong table. It passes only when the whole table was printed (a refusal or a failed run prints
# none); its figures are not judged (the machine running the suite is busy). RUN_SERIAL: its 2 busy ranks must not
# slow the timing-sensitive tests beside it.
set(COHORT_BENCH_DIR ${CMAKE_SOURCE_DIR}/bench)
add_test(NAME unit.bench_compare
         COMMAND python3 ${COHORT_BENCH_DIR}/compare.py --self-test --script ${COHORT_BENCH_DIR}/collectives.sh)
set_tests_properties(unit.bench_compare PROPERTIES LABELS "unit" TIMEOUT 120)

string(CONCAT COHORT_BENCH_ROW "\\| 1 MiB \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x (ok|MISS) "
       "\\| [0-9.]+ \\| [0-9.]+x (ok|MISS) \\| [0-9.]+ \\|.*targets met: [0-3] of 3")
add_test(NAME bench.collectives_smoke
         COMMAND bash ${COHORT_BENCH_DIR}/collectives.sh --max 1M --repeats 1 --build ${CMAKE_BINARY_DIR})
set_tests_properties(bench.collectives_smoke PROPERTIES LABELS "bench" TIMEOUT 300 RUN_SERIAL TRUE
                     PASS_REGULAR_EXPRESSION "${COHORT_BENCH_ROW}")
