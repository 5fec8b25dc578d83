#!/usr/bin/env bash
# test_slurm.sh CASE: cohort under a real Slurm (Debian's slurm-wlm 22.05 and munge; scripts/setup.sh installs them).
#
# Each run brings up a private cluster on this host and tears it down: munged on a socket of its own, slurmctld, and
# two slurmd as node01 and node02, each in a network namespace of its own (10.81.N.1 and 10.81.N.2, joined by a veth
# pair) and a UTS namespace with that host name, so that the two nodes have different addresses and host names as
# real nodes do; /etc/netns/NS/hosts names them inside. The config, logs and state live in a temporary directory;
# ports are chosen from the test's pid. slurmctld runs on node01; srun, sbatch, salloc and scancel run there too.
# Needs root. Exits 77 (skipped), saying why, only where that cluster cannot start (no slurm-wlm or munge, no root,
# no network namespaces, daemons that do not come up); a cohort failure under a cluster that runs is a failure.
#
#   srun     test_collectives --quick on -N2 -n2; cohort.torch's layout (slurm_task.py) on -N2 -n3 block and cyclic:
#            local and cross ranks and sizes as Horovod has them, transport tcp between the nodes; a step on node02
#            alone (-w node02) finds its master there; --mpi=pmi2 runs on Slurm's variables, not MPI's
#   sbatch   a batch script with srun steps (C and Python), two steps at once in one allocation (each its own port);
#            a batch script that runs the program itself (no srun, --ntasks=2) fails at once and says why
#   salloc   salloc -N2 --ntasks-per-node=2 with steps of 4 tasks (C and Python) and of 2 on node02, and cohortrun
#            --nnodes 2 started by srun
#   faults   scancel of a running step: every task gone within 5 s, nothing left in /dev/shm; kill -9 of a task:
#            the other tasks name it and exit within 10 s, srun fails
#
# COHORT_TEST_COLLECTIVES, COHORT_TEST_JOB_VALUE, COHORT_TEST_COHORTRUN name the programs, COHORT_TEST_PYTHON a
# python3 with torch (PYTHONPATH reaching build/python), COHORT_TEST_SLURM_TASK tests/slurm/slurm_task.py.
set -u
CASE=${1:?usage: test_slurm.sh srun|sbatch|salloc|faults}
COLL=${COHORT_TEST_COLLECTIVES:?}
JOBV=${COHORT_TEST_JOB_VALUE:?}
RUN=${COHORT_TEST_COHORTRUN:?}
PY=${COHORT_TEST_PYTHON:-python3}
TASK=${COHORT_TEST_SLURM_TASK:?}

skip() {
  echo "SKIP: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root to run slurmctld, slurmd and munged, and network namespaces"
for cmd in slurmctld slurmd munged srun sbatch salloc scancel sinfo squeue ip unshare; do
  command -v "$cmd" >/dev/null || skip "$cmd is not installed (scripts/setup.sh installs slurm-wlm and munge)"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_slurm.XXXXXX")
chmod 755 "$TMP"
A=cslA$$
B=cslB$$
NET=10.81.$(($$ % 250))
BASE=$((27000 + ($$ % 600) * 4))
PIDS=()
cleanup() {
  [ -n "${SLURM_CONF:-}" ] && ip netns exec "$A" scancel --quiet --full -u root >/dev/null 2>&1
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.5
  for ns in "$A" "$B"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "/etc/netns/$A" "/etc/netns/$B" "$TMP"
}
trap cleanup EXIT
fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$TMP"/out* "$TMP"/err* "$TMP"/*.out; do
    [ -f "$f" ] && { echo "--- $f:" >&2; tail -n 15 "$f" >&2; }
  done
  for f in "$TMP"/slurmctld.log "$TMP"/slurmd-node0*.log; do
    [ -f "$f" ] && { echo "--- $f:" >&2; tail -n 8 "$f" >&2; }
  done
  exit 1
}

