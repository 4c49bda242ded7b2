#!/usr/bin/env bash
# Measures what the agent costs a node: average CPU (cores) and peak/final RSS of `ithbat
# agent` with every collector on, GPUs from the fake NVML (8 idle H100 SXM by default), at
# the given interval, for the given time. CPU is the process's own utime+stime from
# /proc/<pid>/stat, so other load on the machine does not inflate it.
#   scripts/measure-agent-cost.sh [SECONDS=600] [INTERVAL=1s] [BUILD_DIR=build]
# The fake answers NVML calls from shared memory: the cost of real driver calls is NOT in
# these figures (measure on a GPU node for that).
set -euo pipefail
seconds=${1:-600}
interval=${2:-1s}
build=${3:-build}
bin=$build/ithbat
lib=$(cd "$build/sim/lib" && pwd)/libnvidia-ml.so.1
[[ -x $bin && -f $lib ]] || { echo "build first: make build" >&2; exit 1; }
data=$(mktemp -d /tmp/ithbat-cost-XXXXXX)
"$bin" agent --listen 127.0.0.1:0 --interval "$interval" --nvml-library "$lib" --data-dir "$data" \
  --log-level info 2>"$data.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data" "$data.log"' EXIT
sleep 3  # start-up (library load, first ticks) is not steady state
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
t0=$(ticks); s0=$(date +%s.%N)
sleep "$seconds"
t1=$(ticks); s1=$(date +%s.%N)
rss=$(awk '/^VmRSS/{print $2}' "/proc/$pid/status")
hwm=$(awk '/^VmHWM/{print $2}' "/proc/$pid/status")
series=$(curl -s "http://127.0.0.1:$(grep -o 'listening on 127.0.0.1:[0-9]*' "$data.log" | head -1 | cut -d: -f2)/metrics" 2>/dev/null | grep -vc '^#' || true)
awk -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v hz="$hz" -v rss="$rss" -v hwm="$hwm" -v iv="$interval" -v n="$series" 'BEGIN {
  printf "agent cost over %.0f s at %s: %.4f cores average, RSS %.1f MiB (peak %.1f MiB), %s series on /metrics\n",
         s1 - s0, iv, (t1 - t0) / hz / (s1 - s0), rss / 1024, hwm / 1024, n }'
