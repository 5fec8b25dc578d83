#!/bin/sh
# test_file_store.sh COHORTRUN TEST_COLLECTIVES CASE: the collective matrix (--quick) on 3 ranks under cohortrun,
# with the rendezvous going through the file store (COHORT_STORE=file:DIR) instead of the TCP store.
#
#   existing_dir  DIR is a fresh, empty directory.
#   created_dir   DIR does not exist yet (two levels): the ranks race to create it.
#
# Afterwards DIR must hold what the rendezvous wrote there: one "ip:port" per rank, on three different ports, and
# the "connected" counter at exactly 3. That is the proof that the ranks met through the files (cohortrun still
# serves its TCP store, which the ranks then never use).
set -u
RUN=${1:?usage: test_file_store.sh COHORTRUN TEST_COLLECTIVES CASE}
COLL=${2:?usage: test_file_store.sh COHORTRUN TEST_COLLECTIVES CASE}
CASE=${3:?usage: test_file_store.sh COHORTRUN TEST_COLLECTIVES existing_dir|created_dir}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_file_store.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

fail() {
  echo "FAIL [$CASE]: $*" >&2
  exit 1
}

case $CASE in
existing_dir) DIR=$TMP ;;
created_dir) DIR=$TMP/shared/store ;;
*) fail "unknown case" ;;
esac

COHORT_RUN_ID=fs COHORT_STORE=file:$DIR "$RUN" -np 3 "$COLL" --quick >"$TMP/out" 2>"$TMP/err" </dev/null
rc=$?
cat "$TMP/out" "$TMP/err"
[ $rc -eq 0 ] || fail "cohortrun exited with $rc"
n=$(grep -c "of 3 (tcp): all collectives correct" "$TMP/out")
[ "$n" -eq 3 ] || fail "$n of 3 ranks reported correct collectives"

# Key "cohort/fs/0/0/peer/R" (run id fs, generation 0, first open) is the file "k_cohort%2ffs%2f0%2f0%2fpeer%2fR" (file_store.c
# escapes every '/').
ports=""
for r in 0 1 2; do
  f=$DIR/k_cohort%2ffs%2f0%2f0%2fpeer%2f$r
  [ -f "$f" ] || fail "the file store has no address for rank $r ($f)"
  addr=$(cat "$f")
  port=${addr##*:}
  case $port in
  '' | *[!0-9]*) fail "rank $r published '$addr', not ip:port" ;;
  esac
  [ "$port" -gt 0 ] || fail "rank $r published port $port"
  ports="$ports $port"
done
distinct=$(echo $ports | tr ' ' '\n' | sort -u | wc -l)
[ "$distinct" -eq 3 ] || fail "the ranks published $distinct distinct ports:$ports"
connected=$(cat "$DIR/k_cohort%2ffs%2f0%2f0%2fconnected" 2>/dev/null)
[ "$connected" = 3 ] || fail "the connected counter is '$connected', not 3"
echo "ok [$CASE]: rendezvous through $DIR (ports$ports, connected=$connected)"