# --- the cluster ---------------------------------------------------------------------------------------------------
ip netns add "$A" 2>"$TMP/err.netns" || skip "network namespaces are not available: $(cat "$TMP/err.netns")"
ip netns add "$B" || skip "cannot add a second network namespace"
ip link add "cs$$a" type veth peer name "cs$$b" 2>"$TMP/err.netns" || skip "no veth pair: $(cat "$TMP/err.netns")"
ip link set "cs$$a" netns "$A" && ip link set "cs$$b" netns "$B" &&
  ip -n "$A" addr add "$NET.1/24" dev "cs$$a" && ip -n "$B" addr add "$NET.2/24" dev "cs$$b" &&
  ip -n "$A" link set "cs$$a" up && ip -n "$B" link set "cs$$b" up &&
  ip -n "$A" link set lo up && ip -n "$B" link set lo up || skip "cannot configure the veth pair"
for ns in "$A" "$B"; do
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n%s.1 node01\n%s.2 node02\n' "$NET" "$NET" >"/etc/netns/$ns/hosts"
done

dd if=/dev/urandom of="$TMP/munge.key" bs=1024 count=1 status=none && chmod 400 "$TMP/munge.key"
mkdir -p "$TMP/state" "$TMP/spool" "$TMP/work"
munged -F --force --socket="$TMP/munge.sock" --key-file="$TMP/munge.key" --log-file="$TMP/munged.log" \
  --pid-file="$TMP/munged.pid" --seed-file="$TMP/munged.seed" 2>"$TMP/err.munged" &
PIDS+=($!)
cat >"$TMP/slurm.conf" <<EOF
ClusterName=cohorttest
SlurmctldHost=node01($NET.1)
SlurmctldPort=$BASE
SlurmdPort=$((BASE + 1))
AuthType=auth/munge
AuthInfo=socket=$TMP/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool/%n
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd-%n.pid
SlurmctldLogFile=$TMP/slurmctld.log
SlurmdLogFile=$TMP/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MailProg=/bin/true
PlugStackConfig=$TMP/plugstack.conf
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
MessageTimeout=20
NodeName=node01 NodeAddr=$NET.1 CPUs=8 State=UNKNOWN
NodeName=node02 NodeAddr=$NET.2 CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=node01,node02 Default=YES MaxTime=INFINITE State=UP
EOF
: >"$TMP/plugstack.conf"
# slurmd initializes a cgroup plugin whatever the proctrack and task plugins; without systemd it must make its
# hierarchy itself. cgroup v1 (or hybrid, as on this CI machine) or v2, as the host has it.
if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
  printf 'CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\nIgnoreSystemdOnFailure=yes\n' >"$TMP/cgroup.conf"
else
  printf 'CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n' >"$TMP/cgroup.conf"
fi
export SLURM_CONF=$TMP/slurm.conf
# daemon NODE NS ARGS...: runs one daemon in namespace NS with host name NODE, in the foreground of a background job.
daemon() {
  local node=$1 ns=$2
  shift 2
  ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$node" "$@" &
  PIDS+=($!)
}
for _ in $(seq 1 50); do [ -S "$TMP/munge.sock" ] && break; sleep 0.1; done
[ -S "$TMP/munge.sock" ] || skip "munged did not start: $(tail -n 3 "$TMP/munged.log" "$TMP/err.munged" 2>/dev/null)"
daemon node01 "$A" slurmctld -D -i -f "$SLURM_CONF"
daemon node01 "$A" slurmd -D -f "$SLURM_CONF" -N node01
daemon node02 "$B" slurmd -D -f "$SLURM_CONF" -N node02

# in_cluster CMD...: runs a Slurm client (or anything) on node01, in the test's working directory.
in_cluster() { (cd "$TMP/work" && ip netns exec "$A" "$@"); }
up=0
for _ in $(seq 1 120); do
  if [ "$(in_cluster sinfo -h -o '%T %D' -t idle 2>/dev/null)" = "idle 2" ]; then
    up=1
    break
  fi
  sleep 0.25
