#!/usr/bin/env bash
# The HTML incident report (src/report) in a real browser: headless Debian Chromium opens the
# sample report (tests/report/sample_incident.h, written by ithbat_report_sample) from a file,
# with networking off, and
#  1. logs no console error, no uncaught exception and no failed or blocked resource load, and
#     the DOM it built holds the report's charts (one <svg> per chartable piece of evidence, with
#     their lines);
#  2. draws it: the screenshot exists and is not blank (more than a handful of colours).
# Without chromium the test FAILS (CI installs it: scripts/install-deps.sh).
source "$(dirname "$0")/common.bash"
SAMPLE=${2:?usage: $0 ITHBAT_BINARY REPORT_SAMPLE_BINARY}
CHROMIUM=/usr/bin/chromium
[[ -x $CHROMIUM ]] || fail "Debian chromium is not installed at $CHROMIUM (scripts/install-deps.sh installs it)"
require python3

"$SAMPLE" "$WORK/report.html" >"$WORK/sample.log" 2>&1 || fail "ithbat_report_sample exited $?"
want_svgs=$(grep -o '<svg' "$WORK/report.html" | wc -l)
(( want_svgs >= 3 )) || fail "the sample report has only $want_svgs charts"

# Headless Chromium on a local file with every background fetch off; its own profile each run.
browse() {  # LOG ARGS...: runs chromium on the report, stderr in LOG
  local log=$1
  shift
  local profile
  profile=$(mktemp -d "$WORK/profile-XXXXXX")
  timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" "$@" "file://$WORK/report.html" 2>"$log"
}

# 1. Console and DOM.
browse "$WORK/chromium-dom.log" --enable-logging=stderr --v=0 --dump-dom >"$WORK/dom.html" ||
  fail "chromium --dump-dom exited $?"
# Chromium's own noise in a container (no D-Bus, no GPU process) is not the page's; the page's
# messages come as CONSOLE lines, and failed loads as net errors or CSP violations.
if grep -E 'CONSOLE|Uncaught|net::ERR_|Failed to load resource|Content Security Policy|Refused to' \
     "$WORK/chromium-dom.log" >"$WORK/page-errors.txt"; then
  cat "$WORK/page-errors.txt" >&2
  fail "the report logged console errors or failed loads in Chromium"
fi
dom_svgs=$(grep -o '<svg' "$WORK/dom.html" | wc -l)
dom_lines=$(grep -o '<polyline' "$WORK/dom.html" | wc -l)
(( dom_svgs == want_svgs )) || fail "Chromium's DOM has $dom_svgs <svg> elements, the file $want_svgs"
(( dom_lines >= want_svgs )) || fail "Chromium's DOM has only $dom_lines polylines for $dom_svgs charts"
grep -q '<rect class="shade"' "$WORK/dom.html" || fail "no shaded diagnosis window in Chromium's DOM"
grep -q 'class="side infrastructure">infrastructure<' "$WORK/dom.html" || fail "no verdict in Chromium's DOM"
echo "DOM: $dom_svgs charts, $dom_lines polylines, no console error"

# 2. The screenshot: present and drawn.
browse "$WORK/chromium-shot.log" --screenshot="$WORK/report.png" --window-size=1280,2000 >/dev/null ||
  fail "chromium --screenshot exited $?"
[[ -s $WORK/report.png ]] || fail "Chromium wrote no screenshot"
python3 - "$WORK/report.png" <<'PY' || fail "the screenshot is blank or unreadable"
# Decodes the PNG (8-bit RGB/RGBA, non-interlaced: what Chromium writes) with zlib alone and
# counts distinct colours: a blank or unstyled page has a handful, the charts bring dozens.
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
if data[:8] != b"\x89PNG\r\n\x1a\n":
    sys.exit("not a PNG")
pos, idat, header = 8, b"", None
while pos < len(data):
    n, = struct.unpack(">I", data[pos:pos + 4])
    kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
    pos += 12 + n
    if kind == b"IHDR":
        header = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
        idat += body
width, height, depth, colour_type, _, _, interlace = header
if depth != 8 or colour_type not in (2, 6) or interlace:
    sys.exit(f"unexpected PNG format: depth {depth}, colour type {colour_type}, interlace {interlace}")
bpp = 3 if colour_type == 2 else 4
raw, stride = zlib.decompress(idat), width * bpp
prev, colours, i = bytearray(stride), set(), 0
for y in range(height):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    if y % 4 == 0:  # every 4th row is plenty to see what is drawn
        colours.update(bytes(line[x:x + 3]) for x in range(0, stride, bpp))
    prev = line
print(f"screenshot {width}x{height}: {len(colours)} distinct colours")
if len(colours) < 24:
    sys.exit(f"only {len(colours)} distinct colours: the page is blank or the charts are not drawn")
PY
