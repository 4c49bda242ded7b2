#!/usr/bin/env bash
# Issue 25: an operator moving from dcgm-exporter keeps their dashboards. `ithbat agent --once
# --dcgm-exporter-names` on the fake 8-GPU node must expose the series NVIDIA's own Grafana
# dashboard for dcgm-exporter queries (grafana/dcgm-exporter-dashboard.json: GPU_TEMP,
# POWER_USAGE, SM_CLOCK, GR_ENGINE_ACTIVE, PIPE_TENSOR_ACTIVE, FB_USED, FB_FREE, selected by
# Hostname and gpu, grouped by UUID), in DCGM's units; every field dcgm-exporter's default
# counter set enables (../shared/data) either appears or is one the agent does not read; and
# --cluster/--node label every series. promtool must accept the text.
source "$(dirname "$0")/common.bash"
require promtool
fake_node_tools

"$ITHBAT" agent --once --interval 500ms --log-level warn --kmsg "" --nvml-library "$fake" \
  --dcgm-exporter-names --cluster lab-a --node n17 >"$WORK/metrics.txt" 2>"$WORK/agent.log" ||
  fail "ithbat agent --once --dcgm-exporter-names exited $?"
grep -q '^ithbat_collector_up{collector="gpu",cluster="lab-a",node="n17"} 1$' "$WORK/metrics.txt" ||
  fail "the gpu collector is not up (or its series lack cluster/node)"

# promtool: no error; of the lint, only what dcgm-exporter's own names draw (counters without
# _total, the camelCase label modelName, "COUNTER" in a name): they are what the dashboards
# query, so they stay as dcgm-exporter spells them. The agent's own series must lint clean.
# promtool exits 3 on lint complaints alone, other non-zero codes on errors.
rc=0
promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.log" 2>&1 || rc=$?
if ((rc != 0 && rc != 3)); then
  cat "$WORK/promtool.log" >&2
  fail "promtool check metrics found errors (exit $rc)"
fi
if grep -v -e '^DCGM_FI_[A-Z0-9_]* counter metrics should have "_total" suffix$' \
  -e "^DCGM_FI_[A-Z0-9_]* label names should be written in 'snake_case' not 'camelCase'$" \
  -e "^DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'$" "$WORK/promtool.log" |
  grep -q .; then
  cat "$WORK/promtool.log" >&2
  fail "promtool complained about more than dcgm-exporter's own names"
fi

# Every series carries the target labels.
unlabelled=$(grep -v '^#' "$WORK/metrics.txt" | grep -v 'cluster="lab-a"' | head -3 || true)
[[ -z $unlabelled ]] || fail "series without cluster=\"lab-a\": $unlabelled"
unlabelled=$(grep -v '^#' "$WORK/metrics.txt" | grep -v 'node="n17"' | head -3 || true)
[[ -z $unlabelled ]] || fail "series without node=\"n17\": $unlabelled"

# The dashboard's queries: one series per GPU, with the labels it selects and groups by.
gpus=$(grep -c '^ithbat_gpu_info{' "$WORK/metrics.txt")
((gpus == 8)) || fail "the fake node shows $gpus GPUs (want 8)"
for field in DCGM_FI_DEV_GPU_TEMP DCGM_FI_DEV_POWER_USAGE DCGM_FI_DEV_SM_CLOCK DCGM_FI_PROF_GR_ENGINE_ACTIVE \
  DCGM_FI_PROF_PIPE_TENSOR_ACTIVE DCGM_FI_DEV_FB_USED DCGM_FI_DEV_FB_FREE; do
  for ((g = 0; g < gpus; g++)); do
    line=$(grep "^$field{gpu=\"$g\"," "$WORK/metrics.txt" || true)
    [[ -n $line ]] || fail "no $field for gpu $g"
    for label in 'UUID="GPU-' 'Hostname="n17"' 'modelName="' 'pci_bus_id="' "device=\"nvidia$g\"" \
      'DCGM_FI_DRIVER_VERSION="'; do
      [[ $line == *"$label"* ]] || fail "$field for gpu $g lacks $label: $line"
    done
  done
done

# Units: DCGM's MHz and MiB from our hertz and bytes, the same GPU's values.
value() { grep "^$1" "$WORK/metrics.txt" | head -1 | awk '{print $NF}'; }
uuid0=$(grep '^ithbat_gpu_info{.*[{,]gpu="0",' "$WORK/metrics.txt" | grep -o 'gpu_uuid="[^"]*"' | cut -d'"' -f2)
sm_hz=$(value "ithbat_gpu_clock_hertz{clock=\"sm\",gpu=\"0\",")
sm_mhz=$(value 'DCGM_FI_DEV_SM_CLOCK{gpu="0",')
awk -v a="$sm_hz" -v b="$sm_mhz" 'BEGIN { exit !(a / 1e6 == b) }' || fail "SM clock: $sm_hz Hz is not $sm_mhz MHz"
used_b=$(value 'ithbat_gpu_memory_used_bytes{gpu="0",')
used_mib=$(value 'DCGM_FI_DEV_FB_USED{gpu="0",')
awk -v a="$used_b" -v b="$used_mib" 'BEGIN { d = a / 1048576 - b; exit !(d < 1e-6 && d > -1e-6) }' ||
  fail "FB used: $used_b bytes is not $used_mib MiB"
grep -q "^DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"$uuid0\"," "$WORK/metrics.txt" || fail "gpu 0's UUID is not $uuid0"

# dcgm-exporter's default counter set (read from ../shared/data, another project's file).
csv="$(cd "$(dirname "$0")/../.." && pwd)/../shared/data/dcgm/dcgm-exporter-default-counters-HEAD-2026.csv.txt"
# Fields the agent does not read (docs/metrics.md says why).
not_read=" DCGM_FI_DEV_ENC_UTIL DCGM_FI_DEV_DEC_UTIL DCGM_FI_DEV_XID_ERRORS DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
not_read+=" DCGM_FI_DEV_VGPU_LICENSE_STATUS "
if [[ -f $csv ]]; then
  covered=0
  while IFS=, read -r field _; do
    field=${field// /}
    [[ $field == DCGM_FI_* ]] || continue
    # dcgm-exporter exports the driver version as a label of every series (checked above).
    [[ $field == DCGM_FI_DRIVER_VERSION ]] && continue
    if [[ $not_read == *" $field "* ]]; then
      grep -q "^$field" "$WORK/metrics.txt" && fail "$field is listed as not read, yet appears"
      continue
    fi
    grep -q "^$field{" "$WORK/metrics.txt" || fail "dcgm-exporter's default field $field is missing"
    covered=$((covered + 1))
  done < <(grep -v '^#' "$csv")
  ((covered >= 15)) || fail "only $covered default fields covered"
  echo "dcgm-exporter default counters: $covered present, the rest documented as not read"
else
  echo "../shared/data not found beside the checkout: default-counter check not run"
fi
echo "dcgm-exporter names: $(grep -c '^DCGM_FI_' "$WORK/metrics.txt") series, dashboard fields on all $gpus GPUs"
