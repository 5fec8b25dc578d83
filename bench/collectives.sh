#!/usr/bin/env bash
# collectives.sh: cohort's allreduce against its anchors (OpenMPI over TCP, torch.distributed gloo, and OpenMPI
# shared memory for reference), the same sizes, measured one after another in one run on this machine.
#
#   bench/collectives.sh [--max SIZE] [--repeats N] [--build DIR] [--np N] [--factor 2|4] [--keep]
#
#   --max SIZE     largest message, a whole number of MiB: 4M, 256M, 1G (default 256M)
#   --repeats N    runs of every system, interleaved; the table shows the median per size (default 1)
#   --build DIR    cohort build directory holding bin/cohortrun and bin/cohort-bench (default build)
#   --np N         ranks (default 2)
#   --factor F     cohort's size step, 4 (the anchors' step; default) or 2 (extra rows without anchors)
#   --keep         keep the raw outputs and print where they are
#
# Per repeat, in this order:
#   cohort:       COHORT_TRANSPORT=tcp DIR/bin/cohortrun -np N DIR/bin/cohort-bench allreduce --min 4K --max SIZE
#                 --in-place (both anchors reduce in place: MPI_IN_PLACE, torch's tensor), and cohortrun --bind core
#                 (mpirun binds each rank to a core by default; torch does not bind)
#   OpenMPI TCP:  mpirun --allow-run-as-root --oversubscribe -np N --mca pml ob1 --mca btl tcp,self mpi_allreduce MAXMB
#                 (pml ob1 so that no other messaging layer, UCX say, can route around the TCP btl)
#   OpenMPI shm:  mpirun --allow-run-as-root --oversubscribe -np N mpi_allreduce MAXMB      (default btl; reference)
#   torch gloo:   /usr/bin/python3 torch_allreduce.py N MAXMB
# mpi_allreduce is built from the anchor source with mpicc into a temporary directory first.
#
# Output (stdout): the command line and date, then a markdown table of busbw (GB/s) per size with the ratios
# cohort/OpenMPI-TCP (target >= 1.2x) and cohort/gloo (target >= 1.5x), flagged "ok" or "MISS" from 1 MiB to
# 256 MiB, and the 4 KiB latency of each system (cohort's target <= 40 us). Progress goes to stderr.
# Environment: ANCHORS (directory of the anchor sources), MPICC, MPIRUN, PYTHON (default /usr/bin/python3),
# RUN_TIMEOUT (seconds allowed to one system's run, default 900).
set -euo pipefail
ME=collectives.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CMDLINE="bench/collectives.sh$(printf ' %q' "$@")"

die() { echo "$ME: $*" >&2; exit 2; }

MAX=256M REPEATS=1 BUILD=build NP=2 FACTOR=4 KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --max | --repeats | --build | --np | --factor) [ $# -ge 2 ] || die "option $1 needs a value" ;;&
    --max) MAX=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --np) NP=$2; shift 2 ;;
    --factor) FACTOR=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# --max: the anchors take whole MiB and step by 4 from 4 KiB, so SIZE must be a whole number of MiB >= 1.
