#!/bin/sh
# cohortrun --bind core with fmnist-train --threads 2: every thread of every worker (the main thread, cohort's
# progress thread, the stall inspector, the data loader, OpenBLAS's pool) runs inside its worker's share, and the two
# workers' shares are disjoint. Threads inherit the affinity of the thread that creates them; this would catch one
# that sets its own (an OpenBLAS built with affinity support pins its threads to CPUs of its choosing; Debian's is
# built with NO_AFFINITY). Sampled three times, a second apart, once training has begun; then the job is stopped.
# usage: test_bind_threads.sh COHORTRUN FMNIST_TRAIN
set -u
run=$1
train=$2
[ "$(nproc)" -ge 2 ] || { echo "SKIP: 2 workers need 2 CPUs, this process may use $(nproc)"; exit 77; }
tmp=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid"
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -5 "$tmp/out"; exit 1; }

# "0-2,5" -> "0 1 2 5"
expand() {
  for part in $(echo "$1" | tr ',' ' '); do
    case $part in *-*) seq "${part%-*}" "${part#*-}" ;; *) echo "$part" ;; esac
  done | tr '\n' ' ' | sed 's/ $//'
}
cpus_of() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$1/status"; }

"$run" -np 2 --bind core "$train" --threads 2 --steps 400 --log-every 1 >"$tmp/out" 2>&1 &
pid=$!
# By rank 0's first progress line both ranks have finished a step, so every thread they start has started.
i=0
until grep -q '^\[0\] epoch .* step ' "$tmp/out"; do
  i=$((i + 1))
  if [ "$i" -gt 600 ] || ! kill -0 "$pid" 2>/dev/null; then fail "no progress line within 120 s"; fi
  sleep 0.2
done
workers=$(pgrep -P "$pid" | tr '\n' ' ')
[ "$(echo "$workers" | wc -w)" -eq 2 ] || fail "cohortrun $pid has workers '$workers', not 2"
for sample in 1 2 3; do
  seen=
  for w in $workers; do
    share=$(cpus_of "/proc/$w")
    [ -n "$share" ] || fail "cannot read worker $w's affinity"
    rank=$(tr '\0' '\n' <"/proc/$w/environ" | sed -n 's/^RANK=//p')
    n=0
    for t in /proc/"$w"/task/*; do
      [ -d "$t" ] || continue # gone since the listing
      l=$(cpus_of "$t") || continue
      [ -z "$l" ] && continue
      [ "$sample" = 1 ] && echo "rank $rank pid $w thread ${t##*/}: $l"
      [ "$l" = "$share" ] || fail "rank $rank's thread ${t##*/} may run on CPUs $l, outside its share $share"
      n=$((n + 1))
    done
    # main, progress, stall inspector, loader, and OpenBLAS's second thread at the least
    [ "$n" -ge 5 ] || fail "rank $rank has $n threads, fewer than the 5 expected of fmnist-train --threads 2"
    for c in $(expand "$share"); do
      case " $seen " in *" $c "*) fail "CPU $c is in both workers' shares" ;; esac
      seen="$seen $c"
    done
  done
  sleep 1
done
echo "ok: every thread of the 2 workers stayed inside its worker's share, 3 samples; shares disjoint:$seen"
