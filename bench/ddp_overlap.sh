#!/usr/bin/env bash
# ddp_overlap.sh [--build DIR] [--np N] [--bind core|none] [DDP_OVERLAP ARGS...]
#
# Runs build/bin/ddp_overlap (bench/ddp_overlap.c) on N ranks (default 2) and on 1 rank, with the same arguments,
# and judges the DDP-engine issue's targets:
#   step / max(compute-only, allreduce-only) <= 1.15     (N ranks)
#   hidden communication, 1 - exposed/comm   >= 0.80     (N ranks, the worst rank's)
#   DDP overhead, ddp step / compute - 1     <= 2%       (1 rank)
# It prints both runs' tables, then one markdown table of the three figures marked PASS or MISS and a last line
# "targets met: K of 3". The exit status is 0 whatever the figures; a failed run ends the script with status 1 and
# that run's output. --bind is passed to cohortrun (default none). Everything after the options goes to
# ddp_overlap (--steps, --warmup, --batch, --width, --layers, --bucket-mb, --threads).
set -u
BUILD=build
NP=2
BIND=none
while [ $# -gt 0 ]; do
  case "$1" in
  --build) BUILD=${2:?--build needs a directory}; shift 2 ;;
  --np) NP=${2:?--np needs a number}; shift 2 ;;
  --bind) BIND=${2:?--bind needs core or none}; shift 2 ;;
  --help)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *) break ;;
  esac
done
case "$NP" in '' | *[!0-9]* | 0 | 1) echo "ddp_overlap.sh: --np must be 2 or more, got '$NP'" >&2; exit 2 ;; esac
RUN=$BUILD/bin/cohortrun
BENCH=$BUILD/bin/ddp_overlap
for p in "$RUN" "$BENCH"; do
  [ -x "$p" ] || { echo "ddp_overlap.sh: no $p: build first (cmake --build $BUILD)" >&2; exit 2; }
done

# run NP: one run; its output (without cohortrun's "[0] " prefix) on stdout; RESULT gets its "result:" line.
run() {
  local np=$1 out rc
  shift
  out=$("$RUN" -np "$np" --bind "$BIND" "$BENCH" "$@" 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then
    printf '%s\n' "$out" >&2
    echo "ddp_overlap.sh: cohortrun -np $np ddp_overlap $* exited with $rc" >&2
    exit 1
  fi
  out=$(printf '%s\n' "$out" | sed 's/^\[0\] //')
  printf '%s\n\n' "$out"
  RESULT=$(printf '%s\n' "$out" | grep '^result: ' | tail -n 1)
  [ -n "$RESULT" ] || { echo "ddp_overlap.sh: no result line from $np ranks" >&2; exit 1; }
}

# field NAME LINE: the value of NAME= in LINE.
field() { printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

echo "# bench/ddp_overlap.sh --np $NP --bind $BIND $*  ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs)"
echo
run "$NP" "$@"
multi=$RESULT
run 1 "$@"
single=$RESULT

ratio=$(field step_over_max "$multi")
hidden=$(field hidden "$multi")
overhead=$(field overhead "$single")
awk -v np="$NP" -v r="$ratio" -v h="$hidden" -v o="$overhead" 'BEGIN {
  met = 0
  print "| target | measured | goal | |"
  print "| --- | --- | --- | --- |"
  ok = r <= 1.15; met += ok
  printf "| step / max(compute, allreduce), %d ranks | %.3f | <= 1.15 | %s |\n", np, r, ok ? "PASS" : "MISS"
  ok = h >= 0.80; met += ok
  printf "| hidden communication (1 - exposed/comm), %d ranks | %.3f | >= 0.80 | %s |\n", np, h, ok ? "PASS" : "MISS"
  ok = o <= 0.02; met += ok
  printf "| DDP overhead (step / compute - 1), 1 rank | %+.2f%% | <= 2%% | %s |\n", o * 100, ok ? "PASS" : "MISS"
  printf "targets met: %d of 3\n", met
}'
