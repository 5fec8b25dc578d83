#!/bin/sh
# torch.distributed on backend "cohort" in N processes started by hand, without cohortrun, each way torch's
# init_process_group meets: init_method file:// (torch's FileStore), tcp:// (torch's TCPStore), env:// (torchrun's
# variables set by hand: Debian's torchrun 1.13 itself fails under Python 3.11). The backend's ranks then meet
# through torch's store (python/cohort/torch/_backend.py). test_dist_backend.py checks every operation's values.
# usage: test_dist_launch.sh PYTHON TEST_PY MODE N      MODE: file | tcp | env
set -u
py=$1 test=$2 mode=$3 n=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
r=0
while [ "$r" -lt "$n" ]; do
  case $mode in
  file) timeout 240 "$py" "$test" "file://$tmp/store" "$r" "$n" >"$tmp/out.$r" 2>&1 & ;;
  tcp) timeout 240 "$py" "$test" "tcp://127.0.0.1:$port" "$r" "$n" >"$tmp/out.$r" 2>&1 & ;;
  env) RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 240 "$py" "$test" >"$tmp/out.$r" 2>&1 & ;;
  *) echo "test_dist_launch.sh: unknown mode '$mode' (file, tcp or env)"; exit 2 ;;
  esac
  r=$((r + 1))
done
wait
fails=0
r=0
while [ "$r" -lt "$n" ]; do
  if ! grep -q "^PASS (backend torch's store [a-z+]*) rank $r of $n\$" "$tmp/out.$r"; then
    echo "rank $r did not pass:"
    cat "$tmp/out.$r"
    fails=$((fails + 1))
  fi
  r=$((r + 1))
done
[ "$fails" = 0 ] && echo "PASS (dist launch $mode, $n ranks)"
