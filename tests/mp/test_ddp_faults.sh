#!/bin/sh
# The DDP engine's end-to-end scenarios between real processes (see tests/mp/test_ddp.c for each mode).
# usage: test_ddp_faults.sh COHORTRUN TEST_DDP MODE
set -u
run=$1 bin=$2 mode=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL ($mode): $*"; echo "--- output:"; cat "$tmp/out"; exit 1; }
has() { grep -q -- "$1" "$tmp/out" || fail "no line matching '$1'"; }

case $mode in
train)
  COHORT_DDP_OVERLAP=on COHORT_TIMELINE=$tmp/timeline.json "$run" -np 2 "$bin" --mode train >"$tmp/out" 2>&1 || fail "the job failed"
  has "RESULT rank=0 status=ok"
  has "RESULT rank=1 status=ok"
  /usr/bin/python3 - "$tmp/timeline.json" >>"$tmp/out" 2>&1 <<'PY' || fail "the timeline is not what it should be"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e.get("ph") == "X"]
for rank in (0, 1):
    mine = [e for e in spans if e["pid"] == rank]
    names = {e["name"] for e in mine}
    assert {"forward", "backward", "allreduce", "optimizer"} <= names, (rank, names)
    for e in mine:
        assert e["ts"] >= 0 and e["dur"] >= 0, e
    ar = [e for e in mine if e["name"] == "allreduce"]
    # 4 steps; the MLP's 20*32+32+32*5+5 = 837 floats in buckets of <= 100 then <= 400 floats: 3 buckets
    assert len(ar) == 4 * 3, len(ar)
    assert sorted({e["args"]["bucket"] for e in ar}) == [0, 1, 2], ar
    assert sum(e["args"]["bytes"] for e in ar) == 4 * 837 * 4, ar
    for name in ("forward", "backward", "optimizer"):
        assert len([e for e in mine if e["name"] == name]) == 4, (rank, name)
print("timeline ok:", len(spans), "spans")
PY
  # Without overlap: one allreduce per step covers every bucket.
  COHORT_DDP_OVERLAP=off COHORT_TIMELINE=$tmp/fused.json "$run" -np 2 "$bin" --mode train >>"$tmp/out" 2>&1 ||
    fail "the job failed with COHORT_DDP_OVERLAP=off"
  /usr/bin/python3 -c '
import json, sys
spans = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
for rank in (0, 1):
    ar = [e for e in spans if e["pid"] == rank and e["name"] == "allreduce"]
    assert len(ar) == 4, ar
print("fused timeline ok")' "$tmp/fused.json" >>"$tmp/out" 2>&1 || fail "the fused timeline is not what it should be"
  ;;
held_back)
  COHORT_STALL_S=1 "$run" -np 3 "$bin" --mode held_back >"$tmp/out" 2>&1 || fail "the job failed"
  for r in 0 1 2; do has "RESULT rank=$r status=ok"; done
  grep -i "stall" "$tmp/out" | grep -q "rank 2" || fail "no stall warning naming rank 2"
  grep -i "stall" "$tmp/out" | grep -q "bucket" || fail "the stall warning names no bucket"
  grep -i "stall" "$tmp/out" | grep "^\[2\]" && fail "rank 2, the one held back, warned about itself"
  ;;
missing)
  "$run" -np 3 "$bin" --mode missing >"$tmp/out" 2>&1 || fail "the job failed"
  grep "RESULT rank=2" "$tmp/out" | grep "invalid argument" | grep -q "fc1.bias" ||
    fail "rank 2 does not name its missing gradient"
  for r in 0 1; do
    grep "RESULT rank=$r" "$tmp/out" | grep "remote failure" | grep -q "rank 2" || fail "rank $r does not name rank 2"
  done
  ;;
killed)
  "$run" -np 3 "$bin" --mode killed >"$tmp/out" 2>&1 && fail "cohortrun succeeded although rank 2 was killed"
  has "KILLING rank=2"
  for r in 0 1; do
    grep "RESULT rank=$r" "$tmp/out" | grep "remote failure" | grep -q "rank 2" || fail "rank $r does not name rank 2"
  done
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
echo "ok ($mode)"
grep -E "RESULT|stall|timeline ok" "$tmp/out"
