#!/usr/bin/env bash
# horovod-suite.sh HOROVOD_DIR NP [MODE] [pytest args...]: Horovod's own PyTorch tests (test/parallel/test_torch.py of
# a Horovod checkout) on cohort.torch, with only the test file's import changed to `import cohort.torch as hvd`.
# Nothing of Horovod is in this repository: fetch it first (git clone https://github.com/horovod/horovod; the
# figures in docs/torch.md are of 2626dc87).
#   MODE gloo    (default) the whole file in one job per rank under cohortrun, each rank given horovodrun --gloo's
#                variables (HOROVOD_RANK and the rest), as Horovod's CI runs it;
#        mpirun  the whole file under mpirun (cohort's MPI transport where libcohort has it);
#        per-test one cohortrun job per test (a test that breaks the job cannot take the later ones with it).
# The file's helper module (test/utils/common.py) imports horovod.runner, which is not installed: a stand-in with
# the three helpers test_torch.py uses is written beside the copy. Prints pytest's tally (per-test: the counts);
# the full log is in $LOG (default /tmp/horovod-suite-NP-MODE.log). Uses the build in $BUILD (default build).
# Example: scripts/horovod-suite.sh ../horovod 2; scripts/horovod-suite.sh ../horovod 3 gloo -k "not prescale"
set -u
[ $# -ge 2 ] || {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
HVD=$1 NP=$2
shift 2
MODE=gloo
case "${1:-}" in gloo | mpirun | per-test) MODE=$1 && shift ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${BUILD:-$ROOT/build}" 2>/dev/null && pwd) || {
  echo "horovod-suite.sh: no build at ${BUILD:-$ROOT/build} (cmake -S . -B build && cmake --build build)" >&2
  exit 2
}
PY=${PYTHON:-/usr/bin/python3}
SRC=$HVD/test/parallel/test_torch.py
[ -f "$SRC" ] || {
  echo "horovod-suite.sh: $SRC is missing: HOROVOD_DIR must be a Horovod checkout" >&2
  exit 2
}
case $NP in '' | *[!0-9]*) echo "horovod-suite.sh: NP '$NP' is not a number of ranks" >&2 && exit 2 ;; esac
LOG=${LOG:-/tmp/horovod-suite-$NP-$MODE.log}
W=$(mktemp -d /tmp/horovod-suite.XXXXXX)
trap 'rm -rf "$W"' EXIT

# The copy, its import pointed at cohort.torch: exactly one line changes, or the file is not the one we know.
sed 's/^import horovod\.torch as hvd$/import cohort.torch as hvd/' "$SRC" >"$W/test_torch.py"
changed=$(diff "$SRC" "$W/test_torch.py" | grep -c '^>')
[ "$changed" = 1 ] || {
  echo "horovod-suite.sh: expected one line 'import horovod.torch as hvd' in $SRC, changed $changed" >&2
  exit 2
}
cat >"$W/common.py" <<'EOF'
"""Stand-in for Horovod's test/utils/common.py (which imports horovod.runner): the helpers test_torch.py uses."""
import contextlib
import os
import tempfile


def mpi_env_rank_and_size():
    for rank_var, size_var in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank_var in os.environ and size_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ[size_var])
    return 0, 1


@contextlib.contextmanager
def temppath():
    with tempfile.TemporaryDirectory() as d:
        yield os.path.join(d, "temp_test_file")


def skip_or_fail_gpu_test(test, message):
    if int(os.environ.get("HOROVOD_TEST_GPU", 0)):
        test.fail(message)
    test.skipTest(message)
EOF
# horovodrun --gloo's variables, from cohortrun's.
cat >"$W/gloo_env.sh" <<'EOF'
#!/bin/sh
export HOROVOD_RANK=$RANK HOROVOD_SIZE=$WORLD_SIZE HOROVOD_LOCAL_RANK=$LOCAL_RANK HOROVOD_LOCAL_SIZE=$LOCAL_WORLD_SIZE
export HOROVOD_CROSS_RANK=0 HOROVOD_CROSS_SIZE=1 HOROVOD_HOSTNAME=localhost HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1
exec "$@"
EOF
chmod +x "$W/gloo_env.sh"
export PYTHONPATH="$BUILD/python:$W${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
PYTEST=("$PY" -m pytest -q -p no:cacheprovider --color=no "$W/test_torch.py")
cd "$W" || exit 2
: >"$LOG"
case $MODE in
gloo)
  timeout 1800 "$BUILD/bin/cohortrun" -np "$NP" "$W/gloo_env.sh" "${PYTEST[@]}" "$@" >>"$LOG" 2>&1
  rc=$?
  ;;
mpirun)
  command -v mpirun >/dev/null || {
    echo "horovod-suite.sh: no mpirun (apt-get install openmpi-bin)" >&2
    exit 2
  }
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 1800 mpirun --oversubscribe -np "$NP" \
    -x PYTHONPATH -x OMP_NUM_THREADS "${PYTEST[@]}" "$@" >>"$LOG" 2>&1
  rc=$?
  ;;
per-test)
  tests=$("$PY" -m pytest -q -p no:cacheprovider --collect-only "$W/test_torch.py" "$@" 2>/dev/null | grep '::')
  pass=0 fail=0 skip=0 failed=""
  for t in $tests; do
    timeout 300 "$BUILD/bin/cohortrun" -np "$NP" "$W/gloo_env.sh" "$PY" -m pytest -q -p no:cacheprovider --color=no -rs "$t" \
      >"$W/one.log" 2>&1
    one=$?
    cat "$W/one.log" >>"$LOG"
    if grep -q ' skipped' "$W/one.log" && ! grep -q ' passed' "$W/one.log"; then
      skip=$((skip + 1))
    elif [ $one -eq 0 ]; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1)) failed="$failed ${t##*::}"
    fi
  done
  echo "per test at np $NP: $pass passed, $fail failed, $skip skipped${failed:+; failed:$failed}"
  [ $fail -eq 0 ]
  exit
  ;;
esac
# Each rank prints pytest's tally: one line per rank.
grep -E '(passed|failed|error).* in [0-9.]+s' "$LOG" | sed 's/^\[\([0-9]*\)\] /rank \1: /'
grep -E '^(\[[0-9]+\] )?FAILED ' "$LOG" | sort -u | head -20
echo "exit $rc; log: $LOG"
exit $rc
