#!/bin/sh
# cohortrun --bind core: every worker gets its own, disjoint share of the CPUs; more workers than CPUs: no binding.
# usage: test_bind.sh COHORTRUN
set -u
run=$1
ncpu=$(nproc)
out=$("$run" -np "$ncpu" --bind core sh -c 'grep Cpus_allowed_list /proc/self/status | cut -f2') || exit 1
echo "$out"
lists=$(echo "$out" | sed 's/^\[[0-9]*\] //' | sort)
[ "$(echo "$lists" | sort -u | wc -l)" -eq "$ncpu" ] || { echo "FAIL: the $ncpu workers do not have distinct CPU sets"; exit 1; }
for l in $lists; do
  case $l in *-* | *,*) echo "FAIL: a worker of $ncpu on $ncpu CPUs got more than one CPU ($l)"; exit 1 ;; esac
done
over=$((ncpu + 1))
err=$("$run" -np "$over" --bind core true 2>&1 >/dev/null)
echo "$err" | grep -q "are not bound" || { echo "FAIL: no warning when $over workers share $ncpu CPUs: $err"; exit 1; }
"$run" -np 1 --bind socket true 2>/dev/null && { echo "FAIL: --bind socket was accepted"; exit 1; }
echo "ok: $ncpu workers bound to distinct CPUs, $over left unbound with a warning, a bad value refused"
