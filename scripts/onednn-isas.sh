#!/usr/bin/env bash
# onednn-isas.sh: prints, one a line, the values of ONEDNN_MAX_CPU_ISA below the best one this CPU runs, one per
# family of oneDNN 2.6's x86-64 float32 kernels: SSE41, AVX, AVX2, AVX512_CORE (the best itself needs no cap).
# oneDNN picks its kernels by the CPU's features, and their float32 rounding differs from one ISA to the next (other
# blockings, other sums); .ci/run runs the numeric tests under each cap, as it does under each OpenBLAS core type
# (scripts/openblas-cores.sh), so that a tolerance that holds for one machine's kernels only fails here. A cap above
# what the CPU has changes nothing, hence the flags. Reads /proc/cpuinfo; prints nothing on other architectures.
set -euo pipefail
[ "$(uname -m)" = x86_64 ] || exit 0
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() {
  local f
  for f in "$@"; do
    case "$flags" in *" $f "*) ;; *) return 1 ;; esac
  done
}
# The families in order, and how far up this CPU goes: a cap at the best one changes nothing.
best=0
has sse4_1 && best=1
has avx && best=2
has avx2 fma && best=3
has avx512f avx512cd avx512bw avx512dq avx512vl && best=4
has avx512f avx512cd avx512bw avx512dq avx512vl amx_tile amx_bf16 && best=5
isas=(none SSE41 AVX AVX2 AVX512_CORE)
for ((i = 1; i < best && i < 5; i++)); do echo "${isas[$i]}"; done
exit 0
