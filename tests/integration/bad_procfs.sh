#!/usr/bin/env bash
# An agent whose --procfs holds malformed files keeps serving /metrics and /healthz, stays
# alive, and counts the errors in ithbat_collector_errors_total{collector="host"}.
source "$(dirname "$0")/common.bash"
require curl

root="$WORK/proc"
mkdir -p "$root/pressure"
printf 'cpu  not numbers at all\ncpu0 1 2\nintr x\n' >"$root/stat"
printf 'MemTotal: lots kB\nMemFree:\n' >"$root/meminfo"
printf 'garbage\n' >"$root/loadavg"
head -c 4096 /dev/urandom >"$root/vmstat"
printf 'some avg10=abc\n' >"$root/pressure/cpu"
# A line far longer than any real /proc file has, and no newline at the end.
head -c 3000000 /dev/zero | tr '\0' 'x' >"$root/pressure/memory"
: >"$root/pressure/io"

start_agent agent --procfs "$root" --interval 200ms
errors() { metric_value "$AGENT_URL" 'ithbat_collector_errors_total{collector="host"}'; }
has_errors() { local e; e=$(errors); [[ -n $e ]] && python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' "$e"; }
wait_until 20 "ithbat_collector_errors_total{collector=\"host\"} > 0" has_errors

kill -0 "$AGENT_PID" 2>/dev/null || fail "the agent died"
"${CURL[@]}" -f "$AGENT_URL/healthz" >"$WORK/healthz.json" || fail "/healthz failed"
grep -q '"host"' "$WORK/healthz.json" || fail "/healthz does not mention the host collector: $(cat "$WORK/healthz.json")"
"${CURL[@]}" -f "$AGENT_URL/metrics" >"$WORK/metrics.txt" || fail "/metrics failed"
grep -q '^ithbat_collector_errors_total{collector="host"} ' "$WORK/metrics.txt" ||
  fail "/metrics lacks the host collector's error count"
grep -q '^ithbat_collector_up{collector="host"} ' "$WORK/metrics.txt" || fail "/metrics lacks ithbat_collector_up for host"
echo "bad procfs: agent alive, /metrics and /healthz served, host errors=$(errors)"
