#!/usr/bin/env bash
# History survives a crash: an agent with a data directory is killed with SIGKILL (no clean
# stop, no final flush); a new agent on the same directory still answers /api/v1/series for
# the first run's window with the first run's samples, up to the last periodic flush.
source "$(dirname "$0")/common.bash"
require curl
require python3

data="$WORK/data"
series='ithbat_host_memory_total_bytes'

# samples URL START END: the sample times of $series in [START, END] as "t value" lines.
samples() {
  "${CURL[@]}" -G "$1/api/v1/series" --data-urlencode "match=$series" --data-urlencode "start=$2" \
    --data-urlencode "end=$3" | python3 -c 'import json, sys
d = json.load(sys.stdin)
assert d["status"] == "success", d
for s in d["data"]:
    for t, v in s["samples"]:
        print(t, v)'
}

first_start=$(date +%s.%N)
start_agent first --data-dir "$data" --interval 500ms --flush-interval 1s
# Enough ticks for several flushes.
wait_until 30 "the first agent's samples" has_metric "$AGENT_URL" "$series"
sleep 4
samples "$AGENT_URL" "$first_start" "$(date +%s.%N)" >"$WORK/before.txt"
kill -KILL "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
killed_at=$(date +%s.%N)
before=$(wc -l <"$WORK/before.txt")
((before >= 4)) || fail "the first agent stored only $before samples of $series"

start_agent second --data-dir "$data" --interval 500ms --flush-interval 1s
samples "$AGENT_URL" "$first_start" "$killed_at" >"$WORK/after.txt"
after=$(wc -l <"$WORK/after.txt")

# Everything flushed before the kill is back: at most the last flush interval (1 s = two
# ticks at 500 ms, plus one tick in flight) may be missing.
missing=$(comm -23 <(sort "$WORK/before.txt") <(sort "$WORK/after.txt") | wc -l)
if ((after == 0 || missing > 3)); then
  echo "before the kill:" >&2
  cat "$WORK/before.txt" >&2
  echo "after the restart:" >&2
  cat "$WORK/after.txt" >&2
  fail "history lost across the restart: $missing of $before samples missing"
fi
# And what came back is the first run's data, not something else.
extra=$(comm -13 <(sort "$WORK/before.txt") <(sort "$WORK/after.txt") | wc -l)
((extra <= 2)) || fail "$extra samples in the first run's window that the first run never served"
echo "restart kept $after samples of the first run ($before served before SIGKILL, $missing not yet flushed)"
