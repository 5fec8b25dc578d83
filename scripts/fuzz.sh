#!/usr/bin/env bash
# fuzz.sh [SECONDS] [TARGET...]: builds the fuzz targets with clang's libFuzzer (ASan+UBSan, build-fuzz/) and runs
# each for SECONDS (default 10) from its corpus in fuzz/corpus/TARGET. New inputs that reach new code go to
# build-fuzz/corpus/TARGET (not the repository's corpus: `-merge=1` a run's finds into it by hand, docs/fuzzing.md).
# A crash, leak, sanitizer report or FUZZ_CHECK failure stops that target; its input is saved as
# build-fuzz/crash-TARGET-* and the script exits 1 after the other targets have run.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(idx ckpt hostfile auth store_server frame p2p)
command -v clang >/dev/null || { echo "fuzz.sh: clang is missing (apt-get install clang)"; exit 1; }
CC=clang cmake -S . -B build-fuzz -DCOHORT_FUZZ=ON -DCOHORT_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null
failed=()
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  log="build-fuzz/fuzz-$t.log"
  # One process; -timeout: an input slower than 10 s is a hang; -rss_limit_mb: a leak or a runaway allocation.
  if build-fuzz/fuzz/fuzz_"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/crash-$t-" "build-fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o "cov: [0-9]*" "$log" | tail -n 1 | cut -d" " -f2)
    corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -n 1)
    rate=$(sed -n "s/^stat::average_exec_per_sec: *//p" "$log")
    echo "fuzz $t: ${seconds} s, $runs inputs ($rate/s), $cov edges, $corp, no fault"
  else
    echo "fuzz $t: FAILED (log: $log)"
    grep -m 5 -E 'ERROR|FUZZ_CHECK|SUMMARY|Test unit written' "$log" || tail -n 20 "$log"
    failed+=("$t")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz.sh: ${failed[*]} failed"; exit 1; }
