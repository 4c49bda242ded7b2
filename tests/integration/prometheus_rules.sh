#!/usr/bin/env bash
# Issue 25: the alert rules operators load (packaging/prometheus/ithbat-alerts.yml) are valid
# and behave: `promtool check rules` accepts them and `promtool test rules` runs their unit
# tests (ithbat-alerts.test.yml: each alert fires with its labels and text, near misses stay
# quiet). That their metrics exist is checked with the dashboard (grafana_dashboard.sh).
source "$(dirname "$0")/common.bash"
require promtool
dir="$(cd "$(dirname "$0")/../.." && pwd)/packaging/prometheus"
promtool check rules "$dir/ithbat-alerts.yml" >"$WORK/check.log" 2>&1 || {
  cat "$WORK/check.log" >&2
  fail "promtool check rules refused ithbat-alerts.yml"
}
(cd "$dir" && promtool test rules ithbat-alerts.test.yml) >"$WORK/test.log" 2>&1 || {
  cat "$WORK/test.log" >&2
  fail "promtool test rules failed"
}
rules=$(grep -c '^      - alert:' "$dir/ithbat-alerts.yml")
tested=$(grep -o 'alertname: [A-Za-z]*' "$dir/ithbat-alerts.test.yml" | sort -u | wc -l)
((tested == rules)) || fail "$rules alerts, but only $tested have unit tests"
echo "alert rules: $rules alerts, each unit-tested by promtool"
