#!/usr/bin/env bash
# hier.sh: the hierarchical allreduce (src/coll/hier.c) against the flat ring, on 2 simulated nodes x 2 ranks on
# this machine (tests/mp/as_nodes.sh gives ranks 0-1 and 2-3 different COHORT_NODE_IDs: TCP between the two
# "nodes", shared memory within each), measured interleaved in one run.
#
#   bench/hier.sh [--min SIZE] [--max SIZE] [--repeats N] [--build DIR] [--keep]
#
#   --min SIZE     smallest message (default 4K)
#   --max SIZE     largest message (default 64M)
#   --repeats N    rounds; each runs both algorithms once; the table shows the median per size (default 3)
#   --build DIR    cohort build directory holding bin/cohortrun and bin/cohort-bench (default build)
#   --keep         keep the raw outputs and print where they are
#
# Per round, in this order (4 ranks, float32 sum, in place):
#   hier:  DIR/bin/cohortrun -np 4 tests/mp/as_nodes.sh 2 DIR/bin/cohort-bench allreduce --min MIN --max MAX
#          --factor 4 --in-place      (COHORT_ALGO=hier: refused unless the job is layered, so it is what ran)
#   hier zero copy: the same with --zero-copy (buffers from cohort_alloc, in the node's shared arena: the node
#          part reads its peers' buffers in place instead of staging them)
#   ring:  the same as hier with COHORT_ALGO=ring (the flat pipelined ring over the TCP mesh of all 4 ranks)
# All print busbw = algbw * 2(n-1)/n with n = 4; the table shows them and their ratios to the ring.
#
# Output (stdout): the command, date and load (uptime), then a markdown table. Progress goes to stderr.
# Environment: RUN_TIMEOUT (seconds allowed to one run, default 900).
set -euo pipefail
ME=hier.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CMDLINE="bench/hier.sh$(printf ' %q' "$@")"

die() { echo "$ME: $*" >&2; exit 2; }

MIN=4K MAX=64M REPEATS=3 BUILD=build KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --min | --max | --repeats | --build) [ $# -ge 2 ] || die "option $1 needs a value" ;;&
    --min) MIN=$2; shift 2 ;;
    --max) MAX=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || die "--repeats must be a positive integer, not '$REPEATS'"
command -v python3 >/dev/null 2>&1 || die "python3 not found"
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
for f in cohortrun cohort-bench; do
  [ -x "$BUILD/bin/$f" ] || die "$BUILD/bin/$f is missing: cmake --build $BUILD --target cohortrun cohort-bench"
done

TMP=$(mktemp -d /tmp/cohort-hier-bench.XXXXXX)
if ((KEEP)); then trap 'echo "$ME: raw outputs kept in $TMP" >&2' EXIT; else trap 'rm -rf "$TMP"' EXIT; fi

echo "# \`$CMDLINE\`"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, 2 simulated nodes x 2 ranks, allreduce float32 sum in" \
  "place, $REPEATS round(s), median shown; load before: $(uptime | sed 's/.*load average: //')"

for r in $(seq 1 "$REPEATS"); do
  for system in hier hierzc ring; do
    algo=${system%zc}
    zc=()
    [ "$system" = hierzc ] && zc=(--zero-copy)
    out=$TMP/$system.$r.out
    t0=$SECONDS
    rc=0
    env -u COHORT_TRANSPORT -u COHORT_NODE_ID COHORT_ALGO=$algo timeout --kill-after=10 "${RUN_TIMEOUT:-900}" \
      "$BUILD/bin/cohortrun" -np 4 "$ROOT/tests/mp/as_nodes.sh" 2 "$BUILD/bin/cohort-bench" allreduce \
      --min "$MIN" --max "$MAX" --factor 4 --in-place "${zc[@]}" >"$out" 2>"$TMP/$system.$r.err" </dev/null || rc=$?
    if ((rc)); then
      echo "$ME: $system failed in round $r (exit $rc); the end of its output:" >&2
      tail -n 5 "$out" "$TMP/$system.$r.err" >&2
      exit 1
    fi
    grep -q "transport tcp+shm" "$out" || die "$system did not run over the layered transport: $(grep -m1 transport "$out")"
    ! grep -q "outside the shared arena" "$TMP/$system.$r.err" || die "$system: cohort_alloc gave memory outside the arena"
    echo "$ME: round $r/$REPEATS: $system done in $((SECONDS - t0)) s" >&2
  done
done

python3 - "$TMP" "$REPEATS" <<'PY'
import statistics, sys
tmp, repeats = sys.argv[1], int(sys.argv[2])

def busbw(path):
    out = {}
    for line in open(path):
        f = line.split()
        if line.startswith("[0] ") and len(f) >= 7 and not f[1].startswith("#"):
            out[int(f[1])] = float(f[6])
    return out

runs = {a: [busbw(f"{tmp}/{a}.{r}.out") for r in range(1, repeats + 1)] for a in ("hier", "hierzc", "ring")}
sizes = sorted(set.intersection(*(set(x) for a in runs for x in runs[a])))

def size_name(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"

print("| size | hier busbw GB/s | hier zero copy | ring busbw GB/s | hier / ring | zero copy / ring |")
print("| ---: | ---: | ---: | ---: | ---: | ---: |")
for s in sizes:
    h, z, g = (statistics.median(x[s] for x in runs[a]) for a in ("hier", "hierzc", "ring"))
    print(f"| {size_name(s)} | {h:.3f} | {z:.3f} | {g:.3f} | {h / g:.2f} | {z / g:.2f} |")
PY
