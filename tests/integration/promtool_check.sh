#!/usr/bin/env bash
# `ithbat agent --once` produces exposition text that Prometheus' own checker accepts without
# a single complaint (lint warnings included): once on this machine's real /proc alone, and
# once with the GPUs of the fake libnvidia-ml.so.1 (8 idle H100 SXM), where the GPU collector
# must expose at least 850 series, each with its HELP text.
source "$(dirname "$0")/common.bash"
require promtool

check_clean() {  # FILE: promtool must accept it and say nothing
  # promtool exits non-zero on errors; lint problems are printed but may not change the exit
  # code, so any output at all is a failure too.
  if ! promtool check metrics <"$1" >"$WORK/promtool.log" 2>&1; then
    cat "$WORK/promtool.log" >&2
    fail "promtool check metrics found errors in $1"
  fi
  if [[ -s $WORK/promtool.log ]]; then
    cat "$WORK/promtool.log" >&2
    fail "promtool check metrics complained about $1"
  fi
  echo "promtool check metrics: clean ($(grep -c '^# TYPE' "$1") metric families, $(grep -vc '^#' "$1") series)"
}

"$ITHBAT" agent --once --interval 200ms --log-level warn >"$WORK/metrics.txt" 2>"$WORK/agent.log" ||
  fail "ithbat agent --once exited $?"
grep -q '^ithbat_host_memory_total_bytes ' "$WORK/metrics.txt" || fail "no ithbat_host_memory_total_bytes in the output"
grep -q '^ithbat_collector_up{collector="host"} 1$' "$WORK/metrics.txt" || fail "the host collector is not up"
check_clean "$WORK/metrics.txt"

fake_nvml=$(dirname "$ITHBAT")/sim/lib/libnvidia-ml.so.1
[[ -f $fake_nvml ]] || fail "the fake NVML is not built at $fake_nvml"
"$ITHBAT" agent --once --interval 500ms --log-level warn --kmsg "" --nvml-library "$fake_nvml" \
  >"$WORK/gpu-metrics.txt" 2>"$WORK/gpu-agent.log" || fail "ithbat agent --once with the fake NVML exited $?"
grep -q '^ithbat_collector_up{collector="gpu"} 1$' "$WORK/gpu-metrics.txt" || {
  cat "$WORK/gpu-agent.log" >&2
  fail "the gpu collector is not up on the fake NVML"
}
gpu_series=$(grep -c '^ithbat_gpu_' "$WORK/gpu-metrics.txt" || true)
(( gpu_series >= 850 )) || fail "only $gpu_series GPU series on the fake 8-GPU node (want >= 850)"
# Every GPU metric family has its HELP line (no series without a description).
missing_help=$(comm -23 <(grep -o '^ithbat_gpu_[a-z0-9_]*' "$WORK/gpu-metrics.txt" | sort -u) \
                        <(grep -o '^# HELP ithbat_gpu_[a-z0-9_]*' "$WORK/gpu-metrics.txt" | cut -d' ' -f3 | sort -u))
[[ -z $missing_help ]] || fail "GPU metrics without HELP: $missing_help"
echo "fake 8-GPU node: $gpu_series GPU series"
check_clean "$WORK/gpu-metrics.txt"