[[ "$MAX" =~ ^([0-9]+)([KkMmGg]?)[Bb]?$ ]] || die "bad --max '$MAX' (e.g. 4M, 256M, 1G)"
case "${BASH_REMATCH[2]}" in
  K | k) MAXBYTES=$((10#${BASH_REMATCH[1]} * 1024)) ;;
  M | m) MAXBYTES=$((10#${BASH_REMATCH[1]} * 1024 * 1024)) ;;
  G | g) MAXBYTES=$((10#${BASH_REMATCH[1]} * 1024 * 1024 * 1024)) ;;
  *) MAXBYTES=$((10#${BASH_REMATCH[1]})) ;;
esac
((MAXBYTES >= 1048576 && MAXBYTES % 1048576 == 0)) || die "--max must be a whole number of MiB, at least 1M, not '$MAX'"
MAXMB=$((MAXBYTES / 1048576))
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || die "--repeats must be a positive integer, not '$REPEATS'"
[[ "$NP" =~ ^[1-9][0-9]*$ ]] && ((NP >= 2)) || die "--np must be an integer >= 2, not '$NP'"
[[ "$FACTOR" == 2 || "$FACTOR" == 4 ]] || die "--factor must be 2 or 4, not '$FACTOR'"

# Tools: one line each naming the package that provides it.
MPICC=${MPICC:-mpicc}
MPIRUN=${MPIRUN:-mpirun}
PY=${PYTHON:-/usr/bin/python3}
command -v "$MPICC" >/dev/null 2>&1 || die "$MPICC not found: apt-get install -y libopenmpi-dev (or scripts/setup.sh)"
command -v "$MPIRUN" >/dev/null 2>&1 || die "$MPIRUN not found: apt-get install -y openmpi-bin (or scripts/setup.sh)"
command -v "$PY" >/dev/null 2>&1 || die "$PY not found: apt-get install -y python3 python3-torch (or scripts/setup.sh)"
"$PY" -c 'import torch.distributed' >/dev/null 2>&1 ||
  die "$PY cannot import torch.distributed: apt-get install -y python3-torch (or scripts/setup.sh)"
if [ -z "${ANCHORS:-}" ]; then
  for ANCHORS in "$ROOT/bench/anchors" "$ROOT/../shared/bench-anchors" /work/shared/bench-anchors; do
    [ -f "$ANCHORS/mpi_allreduce.c" ] && break
  done
fi
for f in mpi_allreduce.c torch_allreduce.py; do
  [ -f "$ANCHORS/$f" ] || die "anchor $ANCHORS/$f is missing (set ANCHORS to the directory holding it)"
done
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
for f in cohortrun cohort-bench; do
  [ -x "$BUILD/bin/$f" ] || die "$BUILD/bin/$f is missing: cmake --build $BUILD --target cohortrun cohort-bench"
done

TMP=$(mktemp -d /tmp/cohort-collectives.XXXXXX)
if ((KEEP)); then trap 'echo "$ME: raw outputs kept in $TMP" >&2' EXIT; else trap 'rm -rf "$TMP"' EXIT; fi
"$MPICC" -O2 -o "$TMP/mpi_allreduce" "$ANCHORS/mpi_allreduce.c" 2>"$TMP/mpicc.log" ||
  die "mpicc could not build $ANCHORS/mpi_allreduce.c: $(head -n 1 "$TMP/mpicc.log")"

echo "# \`$CMDLINE\`"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $NP ranks, allreduce float32 sum," \
  "$REPEATS repeat(s), median shown"

MPI=("$MPIRUN" --allow-run-as-root --oversubscribe -np "$NP")
# One system's run, by name; timeout(1) needs a program, not a shell function, hence the arrays.
command_of() {
  case "$1" in
    cohort) CMD=(env COHORT_TRANSPORT=tcp "$BUILD/bin/cohortrun" -np "$NP" --bind core "$BUILD/bin/cohort-bench" allreduce
                 --min 4K --max "$MAXBYTES" --factor "$FACTOR" --in-place) ;;
    mpi_tcp) CMD=("${MPI[@]}" --mca pml ob1 --mca btl tcp,self "$TMP/mpi_allreduce" "$MAXMB") ;;
    mpi_shm) CMD=("${MPI[@]}" "$TMP/mpi_allreduce" "$MAXMB") ;;
    gloo) CMD=(env ANCHOR_PORT=$((20000 + RANDOM % 20000)) "$PY" "$ANCHORS/torch_allreduce.py" "$NP" "$MAXMB") ;;
  esac
}

for r in $(seq 1 "$REPEATS"); do
  for sys in cohort mpi_tcp mpi_shm gloo; do
    command_of "$sys"
    out=$TMP/$sys.$r.out
    t0=$SECONDS
    rc=0
    timeout --kill-after=10 "${RUN_TIMEOUT:-900}" "${CMD[@]}" >"$out" 2>"$TMP/$sys.$r.err" </dev/null || rc=$?
    if ((rc)); then
      why="exit $rc"
      ((rc != 124)) || why="timed out after ${RUN_TIMEOUT:-900} s"
      echo "$ME: $sys failed in run $r ($why): ${CMD[*]}; the end of its output:" >&2
      tail -n 5 "$out" "$TMP/$sys.$r.err" >&2
      exit 1
    fi
    echo "$ME: run $r/$REPEATS: $sys done in $((SECONDS - t0)) s" >&2
  done
done

"$PY" "$ROOT/bench/compare.py" --np "$NP" --repeats "$REPEATS" --max-bytes "$MAXBYTES" --factor "$FACTOR" "$TMP"
