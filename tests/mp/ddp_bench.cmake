# bench/ddp_overlap (the DDP engine's overlap benchmark) and its wrapper bench/ddp_overlap.sh, at toy sizes
# (--width 64 --steps 3) so that the programs are exercised in CI. They assert that the output carries every
# figure (numbers in the table, the ratio lines, the machine-readable result line), never the figures' values: the
# machine running the suite is busy and the sizes are not the benchmark's.
string(CONCAT COHORT_DDP_BENCH_TABLE
       "\\| \\(a\\) compute only[^|]*\\| [0-9.]+ \\| [0-9.]+ \\|.*"
       "\\| \\(b\\) allreduce only[^|]*\\| [0-9.]+ \\| [0-9.]+ \\|.*"
       "\\| \\(c\\) ddp step[^|]*\\| [0-9.]+ \\| [0-9.]+ \\|.*")
set(COHORT_DDP_BENCH_RESULT "result: ranks=%NP% compute_ms=[0-9.]+ allreduce_ms=[0-9.]+ step_ms=[0-9.]+ step_over_max=[0-9.]+ hidden=-?[0-9.]+ overhead=-?[0-9.]+")

string(REPLACE "%NP%" "2" COHORT_DDP_BENCH_RESULT2 "${COHORT_DDP_BENCH_RESULT}")
add_test(NAME mp.ddp_bench.np2
         COMMAND $<TARGET_FILE:cohortrun> -np 2 $<TARGET_FILE:ddp_overlap> --width 64 --steps 3)
set_tests_properties(mp.ddp_bench.np2 PROPERTIES LABELS "mp;sanitize" TIMEOUT 120 PASS_REGULAR_EXPRESSION
  "${COHORT_DDP_BENCH_TABLE}step / max\\(compute, allreduce\\): [0-9.]+ .*hidden communication[^:]*: -?[0-9.]+ .*${COHORT_DDP_BENCH_RESULT2}")

string(REPLACE "%NP%" "1" COHORT_DDP_BENCH_RESULT1 "${COHORT_DDP_BENCH_RESULT}")
add_test(NAME mp.ddp_bench.np1 COMMAND $<TARGET_FILE:ddp_overlap> --width 64 --steps 3 --layers 3)
set_tests_properties(mp.ddp_bench.np1 PROPERTIES LABELS "mp;sanitize" TIMEOUT 120 PASS_REGULAR_EXPRESSION
  "${COHORT_DDP_BENCH_TABLE}ddp overhead on 1 rank, step / compute - 1: [-+][0-9.]+%.*${COHORT_DDP_BENCH_RESULT1}")

# The wrapper: both runs, then the three targets, each with its figure and PASS or MISS, and the count.
string(CONCAT COHORT_DDP_BENCH_VERDICT
       "\\| step / max\\(compute, allreduce\\), 2 ranks \\| [0-9.]+ \\| <= 1.15 \\| (PASS|MISS) \\|.*"
       "\\| hidden communication[^|]*, 2 ranks \\| -?[0-9.]+ \\| >= 0.80 \\| (PASS|MISS) \\|.*"
       "\\| DDP overhead[^|]*, 1 rank \\| [-+][0-9.]+% \\| <= 2% \\| (PASS|MISS) \\|.*"
       "targets met: [0-3] of 3")
add_test(NAME mp.ddp_bench.script
         COMMAND bash ${CMAKE_SOURCE_DIR}/bench/ddp_overlap.sh --build ${CMAKE_BINARY_DIR} --width 64 --steps 3)
set_tests_properties(mp.ddp_bench.script PROPERTIES LABELS "mp" TIMEOUT 120 PASS_REGULAR_EXPRESSION
  "${COHORT_DDP_BENCH_VERDICT}")
