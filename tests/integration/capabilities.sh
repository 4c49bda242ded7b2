#!/usr/bin/env bash
# The systemd unit's CapabilityBoundingSet (packaging/ithbat-agent.service) is all the agent
# needs: run with exactly that bounding set (setpriv, as root), the eBPF collectors (job output
# capture, CUDA/NCCL probes, scheduling and I/O) and the kernel log come up undegraded, and it
# writes its data directory. Without CAP_BPF the job-output capture must degrade: proof that the
# check can tell a missing capability.
source "$(dirname "$0")/common.bash"
require setpriv

unit="$(dirname "$0")/../../packaging/ithbat-agent.service"
caps=$(sed -n 's/^CapabilityBoundingSet=//p' "$unit")
[[ -n $caps ]] || fail "no CapabilityBoundingSet= line in $unit"
bounding="-all"
for c in $caps; do
  c=${c#CAP_}
  bounding+=",+${c,,}"
done

# run NAME BOUNDING: one `agent --once` under that bounding set; its /metrics in NAME.prom.
run() {
  setpriv --bounding-set "$2" --inh-caps -all -- "$ITHBAT" agent --once --listen 127.0.0.1:0 --interval 1s \
    --nvml-library /nonexistent/libnvidia-ml.so.1 --data-dir "$WORK/data-$1" >"$WORK/$1.prom" 2>"$WORK/$1.log" ||
    fail "agent --once under bounding set $2 exited $?"
}
degraded() { sed -n "s/^ithbat_collector_degraded{collector=\"$2\"} //p" "$WORK/$1.prom"; }

run unit "$bounding"
for collector in joblog probes sched_io kmsg; do
  d=$(degraded unit "$collector")
  [[ $d == 0 ]] || fail "collector $collector is degraded ($d) with the unit's capabilities ($caps): $(grep -i "$collector" "$WORK/unit.log" | head -3)"
done
[[ -n $(find "$WORK/data-unit" -name 'seg-*.ith' -print -quit) ]] || fail "no segment written under the unit's capabilities"

run nobpf "${bounding/,+bpf/}"
[[ $(degraded nobpf joblog) == 1 ]] || fail "without CAP_BPF the job-output capture did not degrade: the check cannot tell"
echo "capabilities: $caps suffice (joblog, probes, sched_io, kmsg undegraded); without CAP_BPF joblog degrades"
