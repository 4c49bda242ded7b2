#!/usr/bin/env bash
# `ithbat agent --once` on this machine's real /proc produces exposition text that Prometheus'
# own checker accepts without a single complaint (lint warnings included).
source "$(dirname "$0")/common.bash"
require promtool

"$ITHBAT" agent --once --interval 200ms --log-level warn >"$WORK/metrics.txt" 2>"$WORK/agent.log" ||
  fail "ithbat agent --once exited $?"
grep -q '^ithbat_host_memory_total_bytes ' "$WORK/metrics.txt" || fail "no ithbat_host_memory_total_bytes in the output"
grep -q '^ithbat_collector_up{collector="host"} 1$' "$WORK/metrics.txt" || fail "the host collector is not up"

# promtool exits non-zero on errors; lint problems are printed but may not change the exit
# code, so any output at all is a failure too.
if ! promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.log" 2>&1; then
  cat "$WORK/promtool.log" >&2
  fail "promtool check metrics found errors"
fi
if [[ -s $WORK/promtool.log ]]; then
  cat "$WORK/promtool.log" >&2
  fail "promtool check metrics complained"
fi
echo "promtool check metrics: clean ($(grep -c '^# TYPE' "$WORK/metrics.txt") metric families, $(grep -vc '^#' "$WORK/metrics.txt") series)"