done
[ "$up" = 1 ] || skip "the cluster did not come up within 30 s: $(in_cluster sinfo 2>&1 | tail -n 2); $(tail -n 3 \
  "$TMP/slurmctld.log" "$TMP/slurmd-node01.log" 2>/dev/null)"
echo "cluster up: $(in_cluster sinfo -h -o '%P %D %T %N')"

export COHORT_SECRET=slurm-test-$$
export COHORT_TIMEOUT=60
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
export PYTHONPATH=${PYTHONPATH:-}

# expect_line FILE PATTERN WHAT: FILE has a line matching PATTERN (grep -E).
expect_line() { grep -Eq "$2" "$1" || fail "$3: no line like '$2' in $1"; }
# layout_ok FILE ROWS...: each ROW "R size N local L/LS cross C/CS node NODE" is in FILE's task lines.
layout_ok() {
  local file=$1 row
  shift
  for row in "$@"; do expect_line "$file" "task rank $row transport [a-z+]* threads [0-9]+ sum ok" "layout"; done
}
now() { date +%s.%N; }
since() { echo "$1 $(now)" | awk '{printf "%.2f", $2 - $1}'; }

case "$CASE" in
srun)
  in_cluster timeout 120 srun -N2 -n2 "$COLL" --quick >"$TMP/out.coll" 2>"$TMP/err.coll" ||
    fail "srun -N2 -n2 test_collectives --quick failed"
  echo "ok: srun -N2 -n2 test_collectives --quick: $(grep -c . "$TMP/out.coll") lines, exit 0"

  # Uneven: 2 tasks on node01, 1 on node02. Block: ranks 0,1 on node01, 2 on node02.
  in_cluster timeout 120 srun -N2 -n3 "$PY" "$TASK" >"$TMP/out.block" 2>"$TMP/err.block" || fail "srun -N2 -n3 failed"
  layout_ok "$TMP/out.block" "0 size 3 local 0/2 cross 0/2 node node01" "1 size 3 local 1/2 cross 0/1 node node01" \
    "2 size 3 local 0/1 cross 1/2 node node02"
  expect_line "$TMP/out.block" "task rank 2 .* transport tcp" "two nodes talk over TCP"
  echo "ok: srun -N2 -n3 (block): $(tr '\n' ';' <"$TMP/out.block")"
  # Cyclic: ranks 0,2 on node01, 1 on node02.
  in_cluster timeout 120 srun -N2 -n3 -m cyclic "$PY" "$TASK" >"$TMP/out.cyclic" 2>"$TMP/err.cyclic" ||
    fail "srun -N2 -n3 -m cyclic failed"
  layout_ok "$TMP/out.cyclic" "0 size 3 local 0/2 cross 0/2 node node01" "1 size 3 local 0/1 cross 1/2 node node02" \
    "2 size 3 local 1/2 cross 0/1 node node01"
  echo "ok: srun -N2 -n3 -m cyclic: $(tr '\n' ';' <"$TMP/out.cyclic")"
  # A step on node02 only: its master is node02 (the job's first node, node01, before).
  in_cluster timeout 120 srun -N1 -n2 -w node02 "$PY" "$TASK" >"$TMP/out.w2" 2>"$TMP/err.w2" ||
    fail "srun -w node02 failed"
  layout_ok "$TMP/out.w2" "0 size 2 local 0/2 cross 0/1 node node02" "1 size 2 local 1/2 cross 0/1 node node02"
  echo "ok: srun -N1 -n2 -w node02: $(tr '\n' ';' <"$TMP/out.w2")"
  # --mpi=pmi2 sets PMI_RANK and PMI_SIZE: still Slurm's layout, no MPI (Open MPI aborted before).
  in_cluster timeout 120 srun --mpi=pmi2 -N2 -n2 "$PY" "$TASK" >"$TMP/out.pmi2" 2>"$TMP/err.pmi2" ||
    fail "srun --mpi=pmi2 failed"
  layout_ok "$TMP/out.pmi2" "0 size 2 local 0/1 cross 0/2 node node01" "1 size 2 local 0/1 cross 1/2 node node02"
  echo "ok: srun --mpi=pmi2 -N2 -n2: $(tr '\n' ';' <"$TMP/out.pmi2")"
  # --cpus-per-task: each task's threads (torch reads OMP_NUM_THREADS; cohort's default follows Slurm's count).
  in_cluster timeout 120 env -u OMP_NUM_THREADS srun -N2 -n2 --cpus-per-task=3 "$PY" "$TASK" >"$TMP/out.cpus" \
    2>"$TMP/err.cpus" || fail "srun --cpus-per-task=3 failed"
  expect_line "$TMP/out.cpus" "task rank 1 .* threads 3 sum ok" "--cpus-per-task=3"
  echo "ok: srun --cpus-per-task=3: $(tr '\n' ';' <"$TMP/out.cpus")"
  ;;
