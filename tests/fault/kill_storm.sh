#!/usr/bin/env bash
# kill_storm.sh: the 20-kill figure of docs/cohortrun.md. Two "hosts" as network namespaces joined by veth (as in
# test_cluster_netns.sh), each running cohortrun --nnodes 2 with 1 rank of fmnist-train --steps 60.
#
#   Part 1: RUNS runs, each hit by one kill -9 at a random moment (right after a random training step 0..57 of 60,
#           0 being as soon as the workers exist, plus a random 0..0.1 s) of a random target: node 0's worker, node 1's worker, node 0's cohortrun or node 1's cohortrun.
#           Counts hangs (not every cohortrun and worker gone within 30 s of the kill), orphans (a worker still
#           alive 2 s after both cohortruns ended), /dev/shm entries left behind by the run, and reports the time
#           from the kill to the full stop (every process of the job gone): min / median / max.
#   Part 2: RUNS runs with --max-restarts 1, --checkpoint-every 10 --resume auto, and a kill -9 of a random worker at
#           a random moment: counts the runs that complete with the param_sha256 of the uninterrupted run.
#
# Usage (root, `ip netns`): tests/fault/kill_storm.sh BUILD_DIR [RUNS]   (default RUNS 20; ~5 minutes on 2 cores)
# or: cmake --build BUILD_DIR --target kill_storm. Exit 0 when every figure is as expected (0 hangs, 0 orphans,
# 0 leftovers, RUNS of RUNS restarts matching), 1 otherwise, 77 when namespaces cannot be made here.
set -u
BUILD=${1:?usage: kill_storm.sh BUILD_DIR [RUNS]}
RUNS=${2:-20}
RUN=$BUILD/bin/cohortrun
TRAIN=$BUILD/bin/fmnist-train
[ -x "$RUN" ] && [ -x "$TRAIN" ] || { echo "kill_storm: build cohortrun and fmnist-train in $BUILD first" >&2; exit 2; }
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "SKIP: needs root and the ip command (network namespaces)"
  exit 77
