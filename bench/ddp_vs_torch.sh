#!/usr/bin/env bash
# ddp_vs_torch.sh: training throughput of fmnist-train against PyTorch DDP (gloo, CPU) on the same model, batch
# and threads per rank, measured side by side in one run, on 1 and 2 ranks.
#
#   bench/ddp_vs_torch.sh [STEPS [BATCH [THREADS [REPEAT]]]]     (defaults: 300 64 1 1)
#
# cohort:  build/bin/cohortrun -np N build/bin/fmnist-train --steps STEPS --batch BATCH --threads THREADS
#          (the DDP engine: buckets overlapped with backward when every rank has a spare CPU, COHORT_DDP_OVERLAP=auto;
#          on a 2-core machine running 2 ranks that is off and the engine averages all buckets in one allreduce
#          after backward), and the same with --sync fused (one allreduce of a plain gradient buffer after backward:
#          the non-overlapped baseline)
# torch:   $PYTHON (default /usr/bin/python3) torch_ddp_fmnist.py N 1 BATCH STEPS  (the anchor sets 1 thread per rank itself)
# native:  when the environment sets OPENBLAS_CORETYPE (the environment here sets Haswell, AVX2), cohort once
#          more without it, on the kernels OpenBLAS picks for the CPU itself (AVX-512 where present); for
#          information: the verdicts use the environment as given. torch's convolutions (oneDNN, its own JIT
#          kernels) ignore OPENBLAS_CORETYPE.
# Both report images per second of the training loop (all ranks together), evaluation excluded. With REPEAT > 1
# every configuration runs REPEAT times, in rounds (each system on 1 rank, 2 ranks, 1 rank), and the median is
# shown; a system's 1->2 rank scaling is the median over the rounds of its 2-rank run against the mean of the
# 1-rank runs just before and just after it (the ratio of the medians, whose runs lie minutes apart, is printed
# too). Environment: BUILD (default build), ANCHOR (path of torch_ddp_fmnist.py; default bench/anchors/,
# ../shared/bench-anchors/ beside the checkout, or /work/shared/bench-anchors/), PYTHON (a python3 with torch; default /usr/bin/python3).
set -eu
cd "$(dirname "$0")/.."
STEPS=${1:-300}
BATCH=${2:-64}
THREADS=${3:-1}
REPEAT=${4:-1}
BUILD=${BUILD:-build}
RUN="$BUILD/bin/cohortrun"
TRAIN="$BUILD/bin/fmnist-train"
if [ -z "${ANCHOR:-}" ]; then
  for ANCHOR in bench/anchors ../shared/bench-anchors /work/shared/bench-anchors; do
    ANCHOR=$ANCHOR/torch_ddp_fmnist.py
    [ -f "$ANCHOR" ] && break
  done
fi
[ -f "$ANCHOR" ] || { echo "ddp_vs_torch.sh: anchor $ANCHOR is missing (set ANCHOR to its path)" >&2; exit 2; }
PY=${PYTHON:-/usr/bin/python3}
for f in "$RUN" "$TRAIN" "$PY"; do
  [ -e "$f" ] || { echo "ddp_vs_torch.sh: $f is missing (build first; torch: apt-get install python3-torch)" >&2; exit 2; }
done
if [ "$THREADS" != 1 ]; then
  echo "ddp_vs_torch.sh: the torch anchor always uses 1 thread per rank; THREADS must be 1 to compare" >&2
  exit 2
fi

declare -A RESULTS SCALING
cohort_once() { # NP [FLAGS...] -> img/s
  local np=$1
  shift
  "$RUN" -np "$np" "$TRAIN" --steps "$STEPS" --batch "$BATCH" --threads "$THREADS" --quiet "$@" |
    sed -n 's/^\[0\] final: .*img_per_s=\([0-9.]*\).*/\1/p'
}
fused_once() { cohort_once "$1" --sync fused; }
native_once() { (unset OPENBLAS_CORETYPE && cohort_once "$1"); }
blas_core() { "$@" "$TRAIN" --help 2>&1 >/dev/null | sed -n 's/^Core: //p' | head -1; }
torch_once() { # NP -> img/s
  ANCHOR_PORT=$((20000 + RANDOM % 20000)) "$PY" "$ANCHOR" "$1" 1 "$BATCH" "$STEPS" 2>/dev/null |
    sed -n 's/.*img_per_s=\([0-9.]*\).*/\1/p'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

SYSTEMS="cohort fused torch"
[ -z "${OPENBLAS_CORETYPE:-}" ] || SYSTEMS="$SYSTEMS native"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores; steps=$STEPS batch/rank=$BATCH threads/rank=$THREADS repeat=$REPEAT"
echo "# OpenBLAS kernels: cohort $(blas_core env OPENBLAS_VERBOSE=2) (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})$(
  [ -z "${OPENBLAS_CORETYPE:-}" ] || echo "; native $(blas_core env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2)")"
