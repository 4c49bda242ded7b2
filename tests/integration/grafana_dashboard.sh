#!/usr/bin/env bash
# Issue 25: the Grafana dashboard (packaging/grafana/ithbat-dashboard.json) and the alert rules
# (packaging/prometheus/) ask only for what the agent produces. Offline: every ithbat_ metric a
# query names is one `ithbat metrics-doc` lists, and every label it selects on is one of that
# metric's labels (or a label Prometheus or --cluster/--node add). Online: a real Prometheus
# scrapes an agent on the fake 8-GPU node, every dashboard query parses, and the GPU panels'
# queries return one series per GPU.
source "$(dirname "$0")/common.bash"
require prometheus
require promtool
require jq
fake_node_tools

root="$(cd "$(dirname "$0")/../.." && pwd)"
dashboard="$root/packaging/grafana/ithbat-dashboard.json"
rules="$root/packaging/prometheus/ithbat-alerts.yml"

jq -e '.uid and .title and (.panels | length > 10)' "$dashboard" >/dev/null || fail "the dashboard lacks a uid, title or panels"
dupes=$(jq -r '.panels[].id' "$dashboard" | sort | uniq -d)
[[ -z $dupes ]] || fail "panel ids used twice: $dupes"
jq -r '.panels[] | select(.type != "row") | .targets[].expr' "$dashboard" >"$WORK/exprs.txt"
(($(wc -l <"$WORK/exprs.txt") >= 25)) || fail "only $(wc -l <"$WORK/exprs.txt") queries in the dashboard"
grep -v '^#' "$rules" | grep -o 'expr: .*' | sed 's/^expr: //' >"$WORK/rule-exprs.txt"

# metric -> its labels, from the agent's own catalogue.
"$ITHBAT" metrics-doc >"$WORK/metrics.md"
labels_of() {  # METRIC: its label names, one per line (nothing if unknown)
  awk -F'|' -v m="\`$1\`" '$2 ~ " " m " " { print $5 }' "$WORK/metrics.md" | tr -d '` ' | tr ',' '\n' | grep -v '^$' || true
}
known() { grep -q "| \`$1\` |" "$WORK/metrics.md"; }

checked=0
for file in "$WORK/exprs.txt" "$WORK/rule-exprs.txt"; do
  while read -r metric; do
    known "$metric" || fail "$(basename "$file"): $metric is not a metric the agent produces"
    checked=$((checked + 1))
  done < <(grep -o 'ithbat_[a-z0-9_]*' "$file" | sort -u)
  # Selectors: metric{name="..",name=~".."}: each name must be one of the metric's labels.
  while IFS= read -r sel; do
    metric=${sel%%\{*}
    body=${sel#*\{}
    body=${body%\}}
    allowed=" instance job cluster node $(labels_of "$metric" | tr '\n' ' ') "
    while read -r name; do
      [[ -z $name ]] && continue
      [[ $allowed == *" $name "* ]] || fail "$metric has no label $name (selector $sel)"
    done < <(grep -o '[A-Za-z_][A-Za-z0-9_]*[!=]~\?"' <<<"$body" | sed 's/[!=]~\?"$//')
  done < <(grep -o 'ithbat_[a-z0-9_]*{[^}]*}' "$file" | sort -u)
done
echo "offline: $checked metric names in dashboard and rules, all produced by the agent, every selector label known"

# Online: a real Prometheus over an agent on the fake GPUs.
start_agent agent --interval 1s --kmsg "" --nvml-library "$fake" --node n17
wait_until 20 "the agent's first GPU sample" answer_has "$AGENT_URL/metrics" "^ithbat_gpu_temperature_celsius{"
start_prometheus
ask() { "${CURL[@]}" -G "$prom_url/api/v1/query" --data-urlencode "query=$1" 2>/dev/null || true; }
series_count() { ask "$1" | jq -r 'if .status == "success" then (.data.result | length) else "error" end'; }
eight_gpus() { test "$(series_count 'ithbat_gpu_temperature_celsius')" = 8; }  # evaluated on every poll
wait_until 60 "Prometheus to scrape the agent's 8 GPUs" eight_gpus
sleep 3  # a few more scrapes, so that rate() has two points

with_data=0
while IFS= read -r expr; do
  q=${expr//\$instance/.*}
  q=${q//\$job_id/.*}
  n=$(series_count "$q")
  [[ $n == error || -z $n ]] && fail "Prometheus refused the dashboard query: $expr ($(ask "$q" | jq -r .error))"
  ((n > 0)) && with_data=$((with_data + 1))
done <"$WORK/exprs.txt"
for metric in ithbat_gpu_utilization_ratio 'ithbat_gpu_gpm_ratio{metric="sm_activity"}' 'ithbat_gpu_clock_hertz{clock="sm"}' \
  ithbat_gpu_temperature_celsius ithbat_gpu_power_watts ithbat_gpu_memory_used_bytes; do
  n=$(series_count "$metric")
  [[ $n == 8 ]] || fail "the GPU panel query $metric found $n series on the 8-GPU node"
done
echo "online: $(wc -l <"$WORK/exprs.txt") dashboard queries parse in Prometheus, $with_data have data on a fake 8-GPU node"
