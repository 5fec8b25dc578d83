#!/usr/bin/env bash
# budget: 230
# torch.distributed's backend "cohort" and cohort.torch on the GPU host's torch 2 (part of scripts/gpu-check.sh;
# BUILD, OUT, PYTHON and report() come from it). The development machines and CI have Debian's torch 1.13; this is
# where the backend's registration and its tests meet torch 2 (issue 31):
#   1. the Python tests (ctest label python, with the build's COHORT_PYTHON, the host's torch), in parallel, except
#      torch's whole conformance suite, the benchmarks' smoke runs, the CUDA tests (10-collectives runs them) and the
#      pip install (no network there);
#   2. a slice of torch's own suite (distributed_test.py as torch 2 ships it, tests/python/torch_dist_suite.py) on
#      cohort and then on gloo, each for a fixed time: the counts of each, and every cohort failure by name.
set -u
B=$BUILD
BABS=$(cd "$B" && pwd)
W=$SCRATCH/40-torch2
mkdir -p "$W"

echo "== 1. the Python tests on torch $($PYTHON -c 'import torch; print(torch.__version__)')"
t0=$(date +%s)
timeout -k 5 130 ctest --test-dir "$B" -L python -E '^(python\.dist_suite|bench\.|python\.install$|python\.cuda)' \
  -j 8 --timeout 110 --output-on-failure >"$W/ctest.log" 2>&1
cat "$W/ctest.log"
passed=$(grep -cE 'Test +#[0-9]+: [^ ]+ \.+ +Passed' "$W/ctest.log")
failed=$(grep -E 'Test +#[0-9]+: [^ ]+ \.+.*(Failed|Timeout|Exception)' "$W/ctest.log" | sed -E 's/.*: ([^ ]+) \.+.*/\1/')
skipped=$(grep -cE 'Test +#[0-9]+: [^ ]+ \.+.*Skipped' "$W/ctest.log")
report "   python tests on torch 2: $passed passed, $(echo -n "$failed" | grep -c .) failed, $skipped skipped" \
  "($(($(date +%s) - t0)) s)"
for t in $failed; do
  report "FAIL torch2.$t (see 40-torch2/ctest.log)"
done
[ "$passed" -gt 0 ] && [ -z "$failed" ] && report "PASS torch2.python_tests ($passed)"

echo "== 2. torch's distributed_test.py, a slice, cohort then gloo"
PATTERNS=(-k test_all_reduce_sum -k test_all_reduce_max -k test_broadcast -k test_all_gather -k test_reduce_scatter
  -k test_barrier -k test_send_recv -k test_isend -k test_scatter -k test_gather -k test_all_to_all
  -k test_DistributedDataParallel_requires_grad -k test_ddp_uneven_inputs -k test_new_subgroups)
for backend in cohort gloo; do
  secs=$([ $backend = cohort ] && echo 75 || echo 45)
  tmp=$(mktemp -d)
  # The GPU is hidden from the suite: the backend takes CPU tensors, and with one GPU visible torch 2's suite skips its
  # CPU tests too ("Need at least 2 CUDA devices"), as the first run on the host showed (2026-11-26).
  (cd tests/python && CUDA_VISIBLE_DEVICES= BACKEND=$backend WORLD_SIZE=2 TEMP_DIR=$tmp PYTHONUNBUFFERED=1 \
    PYTHONPATH="$BABS/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 \
    timeout -k 5 $secs "$PYTHON" torch_dist_suite.py -v "${PATTERNS[@]}") >"$W/suite_$backend.log" 2>&1
  rm -rf "$tmp"
  # unittest -v writes "test_x (...) ... " and the verdict later, after the ranks' log lines: follow the last test.
  verdicts=$(awk '
    /^test_[A-Za-z0-9_]+ \(/ { cur = $1 }
    / \.\.\. skipped/ { print "skip", cur; next }
    /^ok$/ || / \.\.\. ok$/ { print "ok", cur; next }
    /^(FAIL|ERROR)$/ || / \.\.\. (FAIL|ERROR)$/ { print "bad", cur }' "$W/suite_$backend.log")
  ok=$(echo "$verdicts" | grep -c '^ok ')
  bad=$(echo "$verdicts" | sed -n 's/^bad //p')
  skip=$(echo "$verdicts" | grep -c '^skip ')
  cat "$W/suite_$backend.log"
  report "   torch suite slice on $backend (world 2, ${secs} s): $ok passed, $(echo -n "$bad" | grep -c .) failed," \
    "$skip skipped"
  if [ $backend = cohort ]; then
    for t in $bad; do report "FAIL torch2.suite.$t (see 40-torch2/suite_cohort.log)"; done
    if [ "$ok" -gt 0 ] && [ -z "$bad" ]; then report "PASS torch2.suite_slice ($ok)"; fi
    [ "$ok" -eq 0 ] && report "FAIL torch2.suite_slice: nothing passed ($(tail -3 "$W/suite_$backend.log" | tr '\n' ' ' | cut -c1-200))"
  fi
done
exit 0
