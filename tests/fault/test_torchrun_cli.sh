#!/usr/bin/env bash
# test_torchrun_cli.sh CASE: cohortrun takes torchrun's whole command line (torch 1.13's and torch 2's, '-' or '_'),
# with torchrun's meanings and variables, and writes and reads the error files of torch's @record.
# COHORT_TEST_COHORTRUN names cohortrun, COHORT_TEST_PYTHON a python3 (with torch for the error cases).
#
#   flags    every torchrun flag is accepted (each was "unknown flag" before), and the workers get ROLE_NAME (--role),
#            TORCHELASTIC_RUN_ID (--rdzv-id; "none"; a uuid under --standalone), TORCHELASTIC_ERROR_FILE,
#            OMP_NUM_THREADS=1 with several workers unless set; one worker without -np; auto/cpu count the CPUs;
#            --local-ranks-filter keeps the others off the console; bad values are refused in one line
#   python   a .py program runs under the interpreter (PYTHON_EXEC), with -u, as torchrun runs it ("Exec format
#            error" before); -m MODULE; --no-python runs the file itself; a missing script is refused up front
#   nodes    --nnodes 1:2 starts alone after the last call (it asked for --node-rank before); --rdzv-backend c10d
#            with --rdzv-endpoint numbers two nodes started with the same command
#   errors   a worker's @record error file is named in the report; cohortrun's own TORCHELASTIC_ERROR_FILE gets
#            torch's JSON with errorCode; torchrun running cohortrun shows the worker's exception in its report;
#            a typo'd COHORT_ knob only cohortrun reads is warned about
#   leftovers  the directory of error files of a SIGKILLed cohortrun (cohortrun-errors-NS-PID-*) is removed by the
#            next cohortrun; other PID namespaces' and live processes' are kept
set -u
CASE=${1:?usage: test_torchrun_cli.sh flags|python|nodes|errors|leftovers}
RUN=${COHORT_TEST_COHORTRUN:?set COHORT_TEST_COHORTRUN to build/bin/cohortrun}
PY=${COHORT_TEST_PYTHON:-python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_torchrun_cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$TMP"/out "$TMP"/err; do [ -f "$f" ] && { echo "--- $f:" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}
# run ARGS...: cohortrun ARGS with stdout and stderr in $TMP/out and $TMP/err; RC is its exit code.
run() {
  (cd "$TMP" && timeout 120 "$RUN" "$@") >"$TMP/out" 2>"$TMP/err"
  RC=$?
}
has() { grep -qF -- "$2" "$TMP/$1" || fail "no '$2' in $1"; }
unset OMP_NUM_THREADS TORCHELASTIC_ERROR_FILE
# Below the kernel's ephemeral range (32768-60999), where an outgoing connection of another test can hold it.
PORT=$((20000 + ($$ % 1000) * 2)) # 20000-21999; test_launcher_waits.sh 22000-23999, test_hier_nodes.sh 24000-25999, slurm 27000-29399
# shellcheck disable=SC2016
SHOW='echo "rank $RANK/$WORLD_SIZE role $ROLE_NAME run $TORCHELASTIC_RUN_ID omp ${OMP_NUM_THREADS:-unset} err ${TORCHELASTIC_ERROR_FILE:+set}"'

case "$CASE" in
flags)
  # torch 1.13's spellings, then torch 2's.
  run --nnodes 1 --nproc_per_node 2 --rdzv_backend static --rdzv_endpoint "127.0.0.1:$PORT" --rdzv_id job7 \
    --rdzv_conf join_timeout=30,close_timeout=5 --max_restarts 0 --monitor_interval 0.5 --start_method spawn \
    --role trainer --log_dir "$TMP/logs" --redirects 3 --tee 0:1,1:2 --node_rank 0 --master_addr 127.0.0.1 \
    --master_port "$PORT" /bin/sh -c "$SHOW"
  [ "$RC" = 0 ] || fail "torch 1.13's flags: exit $RC"
  has out "[1] rank 1/2 role trainer run job7 omp 1 err set"
  run --nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint="127.0.0.1:$PORT" --rdzv-id=job8 \
    --rdzv-conf=join_timeout=30 --max-restarts=0 --monitor-interval=1 --start-method=fork --role=r \
    --log-dir="$TMP/logs2" -r 0 -t 3 --local-addr=127.0.0.1 --local-ranks-filter=1 --logs-specs=default \
    --node-rank=0 --master-addr=127.0.0.1 --master-port="$PORT" /bin/sh -c "$SHOW"' $COHORT_BIND_ADDR'
  [ "$RC" = 0 ] || fail "torch 2's flags: exit $RC"
  has out "[1] rank 1/2 role r run job8 omp 1 err set 127.0.0.1"
  grep -q '^\[0\]' "$TMP/out" && fail "--local-ranks-filter=1 printed rank 0"
  grep -q 'rank 0/2' "$TMP/logs2/rank-0.log" || fail "rank 0's log lost its output"
  echo "ok: torch 1.13's and torch 2's flags, ROLE_NAME, TORCHELASTIC_RUN_ID, OMP_NUM_THREADS, error file, filter"
  run /bin/sh -c "$SHOW"
  [ "$RC" = 0 ] || fail "no -np: exit $RC"
  has out "[0] rank 0/1 role default run none omp unset err set"
  OMP_NUM_THREADS=4 run --standalone --nproc_per_node 2 /bin/sh -c "$SHOW"
  has out "[1] rank 1/2 role default run "
  has out "omp 4 err set"
  grep -q "run none" "$TMP/out" && fail "--standalone gave no run id of its own"
  cpus=$(getconf _NPROCESSORS_ONLN)
  for what in auto cpu; do
    run --nproc_per_node "$what" /bin/sh -c 'echo "of $WORLD_SIZE"'
    [ "$RC" = 0 ] || fail "--nproc_per_node $what: exit $RC"
    has out "[0] of $cpus"
  done
  echo "ok: one worker by default, OMP_NUM_THREADS kept when set, --standalone's own run id, auto/cpu = $cpus"
  for bad in "--rdzv_backend etcd|an etcd server is not used" "--start_method thread|--start-method takes spawn" \
    "--redirects 4|--redirects takes 0, 1, 2 or 3" "--rdzv_conf join_timeout|--rdzv-conf takes key=value" \
    "--nproc_per_node many|--nproc-per-node needs a positive number of workers, or auto, cpu, gpu" \
    "--no_python -m x|--no-python runs the program itself"; do
    args=${bad%%|*}
    want=${bad#*|}
    # shellcheck disable=SC2086
    run $args /bin/true
    [ "$RC" = 2 ] || fail "$args: exit $RC, expected 2"
    has err "$want"
  done
  echo "ok: bad torchrun values are refused with one line"
  ;;
python)
  printf 'import os, sys\nprint("py", os.environ["RANK"], sys.argv[1:], sys.stdout.write_through)\n' >"$TMP/ddp.py"
  PYTHON_EXEC=$PY run --standalone --nproc_per_node 2 ddp.py --lr 0.1
  [ "$RC" = 0 ] || fail "a .py program: exit $RC"
  has out "[1] py 1 ['--lr', '0.1'] True"
  mkdir -p "$TMP/pkg"
  printf 'import os\nprint("module", os.environ["RANK"])\n' >"$TMP/pkg/mod.py"
  PYTHONPATH=$TMP/pkg PYTHON_EXEC=$PY run --nproc_per_node 2 -m mod
  [ "$RC" = 0 ] || fail "-m: exit $RC"
  has out "[1] module 1"
  printf '#!/bin/sh\necho "itself $RANK"\n' >"$TMP/tool.py"
  chmod +x "$TMP/tool.py"
  run --no_python --nproc_per_node 1 ./tool.py
  [ "$RC" = 0 ] || fail "--no_python: exit $RC"
  has out "[0] itself 0"
  PYTHON_EXEC=$PY run --nproc_per_node 1 --run_path ddp.py x
  has out "[0] py 0 ['x'] True"
  run --nproc_per_node 2 missing.py
  [ "$RC" = 2 ] || fail "a missing script: exit $RC"
  has err "cohortrun: Python script 'missing.py': No such file or directory"
  echo "ok: .py under the interpreter with -u, -m, --no-python, --run-path, a missing script refused"
  ;;
