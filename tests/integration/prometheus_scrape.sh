#!/usr/bin/env bash
# A real Prometheus server (Debian's) scrapes the agent every second: the target is up and
# the value Prometheus stored for a host metric is the one the agent exposes.
source "$(dirname "$0")/common.bash"
require prometheus
require curl
require python3

start_agent agent --data-dir "$WORK/data" --interval 1s
wait_until 20 "the agent's first host sample" has_metric "$AGENT_URL" ithbat_host_memory_total_bytes
expected=$(metric_value "$AGENT_URL" ithbat_host_memory_total_bytes)

start_prometheus

# query EXPR: the first result's value, or nothing.
query() {
  "${CURL[@]}" -G "$prom_url/api/v1/query" --data-urlencode "query=$1" 2>/dev/null |
    python3 -c 'import json, sys
d = json.load(sys.stdin)
r = d.get("data", {}).get("result", [])
print(r[0]["value"][1] if r else "")' 2>/dev/null || true
}
have_sample() { test -n "$(query ithbat_host_memory_total_bytes)" && test "$(query 'up{job="ithbat"}')" = 1; }
wait_until 60 "Prometheus to scrape the agent" have_sample

got=$(query ithbat_host_memory_total_bytes)
up=$(query 'up{job="ithbat"}')
python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if a == b else 1)' "$got" "$expected" ||
  fail "Prometheus stored ithbat_host_memory_total_bytes=$got, the agent exposes $expected"
[[ $up == 1 ]] || fail "up{job=\"ithbat\"} is $up"
# A labelled series too, and the agent's own health, the way a dashboard would ask.
[[ $(query 'ithbat_collector_up{collector="host"}') == 1 ]] || fail "ithbat_collector_up{collector=\"host\"} is not 1 in Prometheus"
echo "Prometheus scraped the agent: up=1, ithbat_host_memory_total_bytes=$got (agent: $expected)"
