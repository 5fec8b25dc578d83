#!/usr/bin/env bash
# shm.sh: cohort's allreduce on one machine (the default transport, which is shared memory there) against OpenMPI's
# shared-memory MPI_Allreduce, and against the memory limit, measured interleaved in one run.
#
#   bench/shm.sh [--max SIZE] [--repeats N] [--build DIR] [--keep]
#
#   --max SIZE     largest message, a whole number of MiB (default 256M)
#   --repeats N    rounds; each runs cohort, OpenMPI and membw once; the table shows the median per size (default 3)
#   --build DIR    cohort build directory holding bin/cohortrun and bin/cohort-bench (default build)
#   --keep         keep the raw outputs and print where they are
#
# Per round, in this order (2 ranks, float32 sum, in place as the anchor does):
#   cohort:   DIR/bin/cohortrun -np 2 --bind core DIR/bin/cohort-bench allreduce --min 4K --max SIZE --factor 4
#             --in-place          (no COHORT_TRANSPORT: the default, auto, must pick shm; the script checks it)
#   cohort zero copy: the same with --zero-copy (buffers from cohort_alloc, in the shared arena)
#   OpenMPI:  mpirun --allow-run-as-root --oversubscribe -np 2 mpi_allreduce MAXMB   (its shared-memory path; it binds
#             each rank to a core)
#   membw:    membw MAXMB          (single-thread memcpy bandwidth by size, counting bytes read + bytes written)
# mpi_allreduce and membw are built from the anchor sources (ANCHORS, default /work/shared/bench-anchors).
#
# Targets (cohort busbw / OpenMPI busbw): >= 2x from 1 to 4 MiB, >= 1.5x from 16 to 256 MiB, >= 1x from 4 to
# 512 KiB (the 4 KiB row is the latency); with --zero-copy, >= 2x from 1 to 256 MiB.
#
# The memory limit (rows >= 64 MiB). The node allreduce (src/transport/shm_coll.c), per rank and per byte of the
# vector, with s = 1/n of it being the rank's own slice, moves: staging its input but its own slice, (1-s) read +
# (1-s) written; the reduction of its slice, 1 read (all n inputs of a slice) + 2s written (into staging and into
# recvbuf); the peers' slices into recvbuf, (1-s) read + (1-s) written: 5 - 2s bytes, 4 for 2 ranks. The
# staging buffers (2 x COHORT_SHM_CHUNK_BYTES per rank) stay in cache, so of those bytes only the read of sendbuf (1)
# and the write of recvbuf (1) are main-memory traffic once the vector is far larger than the caches: 2 bytes per
# byte. Zero copy (every rank's buffers from cohort_alloc) moves 2 bytes per byte: each rank reads its slice of all
# n inputs in place (1) and writes the result into all n recvbufs (1); both reach main memory: 2 bytes per byte too. A rank therefore needs at least 2 x bytes / membw seconds, where membw is the single-thread copy bandwidth
# at that size (which also counts read + written bytes), and
#     limit busbw = membw / 2 * 2(n-1)/n        (= membw / 2 for 2 ranks)
# The table shows cohort's busbw (default and zero copy) as a fraction of it (target >= 70%).
#
# Output (stdout): the command, date and load (uptime), then a markdown table. Progress goes to stderr.
# Environment: ANCHORS, MPICC, MPIRUN, CC (for membw), RUN_TIMEOUT (seconds allowed to one run, default 900).
set -euo pipefail
ME=shm.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CMDLINE="bench/shm.sh$(printf ' %q' "$@")"

die() { echo "$ME: $*" >&2; exit 2; }

MAX=256M REPEATS=3 BUILD=build KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --max | --repeats | --build) [ $# -ge 2 ] || die "option $1 needs a value" ;;&
    --max) MAX=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$MAX" =~ ^([0-9]+)[Mm]$ ]] || die "--max must be a whole number of MiB such as 16M or 256M, not '$MAX'"
MAXMB=$((10#${BASH_REMATCH[1]}))
((MAXMB >= 1)) || die "--max must be at least 1M"
MAXBYTES=$((MAXMB * 1048576))
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || die "--repeats must be a positive integer, not '$REPEATS'"

MPICC=${MPICC:-mpicc}
MPIRUN=${MPIRUN:-mpirun}
CC=${CC:-gcc}
command -v "$MPICC" >/dev/null 2>&1 || die "$MPICC not found: apt-get install -y libopenmpi-dev"
command -v "$MPIRUN" >/dev/null 2>&1 || die "$MPIRUN not found: apt-get install -y openmpi-bin"
command -v python3 >/dev/null 2>&1 || die "python3 not found"
ANCHORS=${ANCHORS:-/work/shared/bench-anchors}
for f in mpi_allreduce.c membw.c; do
  [ -f "$ANCHORS/$f" ] || die "anchor $ANCHORS/$f is missing (set ANCHORS to the directory holding it)"
done
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
for f in cohortrun cohort-bench; do
  [ -x "$BUILD/bin/$f" ] || die "$BUILD/bin/$f is missing: cmake --build $BUILD --target cohortrun cohort-bench"
done

TMP=$(mktemp -d /tmp/cohort-shm-bench.XXXXXX)
if ((KEEP)); then trap 'echo "$ME: raw outputs kept in $TMP" >&2' EXIT; else trap 'rm -rf "$TMP"' EXIT; fi
"$MPICC" -O2 -o "$TMP/mpi_allreduce" "$ANCHORS/mpi_allreduce.c" 2>"$TMP/build.log" ||
  die "mpicc could not build $ANCHORS/mpi_allreduce.c: $(head -n 1 "$TMP/build.log")"
"$CC" -O3 -march=native -o "$TMP/membw" "$ANCHORS/membw.c" 2>"$TMP/build.log" ||
  die "$CC could not build $ANCHORS/membw.c: $(head -n 1 "$TMP/build.log")"

echo "# \`$CMDLINE\`"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, 2 ranks, allreduce float32 sum in place," \
  "$REPEATS round(s), median shown; load before: $(uptime | sed 's/.*load average: //')"

command_of() {
  case "$1" in
    cohort) CMD=("$BUILD/bin/cohortrun" -np 2 --bind core "$BUILD/bin/cohort-bench" allreduce --min 4K
                 --max "$MAXBYTES" --factor 4 --in-place) ;;
    cohort_zc) CMD=("$BUILD/bin/cohortrun" -np 2 --bind core "$BUILD/bin/cohort-bench" allreduce --min 4K
                    --max "$MAXBYTES" --factor 4 --in-place --zero-copy) ;;
    mpi) CMD=("$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$TMP/mpi_allreduce" "$MAXMB") ;;
    membw) CMD=("$TMP/membw" "$MAXMB") ;;
  esac
}

