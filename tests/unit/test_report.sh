#!/usr/bin/env bash
# test_report.sh COHORTRUN FMNIST_TRAIN REPORT: the metrics of a real 2-rank run turned into the HTML report, and the
# report rendered in headless Chromium (Debian's chromium): every chart is in the page with the data of the run, and
# the rendered page is not blank (its pixels are decoded here: many colours, most of them not white). Bad input gets
# one line naming the file and the line. Skipped (77) only where chromium is not installed, for the rendering part.
set -u
COHORTRUN=$1 FT=$2 REPORT=$3
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL [report]: $*"; exit 1; }

"$COHORTRUN" -np 2 "$FT" --steps 24 --batch 32 --log-every 8 --metrics "$W/m.jsonl" --csv "$W/m.csv" --quiet \
  >"$W/train.log" 2>&1 || { cat "$W/train.log"; fail "fmnist-train --metrics failed"; }
steps=$(grep -c '"step":' "$W/m.jsonl")
[ "$steps" -eq 24 ] || fail "$steps step lines in the metrics, expected 24"
grep -q '"summary":true' "$W/m.jsonl" || fail "no summary line at the end of the metrics"
"$REPORT" --metrics "$W/m.jsonl" --csv "$W/m.csv" -o "$W/r.html" --title "test run" || fail "cohort-report failed"

/usr/bin/python3 - "$W/r.html" "$W/m.jsonl" <<'PY' || exit 1
import json, re, sys
page, metrics = open(sys.argv[1]).read(), [json.loads(l) for l in open(sys.argv[2])]
steps = [m for m in metrics if "step" in m]
ids = re.findall(r'<svg id="([a-z]+)"', page)
want = ["loss", "accuracy", "throughput", "heatmap", "breakdown", "comm"]
assert ids == want, f"charts {ids}, expected {want}"
cells = len(re.findall(r'<rect class="cell"', page))
assert cells == 2 * len(steps), f"{cells} heatmap cells for 2 ranks x {len(steps)} steps"
loss = re.search(r'<svg id="loss".*?<polyline class="series"[^>]* points="([^"]*)"', page, re.S)
assert loss and len(loss.group(1).split()) == len(steps), "the loss line does not have a point per step"
bars = len(re.findall(r'<rect class="bar ', page))
assert bars == 3 * 2, f"{bars} bars in the breakdown, expected 3 per rank"
slow = max(range(2), key=lambda r: sum(1 for s in steps if s["slowest_rank"] == r))
assert f"rank {slow}: the longest forward+backward" in page, "the summary does not name the slowest rank"
print(f"ok   the page has its {len(ids)} charts, {cells} heatmap cells, the slowest rank {slow}")
PY

# Bad input: one line with the file and line.
printf '{"step":0,"step_s":[1],"compute_s":[1]}\n{"step": 1, oops\n' >"$W/bad.jsonl"
err=$("$REPORT" --metrics "$W/bad.jsonl" -o "$W/bad.html" 2>&1)
[ $? -eq 2 ] || fail "a broken line did not give exit 2: $err"
echo "$err" | grep -q "bad.jsonl:2: not a JSON line" || fail "the error does not name the line: $err"
echo "ok   a broken line: $err"

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  echo "SKIP: the rendering check needs chromium (apt-get install chromium)"
  exit 77
fi
timeout 120 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1300 \
  --user-data-dir="$W/chrome" --screenshot="$W/r.png" "file://$W/r.html" >"$W/chrome.log" 2>&1
[ -s "$W/r.png" ] || { tail -5 "$W/chrome.log"; fail "chromium wrote no screenshot"; }
/usr/bin/python3 - "$W/r.png" <<'PY'
import struct, sys, zlib
# A PNG decoder for chromium's screenshots (8-bit RGB or RGBA, not interlaced): enough to count colours.
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, w = 8, b"", 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        assert depth == 8 and ctype in (2, 6) and not interlace, f"PNG type {depth}/{ctype}/{interlace}"
        bpp = 3 if ctype == 2 else 4
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(bytes(line)); prev = line
colours, inked = set(), 0
for row in rows:
    for x in range(0, stride, bpp):
        px = row[x:x + 3]
        colours.add(px)
        inked += px != b"\xff\xff\xff"
share = inked / (w * h)
print(f"rendered {w}x{h}: {len(colours)} colours, {100 * share:.1f}% of the pixels not white")
assert len(colours) >= 40, "too few colours: the charts did not render"
assert share > 0.05, "the page is nearly blank"
print("ok   chromium rendered the report")
PY
