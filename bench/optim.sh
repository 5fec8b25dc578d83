#!/usr/bin/env bash
# optim.sh: one optimizer step of the reference CNN (1.2 M parameters), cohort (build/bin/optim_step) beside
# torch.optim (bench/optim_step_torch.py), one thread each, with ordinary state and with state decayed into
# subnormal floats (optim_step.c's header says what each case holds).
#
#   bench/optim.sh [STEPS]      (default 100; each figure is the median of STEPS steps)
#
# Environment: BUILD (default build), PYTHON (a python3 with torch; default /usr/bin/python3).
set -eu
cd "$(dirname "$0")/.."
STEPS=${1:-100}
BUILD=${BUILD:-build}
BIN="$BUILD/bin/optim_step"
PY=${PYTHON:-/usr/bin/python3}
[ -x "$BIN" ] || { echo "optim.sh: $BIN is missing (build first)" >&2; exit 2; }
"$PY" -c 'import torch' 2>/dev/null || { echo "optim.sh: torch is missing (apt-get install python3-torch)" >&2; exit 2; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores; $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1); steps=$STEPS"
cohort=$("$BIN" "$STEPS")
torch=$(OMP_NUM_THREADS=1 "$PY" bench/optim_step_torch.py "$STEPS")
echo "$cohort" | sed -n 's/^# /# cohort: /p'
echo "$torch" | sed -n 's/^# /# torch: /p'
echo "| optimizer | state | cohort ms | torch ms | torch / cohort |"
echo "| --- | --- | --- | --- | --- |"
for opt in sgd adamw; do
  for state in normal subnormal; do
    c=$(echo "$cohort" | sed -n "s/^$opt $state ms=//p")
    t=$(echo "$torch" | sed -n "s/^$opt $state ms=//p")
    [ -n "$c" ] && [ -n "$t" ] || { echo "optim.sh: no figure for $opt $state (cohort '$c', torch '$t')" >&2; exit 1; }
    awk -v o="$opt" -v s="$state" -v c="$c" -v t="$t" 'BEGIN { printf "| %s | %s | %.3f | %.3f | %.2fx |\n", o, s, c, t, t / c }'
  done
done
