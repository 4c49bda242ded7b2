#!/usr/bin/env bash
# The agent's systemd unit (packaging/ithbat-agent.service) keeps its exposure at 4.0 or lower
# (the hub's, packaging/ithbat-hub.service, at 2.0)
# by `systemd-analyze security` (issue 20; it was 8.3 EXPOSED). Offline: the unit file is scored
# as written, no systemd instance is needed. The threshold is systemd's own scale x10.
source "$(dirname "$0")/common.bash"
require systemd-analyze

unit="$(dirname "$0")/../../packaging/ithbat-agent.service"
cp "$unit" "$WORK/ithbat-agent.service"
if ! systemd-analyze security --offline=yes --threshold=40 "$WORK/ithbat-agent.service" >"$WORK/analyze.log" 2>&1; then
  grep -E '✗|Overall' "$WORK/analyze.log" >&2 || cat "$WORK/analyze.log" >&2
  fail "the unit's exposure is above 4.0"
fi
echo "unit security: $(grep -o 'Overall exposure level.*' "$WORK/analyze.log")"

# The hub needs no privilege at all (a system user, no capabilities, no devices): 2.0 at most.
cp "$(dirname "$0")/../../packaging/ithbat-hub.service" "$WORK/ithbat-hub.service"
if ! systemd-analyze security --offline=yes --threshold=20 "$WORK/ithbat-hub.service" >"$WORK/analyze-hub.log" 2>&1; then
  grep -E '✗|Overall' "$WORK/analyze-hub.log" >&2 || cat "$WORK/analyze-hub.log" >&2
  fail "the hub unit's exposure is above 2.0"
fi
echo "unit security: $(grep -o 'Overall exposure level.*' "$WORK/analyze-hub.log")"
