#!/usr/bin/env bash
# Node membership on one machine: two agents, each on its own fake node (its own fake-hardware
# state file, read by the fake libnvidia-ml.so.1 through ITHBAT_FAKE_STATE), see only their own
# node's ranks. Four real "rank" processes of Slurm job 9001 (sleep under Slurm/torch
# variables) are listed as compute processes: ranks 0,1 on node A's GPUs 0,1, ranks 2,3 on node
# B's GPUs 0,1. Agent A must export exactly ranks {0,1} with job_id="9001", their pids and GPUs,
# agent B exactly {2,3}; then rank 1 leaves node A's list and agent A must stop storing its
# series within a few ticks while rank 0's goes on.
#
# The tool and the fake come from the build tree next to the binary:
# $(dirname ITHBAT)/sim/ithbat-fake-state and $(dirname ITHBAT)/sim/lib/libnvidia-ml.so.1
# (sim/CMakeLists.txt). Every process started here is killed by the EXIT trap (common.bash),
# which also prints the agents' log tails when the test fails.
source "$(dirname "$0")/common.bash"
require curl
require python3

fake_node_tools

metric=ithbat_gpu_process_memory_used_bytes
job=9001
state_a="$WORK/node-a.state"
state_b="$WORK/node-b.state"
"$ctl" create "$state_a" --gpus 4 --model h100 --seed node-a || fail "cannot create node A's state"
"$ctl" create "$state_b" --gpus 4 --model h100 --seed node-b || fail "cannot create node B's state"

# The ranks: real processes with the variables a Slurm/torchrun task has (env execs sleep, so
# $! is the pid NVML lists).
rank_pids=()
for r in 0 1 2 3; do
  env SLURM_JOB_ID=$job SLURM_PROCID=$r RANK=$r LOCAL_RANK=$((r % 2)) WORLD_SIZE=4 sleep 300 &
  rank_pids+=("$!")
  STARTED_PIDS+=("$!")
done
# memory RANK: a distinct size per rank, so a value mix-up shows too.
memory() { echo $((($1 + 1) * 1073741824)); }
for r in 0 1; do
  "$ctl" add-process "$state_a" --gpu "$r" --pid "${rank_pids[r]}" --memory "$(memory "$r")" ||
    fail "cannot list rank $r on node A"
done
for r in 2 3; do
  "$ctl" add-process "$state_b" --gpu $((r - 2)) --pid "${rank_pids[r]}" --memory "$(memory "$r")" ||
    fail "cannot list rank $r on node B"
done
"$ctl" show "$state_a" >"$WORK/node-a.show.txt" && "$ctl" show "$state_b" >"$WORK/node-b.show.txt" ||
  fail "ithbat-fake-state show failed"

# start_node NAME NODE STATE: an agent on the fake node; sets the URL_<NAME> variable.
start_node() {
  : >"$WORK/$1.log"  # so start_agent's first look at the log finds a file
  ITHBAT_FAKE_STATE=$3 start_agent "$1" --node "$2" --nvml-library "$fake" --kmsg "" --interval 200ms
  printf -v "URL_$1" '%s' "$AGENT_URL"
}
start_node a node-a "$state_a"
start_node b node-b "$state_b"

# A node's view: "rank pid gpu job_id local_rank world_size value" per process series, sorted
# by rank, from the agent's /metrics.
cat >"$WORK/view.py" <<'PY'
import re, sys
metric = sys.argv[1]
rows = []
for line in sys.stdin:
    if not line.startswith(metric + "{"):
        continue
    labels_text, value = line[len(metric) + 1:].rsplit("} ", 1)
    labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels_text))
    rows.append((labels.get("rank", "-"), labels.get("pid", "-"), labels.get("gpu", "-"),
                 labels.get("job_id", "-"), labels.get("local_rank", "-"),
                 labels.get("world_size", "-"), "%.17g" % float(value)))
for row in sorted(rows, key=lambda r: (r[0], r[1])):
    print(" ".join(row))
