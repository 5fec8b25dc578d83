#!/bin/sh
# fmnist-train under Open MPI's mpirun with its output in a file: whole progress lines, no carriage-return redraws.
# mpirun gives the workers a pseudo-terminal of its own whatever its own output is, so a worker's isatty() is no
# guide there (the \r redraws once ended up in log files).
# usage: test_mpirun_log.sh FMNIST_TRAIN
set -u
command -v mpirun >/dev/null || { echo "mpirun is missing: apt-get install openmpi-bin (scripts/setup.sh does)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_PORT=$port -x COHORT_SECRET=from-mpirun \
  "$1" --model mlp --steps 4 --log-every 1 >"$tmp/log" 2>&1 || { cat "$tmp/log"; echo "FAIL: the job failed"; exit 1; }
# The check itself must see a terminal there, or it would pass for the wrong reason.
mpirun --allow-run-as-root -np 1 sh -c '[ -t 1 ]' ||
  { echo "FAIL: this mpirun gives workers no terminal: the test would not show the bug"; exit 1; }
if grep -q "$(printf '\r')" "$tmp/log"; then echo "FAIL: carriage returns in the log:"; od -c "$tmp/log" | head; exit 1; fi
grep -q '^epoch 1/1 step 4/4 ' "$tmp/log" || { cat "$tmp/log"; echo "FAIL: no whole progress line for step 4"; exit 1; }
grep -q '^final: steps=4 ' "$tmp/log" || { cat "$tmp/log"; echo "FAIL: no final line"; exit 1; }
echo "PASS: $(grep -c '^epoch ' "$tmp/log") whole progress lines, no carriage return"
