#!/bin/sh
# The MPI transport (COHORT_TRANSPORT=mpi, src/transport/mpi.c) under Open MPI's mpirun:
#   matrix    every collective, dtype and op on 3 ranks (test_collectives), with COHORT_TRANSPORT unset: auto is mpi
#   faults    a count mismatch and an abort reach every rank with the same status, naming the ranks; a silent rank
#             stops the others after COHORT_OP_TIMEOUT, each naming the call and the rank it waited on; a program
#             that initialized MPI without thread support is refused with what to do; a program that returns from main
#             with its communicator alive exits with its own status, not a crash at MPI_Finalize; an exit handler that
#             runs after that MPI_Finalize gets a clear error from a collective, not a hang; a child forked from a rank
#             exits without calling MPI (mpi_check.c)
#   train     fmnist-train on 2 ranks over mpi ends with the param_sha256 of the same run over tcp under cohortrun
#             (the same algorithms, so the same summation order)
# usage: test_mpi_transport.sh matrix|faults|train TEST_COLLECTIVES MPI_CHECK COHORTRUN FMNIST_TRAIN
set -u
mode=$1 coll=$2 check=$3 run=$4 train=$5
command -v mpirun >/dev/null || { echo "mpirun is missing: apt-get install openmpi-bin (scripts/setup.sh does)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset COHORT_TRANSPORT MASTER_ADDR MASTER_PORT RANK WORLD_SIZE
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { cat "$tmp"/* 2>/dev/null; echo "FAIL ($mode): $1"; exit 1; }
mpi() { timeout 120 mpirun --oversubscribe "$@"; }
case $mode in
matrix)
  mpi -np 3 "$check" transport >"$tmp/t" 2>&1 || fail "the transport probe failed"
  [ "$(grep -c 'transport mpi$' "$tmp/t")" = 3 ] || fail "auto did not pick mpi under mpirun"
  mpi -np 3 "$coll" >"$tmp/m" 2>&1 || fail "the collective matrix failed over mpi"
  [ "$(grep -c '(mpi): all collectives correct' "$tmp/m")" = 3 ] || fail "not every rank checked the matrix"
  ;;
faults)
  mpi -np 3 "$check" mismatch >"$tmp/mm" 2>&1 || fail "a rank did not see the mismatch"
  [ "$(grep -c 'mismatch between ranks: ranks disagree: rank [0-9] called allreduce(count=1[01], f32, sum' "$tmp/mm")" = 3 ] ||
    fail "not every rank named the mismatch"
  mpi -np 3 "$check" abort >"$tmp/ab" 2>&1 || fail "a rank did not see the abort"
  for r in 1 2; do
    grep -q "^rank $r: remote failure: .*the data loader of rank 0 broke.*(reported by rank 0)" "$tmp/ab" ||
      fail "rank $r was not told rank 0's reason"
  done
  # A program that initialized MPI without thread support is told what to do, not left to crash.
  mpi -np 2 "$check" single >"$tmp/sg" 2>&1 || fail "MPI_THREAD_SINGLE was not refused"
  [ "$(grep -c 'invalid argument: COHORT_TRANSPORT=mpi needs MPI_THREAD_MULTIPLE .*MPI_Init_thread' "$tmp/sg")" = 2 ] ||
    fail "no clear refusal of MPI_THREAD_SINGLE"
  # Leaving main with a live communicator: the engine thread must not crash under MPI_Finalize at exit. Several runs:
  # the crash came from a thread inside MPI_Test at that moment (3 of 3 runs before the fix).
  for i in 1 2 3; do
    mpi -np 3 "$check" exit >"$tmp/ex" 2>&1
    rc=$?
    [ "$rc" = 3 ] || fail "a program leaving main with status 3 and a live communicator ended with $rc (run $i)"
    [ "$(grep -c 'leaving with the communicator alive' "$tmp/ex")" = 3 ] || fail "not every rank got to leave (run $i)"
    if grep -q 'Segmentation fault' "$tmp/ex"; then fail "a rank crashed at exit (run $i)"; fi
  done
  # A child forked from a rank that leaves by exit(0) must not run cohort's MPI_Finalize: it hung there (3 of 3 runs).
  mpi -np 3 "$check" fork >"$tmp/fk" 2>&1 || fail "a forked child's exit or the parent's allreduce after it failed"
  [ "$(grep -c '^rank [0-9]: success' "$tmp/fk")" = 3 ] || fail "not every rank's child ended cleanly"
  # An exit handler that runs after cohort's MPI_Finalize and calls a collective: a clear error, not a hang or a crash.
  mpi -np 3 "$check" late >"$tmp/la" 2>&1 || fail "an exit handler's barrier after MPI_Finalize did not end cleanly"
  [ "$(grep -c '^late barrier: invalid argument: COHORT_TRANSPORT=mpi: MPI was finalized at exit' "$tmp/la")" = 3 ] ||
    fail "not every rank's late barrier was refused with the reason"
  COHORT_OP_TIMEOUT=2 mpi -np 3 -x COHORT_OP_TIMEOUT "$check" silent >"$tmp/si" 2>&1 || fail "a rank did not time out"
  # Each waiting rank names the rank it waits on directly (in the recursive-doubling pattern, not always the silent
  # one), and the first to give up tells the others; the silence comes while the ranks compare their calls, before
  # the allreduce's data moves (src/coll/agree.c), and the message says so.
  for r in 0 1; do
    grep -q "^rank $r: timeout: allreduce(count=11, f32, sum, rd) \[call #0\]\( (while the ranks compared their calls)\)\{0,1\}: no progress for 2 s waiting on rank(s) [0-9]" \
      "$tmp/si" || fail "rank $r did not time out with the call and the rank it waited on"
  done
  ;;
train)
  mpi -np 2 "$train" --model mlp --steps 20 --quiet >"$tmp/mpi" 2>&1 || fail "fmnist-train over mpi failed"
  COHORT_TRANSPORT=tcp "$run" -np 2 "$train" --model mlp --steps 20 --quiet >"$tmp/tcp" 2>&1 || fail "over tcp failed"
  a=$(sed -n 's/.*final: .*param_sha256=\([0-9a-f]*\).*/\1/p' "$tmp/mpi")
  b=$(sed -n 's/.*final: .*param_sha256=\([0-9a-f]*\).*/\1/p' "$tmp/tcp")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "param_sha256 over mpi '$a', over tcp '$b'"
  echo "param_sha256 $a over mpi and tcp"
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
echo "PASS (mpi $mode)"
