#!/usr/bin/env bash
# mpi.sh: cohort's allreduce over its three process transports, all started by Open MPI's mpirun on this machine,
# beside OpenMPI's own MPI_Allreduce, interleaved in one run.
#
#   bench/mpi.sh [--max SIZE] [--repeats N] [--np N] [--build DIR]
#
#   --max SIZE     largest message, a whole number of MiB (default 64M)
#   --repeats N    rounds; each runs every system once; the table shows the median per size (default 3)
#   --np N         ranks (default 2)
#   --build DIR    cohort build directory holding bin/cohort-bench (default build)
#
# Per round, in this order (float32 sum, in place, sizes 4 KiB x4 up to SIZE):
#   cohort mpi:  mpirun -np N -x COHORT_TRANSPORT=mpi DIR/bin/cohort-bench allreduce --in-place ...  (cohort's ring and
#                recursive doubling over MPI_Isend/MPI_Irecv: src/transport/mpi.c)
#   cohort tcp:  the same with COHORT_TRANSPORT=tcp;  cohort shm: with COHORT_TRANSPORT=shm
#   OpenMPI:     mpirun -np N mpi_allreduce MAXMB  (its own MPI_Allreduce; anchor source in ANCHORS,
#                default bench/anchors, ../shared/bench-anchors or /work/shared/bench-anchors)
# The figures are bus bandwidth in GB/s (nccl-tests' busbw: 2(n-1)/n x bytes / time); the 4 KiB row is latency-bound.
set -euo pipefail
cd "$(dirname "$0")/.."
MAX=64 REPEATS=3 NP=2 BUILD=build
while [ $# -gt 0 ]; do
  case $1 in
  --max) MAX=${2%M}; shift 2 ;;
  --repeats) REPEATS=$2; shift 2 ;;
  --np) NP=$2; shift 2 ;;
  --build) BUILD=$2; shift 2 ;;
  *) echo "mpi.sh: unknown argument '$1' (--max SIZE, --repeats N, --np N, --build DIR)" >&2; exit 2 ;;
  esac
done
if [ -z "${ANCHORS:-}" ]; then
  for ANCHORS in bench/anchors ../shared/bench-anchors /work/shared/bench-anchors; do
    [ -f "$ANCHORS/mpi_allreduce.c" ] && break
  done
fi
[ -f "$ANCHORS/mpi_allreduce.c" ] || { echo "mpi.sh: anchor $ANCHORS/mpi_allreduce.c is missing (set ANCHORS)" >&2; exit 2; }
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
  { echo "mpi.sh: mpicc and mpirun are missing (apt-get install libopenmpi-dev openmpi-bin)" >&2; exit 2; }
BENCH="$BUILD/bin/cohort-bench"
[ -x "$BENCH" ] || { echo "mpi.sh: $BENCH is missing: build first" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_allreduce" "$ANCHORS/mpi_allreduce.c"
# busbw per size of one run: "bytes busbw" lines.
cohort_run() {
  COHORT_TRANSPORT=$1 mpirun --oversubscribe -np "$NP" -x COHORT_TRANSPORT "$BENCH" allreduce --min 4K \
    --max "${MAX}M" --factor 4 --in-place 2>/dev/null | awk -v want="$1" '
      /^# cohort-bench/ { if ($0 !~ ("transport " want ",")) { print "wrong transport: " $0 > "/dev/stderr"; exit 1 } }
      /^ *[0-9]/ { print $1, $6 }'
}
for round in $(seq 1 "$REPEATS"); do
  for t in mpi tcp shm; do cohort_run $t >"$tmp/$t.$round"; done
  mpirun --oversubscribe -np "$NP" "$tmp/mpi_allreduce" "$MAX" 2>/dev/null | awk '/^ *[0-9]/ { print $1, $4 }' \
    >"$tmp/ompi.$round"
done
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "allreduce busbw GB/s, $NP ranks under mpirun, median of $REPEATS rounds ($(nproc) CPUs, $(date -u +%F))"
echo
echo "| size | cohort mpi | cohort tcp | cohort shm | OpenMPI MPI_Allreduce | mpi / OpenMPI |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for bytes in $(awk '{ print $1 }' "$tmp/ompi.1"); do
  row=""
  for t in mpi tcp shm ompi; do
    v=$(cat "$tmp"/$t.* | awk -v b="$bytes" '$1 == b { print $2 }' | median)
    row="$row | $v"
    eval "v_$t=$v"
  done
  size=$(awk -v b="$bytes" 'BEGIN { if (b >= 1048576) printf "%d MiB", b / 1048576; else printf "%d KiB", b / 1024 }')
  echo "| $size$row | $(awk -v a="$v_mpi" -v b="$v_ompi" 'BEGIN { printf "%.2fx", a / b }') |"
done
