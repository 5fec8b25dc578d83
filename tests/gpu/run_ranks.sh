#!/usr/bin/env bash
# run_ranks.sh N PROGRAM ARGS...: starts N ranks of PROGRAM on this host without a launcher (rank 0 serves the store,
# as under a hand-written script), so that a test can kill one and watch what the others say: cohortrun would stop
# the survivors at the first death. Prints each rank's output prefixed with its rank. Exit status: 77 when a rank
# skipped (no GPU), else 0 when every rank that did not die of SIGKILL exited 0, else 1.
set -u
n=$1
shift
port=$((30000 + RANDOM % 2000)) # below the ephemeral range (32768-60999), apart from the other tests' ports
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    COHORT_SECRET=gpu-test-$port "$@" >"$dir/$r.out" 2>&1 &
  pids+=($!)
done
rc=0
skipped=0
for ((r = 0; r < n; r++)); do
  wait "${pids[$r]}"
  st=$?
  sed "s/^/[$r] /" "$dir/$r.out"
  if [ $st -eq 77 ]; then
    skipped=1
  elif [ $st -ne 0 ] && [ $st -ne 137 ]; then
    echo "rank $r exited with $st"
    rc=1
  fi
done
[ $skipped -eq 1 ] && [ $rc -eq 0 ] && exit 77
exit $rc
