#!/bin/sh
# cohortrun --bind core: every worker gets its own, disjoint share of the CPUs; more workers than CPUs: no binding.
# --bind socket: every worker gets all the CPUs of one socket (those cohortrun may use), consecutive ranks on the
# same or the next socket. A bad value is refused.
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

# "0-2,5" -> "0 1 2 5"
expand() {
  for part in $(echo "$1" | tr ',' ' '); do
    case $part in *-*) seq "${part%-*}" "${part#*-}" ;; *) echo "$part" ;; esac
  done | tr '\n' ' ' | sed 's/ $//'
}
socket_of() { cat "/sys/devices/system/cpu/cpu$1/topology/physical_package_id" 2>/dev/null || echo 0; }
allowed=$(expand "$(grep Cpus_allowed_list /proc/self/status | cut -f2)")
nsock=$(for c in $allowed; do socket_of "$c"; done | sort -u | wc -l)
out=$("$run" -np 2 --bind socket sh -c 'grep Cpus_allowed_list /proc/self/status | cut -f2') || exit 1
echo "$out"
prev=-1
for r in 0 1; do
  got=$(expand "$(echo "$out" | sed -n "s/^\[$r\] //p")")
  s=$(socket_of "${got%% *}")
  want=$(for c in $allowed; do [ "$(socket_of "$c")" = "$s" ] && printf '%s ' "$c"; done | sed 's/ $//')
  if [ -z "$got" ] || [ "$got" != "$want" ]; then
    echo "FAIL: --bind socket gave rank $r CPUs '$got', not all of socket $s's: '$want'"
    exit 1
  fi
  [ "$s" -ge "$prev" ] || { echo "FAIL: rank $r on socket $s, before rank $((r - 1))'s socket $prev"; exit 1; }
  prev=$s
done
"$run" -np 1 --bind sock true 2>/dev/null && { echo "FAIL: --bind sock was accepted"; exit 1; }
echo "ok: $ncpu workers bound to distinct CPUs, $over left unbound with a warning, 2 workers each on a whole" \
  "socket ($nsock socket(s) here), a bad value refused"