fi
A=stormA$$
B=stormB$$
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kill_storm.XXXXXX")
N0="" N1=""
# Whatever still runs in the two namespaces is this script's: the job's cohortruns and workers.
ns_pids() { { ip netns pids "$A"; ip netns pids "$B"; } 2>/dev/null; }
cleanup() {
  for p in $N0 $N1 $(ns_pids); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
ip netns add "$A" 2>"$TMP/err" || { echo "SKIP: ip netns: $(cat "$TMP/err")"; exit 77; }
ip netns add "$B" || exit 1
ip link add "ks$$a" type veth peer name "ks$$b" 2>"$TMP/err" || { echo "SKIP: veth: $(cat "$TMP/err")"; exit 77; }
ip link set "ks$$a" netns "$A" && ip link set "ks$$b" netns "$B" &&
  ip -n "$A" addr add 10.78.0.1/24 dev "ks$$a" && ip -n "$B" addr add 10.78.0.2/24 dev "ks$$b" &&
  ip -n "$A" link set "ks$$a" up && ip -n "$B" link set "ks$$b" up &&
  ip -n "$A" link set lo up && ip -n "$B" link set lo up || exit 1

export COHORT_SECRET=kill-storm-$$ COHORT_TIMEOUT=20 COHORT_TRANSPORT=tcp
PORT=29741
ARGS=(--steps 60 --batch 32 --log-every 1)
now() { date +%s.%N; }
final_of() { grep '^\[0\] final: ' "$1" | tail -n 1 | sed -n 's/.*param_sha256=\([0-9a-f]*\).*/\1/p'; }
shm_list() { ls -1 /dev/shm 2>/dev/null | sort; }

# start_job DIR EXTRA...: both nodes in the background; pids in N0 and N1.
start_job() {
  local dir=$1
  shift
  mkdir -p "$dir"
  ip netns exec "$B" "$RUN" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 10.78.0.1 --master-port "$PORT" \
    "$@" >"$dir/out1" 2>"$dir/err1" &
  N1=$!
  ip netns exec "$A" "$RUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 10.78.0.1 --master-port "$PORT" \
    "$@" >"$dir/out0" 2>"$dir/err0" &
  N0=$!
}

# The worker (child) of a node's cohortrun, waiting for it to exist (at most 10 s); empty if it never came.
worker_of() {
  local w=""
  for _ in $(seq 1 200); do
    w=$(pgrep -P "$1" | head -n 1)
    [ -n "$w" ] && break
    kill -0 "$1" 2>/dev/null || break
    sleep 0.05
  done
  echo "$w"
}

alive() { for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

# The uninterrupted 2-node run: its param_sha256 and how long it takes.
t0=$(now)
start_job "$TMP/ref" "$TRAIN" "${ARGS[@]}"
wait "$N0"; rc0=$?
wait "$N1"; rc1=$?
DUR=$(echo "$t0 $(now)" | awk '{print $2 - $1}')
WANT=$(final_of "$TMP/ref/out0")
if [ "$rc0" -ne 0 ] || [ "$rc1" -ne 0 ] || [ -z "$WANT" ]; then
  echo "kill_storm: the uninterrupted run failed ($rc0, $rc1): $(tail -n 5 "$TMP/ref/err0")" >&2
  exit 1
fi
printf 'uninterrupted 2-node run: %.1f s, param_sha256 %s\n' "$DUR" "$WANT"
# A random moment: after training step K (0..57 of 60; 0: as soon as the workers exist), plus up to 0.1 s. Step
# numbers rather than seconds, so that the kill lands in the run however busy the machine is.
# kill_moment DIR: waits for it; sets MOMENT (text) and T_START-relative seconds in DELAY.
kill_moment() {
  local k=$((RANDOM % 58)) frac
  frac=$(awk -v r="$RANDOM" 'BEGIN { printf "%.3f", 0.1 * r / 32767 }')
  if [ "$k" -gt 0 ]; then
    for _ in $(seq 1 600); do
      grep -q "^\[0\] epoch 1/1 step $k/60 " "$1/out0" 2>/dev/null && break
      alive "$N0" "$N1" || break
      sleep 0.05
    done
  fi
  sleep "$frac"
  MOMENT="step $k+${frac}s"
}

# ---- Part 1: kills without restarts ----
hangs=0 orphans=0 leftovers=0 bad_exit=0
: >"$TMP/stop_times"
targets=("worker-0" "worker-1" "cohortrun-0" "cohortrun-1")
for i in $(seq 1 "$RUNS"); do
  shm_before=$(shm_list)
  start_job "$TMP/p1.$i" "$TRAIN" "${ARGS[@]}"
  target=${targets[$((RANDOM % 4))]}
  W0=$(worker_of "$N0")
  W1=$(worker_of "$N1")
  kill_moment "$TMP/p1.$i"
  case $target in
  worker-0) victim=$W0 ;;
  worker-1) victim=$W1 ;;
  cohortrun-0) victim=$N0 ;;
  cohortrun-1) victim=$N1 ;;
  esac
  if [ -z "$victim" ] || ! kill -9 "$victim" 2>/dev/null; then
    echo "run $i: $target was not there to kill at $MOMENT (the job ended or never started)" >&2
    bad_exit=$((bad_exit + 1))
  fi
  k=$(now)
  stopped=""
  for _ in $(seq 1 600); do
    if ! alive "$N0" "$N1" $W0 $W1; then stopped=$(now); break; fi
    sleep 0.05
  done
  if [ -z "$stopped" ]; then
    hangs=$((hangs + 1))
    echo "run $i: HANG: $target killed at $MOMENT, job not stopped within 30 s" >&2
    kill -9 "$N0" "$N1" $W0 $W1 2>/dev/null
    took=30
  else
    took=$(echo "$k $stopped" | awk '{printf "%.2f", $2 - $1}')
  fi
  # (the shell's own "Killed" notice for a killed cohortrun is not wanted in the table)
  { wait "$N0"; } 2>/dev/null; rc0=$?
  { wait "$N1"; } 2>/dev/null; rc1=$?
  sleep 2
  left=$(ns_pids | wc -l)
  if [ "$left" -gt 0 ]; then
    orphans=$((orphans + left))
    echo "run $i: ORPHANS: $(ns_pids | tr '\n' ' ')" >&2
    for p in $(ns_pids); do kill -9 "$p" 2>/dev/null; done
  fi
  # Every node must fail (non-zero), including the one whose cohortrun survived the kill.
  [ "$rc0" -ne 0 ] && [ "$rc1" -ne 0 ] || { bad_exit=$((bad_exit + 1)); echo "run $i: exit codes $rc0 $rc1" >&2; }
  new=$(comm -13 <(echo "$shm_before") <(shm_list))
  if [ -n "$new" ]; then
    # Other jobs on this machine may be making their own entries: name them, for a human to judge.
    leftovers=$((leftovers + $(echo "$new" | wc -l)))
    echo "run $i: new /dev/shm entries: $(echo "$new" | tr '\n' ' ')" >&2
  fi
  echo "$took" >>"$TMP/stop_times"
  printf 'part 1 run %2d: kill -9 %-11s after %-14s: full stop in %5.2f s, exits %3d %3d\n' "$i" "$target" "$MOMENT" \
    "$took" "$rc0" "$rc1"
