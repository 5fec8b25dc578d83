#!/usr/bin/env bash
# openblas-cores.sh: prints, one a line, the OpenBLAS core types (values of OPENBLAS_CORETYPE) whose kernels this
# CPU can run, one for each family of x86-64 SGEMM kernels that OpenBLAS 0.3.21 to 0.3.26 ship:
#   Prescott (SSE3), Nehalem (SSE4.2), Sandybridge (AVX), Haswell and Zen (AVX2 + FMA),
#   SkylakeX (AVX-512 F/CD/BW/DQ/VL), Cooperlake (SkylakeX's and AVX-512 BF16).
# Which one OpenBLAS picks by itself depends on the CPU and the OpenBLAS version, and results differ between them
# in float32 rounding; .ci/run runs the numeric tests under each, so that a test whose tolerance only holds for
# one machine's kernels fails where it is written. Forcing a core type whose instructions the CPU lacks would
# crash (SIGILL), hence the flags. Reads /proc/cpuinfo, not OPENBLAS_CORETYPE; prints nothing on other architectures.
# A core type the CPU runs may still compute wrong results on it: environments that know so pin OPENBLAS_CORETYPE,
# and whoever forces the types listed here checks for that first (.ci/run skips them; mp.train.kernels restarts to
# the pinned one).
set -euo pipefail
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
[ "$(uname -m)" = x86_64 ] || exit 0
has() {
  local f
  for f in "$@"; do
    case "$flags" in *" $f "*) ;; *) return 1 ;; esac
  done
}
has pni && echo Prescott
has sse4_2 popcnt && echo Nehalem
has avx && echo Sandybridge
has avx2 fma && printf '%s\n' Haswell Zen
has avx512f avx512cd avx512bw avx512dq avx512vl && echo SkylakeX
has avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16 && echo Cooperlake
exit 0
