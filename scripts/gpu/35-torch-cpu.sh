#!/usr/bin/env bash
# budget: 150
# torch.distributed on CPU tensors on the GPU host's 16 cores, against gloo (issue 31's >= 5x busbw, issue 35's
# cohort.torch >= 3x gloo from 4 MiB; part of scripts/gpu-check.sh, which sets BUILD, OUT, PYTHON and report()):
# bench/torch_vs_gloo.py dist_allreduce at 2 ranks, up to 64 MiB, with the backend's shared-arena allocator
# (COHORT_TORCH_ARENA=1: torch's tensors zero copy, where cohort.torch._shared_alloc was built for the host's torch)
# and without it (0: staged), in that order, in one call. gloo runs in the same processes each time.
set -u
B=$BUILD
W=$SCRATCH/35-torch-cpu
mkdir -p "$W"
alloc=$(PYTHONPATH="$B/python" "$PYTHON" -c "from cohort.torch import _arena; print(_arena.why_not() or 'built')" 2>&1 |
  tail -1)
report "   torch on CPU, 2 ranks, dist_allreduce busbw against gloo in the same processes (allocator: $alloc)"
for a in 1 0; do
  PYTHONPATH="$B/python" OMP_NUM_THREADS=1 COHORT_TORCH_ARENA=$a timeout -k 5 60 "$B/bin/cohortrun" -np 2 \
    "$PYTHON" bench/torch_vs_gloo.py dist_allreduce 64 >"$W/arena$a.log" 2>&1
  rc=$?
  cat "$W/arena$a.log"
  [ $rc -eq 0 ] || report "FAIL torch_cpu.dist_allreduce COHORT_TORCH_ARENA=$a (exit $rc: $(tail -1 "$W/arena$a.log"))"
  # bytes cohort_us gloo_us cohort_busbw gloo_busbw ratio ...: the ratio per size from 1 MiB (target 5x).
  row=$(awk '{ sub(/^\[[0-9]+\] /, "") } $1 ~ /^[0-9]+$/ && $1 >= 1048576 {
    printf "%s%dM %.1fx", (n++ ? ", " : ""), $1 / 1048576, $6; if ($6 < 5) miss++ }
    END { printf " (%s)", miss ? miss " below 5x" : "all >= 5x" }' "$W/arena$a.log")
  report "   COHORT_TORCH_ARENA=$a: $row"
done
