#!/bin/sh
# Jobs started by Open MPI's mpirun (no cohortrun, no MASTER_PORT, no COHORT_SECRET) on one host stay apart: the
# rendezvous id and the port come from the MPI job's identity (PMIX_NAMESPACE, else OMPI_MCA_ess_base_jobid).
#   two_jobs  two mpirun jobs of 2 ranks at once: each finishes with its own allreduce (job_value.c)
#   stranger  a rank of another job (another PMIX_NAMESPACE) that reaches a job's store is refused, with a message
#             naming both jobs, and the job goes on with its own ranks
# usage: test_mpirun_jobs.sh JOB_VALUE_BINARY two_jobs|stranger
set -u
bin=$1
mode=$2
command -v mpirun >/dev/null || { echo "mpirun is missing: apt-get install openmpi-bin (scripts/setup.sh does)"; exit 1; }
unset MASTER_ADDR MASTER_PORT COHORT_SECRET COHORT_RUN_ID COHORT_STORE_PORT COHORT_STORE_ADDR RANK WORLD_SIZE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 COHORT_TIMEOUT=30
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  for f in "$tmp"/*; do echo "--- $f"; cat "$f"; done
  echo "FAIL ($mode): $1"
  exit 1
}
case $mode in
two_jobs)
  for v in 1 2; do
    timeout 120 mpirun --oversubscribe -np 2 -x JOB_VALUE=$v "$bin" >"$tmp/out.$v" 2>"$tmp/err.$v" &
    eval "pid$v=\$!"
  done
  wait "$pid1" || fail "job 1 failed"
  wait "$pid2" || fail "job 2 failed"
  grep -q "^job 1 rank 0 of 2: sum 2001 ok" "$tmp/out.1" && grep -q "^job 1 rank 1 of 2: sum 2001 ok" "$tmp/out.1" ||
    fail "job 1 did not get its own sum"
  grep -q "^job 2 rank 0 of 2: sum 4001 ok" "$tmp/out.2" && grep -q "^job 2 rank 1 of 2: sum 4001 ok" "$tmp/out.2" ||
    fail "job 2 did not get its own sum"
  ;;
stranger)
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  timeout 120 mpirun --oversubscribe -np 2 -x JOB_VALUE=1 -x JOB_HOLD_S=6 -x MASTER_PORT=$port "$bin" \
    >"$tmp/out.job" 2>"$tmp/err.job" &
  job=$!
  i=0
  until grep -q "^job 1 rank 0 of 2: sum" "$tmp/out.job" 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 600 ] || fail "the job never got to its allreduce"
    sleep 0.1
  done
  # The stranger: rank 1 of 2 of another Open MPI job, at the same port.
  OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 PMIX_NAMESPACE=stranger-job MASTER_PORT=$port JOB_VALUE=9 \
    COHORT_TIMEOUT=5 timeout 60 "$bin" >"$tmp/out.stranger" 2>"$tmp/err.stranger"
  rc=$?
  wait "$job" || fail "the job failed"
  grep -q "^job 1 rank 1 of 2: sum 2001 ok" "$tmp/out.job" || fail "the job did not get its own sum"
  [ $rc -eq 1 ] || fail "the stranger exited $rc, not 1"
  grep -q "another job" "$tmp/err.stranger" && grep -q "stranger-job" "$tmp/err.stranger" ||
    fail "the stranger was not told that the store belongs to another job"
  cat "$tmp/err.stranger"
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
echo "PASS (mpirun $mode)"