nodes)
  export COHORT_SECRET=torchrun-cli-$$ COHORT_TIMEOUT=30
  run --nnodes=1:2 --nproc_per_node 1 --rdzv_endpoint "127.0.0.1:$PORT" --rdzv_conf last_call_timeout=0.5 \
    /bin/sh -c 'echo "world $WORLD_SIZE"'
  [ "$RC" = 0 ] || fail "--nnodes=1:2 alone: exit $RC"
  has out "[0] world 1"
  (cd "$TMP" && timeout 60 "$RUN" --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$PORT" \
    /bin/sh -c 'echo "rank $RANK of $WORLD_SIZE"') >"$TMP/out.a" 2>"$TMP/err.a" &
  a=$!
  (cd "$TMP" && timeout 60 "$RUN" --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$PORT" \
    /bin/sh -c 'echo "rank $RANK of $WORLD_SIZE"') >"$TMP/out.b" 2>"$TMP/err.b" &
  b=$!
  wait "$a" || fail "c10d node a: $(cat "$TMP/err.a")"
  wait "$b" || fail "c10d node b: $(cat "$TMP/err.b")"
  cat "$TMP/out.a" "$TMP/out.b" >"$TMP/out"
  has out "rank 0 of 2"
  has out "rank 1 of 2"
  echo "ok: --nnodes=1:2 alone, and two c10d nodes numbered by the endpoint: $(tr '\n' ' ' <"$TMP/out")"
  ;;
errors)
  COHORT_HEARTBEAT_SEC=2 run --nproc_per_node 1 /bin/true
  has err "cohortrun: unknown variable COHORT_HEARTBEAT_SEC is ignored"
  echo "ok: a typo'd COHORT_ knob is warned about"
  if ! "$PY" -c 'import torch.distributed.elastic.multiprocessing.errors' 2>/dev/null; then
    echo "SKIP: $PY has no torch: the @record cases need it"
    exit 77
  fi
  cat >"$TMP/rec.py" <<'EOF'
import os
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    assert dist.is_torchelastic_launched()
    if os.environ["RANK"] == "1":
        raise ValueError("rank 1 gives up")

main()
EOF
  PYTHON_EXEC=$PY TORCHELASTIC_ERROR_FILE=$TMP/outer.json run --nproc_per_node 2 rec.py
  [ "$RC" = 1 ] || fail "@record: exit $RC"
  has err "cohortrun: rank 1's error file (torch's @record, TORCHELASTIC_ERROR_FILE): ValueError: rank 1 gives up"
  "$PY" - "$TMP/outer.json" <<'EOF' || fail "cohortrun's own error file is not torch's"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["message"]["message"] == "ValueError: rank 1 gives up", d
assert d["message"]["errorCode"] == 1, d
assert "raise ValueError" in d["message"]["extraInfo"]["py_callstack"], d
EOF
  echo "ok: @record's error file named in the report and copied to cohortrun's own, with errorCode"
  (cd "$TMP" && PYTHON_EXEC=$PY timeout 120 "$PY" -m torch.distributed.run --redirects 1 --tee 1 --nproc_per_node 1 \
    --no_python "$RUN" --nproc_per_node 2 rec.py) >"$TMP/out" 2>"$TMP/err"
  has err "ChildFailedError"
  has err "ValueError: rank 1 gives up"
  echo "ok: torchrun over cohortrun reports the worker's exception from cohortrun's error file"
  ;;
leftovers)
  # A SIGKILLed cohortrun cannot remove its directory of error files; the next cohortrun removes it, and no other.
  T="$TMP/tmpdir"
  mkdir -p "$T"
  NS=$(stat -Lc %i /proc/self/ns/pid)
  NAP=30.$$
  (cd "$TMP" && TMPDIR="$T" exec "$RUN" -np 1 sleep "$NAP") >"$TMP/out" 2>"$TMP/err" &
  K=$!
  for _ in $(seq 1 200); do
    compgen -G "$T/cohortrun-errors-$NS-$K-*" >/dev/null && break
    sleep 0.05
  done
  compgen -G "$T/cohortrun-errors-$NS-$K-*" >/dev/null || fail "no cohortrun-errors-$NS-$K-* in TMPDIR while it ran"
  kill -9 "$K"
  wait "$K" 2>/dev/null
  pkill -f "^sleep $NAP\$" 2>/dev/null
  compgen -G "$T/cohortrun-errors-$NS-$K-*" >/dev/null || fail "the killed cohortrun's directory vanished by itself"
  # Kept: another PID namespace's (a container sharing the directory), a live process's, and the old unnamed form.
  mkdir "$T/cohortrun-errors-$((NS + 1))-$K-other" "$T/cohortrun-errors-$NS-$$-live" "$T/cohortrun-errors-old"
  (cd "$TMP" && TMPDIR="$T" timeout 60 "$RUN" -np 1 true) >"$TMP/out" 2>"$TMP/err"
  RC=$?
  [ "$RC" = 0 ] || fail "the next cohortrun: exit $RC"
  compgen -G "$T/cohortrun-errors-$NS-$K-*" >/dev/null && fail "the killed cohortrun's directory is still there"
  left=$(cd "$T" && ls -d cohortrun-errors-* | sort | tr '\n' ' ')
  want=$(printf '%s\n' "cohortrun-errors-$((NS + 1))-$K-other" "cohortrun-errors-$NS-$$-live" cohortrun-errors-old |
    sort | tr '\n' ' ')
  [ "$left" = "$want" ] || fail "left in TMPDIR: $left (expected: $want)"
  echo "ok: a SIGKILLed cohortrun's error directory removed by the next one; other namespaces', live and old kept"
  ;;
*)
  fail "unknown case"
  ;;
esac
exit 0
