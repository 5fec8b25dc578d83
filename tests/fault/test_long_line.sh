#!/bin/sh
# A line longer than 1 MiB (3,000,000 bytes, no newline) comes out of cohortrun as lines of exactly 1 MiB and the
# rest, each with its rank prefix (docs/cohortrun.md, "Output"). usage: test_long_line.sh COHORTRUN
set -u
got=$("$1" -np 1 sh -c 'head -c 3000000 /dev/zero | tr "\0" x' | awk '{ s = s " " length($0) } END { print s }')
want=" 1048580 1048580 902852" # "[0] " and 1048576 bytes, twice, then "[0] " and the 902848 left
if [ "$got" = "$want" ]; then echo "PASS: line lengths$got"; else echo "FAIL: line lengths$got, expected$want"; exit 1; fi
