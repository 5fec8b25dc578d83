#!/usr/bin/env bash
# torch_vs_gloo.sh: cohort.torch beside torch.distributed on gloo, measured side by side in one run, 2 ranks.
#
#   bench/torch_vs_gloo.sh [STEPS [MAXMB [OVERHEAD_ITERS]]]      (defaults: 100 256 20000)
#
# 1. allreduce busbw of float32 CPU tensors, in place, 4 KiB .. MAXMB MiB: cohort.torch.allreduce_ (torch_vs_gloo.py,
#    the anchor's loop and columns) against torch.distributed.all_reduce on gloo (the anchor torch_allreduce.py);
#    ordinary tensors (torch's allocator), so cohort copies through its staging buffers, as gloo does.
#    Then grouped_allreduce_ of 4 tensors (torch_vs_gloo.py grouped): its fused buffer in the shared arena (the
#    default), in ordinary memory (staged), and the same done on gloo (cat, all_reduce, copy back), alternately in
#    the same processes.
# 2. the binding's cost: a one-float allreduce through cohort.torch, the bare ctypes call, and the same call in C
#    (cohort-bench allreduce --min 4 --max 4 --in-place), on 1 rank (the binding alone) and 2.
# 3. training img/s, 1 thread per rank, the same model, batch (64 per rank) and data: cohort.torch's
#    DistributedDataParallel against torch DDP on gloo, for the reference CNN and a 24.2 M-parameter MLP, on 1 and
#    2 ranks (1->2 scaling printed beside each).
# 4. the same two trainings on 2 ranks, interleaved in the same processes (torch_vs_gloo.py interleaved): every rank
#    trains three copies of the model in turns, alone (no communication: the ceiling of any wrapper here), with
#    cohort.torch's DDP and with torch DDP on gloo, so that the machine's drift between runs (10-20% on a shared VM)
#    cannot decide the ratio. ROUNDS_CNN (turns of 10 steps; default 2/3 of STEPS, at least 2) and ROUNDS_MLP
#    (turns of 5 steps; default 2/5 of STEPS, at least 2): 20 and 12 for STEPS=30.
# 5. torch.distributed on backend "cohort" (dist.init_process_group("cohort"), python/cohort/torch/_backend.py):
#    dist.all_reduce busbw on "cohort" against a gloo group of the same ranks, 4 KiB .. MAXMB MiB, alternately in the
#    same processes (best of 3 per size), beside the memory floor; then torch's DDP on "cohort", torch's DDP on gloo,
#    cohort.torch's DistributedDataParallel, the model alone and torch's DDP on "cohort" with gradient_as_bucket_view,
#    interleaved as in 4 (torch_vs_gloo.py dist_ddp).
# Environment: BUILD (default build), ANCHOR_DIR (default bench/anchors, ../shared/bench-anchors beside the
# checkout, or /work/shared/bench-anchors), PYTHON (a python3 with torch; default /usr/bin/python3).
set -eu
cd "$(dirname "$0")/.."
STEPS=${1:-100}
MAXMB=${2:-256}
OITERS=${3:-20000}
BUILD=${BUILD:-build}
RUN="$BUILD/bin/cohortrun"
PY=${PYTHON:-/usr/bin/python3}
if [ -z "${ANCHOR_DIR:-}" ]; then
  for ANCHOR_DIR in bench/anchors ../shared/bench-anchors /work/shared/bench-anchors; do
    [ -f "$ANCHOR_DIR/torch_allreduce.py" ] && break
  done
fi
[ -f "$ANCHOR_DIR/torch_allreduce.py" ] ||
  { echo "torch_vs_gloo.sh: anchor $ANCHOR_DIR/torch_allreduce.py is missing (set ANCHOR_DIR)" >&2; exit 2; }
for f in "$RUN" "$BUILD/bin/cohort-bench" "$BUILD/python/cohort/_config.py" "$PY"; do
  [ -e "$f" ] || { echo "torch_vs_gloo.sh: $f is missing (build first; torch: apt-get install python3-torch)" >&2; exit 2; }
done
case $BUILD in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
export PYTHONPATH="$BUILD/python" OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
B=bench/torch_vs_gloo.py

echo "== allreduce, 2 ranks, float32 sum in place (busbw GB/s)"
"$RUN" -np 2 "$PY" $B allreduce "$MAXMB" 2>&1 | sed 's/^\[0\] //' | grep -E '^ *[0-9]' >"$tmp/cohort"
"$PY" "$ANCHOR_DIR/torch_allreduce.py" 2 "$MAXMB" 2>&1 | grep -E '^ *[0-9]' >"$tmp/gloo"
printf '%12s %14s %14s %12s %12s %8s\n' bytes cohort_time_us gloo_time_us cohort_busbw gloo_busbw ratio
join <(awk '{print $1, $3, $4}' "$tmp/cohort") <(awk '{print $1, $3, $4}' "$tmp/gloo") |
  awk '{r = ($5 > 0) ? $3 / $5 : 0; printf "%12d %14.1f %14.1f %12.2f %12.2f %8.1f\n", $1, $2, $4, $3, $5, r}'

echo "== grouped_allreduce_ of 4 float32 tensors, 2 ranks, sum (us per call, best of 3 alternated runs)"
"$RUN" -np 2 "$PY" $B grouped "$MAXMB" 2>&1 | sed 's/^\[0\] //' | grep -E '^ *([0-9]|bytes)'

