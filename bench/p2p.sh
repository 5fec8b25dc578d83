#!/usr/bin/env bash
# p2p.sh: ping-pong between 2 ranks, cohort_send/cohort_recv over shm and tcp (under cohortrun) beside Open MPI's
# MPI_Send/MPI_Recv (under mpirun, when mpicc is there), interleaved in one run:
#   bench/p2p.sh [--build DIR] [--repeats N] [--iters N]
# Each line: latency of 8 B (half the round trip) and bandwidth of 4 MiB, median of 5 blocks (bench/p2p_pingpong.c).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build REPEATS=2 ITERS=2000
while [ $# -gt 0 ]; do
  case $1 in
  --build) BUILD=$2; shift 2 ;;
  --repeats) REPEATS=$2; shift 2 ;;
  --iters) ITERS=$2; shift 2 ;;
  *) echo "p2p.sh: unknown argument '$1' (--build DIR, --repeats N, --iters N)" >&2; exit 2 ;;
  esac
done
mpi_bin=""
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mpi_bin=$(mktemp -d)/p2p_pingpong_mpi
  mpicc -O2 -DP2P_MPI -o "$mpi_bin" bench/p2p_pingpong.c
fi
for r in $(seq "$REPEATS"); do
  for tr in shm tcp; do
    COHORT_TRANSPORT=$tr "$BUILD/bin/cohortrun" -np 2 "$BUILD/bin/p2p_pingpong" "$ITERS" | sed -n 's/^\[0\] //p'
  done
  if [ -n "$mpi_bin" ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --allow-run-as-root --oversubscribe -np 2 \
      "$mpi_bin" "$ITERS" 2>/dev/null | grep openmpi
  fi
done