# Each round runs a system on 1 rank, on 2, and on 1 again, one straight after the other, and the round's scaling
# compares the 2-rank run with the mean of the two 1-rank runs around it: this machine's speed drifts by several
# percent over minutes (other tenants), and a ratio of runs taken minutes apart, or of a 2-rank run against only the
# run before it, would count that drift as scaling. Both 1-rank runs go into the 1-rank median.
for r in $(seq 1 "$REPEAT"); do
  for sys in $SYSTEMS; do
    before= two=
    for np in 1 2 1; do
      v=$(${sys}_once "$np")
      [ -n "$v" ] || { echo "ddp_vs_torch.sh: $sys on $np ranks gave no img/s" >&2; exit 1; }
      RESULTS[$sys.$np]="${RESULTS[$sys.$np]:-} $v"
      echo "# run $r: $sys np=$np img/s=$v"
      if [ "$np" = 2 ]; then two=$v; elif [ -z "$before" ]; then before=$v; fi
    done
    s=$(awk -v two="$two" -v a="$before" -v b="$v" 'BEGIN { printf "%.4f", two / (a + b) }')
    SCALING[$sys]="${SCALING[$sys]:-} $s"
    echo "# run $r: $sys scaling $(awk -v s="$s" 'BEGIN { printf "%.1f%%", 100 * s }')"
  done
done
c1=$(echo "${RESULTS[cohort.1]}" | median); c2=$(echo "${RESULTS[cohort.2]}" | median)
cs=$(echo "${SCALING[cohort]}" | median); fs=$(echo "${SCALING[fused]}" | median); ts=$(echo "${SCALING[torch]}" | median)
f1=$(echo "${RESULTS[fused.1]}" | median); f2=$(echo "${RESULTS[fused.2]}" | median)
t1=$(echo "${RESULTS[torch.1]}" | median); t2=$(echo "${RESULTS[torch.2]}" | median)
n1= n2=
if [ -n "${RESULTS[native.1]:-}" ]; then
  n1=$(echo "${RESULTS[native.1]}" | median) n2=$(echo "${RESULTS[native.2]}" | median)
fi
awk -v c1="$c1" -v c2="$c2" -v f1="$f1" -v f2="$f2" -v t1="$t1" -v t2="$t2" -v n1="$n1" -v n2="$n2" \
  -v cs="$cs" -v fs="$fs" -v ts="$ts" 'BEGIN {
  printf "| ranks | cohort (ddp) img/s | cohort --sync fused img/s | torch DDP img/s | cohort / torch | ddp / fused |\n"
  printf "| --- | --- | --- | --- | --- | --- |\n"
  printf "| 1 | %.0f | %.0f | %.0f | %.2fx | %.2fx |\n", c1, f1, t1, c1 / t1, c1 / f1
  printf "| 2 | %.0f | %.0f | %.0f | %.2fx | %.2fx |\n", c2, f2, t2, c2 / t2, c2 / f2
  printf "1->2 rank scaling, median of the rounds (2-rank img/s / 2 x the mean of the 1-rank runs around it): " \
         "cohort %.1f%%, fused %.1f%%, torch %.1f%%\n", 100 * cs, 100 * fs, 100 * ts
  printf "1->2 rank scaling, ratio of the medians above (runs minutes apart): cohort %.1f%%, fused %.1f%%, " \
         "torch %.1f%%\n", 100 * c2 / (2 * c1), 100 * f2 / (2 * f1), 100 * t2 / (2 * t1)
  if (n1 != "")
    printf "native OpenBLAS kernels (information): 1 rank %.0f img/s, 2 ranks %.0f img/s, %.2fx torch on 2 ranks, " \
           "scaling %.1f%%\n", n1, n2, n2 / t2, 100 * n2 / (2 * n1)
  printf "targets: 2 ranks vs torch >= 1.0x (training issue): %.2fx %s; >= 1.2x (DDP issue): %.2fx %s; ", c2 / t2,
         (c2 / t2 >= 1.0 ? "PASS" : "MISS"), c2 / t2, (c2 / t2 >= 1.2 ? "PASS" : "MISS")
  printf "ddp vs fused >= 1.1x: %.2fx %s; scaling >= 95%% (median of the rounds): %.1f%% %s\n", c2 / f2,
         (c2 / f2 >= 1.1 ? "PASS" : "MISS"), 100 * cs, (cs >= 0.95 ? "PASS" : "MISS")
}'