sbatch)
  cat >"$TMP/work/job.sh" <<EOF
#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 -o $TMP/job.out -e $TMP/job.err
set -e
srun "$COLL" --quick > $TMP/job.coll
srun "$PY" "$TASK"
# Two steps at once in one allocation: each its own port and rendezvous.
JOB_VALUE=1 srun -N2 -n2 --exact "$JOBV" > $TMP/job.a 2>&1 &
JOB_VALUE=2 srun -N2 -n2 --exact "$JOBV" > $TMP/job.b 2>&1 &
wait %1 && echo "step a ok"
wait %2 && echo "step b ok"
EOF
  jobid=$(in_cluster sbatch --parsable "$TMP/work/job.sh") || fail "sbatch refused the job"
  for _ in $(seq 1 600); do
    state=$(in_cluster squeue -h -j "$jobid" -o %T 2>/dev/null)
    [ -z "$state" ] && break
    sleep 0.2
  done
  [ -z "$state" ] || fail "batch job $jobid still $state after 120 s"
  layout_ok "$TMP/job.out" "0 size 4 local 0/2 cross 0/2 node node01" "3 size 4 local 1/2 cross 1/2 node node02"
  expect_line "$TMP/job.out" "^step a ok$" "first of two steps at once"
  expect_line "$TMP/job.out" "^step b ok$" "second of two steps at once"
  expect_line "$TMP/job.a" "job 1 rank 1 of 2: sum .* ok" "step a"
  expect_line "$TMP/job.b" "job 2 rank 1 of 2: sum .* ok" "step b"
  echo "ok: sbatch: steps of C and Python, two steps at once ($(head -n 1 "$TMP/job.a"); $(head -n 1 "$TMP/job.b"))"

  # The program run by the batch script itself, without srun: refused at once, saying so (it waited 300 s).
  cat >"$TMP/work/direct.sh" <<EOF
#!/bin/bash
#SBATCH -N2 --ntasks=2 -o $TMP/direct.out -e $TMP/direct.err
"$PY" "$TASK"
EOF
  start=$(now)
  jobid=$(in_cluster sbatch --parsable "$TMP/work/direct.sh") || fail "sbatch refused the direct job"
  for _ in $(seq 1 300); do
    [ -z "$(in_cluster squeue -h -j "$jobid" -o %T 2>/dev/null)" ] && break
    sleep 0.2
  done
  took=$(since "$start")
  expect_line "$TMP/direct.err" "SLURM_STEP_ID is not: this process runs in the batch script of Slurm job $jobid \(sbatch\), not as one of srun's tasks" "the direct batch job"
  awk -v t="$took" 'BEGIN { exit !(t < 30) }' || fail "the direct batch job took $took s"
  echo "ok: a batch script without srun fails in $took s: $(grep -o 'this process runs in the batch script[^;]*' "$TMP/direct.err" | head -n 1)"
  ;;
