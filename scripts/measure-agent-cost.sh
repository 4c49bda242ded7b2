#!/usr/bin/env bash
# Measures what the agent costs a node: average CPU (cores) and peak/final RSS of `ithbat
# agent` with every collector on, GPUs from the fake NVML (8 idle H100 SXM), at the given
# interval, for the given time, then where the RSS is (/proc/PID/smaps summed by kind of
# mapping: BPF maps, heap, other anonymous, the binary, shared libraries). CPU is the process's
# own utime+stime from /proc/<pid>/stat, so other load on the machine does not inflate it.
#   scripts/measure-agent-cost.sh [SECONDS=600] [INTERVAL=1s] [BUILD_DIR=build] [LINES_PER_S=0]
# LINES_PER_S > 0 adds a tracked job: a process listed on the fake GPU 0 with a Slurm job id
# that writes that many Megatron-style iteration lines a second to a pipe, one write(2) per
# line (the worst case for the job-output capture: one ring-buffer record per line). The
# agent then captures, redacts and parses every line.
# The fake answers NVML calls from shared memory: the cost of real driver calls is NOT in
# these figures (measure on a GPU node for that). Needs root (eBPF). METRICS_OUT=FILE keeps the
# agent's /metrics answer at the end.
set -euo pipefail
seconds=${1:-600}
interval=${2:-1s}
build=${3:-build}
lines_per_s=${4:-0}
bin=$build/ithbat
lib=$(cd "$build/sim/lib" && pwd)/libnvidia-ml.so.1
ctl=$build/sim/ithbat-fake-state
[[ -x $bin && -f $lib && -x $ctl ]] || { echo "build first: make build" >&2; exit 1; }
data=$(mktemp -d /tmp/ithbat-cost-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$data" "$data.log"
}
trap cleanup EXIT
"$ctl" create "$data/node.state" --gpus 8 --model h100 --seed cost >/dev/null
if ((lines_per_s > 0)); then
  # The job: waits for the agent to track it, then prints paced iteration lines.
  mkfifo "$data/out.fifo"
  cat "$data/out.fifo" >/dev/null &
  pids+=($!)
  env -i PATH=/usr/bin:/bin SLURM_JOB_ID=4242 RANK=0 LOCAL_RANK=0 WORLD_SIZE=8 GO="$data/go" RATE="$lines_per_s" \
    python3 -c '
import os, sys, time
while not os.path.exists(os.environ["GO"]):
    time.sleep(0.05)
rate = int(os.environ["RATE"])
per_slot, slot = max(1, rate // 100), 0.01  # 100 slots a second
step, t = 0, time.monotonic()
while True:
    for _ in range(per_slot):
        step += 1
        os.write(1, (f" iteration {step:8d}/ 1000000 | consumed samples: {step*16:12d} | elapsed time per "
                     f"iteration (ms): 250.0 | learning rate: 1.000000E-04 | global batch size:    16 | "
                     f"lm loss: {3.0 + (step % 97) / 1000:.6E} | loss scale: 1.0 | grad norm: 0.750 |\n").encode())
    t += slot
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)
' >"$data/out.fifo" &
  job=$!
  pids+=("$job")
  "$ctl" add-process "$data/node.state" --gpu 0 --pid "$job" --memory 2147483648 >/dev/null
fi
ITHBAT_FAKE_STATE=$data/node.state ${AGENT_WRAPPER:-} "$bin" agent --listen 127.0.0.1:0 --interval "$interval" \
  --nvml-library "$lib" --data-dir "$data" --log-level info 2>"$data.log" &
pid=$!
pids=("$pid" "${pids[@]}")
port=
for _ in $(seq 100); do
  port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$data.log" | head -1 | cut -d: -f2) && [[ -n $port ]] && break
  sleep 0.1
done
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 {s += $2} END {print s + 0}'; }
if ((lines_per_s > 0)); then
  for _ in $(seq 300); do
    (($(metric ithbat_joblog_tracked_processes) >= 1)) && break
    sleep 0.1
  done
  (($(metric ithbat_joblog_tracked_processes) >= 1)) || { echo "the agent never tracked the job" >&2; exit 1; }
  touch "$data/go"
fi
sleep 3  # start-up (library load, first ticks) is not steady state
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
t0=$(ticks); s0=$(date +%s.%N)
# RSS once a second: one reading at the end would land before or after a maintenance round
# (flush, compaction, then the freed pages given back) by chance.
for ((i = 0; i < seconds; i++)); do
  awk '/^VmRSS/{print $2}' "/proc/$pid/status" >>"$data/rss.txt"
  sleep 1
done
t1=$(ticks); s1=$(date +%s.%N)
rss=$(awk '/^VmRSS/{print $2}' "/proc/$pid/status")
hwm=$(awk '/^VmHWM/{print $2}' "/proc/$pid/status")
threads=$(awk '/^Threads/{print $2}' "/proc/$pid/status")
curl -s "http://127.0.0.1:$port/metrics" >"$data/metrics.txt" || true
[[ -z ${METRICS_OUT:-} ]] || cp "$data/metrics.txt" "$METRICS_OUT"  # the agent's own view, to compare
series=$(grep -vc '^#' "$data/metrics.txt" || true)
awk -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v hz="$hz" -v rss="$rss" -v hwm="$hwm" -v iv="$interval" \
  -v n="$series" -v th="$threads" 'BEGIN {
  printf "agent cost over %.0f s at %s: %.4f cores average, RSS %.1f MiB (peak %.1f MiB), %s threads, %s series on /metrics\n",
         s1 - s0, iv, (t1 - t0) / hz / (s1 - s0), rss / 1024, hwm / 1024, th, n }'
sort -n "$data/rss.txt" | awk '{v[NR] = $1} END {
  printf "RSS over the run, one reading a second: median %.1f MiB, 95th percentile %.1f MiB, max %.1f MiB\n",
         v[int((NR + 1) / 2)] / 1024, v[int(NR * 0.95 + 0.5)] / 1024, v[NR] / 1024 }'
if ((lines_per_s > 0)); then
  echo "job output: $(metric ithbat_joblog_lines_total) lines captured, lost records $(metric ithbat_joblog_lost_records_total)"
fi
# Where the RSS is: smaps summed by kind of mapping (kB -> MiB), Rss and Private_Dirty.
awk -v exe="$(readlink -f "$bin")" '
  /^[0-9a-f]+-[0-9a-f]+ / {
    name = (NF >= 6) ? $6 : ""
    if (name ~ /bpf-map/) kind = "BPF maps"
    else if (name == "[heap]") kind = "heap"
    else if (name == exe) kind = "the binary"
    else if (name ~ /\.so/) kind = "shared libraries"
    else if (name == "" || name ~ /^\[(stack|anon)/) kind = "other anonymous (stacks, arenas)"
    else kind = "other (" name ")"
    next
  }
  /^Rss:/ { rss[kind] += $2 }
  /^Private_Dirty:/ { dirty[kind] += $2 }
  END {
    for (k in rss) printf "  %-36s RSS %6.1f MiB  private dirty %6.1f MiB\n", k, rss[k] / 1024, dirty[k] / 1024
  }' "/proc/$pid/smaps" | sort -k1,1
