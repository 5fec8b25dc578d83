#!/usr/bin/env bash
# budget: 90
# Where a multi-rank step's time goes on the GPU host's 16 cores, and which --bind to default to (issue 35's part 4;
# part of scripts/gpu-check.sh, which sets BUILD, OUT, FMNIST_DIR and report()):
#   1. 2 ranks, 100 steps, fmnist-train --profile: per step the data wait, forward+backward, allreduce and update,
#      the slowest rank, and the DDP engine's compute / allreduce / exposed (the 8-14 ms of allreduce wait a 2-rank
#      step showed on 2026-11-25: is it a straggler, the progress thread, or the memory?)
#   2. 8 ranks, 60 steps each with --bind none, core and socket: img/s, for cohortrun's default
set -u
B=$BUILD
W=$SCRATCH/32-cpu16-steps
mkdir -p "$W"
DATA=(--data "${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}")
echo "== the host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
timeout -k 5 40 "$B/bin/cohortrun" -np 2 --bind core "$B/bin/fmnist-train" --steps 100 --epochs 1 --profile \
  --eval-images 0 --log-every 1000 "${DATA[@]}" >"$W/profile2.log" 2>&1
rc=$?
cat "$W/profile2.log"
if [ $rc -eq 0 ] && grep -q '^\[0\] profile:\|^profile:' "$W/profile2.log"; then
  grep -E '^(\[0\] )?(kernels|profile|ddp):' "$W/profile2.log" | sed 's/^\[0\] //' | while IFS= read -r l; do
    report "   [2 ranks] $l"
  done
  report "PASS cpu16.step_profile (2 ranks, 100 steps)"
else
  report "FAIL cpu16.step_profile: exit $rc: $(tail -2 "$W/profile2.log" | tr '\n' ' ' | cut -c1-200)"
fi
line="   8 ranks, 60 steps, img/s by --bind:"
for bind in none core socket; do
  timeout -k 5 40 "$B/bin/cohortrun" -np 8 --bind $bind "$B/bin/fmnist-train" --steps 60 --epochs 1 \
    --eval-images 0 --quiet "${DATA[@]}" >"$W/bind_$bind.log" 2>&1
  rc=$?
  cat "$W/bind_$bind.log"
  v=$(sed -n 's/.*final: .*img_per_s=\([^ ]*\).*/\1/p' "$W/bind_$bind.log" | tail -1)
  line="$line $bind ${v:-exit$rc}"
done
report "$line"
exit 0
