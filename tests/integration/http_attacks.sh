#!/usr/bin/env bash
# Issue 20's attack suite against a real agent and a real hub (attacks/http_attacks.py: oversized
# request line and headers, 100k headers, chunked and gzip bombs, CL.TE smuggling, 1000 slow
# connections, 2000 concurrent scrapes, 1000 connections that never read their answer). Each
# must leave the process up, its RSS within +32 MiB of where it was, and /healthz and /metrics
# answering a well-behaved client throughout. Then the other direction: a hostile "inference
# server" the agent scrapes (a process anyone could start) and a hostile "agent" the hub pulls,
# each answering with an endless header line and an endless body: the scraper stays up and
# bounded and says what it refused.
source "$(dirname "$0")/common.bash"
require python3
require curl

here=$(cd "$(dirname "$0")" && pwd)
attacks="$here/attacks/http_attacks.py"
ulimit -n 65536 2>/dev/null || ulimit -n 8192

# The agent runs on a fake node (fake NVML, state file): part 2 lists a process on its GPU.
fake_node_tools
state="$WORK/node.state"
"$ctl" create "$state" --gpus 2 --model h100 --seed attacks || fail "cannot create the fake node"

# 1. The agent under attack.
ITHBAT_FAKE_STATE=$state start_agent agent --interval 1s --nvml-library "$fake"
python3 "$attacks" agent "$AGENT_URL" "$AGENT_PID" | tee "$WORK/agent-attacks.txt" || fail "an attack on the agent failed"

# 2. A hostile inference server the agent finds by its command line (python -m
#    vllm.entrypoints.openai.api_server, as vLLM runs) and scrapes as root.
mkdir -p "$WORK/fake/vllm/entrypoints/openai"
touch "$WORK/fake/vllm/__init__.py" "$WORK/fake/vllm/entrypoints/__init__.py" "$WORK/fake/vllm/entrypoints/openai/__init__.py"
cp "$here/attacks/hostile_server.py" "$WORK/fake/vllm/entrypoints/openai/api_server.py"
serve_port=$(free_port)
PYTHONPATH="$WORK/fake" python3 -m vllm.entrypoints.openai.api_server --port "$serve_port" --mode metrics \
  >"$WORK/hostile-server.log" 2>&1 &
serve_pid=$!
STARTED_PIDS+=("$serve_pid")
# It holds no GPU and runs in no job's cgroup: the agent must not even connect to it.
serving_error() {
  "${CURL[@]}" "$AGENT_URL/healthz" | python3 -c '
import json, sys
for c in json.load(sys.stdin)["collectors"]:
    if c["name"] == "serving": print(c.get("last_error", ""))'
}
untied_refused() { serving_error | grep -q "not tied to the node's workload"; }
wait_until 30 "the agent refused an inference server tied to no GPU or job" untied_refused
sleep 3  # three more ticks
accepted=$(grep -c "accepted a connection" "$WORK/hostile-server.log" || true)
((accepted == 0)) || fail "the agent connected $accepted times to a server tied to no GPU or job"
echo "PASS agent untied-inference-server: not contacted ($(serving_error | head -c 120)...)"
# Once the server is a GPU process (as vLLM V0 or a naive server is), the agent scrapes it.
"$ctl" add-process "$state" --gpu 0 --pid "$serve_pid" --memory 1073741824 || fail "cannot list the server on GPU 0"
# peak_rss PID FILE: samples PID's resident memory every 0.1 s, keeping the highest in FILE.
peak_rss() {
  local pid=$1 file=$2 peak=0 now
  while kill -0 "$pid" 2>/dev/null; do
    now=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    ((now > peak)) && peak=$now && echo "$peak" >"$file"
    sleep 0.1
  done
}
idle=$(awk '/VmRSS/ {print $2}' "/proc/$AGENT_PID/status")
peak_rss "$AGENT_PID" "$WORK/agent-peak" &
sampler=$!
# Each tick the agent scrapes the next hostile answer; its /healthz says why the last one was
# refused (the log says so once a minute). Collect the reasons until three kinds were seen.
touch "$WORK/refusals"
record_refusal() {
  "${CURL[@]}" "$AGENT_URL/healthz" | python3 -c '
import json, re, sys
for c in json.load(sys.stdin)["collectors"]:
    if c["name"] == "serving" and c.get("last_error"):
        m = re.search(r"(larger than \d+ bytes|headers exceed \d+ bytes|header line over|no complete answer within \d+ ms|not HTTP|exchange failed)", c["last_error"])
        if m: print(re.sub(r"\d+", "N", m.group(1)))' >>"$WORK/refusals" || true
  (($(sort -u "$WORK/refusals" | wc -l) >= 3))
}
wait_until 90 "the agent refused three kinds of hostile answer" record_refusal
kill "$sampler" 2>/dev/null || true
peak=$(cat "$WORK/agent-peak")
kill -0 "$AGENT_PID" 2>/dev/null || fail "the agent died scraping a hostile server"
[[ $(curl --silent --max-time 5 -o /dev/null -w '%{http_code}' "$AGENT_URL/healthz") == 200 ]] || fail "/healthz after the hostile scrapes"
((peak - idle <= 32 * 1024)) || fail "the agent's RSS grew by $(((peak - idle) >> 10)) MiB scraping a hostile server"
echo "PASS agent hostile-inference-server: refused as $(sort -u "$WORK/refusals" | paste -sd';'); RSS $((idle >> 10)) MiB, peak +$(((peak - idle) >> 10)) MiB"

# 3. The hub under attack, pulling the real agent and a hostile one.
hostile_port=$(free_port)
python3 "$here/attacks/hostile_server.py" --port "$hostile_port" --mode agent >"$WORK/hostile-agent.log" 2>&1 &
STARTED_PIDS+=("$!")
agent_port=${AGENT_URL##*:}
"$ITHBAT" hub --agent "good=127.0.0.1:$agent_port" --agent "bad=127.0.0.1:$hostile_port" --listen 127.0.0.1 --port 0 \
  --interval 1s 2>"$WORK/hub.log" &
HUB_PID=$!
STARTED_PIDS+=("$HUB_PID")
hub_port=$(listen_port "the hub" "$HUB_PID" "$WORK/hub.log") || exit 1
HUB="http://127.0.0.1:$hub_port"
bad_down() { "${CURL[@]}" "$HUB/healthz" | python3 -c '
import json, sys
h = json.load(sys.stdin)
up = {a["node"]: a["up"] for a in h["agents"]}
sys.exit(0 if up.get("good") and up.get("bad") is False and h["rounds"] >= 3 else 1)'; }
wait_until 60 "the hub: the real agent up, the hostile one down, three rounds" bad_down
python3 "$attacks" hub "$HUB" "$HUB_PID" huge-header-line 100k-headers chunked-body smuggling slow-connections \
  concurrent-scrapes | tee "$WORK/hub-attacks.txt" || fail "an attack on the hub failed"
echo "http attacks: every attack passed (agent: $(grep -c PASS "$WORK/agent-attacks.txt"), hub: $(grep -c PASS "$WORK/hub-attacks.txt"))"