PY
view() {
  local text
  text=$("${CURL[@]}" "$1/metrics") && python3 "$WORK/view.py" "$metric" <<<"$text"
}
# expected RANK...: the view a node holding exactly these ranks must show. Rank r is on GPU
# r % 2 of its node (ranks 0,1 on A's GPUs 0,1; ranks 2,3 on B's GPUs 0,1).
expected() {
  local r
  for r in "$@"; do
    echo "$r ${rank_pids[r]} $((r % 2)) $job $((r % 2)) 4 $(memory "$r")"
  done
}
# Each node's processes are all there, with their identity resolved (job_id is filled once
# the resolver has read the rank's environment).
view_is() {
  local url=$1
  shift
  [[ $(view "$url") == "$(expected "$@")" ]]
}
check_view() {
  local name=$1 url=$2
  shift 2
  if ! wait_until_quiet 30 view_is "$url" "$@"; then
    echo "expected on node $name (rank pid gpu job_id local_rank world_size bytes):" >&2
    expected "$@" >&2
    echo "agent $name exports:" >&2
    view "$url" >&2 || true
    fail "agent $name does not show exactly ranks {$*} of job $job"
  fi
}
# wait_until_quiet SECONDS COMMAND...: like wait_until, but returns 1 instead of failing so
# the caller can print what it saw first.
wait_until_quiet() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

wait_until 30 "agent A's first process series" answer_has "$URL_a/metrics" "^$metric{"
wait_until 30 "agent B's first process series" answer_has "$URL_b/metrics" "^$metric{"
check_view A "$URL_a" 0 1
check_view B "$URL_b" 2 3
echo "rank pid gpu job_id local_rank world_size bytes, as exported by agent A:"
view "$URL_a"
echo "... and by agent B:"
view "$URL_b"

# Neither agent mentions the other node's pids anywhere in /metrics (no other family carries
# them either), and the two nodes' GPUs are different GPUs.
"${CURL[@]}" "$URL_a/metrics" >"$WORK/a.metrics.txt" || fail "agent A's /metrics failed"
"${CURL[@]}" "$URL_b/metrics" >"$WORK/b.metrics.txt" || fail "agent B's /metrics failed"
for r in 2 3; do
  ! grep -q "pid=\"${rank_pids[r]}\"" "$WORK/a.metrics.txt" || fail "agent A exports rank $r's pid ${rank_pids[r]}"
done
for r in 0 1; do
  ! grep -q "pid=\"${rank_pids[r]}\"" "$WORK/b.metrics.txt" || fail "agent B exports rank $r's pid ${rank_pids[r]}"
done
uuids() { grep -Eo 'gpu_uuid="[^"]+"' "$1" | sort -u; }
[[ -n $(uuids "$WORK/a.metrics.txt") ]] || fail "agent A exports no gpu_uuid"
shared=$(comm -12 <(uuids "$WORK/a.metrics.txt") <(uuids "$WORK/b.metrics.txt"))
[[ -z $shared ]] || fail "both nodes export the same GPU: $shared"

# series_samples URL PID SECONDS: how many samples the store holds for PID's process series
# in the last SECONDS.
series_samples() {
  local start
  start=$(python3 -c 'import sys, time; print(f"{time.time() - float(sys.argv[1]):.3f}")' "$3")
  "${CURL[@]}" -G "$1/api/v1/series" --data-urlencode "match=$metric{pid=\"$2\"}" \
    --data-urlencode "start=$start" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["status"] == "success", d
print(sum(len(s["samples"]) for s in d["data"]))'
}
# The store is being fed for both of node A's ranks before the removal.
has_recent() { (($(series_samples "$1" "$2" 1) > 0)); }
wait_until 10 "recent samples of rank 1 in agent A's store" has_recent "$URL_a" "${rank_pids[1]}"

"$ctl" remove-process "$state_a" --gpu 1 --pid "${rank_pids[1]}" || fail "cannot take rank 1 off node A"
# 1 s is five ticks at 200 ms: once a whole second passes without a sample the series is gone.
no_recent() { (($(series_samples "$1" "$2" 1) == 0)); }
if ! wait_until_quiet 15 no_recent "$URL_a" "${rank_pids[1]}"; then
  fail "agent A still stores samples of rank 1 (pid ${rank_pids[1]}) after it left GPU 1: $(series_samples "$URL_a" "${rank_pids[1]}" 1) in the last second"
fi
# ...while rank 0 (same node, still listed) and node B's ranks go on.
wait_until 10 "rank 0's samples after rank 1 left" has_recent "$URL_a" "${rank_pids[0]}"
for r in 2 3; do
  wait_until 10 "rank $r's samples on node B" has_recent "$URL_b" "${rank_pids[r]}"
done
kill -0 "${rank_pids[1]}" 2>/dev/null || fail "rank 1's process died: the test meant only its GPU listing to go"

echo "two nodes: agent A shows ranks 0,1 (pids ${rank_pids[0]},${rank_pids[1]}), agent B ranks 2,3" \
  "(pids ${rank_pids[2]},${rank_pids[3]}) of job $job; rank 1's series stopped once it left node A"
