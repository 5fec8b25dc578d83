#!/usr/bin/env bash
# pack-onednn.sh [OUT]: packs this machine's oneDNN (Debian's libdnnl-dev: the library, its OpenCL loader and the
# headers) into OUT (default .data/onednn.tar.xz, about 7 MB), for a machine whose image has no oneDNN and nothing can
# be installed on: the GPU host. scripts/gpu-check.sh unpacks it there and builds nn's oneDNN kernels against it.
# Carry it with the checkout (the device tool's carry: .data/onednn.tar.xz; .data/ is in .git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.data/onednn.tar.xz}
lib=$(ldconfig -p | sed -n 's/.*libdnnl\.so\.[0-9]* .*=> //p' | head -1)
[ -n "$lib" ] && [ -f /usr/include/oneapi/dnnl/dnnl.h ] || {
  echo "pack-onednn.sh: no oneDNN here (apt-get install libdnnl-dev)" >&2
  exit 2
}
dir=$(dirname "$lib")
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/lib" "$W/include"
cp -a "$dir"/libdnnl.so* "$W/lib/"
# libdnnl links the OpenCL loader (ocl-icd), which a CUDA machine's image may lack.
ocl=$(ldd "$lib" | sed -n 's/.*libOpenCL\.so\.1 => \([^ ]*\).*/\1/p')
[ -n "$ocl" ] && cp -L "$ocl" "$W/lib/libOpenCL.so.1"
cp -a /usr/include/oneapi "$W/include/"
mkdir -p "$(dirname "$OUT")"
tar -cJf "$OUT" -C "$W" .
echo "pack-onednn.sh: $OUT ($(du -h "$OUT" | cut -f1)): $(basename "$(readlink -f "$lib")"), headers$([ -n "$ocl" ] && echo ", libOpenCL.so.1")"