done
read -r smin smed smax < <(sort -n "$TMP/stop_times" | awk '{a[NR]=$1} END {m = NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%.2f %.2f %.2f\n", a[1], m, a[NR]}')

# ---- Part 2: kills of a worker under --max-restarts 1 ----
same=0 missed=0
for i in $(seq 1 "$RUNS"); do
  d=$TMP/p2.$i
  start_job "$d" --max-restarts 1 "$TRAIN" "${ARGS[@]}" --checkpoint-every 10 --checkpoint "$TMP/p2.$i.ck" --resume auto
  node=$((RANDOM % 2))
  if [ "$node" -eq 0 ]; then victim=$(worker_of "$N0"); else victim=$(worker_of "$N1"); fi
  kill_moment "$d"
  note=""
  [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null || note=" (nothing to kill: the job had ended)"
  rc0=1 rc1=1
  for _ in $(seq 1 1200); do alive "$N0" "$N1" || break; sleep 0.05; done
  if alive "$N0" "$N1"; then
    echo "run $i: HANG under --max-restarts" >&2
    kill -9 "$N0" "$N1" 2>/dev/null
  fi
  # (the shell's own "Killed" notice for a killed cohortrun is not wanted in the table)
  { wait "$N0"; } 2>/dev/null; rc0=$?
  { wait "$N1"; } 2>/dev/null; rc1=$?
  got=$(final_of "$d/out0")
  ok=no
  [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] && [ "$got" = "$WANT" ] && ok=yes && same=$((same + 1))
  restarted=$(grep -c '^cohortrun: restart 1 of 1' "$d/err0")
  printf 'part 2 run %2d: kill -9 worker-%d after %-14s%s: restarted %d, exits %d %d, same param_sha256: %s\n' "$i" \
    "$node" "$MOMENT" "$note" "$restarted" "$rc0" "$rc1" "$ok"
  [ "$restarted" -eq 1 ] || missed=$((missed + 1))
  [ "$ok" = yes ] || tail -n 5 "$d/err0" "$d/err1" >&2
  for p in $(ns_pids); do kill -9 "$p" 2>/dev/null; done
done

echo
echo "kill_storm: $RUNS kills at random moments of a 2-node fmnist-train --steps 60 (1 rank per node, network namespaces)"
echo "| figure | result | expected |"
echo "|---|---|---|"
echo "| hangs (no full stop within 30 s) | $hangs of $RUNS | 0 |"
echo "| orphan workers | $orphans | 0 |"
echo "| /dev/shm entries left behind | $leftovers | 0 |"
echo "| runs with a missed kill or a node exiting 0 | $bad_exit | 0 |"
echo "| time from kill -9 to full stop, min / median / max | $smin / $smed / $smax s | < 5 s |"
echo "| --max-restarts 1: completed with the uninterrupted param_sha256 | $same of $RUNS | $RUNS of $RUNS |"
echo "| --max-restarts 1: runs where the kill missed (no restart) | $missed | 0 |"
echo "command: tests/fault/kill_storm.sh $BUILD $RUNS; $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs"
[ "$hangs" -eq 0 ] && [ "$orphans" -eq 0 ] && [ "$leftovers" -eq 0 ] && [ "$bad_exit" -eq 0 ] && [ "$same" -eq "$RUNS" ] &&
  [ "$missed" -eq 0 ]