# On 1 rank the call does no communication: what remains is the binding's own cost. On 2 ranks the peer's timing
# adds in (and on a loaded machine dominates).
for np in 1 2; do
  echo "== binding overhead: one float, allreduce sum in place, $np rank(s) (us per call)"
  "$RUN" -np $np "$BUILD/bin/cohort-bench" allreduce --min 4 --max 4 --in-place --iters "$OITERS" 2>&1 |
    sed 's/^\[0\] //' | awk '$1 == 4 && $3 == "f32" {print "overhead C cohort_allreduce (cohort-bench) us=" $4}'
  "$RUN" -np $np "$PY" $B overhead "$OITERS" 2>&1 | sed 's/^\[0\] //' | grep '^overhead'
done

echo "== training img/s, batch 64 per rank, 1 thread per rank, $STEPS steps"
for model in cnn mlp; do
  c1=$("$RUN" -np 1 "$PY" $B train cohort $model "$STEPS" 64 2>&1 | sed -n 's/.*img_per_s=//p')
  c2=$("$RUN" -np 2 "$PY" $B train cohort $model "$STEPS" 64 2>&1 | sed -n 's/.*img_per_s=//p')
  g1=$("$PY" $B train gloo $model "$STEPS" 64 1 2>&1 | sed -n 's/.*img_per_s=//p')
  g2=$("$PY" $B train gloo $model "$STEPS" 64 2 2>&1 | sed -n 's/.*img_per_s=//p')
  for v in "$c1" "$c2" "$g1" "$g2"; do
    [ -n "$v" ] || { echo "torch_vs_gloo.sh: a $model training run printed no img_per_s" >&2; exit 1; }
  done
  awk -v m=$model -v c1="$c1" -v c2="$c2" -v g1="$g1" -v g2="$g2" 'BEGIN {
    printf "%-4s cohort 1 rank %8.1f  2 ranks %8.1f (scaling %5.1f%%)   gloo 1 rank %8.1f  2 ranks %8.1f (scaling %5.1f%%)   2-rank ratio %.2fx\n",
      m, c1, c2, 100 * c2 / (2 * c1), g1, g2, 100 * g2 / (2 * g1), c2 / g2 }'
done

echo "== training interleaved in the same 2 processes, batch 64 per rank (img/s summed over the rounds)"
RC=$((STEPS * 2 / 3 > 2 ? STEPS * 2 / 3 : 2))
RM=$((STEPS * 2 / 5 > 2 ? STEPS * 2 / 5 : 2))
for spec in "cnn ${ROUNDS_CNN:-$RC} 10" "mlp ${ROUNDS_MLP:-$RM} 5"; do
  line=$("$RUN" -np 2 "$PY" $B interleaved $spec 64 2>&1 | sed 's/^\[0\] //' | grep '^interleaved') ||
    { echo "torch_vs_gloo.sh: the interleaved run ($spec) printed no result" >&2; exit 1; }
  echo "$line" | awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "%-4s alone %8.1f  cohort %8.1f  gloo %8.1f img/s   cohort/gloo %.3fx (rounds: min %.3f median %.3f max %.3f)   ceiling (alone/gloo) %.3fx\n",
      $2, v["alone_img_per_s"], v["cohort_img_per_s"], v["gloo_img_per_s"], v["cohort_over_gloo"],
      v["round_ratio_min"], v["round_ratio_median"], v["round_ratio_max"], v["alone_over_gloo"] }'
done

echo "== torch.distributed backend \"cohort\": dist.all_reduce, 2 ranks, float32 sum in place, alternately with gloo"
"$RUN" -np 2 "$PY" $B dist_allreduce "$MAXMB" 2>&1 | sed 's/^\[0\] //' | grep -E '^ *([0-9]|bytes)' ||
  { echo "torch_vs_gloo.sh: the dist_allreduce run printed no result" >&2; exit 1; }

echo "== torch DDP on backend \"cohort\" vs DDP on gloo vs cohort.torch DDP, interleaved, 2 ranks, batch 64 per rank"
for spec in "cnn ${ROUNDS_CNN:-$RC} 10" "mlp ${ROUNDS_MLP:-$RM} 5"; do
  line=$("$RUN" -np 2 "$PY" $B dist_ddp $spec 64 2>&1 | sed 's/^\[0\] //' | grep '^dist_ddp') ||
    { echo "torch_vs_gloo.sh: the dist_ddp run ($spec) printed no result" >&2; exit 1; }
  echo "$line" | awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "%-4s dist(cohort) %8.1f  dist(gloo) %8.1f  cohort.torch %8.1f img/s   dist(cohort)/gloo %.3fx   dist(cohort)/cohort.torch %.3fx\n",
      $2, v["dist_cohort_img_per_s"], v["gloo_img_per_s"], v["cohort_torch_img_per_s"], v["dist_cohort_over_gloo"],
      v["dist_cohort_over_cohort_torch"]
    printf "     alone %8.1f img/s (no wrapper)   dist(cohort), gradient_as_bucket_view %8.1f: /gloo %.3fx, /cohort.torch %.3fx\n",
      v["alone_img_per_s"], v["dist_cohort_view_img_per_s"], v["dist_cohort_view_over_gloo"],
      v["dist_cohort_view_over_cohort_torch"] }'
done
