#!/usr/bin/env bash
# fmnist-train --device cuda: without a usable GPU, one clear line on stderr and exit 1 (before any training); with
# one, a 3-step run ends with the machine-readable final line. Also: --device takes only cpu or cuda.
set -u
bin=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
data=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ ! -d "$data" ]; then
  echo "SKIP: no Fashion-MNIST in $data (set FMNIST_DIR)"
  exit 77
fi
"$bin" --device cuda --steps 3 --quiet --data "$data" >"$out/stdout" 2>"$out/stderr"
rc=$?
if [ $rc -eq 0 ]; then
  grep -q '^final: steps=3 ' "$out/stdout" || { echo "FAIL: exit 0 without the final line"; cat "$out/stdout"; exit 1; }
  echo "PASS: a GPU is here and a 3-step run finished: $(tail -1 "$out/stdout")"
else
  lines=$(wc -l <"$out/stderr")
  if [ $rc -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -q -- '--device cuda: ' "$out/stderr"; then
    echo "FAIL: without a GPU expected exit 1 and one line naming --device cuda, got exit $rc and $lines lines:"
    cat "$out/stderr"
    exit 1
  fi
  [ -s "$out/stdout" ] && { echo "FAIL: stdout is not empty:"; cat "$out/stdout"; exit 1; }
  if [ "${COHORT_TEST_EXPECT_GPU:-}" = 1 ]; then
    echo "FAIL: COHORT_TEST_EXPECT_GPU=1 (a GPU is listed here), but: $(cat "$out/stderr")"
    exit 1
  fi
  echo "PASS: no GPU here, one line: $(cat "$out/stderr")"
fi
"$bin" --device tpu --steps 1 >/dev/null 2>"$out/usage"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--device must be cpu or cuda" "$out/usage" || { echo "FAIL: --device tpu gave exit $rc:"; cat "$out/usage"; exit 1; }
"$bin" --device cuda --zero 1 --steps 1 >/dev/null 2>"$out/usage"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--zero 1 does not run with --device cuda" "$out/usage" || { echo "FAIL: --device cuda --zero 1 gave exit $rc:"; cat "$out/usage"; exit 1; }
echo "PASS: --device's usage errors"
