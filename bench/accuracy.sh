#!/usr/bin/env bash
# accuracy.sh: the default recipe's test accuracy at several world sizes, as docs/training.md reports it: one
# `cohortrun -np N fmnist-train --epochs EPOCHS` per N with default flags (plus any FLAGS given), one table.
#
#   bench/accuracy.sh [RANKS [EPOCHS [FLAGS...]]]      (defaults: 1,2,4,8,16 and 10)
#
# More ranks than cores is fine (the job is oversubscribed and slower, the arithmetic is the same). Each run's
# per-epoch metrics stay in $OUT (default /tmp/cohort-accuracy) as N.csv and its output as N.log.
# Environment: BUILD (default build), OUT.
set -eu
cd "$(dirname "$0")/.."
RANKS=${1:-1,2,4,8,16}
EPOCHS=${2:-10}
shift $(($# < 2 ? $# : 2))
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/cohort-accuracy}
RUN="$BUILD/bin/cohortrun"
TRAIN="$BUILD/bin/fmnist-train"
for f in "$RUN" "$TRAIN"; do
  [ -x "$f" ] || { echo "accuracy.sh: $f is missing (build first)" >&2; exit 2; }
done
case $RANKS in *[!0-9,]* | "" | ,* | *, | *,,*)
  echo "accuracy.sh: RANKS must be a comma-separated list of rank counts, not '$RANKS'" >&2
  exit 2
  ;;
esac
mkdir -p "$OUT"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores; epochs=$EPOCHS; flags: ${*:-(defaults)}"
rows=
for n in ${RANKS//,/ }; do
  start=$(date +%s)
  "$RUN" -np "$n" "$TRAIN" --epochs "$EPOCHS" --csv "$OUT/$n.csv" --log-every 100000 "$@" >"$OUT/$n.log" 2>&1 || {
    echo "accuracy.sh: $n ranks failed; the end of $OUT/$n.log:" >&2
    tail -n 5 "$OUT/$n.log" >&2
    exit 1
  }
  head=$(sed -n 's/^\[0\] fmnist-train: \(.*\)/\1/p' "$OUT/$n.log" | head -1)
  final=$(sed -n 's/^\[0\] final: //p' "$OUT/$n.log")
  acc=$(echo "$final" | sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p')
  best=$(awk -F, 'NR > 1 && $4 > b { b = $4 } END { printf "%.4f", b }' "$OUT/$n.csv")
  passed=$(awk -F, 'NR > 1 && $4 >= 0.91 { print $1; exit }' "$OUT/$n.csv")
  echo "# np=$n: $head; $(($(date +%s) - start)) s"
  global=$(echo "$head" | sed -n 's/.* \([0-9]*\) ranks\{0,1\} x batch \([0-9]*\).*/\1 \2/p' | awk '{ print $1 * $2 }')
  rows="$rows| $n | ${global:-?} | $acc | $best | ${passed:--} | $(
    [ "$(awk -v a="$acc" 'BEGIN { print (a >= 0.91) }')" = 1 ] && echo ok || echo MISS) |
"
done
echo "| ranks | global batch | final test_acc | best epoch's test_acc | first epoch >= 0.91 | >= 0.91 |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s' "$rows"
