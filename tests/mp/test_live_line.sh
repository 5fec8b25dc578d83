#!/bin/sh
# cohortrun on a terminal (a pseudo-terminal from script(1)): a worker's carriage-return line is drawn in place,
# prefixed, and kept at the bottom while other workers print whole lines; COHORT_TTY tells the worker. On a pipe,
# nothing is drawn and COHORT_TTY is 0. Then fmnist-train's progress line end to end.
# usage: test_live_line.sh COHORTRUN FMNIST_TRAIN
set -u
run=$1
train=$2
command -v script >/dev/null || { echo "SKIP: script(1) (bsdutils) is not installed"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; od -c "$tmp/out" | tail -40; exit 1; }

# Rank 0 draws "one" then "two" in place; rank 1 prints a whole line in between.
worker='if [ "$RANK" = 0 ]; then printf "\rone tty=%s" "$COHORT_TTY"; sleep 0.6; printf "\rtwo"; sleep 0.3; printf "\n"; else sleep 0.3; echo hello; fi'
script -qfec "$run -np 2 sh -c '$worker'" /dev/null >"$tmp/out" 2>&1 </dev/null || fail "the job failed"
python3 - "$tmp/out" <<'PY' || fail "wrong live-line output"
import sys
d = open(sys.argv[1], 'rb').read().replace(b'\r\n', b'\n')  # the pty turns \n into \r\n
erase = b'\r\x1b[K'
expect = [erase + b'[0] one tty=1',                    # drawn at once, before its line ends
          erase + b'[1] hello\n' + erase + b'[0] one tty=1',  # a whole line goes above it, then it is drawn again
          erase + b'[0] two',                          # redrawn in place
          b'[0] two\n']                                # finished: its last segment, as a line
at = 0
for e in expect:
    i = d.find(e, at)
    if i < 0:
        sys.exit('missing, in order: %r in %r' % (e, d))
    at = i + len(e)
if d.count(b'hello') != 1 or b'one tty=1two' in d or b'\rtwo\n' in d:
    sys.exit('a line was repeated or written raw: %r' % d)
PY

# On a pipe: the raw carriage returns go through inside one line, and the worker is told there is no terminal.
out=$("$run" -np 1 sh -c 'printf "tty=%s\n" "$COHORT_TTY"') || fail "the piped job failed"
[ "$out" = "[0] tty=0" ] || fail "on a pipe: '$out'"

# fmnist-train: its progress line is live under cohortrun on a terminal, and its final line intact.
script -qfec "$run -np 2 $train --steps 6 --batch 16 --eval-batch 200" /dev/null >"$tmp/out" 2>&1 </dev/null ||
  fail "fmnist-train failed"
python3 - "$tmp/out" <<'PY' || fail "fmnist-train's live line"
import re, sys
d = open(sys.argv[1], 'rb').read().replace(b'\r\n', b'\n')
if not re.search(rb'\r\x1b\[K\[0\] epoch 1/1  step [1-6]/6  loss [0-9.]+', d):
    sys.exit('no live progress line: %r' % d[-2000:])
if not re.search(rb'(^|\n)\[0\] final: steps=6 loss=[0-9.]+ ', d):
    sys.exit('no final line at the start of a line: %r' % d[-2000:])
if b'unknown variable' in d:  # COHORT_TTY must be a known knob (src/core/env_knobs.h)
    sys.exit('a warning about the environment: %r' % d[-2000:])
PY
echo "ok: live line drawn, kept below other output, finished as a line; none on a pipe; fmnist-train live"
