#!/usr/bin/env bash
# The GPU host's check, in one call of the device tool (docs/gpu.md): builds cohort with its CUDA plugins on the
# host's 16 cores, runs the GPU tests and the benchmarks beside their anchors (torch, NCCL), and writes one report.
# It must finish in about 8 minutes so that a second try fits in a lease. Usage, from the repository root:
#   OUT=/some/dir scripts/gpu-check.sh [PART...]     (PARTS: the files of scripts/gpu/, default all, in name order)
# The report ($OUT/report.txt) has one line per check ("PASS name", "FAIL name: why", "SKIP name: why") and the
# benchmark tables; each part's full log is $OUT/<part>.log, the build's $OUT/build.log. The Fashion-MNIST files are
# read from $FMNIST_DIR, else .data/fashion-mnist (carried into the checkout), else the Debian package's path.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
# The parts' own files (checkpoints, parameter dumps, per-run logs, binaries) go to a scratch folder: the device tool
# brings back at most 8 files from $OUT, so $OUT holds the report, the build's log and one log per part, into which
# each part copies what matters of its files.
export SCRATCH=${SCRATCH:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
REPORT=$OUT/report.txt
: >"$REPORT"
START=$(date +%s)
report() { echo "$*" | tee -a "$REPORT"; }
export -f report
export REPORT

# The host's Python is the one with torch (and CUDA); its nvidia-* wheels may hold NCCL's and cuDNN's headers.
PY=${PYTHON:-$(command -v python3)}
export PYTHON=$PY
# The device tool sends the working tree with a stale .git: the commit comes from COMMIT when the caller carries one
# (git rev-parse --short HEAD > COMMIT before the call).
COMMIT_ID=$(cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo '?')
export COMMIT_ID
report "== gpu-check at $COMMIT_ID on $(hostname), $(date -u +%FT%TZ)"
report "   $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
# Where a GPU is listed, a GPU test that finds none usable (a plugin that does not load, a library missing) fails
# instead of skipping: otherwise the summary would count it as a skip of a machine without a GPU.
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then export COHORT_TEST_EXPECT_GPU=1; fi
report "   nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo none); cpus: $(nproc);" \
  "python: $PY, torch $($PY -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"

# Headers and libraries that may live in the Python wheels rather than /usr/local/cuda.
WHEELS=$($PY -c 'import os, nvidia; print(os.path.dirname(nvidia.__path__[0]) + "/nvidia")' 2>/dev/null ||
  $PY -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
hints=()
for comp in nccl cudnn cublas cu13; do
  for d in "$WHEELS/$comp" "$WHEELS/$comp/"*; do
    [ -d "$d/include" ] && hints+=("$d")
  done
done
CUDA_HINTS=$(
  IFS=';'
  echo "${hints[*]:-}"
)
report "   CUDA search hints (wheels): ${CUDA_HINTS:-none}"
for h in "${hints[@]}"; do
  [ -d "$h/lib" ] && export LD_LIBRARY_PATH="$h/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"

# oneDNN, which the host's image lacks (nn's CPU kernels, issue 35): scripts/pack-onednn.sh packs this machine's
# (Debian's libdnnl 2.6.3, the version Debian's torch uses) into .data/onednn.tar.xz, carried with the checkout; it is
# unpacked here for the build and the runs. Without it the CPU parts measure the reference kernels (OpenBLAS).
DNNL_PREFIX=""
if ! ldconfig -p 2>/dev/null | grep -q 'libdnnl\.so' && [ -f .data/onednn.tar.xz ]; then
  DNNL_PREFIX=$SCRATCH/onednn
  mkdir -p "$DNNL_PREFIX" && tar -xJf .data/onednn.tar.xz -C "$DNNL_PREFIX" &&
    export LD_LIBRARY_PATH="$DNNL_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ||
    { report "   (.data/onednn.tar.xz did not unpack: the reference kernels only)" && DNNL_PREFIX=""; }
fi
report "   oneDNN: $(if ldconfig -p 2>/dev/null | grep -q 'libdnnl\.so'; then echo "the host's"
  elif [ -n "$DNNL_PREFIX" ]; then echo "carried (.data/onednn.tar.xz)"; else echo "none: reference kernels"; fi)"

# Data for the training checks.
if [ -z "${FMNIST_DIR:-}" ]; then
  for d in .data/fashion-mnist /usr/share/datasets/fashion-mnist; do
    [ -f "$d/train-images-idx3-ubyte.gz" ] && FMNIST_DIR=$(cd "$d" && pwd) && break
  done
fi
export FMNIST_DIR=${FMNIST_DIR:-}
# Programs that read the Debian package's path (fmnist-train's default --data, torch's anchors) find the carried copy
# there: the host runs commands as root, and its image has no such package.
if [ -n "$FMNIST_DIR" ] && [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  mkdir -p /usr/share/datasets 2>/dev/null && ln -sfn "$FMNIST_DIR" /usr/share/datasets/fashion-mnist 2>/dev/null ||
    report "   (cannot link $FMNIST_DIR at /usr/share/datasets/fashion-mnist: tests that read the default path fail)"
fi

# The build: everything, CUDA required, Hopper code.
BUILD=${BUILD:-build-gpu}
export BUILD
t0=$(date +%s)
if cmake -S . -B "$BUILD" -DCOHORT_CUDA=ON -DCOHORT_CUDA_ARCHITECTURES=90 -DCOHORT_PYTHON="$PY" \
  -DCOHORT_CUDA_HINTS="$CUDA_HINTS" ${DNNL_PREFIX:+-DCMAKE_PREFIX_PATH="$DNNL_PREFIX"} >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j"$(nproc)" >>"$OUT/build.log" 2>&1; then
  report "PASS build ($(($(date +%s) - t0)) s)"
else
  report "FAIL build: see build.log"
  tail -40 "$OUT/build.log"
  exit 1
fi
grep -E "CUDA plugins|NCCL|cuDNN|oneDNN" "$OUT/build.log" | sed 's/^/   /' | tee -a "$REPORT"
# The shared-arena allocator (cohort.torch._shared_alloc) is built with everything under torch 1.13 only; under the
# host's torch 2 CMake leaves it to a request, tried here so that 35-torch-cpu and 40-torch2 run it where it builds.
if grep -q "_shared_alloc): on request only" "$OUT/build.log"; then
  if cmake --build "$BUILD" --target cohort_shared_alloc >>"$OUT/build.log" 2>&1; then
    report "PASS build of cohort.torch._shared_alloc under the host's torch"
  else
    report "FAIL build of cohort.torch._shared_alloc under the host's torch (see build.log): the rest goes on without it"
  fi
fi

# NVIDIA's Multi-Process Service for the parts that run ranks sharing the GPU (without it the processes' kernels
# take turns on the GPU). mps_start DIR, called in the part's own shell (it exports the daemon's directories; why it
# failed goes to stderr), starts a daemon of the check's own, its pipe and log directories under DIR, so that no
# other process of the machine connects to it; mps_stop ends it, bounded, so that a wedged server costs 20 s and not
# the part; mps_ran says whether a server started (a client that cannot reach the daemon runs without MPS,
# silently). MPS changes no setting of the GPU: compute mode, clocks and the rest stay as they are.
mps_start() {
  command -v nvidia-cuda-mps-control >/dev/null 2>&1 || { echo "no nvidia-cuda-mps-control on this host" >&2; return 1; }
  export CUDA_MPS_PIPE_DIRECTORY=$1/mps-pipe CUDA_MPS_LOG_DIRECTORY=$1/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || {
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    echo "nvidia-cuda-mps-control -d failed" >&2
    return 1
  }
}
mps_stop() {
  echo quit | timeout -k 5 15 nvidia-cuda-mps-control || echo "MPS: quit failed or timed out ($?)"
  for f in control.log server.log; do echo "-- MPS $f:"; tail -20 "$CUDA_MPS_LOG_DIRECTORY/$f" 2>/dev/null; done
}
mps_ran() { [ -s "$CUDA_MPS_LOG_DIRECTORY/server.log" ]; }
export -f mps_start mps_stop mps_ran

# A C test that crashes writes "CRASH in case NAME" and its stack, a library's frames as lib.so(+0xOFFSET)
# (tests/test.c): each frame of cohort's own libraries and programs is named here (function, file:line) with
# addr2line, into the report, since nothing of the host outlives the call.
explain_crashes() {
  grep -q "CRASH in case" "$1" || return 0
  grep -m3 "CRASH in case" "$1" | sed 's/^[0-9]*: //' | while IFS= read -r l; do report "   $l"; done
  grep -oE "[^ ]*/$BUILD/[^ (]+\(\+0x[0-9a-f]+\)" "$1" | head -40 | while IFS= read -r f; do
    file=${f%%(*}
    off=${f##*(+}
    off=${off%)}
    where=$(addr2line -f -C -e "$file" "$off" 2>/dev/null | paste -sd' ')
    report "     $(basename "$file")+$off: ${where:-?}"
  done
}

# The parts: each prints its checks with report(), keeps its own log, and is given a time budget.
parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then
  for f in scripts/gpu/*.sh; do parts+=("$(basename "$f" .sh)"); done
fi
for part in "${parts[@]}"; do
  budget=$(sed -n 's/^# budget: \([0-9]*\).*/\1/p' "scripts/gpu/$part.sh")
  t0=$(date +%s)
  report "== $part (budget ${budget:-120} s)"
  timeout -k 5 "${budget:-120}" bash "scripts/gpu/$part.sh" >"$OUT/$part.log" 2>&1
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    report "FAIL $part: over its budget of ${budget:-120} s (the log's tail is in $part.log)"
    # The part's inner `timeout`s run their commands in process groups of their own, which outlive the part: end
    # them, or they run on beside the next part and skew its timings. (This host runs nothing else of ours.)
    pkill -9 -f -- "$BUILD/bin/|tests/python/|bench/torch_|bench/gpu_" 2>/dev/null
    sleep 1
  elif [ $rc -ne 0 ]; then
    # The parts end with exit 0 and report each check themselves: another status is a part that died on its way
    # (a missing file, set -u), whose later checks never reported; without this line the summary would count none.
    report "FAIL $part: ended with exit $rc before its end (the log's tail is in $part.log)"
  fi
  explain_crashes "$OUT/$part.log"
  # An MPS daemon of a part that was cut short (its own trap may not have run) would outlive it: quit it here.
  for pipe in "$SCRATCH"/*/mps-pipe; do
    [ -d "$pipe" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe timeout -k 2 10 nvidia-cuda-mps-control >/dev/null 2>&1
  done
  report "   ($part: exit $rc, $(($(date +%s) - t0)) s)"
done
report "== done in $(($(date +%s) - START)) s: $(grep -c '^PASS' "$REPORT") passed, $(grep -c '^FAIL' "$REPORT") failed," \
  "$(grep -c '^SKIP' "$REPORT") skipped"
cat "$REPORT"
