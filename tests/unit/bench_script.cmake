# bench/collectives.sh and its table maker bench/compare.py; bench/ddp_vs_torch.sh; bench/optim.sh.
# unit.bench_compare: compare.py's parsing, medians, ratios and ok/MISS flags on made-up runs, and the script's
# one-line refusals when mpicc, mpirun or torch is missing (needs only python3 and bash).
# bench.collectives_smoke: one real run up to 1 MiB against the real anchors (needs openmpi-bin, libopenmpi-dev,
# python3-torch: scripts/setup.sh), so that a change in cohort-bench's or an anchor's output shows up as a failure
# rather than as a wrong table. It passes only when the whole table was printed (a refusal or a failed run prints
# none); its figures are not judged (the machine running the suite is busy). RUN_SERIAL: its 2 busy ranks must not
# slow the timing-sensitive tests beside it.
# The anchors live beside the checkout (../shared/bench-anchors) or in bench/anchors/: where neither holds them, the
# smoke tests that need them report SKIP with the script's line saying which file is missing.
set(COHORT_BENCH_DIR ${CMAKE_SOURCE_DIR}/bench)
add_test(NAME unit.bench_compare
         COMMAND python3 ${COHORT_BENCH_DIR}/compare.py --self-test --script ${COHORT_BENCH_DIR}/collectives.sh)
set_tests_properties(unit.bench_compare PROPERTIES LABELS "unit" TIMEOUT 120)

# unit.cohort_bench_usage: a bad command line gets one line naming the mistake and exit 2, not the whole usage.
add_test(NAME unit.cohort_bench_usage
         COMMAND bash -c "for a in '' 'allreduce --bogus' 'allreduce --min 3X' 'gather' 'allreduce --page-offset 4096' 'allreduce --page-offset 6'; do \
                            out=$($<TARGET_FILE:cohort-bench> $a 2>&1 >/dev/null); rc=$?; \
                            [ $rc = 2 ] && [ $(printf '%s\\n' \"$out\" | wc -l) = 1 ] || \
                              { echo \"for '$a': exit $rc, stderr: $out\"; exit 1; }; echo \"$out\"; done")
set_tests_properties(unit.cohort_bench_usage PROPERTIES LABELS "unit" TIMEOUT 30
  PASS_REGULAR_EXPRESSION "which collective\\?.*unknown option '--bogus'.*bad size '3X' for --min.*unknown collective 'gather'.*--page-offset must be an integer from 0 to 4095.*--page-offset 6 is not a multiple of f32's 4 bytes")

string(CONCAT COHORT_BENCH_ROW "\\| 1 MiB \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x (ok|MISS) "
       "\\| [0-9.]+ \\| [0-9.]+x (ok|MISS) \\| [0-9.]+ \\|.*targets met: [0-3] of 3")
add_test(NAME bench.collectives_smoke
         COMMAND bash ${COHORT_BENCH_DIR}/collectives.sh --max 1M --repeats 1 --build ${CMAKE_BINARY_DIR})
set_tests_properties(bench.collectives_smoke PROPERTIES LABELS "bench" TIMEOUT 300 RUN_SERIAL TRUE
                     ENVIRONMENT "PYTHON=${COHORT_PYTHON}" SKIP_REGULAR_EXPRESSION "anchor [^ ]* is missing"
                     PASS_REGULAR_EXPRESSION "${COHORT_BENCH_ROW}")

# bench.ddp_vs_torch_smoke: bench/ddp_vs_torch.sh on 20 steps, one round, against the real torch DDP anchor, so that
# a change in fmnist-train's final line, cohortrun or the anchor shows up as a failure rather than as a wrong or
# missing table. It passes when both table rows (RANKS defaults to 1,2), the scaling line and the verdict lines were
# printed; the figures are not judged. Four systems (cohort, fused, torch, and cohort on the reference kernels) of
# three runs each: 280 s on the loaded 2-core machine, hence the timeout. NATIVE=0: cohort runs only on the caller's
# OpenBLAS kernels, also where the caller pins OPENBLAS_CORETYPE (the script's native runs would compute without the
# pin, on kernels it may keep away because they compute wrong results or crash on that CPU).
string(CONCAT COHORT_DDP_BENCH_ROWS "\\| 1 \\| [0-9]+ \\| [0-9]+ \\| [0-9]+ \\| [0-9.]+x \\| [0-9.]+x \\|\n"
       "\\| 2 \\| [0-9]+ \\| [0-9]+ \\| [0-9]+ \\| [0-9.]+x \\| [0-9.]+x \\|\n"
       "1->2 rank scaling, median of the rounds .*: cohort [0-9.]+%, fused [0-9.]+%, torch [0-9.]+%\n"
       ".*targets: cohort vs torch >= 1.0x at every rank count \\(1 rank [0-9.]+x, 2 ranks [0-9.]+x\\): (PASS|MISS)\n"
       "targets: 2 ranks vs torch >= 1.0x .*scaling >= 95% \\(median of the rounds\\): [0-9.]+% (PASS|MISS)")
add_test(NAME bench.ddp_vs_torch_smoke COMMAND bash ${COHORT_BENCH_DIR}/ddp_vs_torch.sh 20 64 1 1)
set_tests_properties(bench.ddp_vs_torch_smoke PROPERTIES LABELS "bench" TIMEOUT 600 RUN_SERIAL TRUE
                     ENVIRONMENT "BUILD=${CMAKE_BINARY_DIR};PYTHON=${COHORT_PYTHON};NATIVE=0"
                     SKIP_REGULAR_EXPRESSION "anchor [^ ]* is missing" PASS_REGULAR_EXPRESSION "${COHORT_DDP_BENCH_ROWS}")

# bench.optim_smoke: bench/optim.sh on 5 steps against torch.optim; passes when all four rows were printed.
string(CONCAT COHORT_OPTIM_BENCH_ROWS "\\| sgd \\| normal \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x \\|\n"
       "\\| sgd \\| subnormal \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x \\|\n"
       "\\| adamw \\| normal \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x \\|\n"
       "\\| adamw \\| subnormal \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x \\|")
add_test(NAME bench.optim_smoke COMMAND bash ${COHORT_BENCH_DIR}/optim.sh 5)
set_tests_properties(bench.optim_smoke PROPERTIES LABELS "bench" TIMEOUT 120 RUN_SERIAL TRUE
                     ENVIRONMENT "BUILD=${CMAKE_BINARY_DIR};PYTHON=${COHORT_PYTHON}"
                     PASS_REGULAR_EXPRESSION "${COHORT_OPTIM_BENCH_ROWS}")