salloc)
  in_cluster timeout 180 salloc -N2 --ntasks-per-node=2 sh -c "srun -n4 '$COLL' --quick > '$TMP/salloc.coll' &&
    srun -n4 '$PY' '$TASK' && srun -N1 -n2 -w node02 '$PY' '$TASK' &&
    srun -N2 -n2 --ntasks-per-node=1 sh -c 'exec \"\$0\" --nnodes 2 --node-rank \$SLURM_NODEID --nproc-per-node 2 \
      --master-addr node01 --master-port $((BASE + 3)) \"\$1\" \"\$2\"' '$RUN' '$PY' '$TASK'" >"$TMP/out.salloc" \
    2>"$TMP/err.salloc" || fail "salloc failed"
  layout_ok "$TMP/out.salloc" "0 size 4 local 0/2 cross 0/2 node node01" "3 size 4 local 1/2 cross 1/2 node node02" \
    "1 size 2 local 1/2 cross 0/1 node node02"
  expect_line "$TMP/out.salloc" "^\[3\] task rank 3 size 4 local 1/2 cross 1/2 node node02" "cohortrun under srun"
  echo "ok: salloc -N2 --ntasks-per-node=2: test_collectives and cohort.torch on 4 tasks, 2 on node02, cohortrun under srun"
  ;;
faults)
  mkdir -p "$TMP/pids"
  before=$(ls /dev/shm | grep -c '^cohort-shm-')
  in_cluster srun -N2 -n3 "$PY" "$TASK" --loop 3000 --pid-dir "$TMP/pids" >"$TMP/out.cancel" 2>"$TMP/err.cancel" &
  srun_pid=$!
  PIDS+=("$srun_pid")
  for _ in $(seq 1 300); do [ "$(ls "$TMP/pids" | wc -l)" = 3 ] && break; sleep 0.1; done
  [ "$(ls "$TMP/pids" | wc -l)" = 3 ] || fail "the tasks did not start"
  sleep 1
  jobid=$(in_cluster squeue -h -o %i | head -n 1)
  start=$(now)
  in_cluster scancel "$jobid.0" || fail "scancel $jobid.0"
  for _ in $(seq 1 100); do
    alive=0
    for f in "$TMP"/pids/pid.*; do kill -0 "$(cat "$f")" 2>/dev/null && alive=$((alive + 1)); done
    [ "$alive" = 0 ] && break
    sleep 0.05
  done
  took=$(since "$start")
  [ "$alive" = 0 ] || fail "$alive tasks still alive 5 s after scancel"
  wait "$srun_pid"
  after=$(ls /dev/shm | grep -c '^cohort-shm-')
  [ "$after" -le "$before" ] || fail "scancel left $((after - before)) entries in /dev/shm"
  echo "ok: scancel of step $jobid.0: every task gone in $took s, nothing left in /dev/shm"
  in_cluster scancel "$jobid" 2>/dev/null

  rm -f "$TMP"/pids/*
  in_cluster srun -N2 -n3 "$PY" "$TASK" --loop 3000 --pid-dir "$TMP/pids" >"$TMP/out.kill" 2>"$TMP/err.kill" &
  srun_pid=$!
  PIDS+=("$srun_pid")
  for _ in $(seq 1 300); do [ "$(ls "$TMP/pids" | wc -l)" = 3 ] && break; sleep 0.1; done
  [ "$(ls "$TMP/pids" | wc -l)" = 3 ] || fail "the tasks did not start (kill -9)"
  sleep 1
  start=$(now)
  kill -9 "$(cat "$TMP/pids/pid.2")"
  for _ in $(seq 1 200); do kill -0 "$srun_pid" 2>/dev/null || break; sleep 0.05; done
  took=$(since "$start")
  kill -0 "$srun_pid" 2>/dev/null && fail "srun still runs 10 s after kill -9 of rank 2"
  wait "$srun_pid" && fail "srun exited 0 after a task was killed"
  for r in 0 1; do
    pid=$(cat "$TMP/pids/pid.$r")
    kill -0 "$pid" 2>/dev/null && fail "rank $r still alive"
  done
  [ "$(grep -c 'rank 2' "$TMP/err.kill")" -ge 2 ] || fail "the surviving ranks do not name rank 2"
  echo "ok: kill -9 of rank 2: srun ended in $took s, the survivors named it: $(grep -m1 'rank 2' "$TMP/err.kill")"
  ;;
*)
  fail "unknown case"
  ;;
esac
exit 0