for r in $(seq 1 "$REPEATS"); do
  for sys in cohort cohort_zc mpi membw; do
    command_of "$sys"
    out=$TMP/$sys.$r.out
    t0=$SECONDS
    rc=0
    env -u COHORT_TRANSPORT timeout --kill-after=10 "${RUN_TIMEOUT:-900}" "${CMD[@]}" >"$out" 2>"$TMP/$sys.$r.err" \
      </dev/null || rc=$?
    if ((rc)); then
      echo "$ME: $sys failed in round $r (exit $rc): ${CMD[*]}; the end of its output:" >&2
      tail -n 5 "$out" "$TMP/$sys.$r.err" >&2
      exit 1
    fi
    if [ "${sys%_zc}" = cohort ] && ! grep -q "transport shm" "$out"; then
      die "cohort did not run over shared memory: $(grep -m1 'transport' "$out")"
    fi
    echo "$ME: round $r/$REPEATS: $sys done in $((SECONDS - t0)) s" >&2
  done
done

python3 - "$TMP" "$REPEATS" <<'EOF'
import statistics, sys
tmp, repeats = sys.argv[1], int(sys.argv[2])
MIB = 1 << 20

def rows(path, cohort):
    out = {}
    for line in open(path):
        f = line.split()
        if cohort:
            if not line.startswith("[0] ") or len(f) < 7 or f[1].startswith("#"):
                continue
            out[int(f[1])] = float(f[4])  # time_us
        elif len(f) >= 4 and f[0].isdigit():
            out[int(f[0])] = float(f[2])
    return out

def membw(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) == 3 and f[0].isdigit():
            out[int(f[0])] = float(f[1])
    return out

def median_of(name, reader):
    runs = [reader(f"{tmp}/{name}.{r}.out") for r in range(1, repeats + 1)]
    return {b: statistics.median(run[b] for run in runs if b in run) for b in runs[0]}

cohort = median_of("cohort", lambda p: rows(p, True))
zc = median_of("cohort_zc", lambda p: rows(p, True))
mpi = median_of("mpi", lambda p: rows(p, False))
bw = median_of("membw", membw)

def target(b, zero_copy):
    if zero_copy:
        return 2.0 if MIB <= b <= 256 * MIB else None
    if b <= 512 * 1024: return 1.0
    if MIB <= b <= 4 * MIB: return 2.0
    if 16 * MIB <= b <= 256 * MIB: return 1.5
    return None

def busbw(b, us):  # 2 ranks: busbw = algbw * 2(n-1)/n = algbw
    return b / (us * 1e-6) / 1e9

misses = 0
def verdict(value, goal):
    global misses
    if goal is None: return ""
    misses += value < goal
    return "PASS" if value >= goal else "MISS"

print("| bytes | cohort us | cohort busbw | zero-copy busbw | OpenMPI us | OpenMPI busbw | ratio (target) | | "
      "zero-copy ratio (target) | | membw | memory limit | fraction | zero-copy fraction |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: |")
for b in sorted(cohort):
    if b not in mpi or b not in zc:
        continue
    c, z, m = busbw(b, cohort[b]), busbw(b, zc[b]), busbw(b, mpi[b])
    t, tz = target(b, False), target(b, True)
    row = [f"{b // MIB} MiB" if b >= MIB else f"{b // 1024} KiB", f"{cohort[b]:.1f}", f"{c:.2f}", f"{z:.2f}",
           f"{mpi[b]:.1f}", f"{m:.2f}", f"{c / m:.2f}x" + (f" (>= {t}x)" if t else ""), verdict(c / m, t),
           f"{z / m:.2f}x" + (f" (>= {tz}x)" if tz else ""), verdict(z / m, tz), f"{bw[b]:.1f}" if b in bw else ""]
    if b >= 64 * MIB and b in bw:
        limit = bw[b] / 2
        row += [f"{limit:.2f}", f"{c / limit:.2f} {verdict(c / limit, 0.70)}", f"{z / limit:.2f} {verdict(z / limit, 0.70)}"]
    else:
        row += ["", "", ""]
    print("| " + " | ".join(row) + " |")
print(f"\n{misses} target(s) missed")
EOF
echo "# load after: $(uptime | sed 's/.*load average: //')"
