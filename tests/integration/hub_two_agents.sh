#!/usr/bin/env bash
# `ithbat hub` over two real agents on loopback: each agent runs on its own fake node (its own
# fake-hardware state, as two_nodes.sh) with a bearer token, and node A's kernel log (a regular
# file given as --kmsg) gets an Xid line, so that it holds an event as well as series. Then:
#  1. `ithbat hub --once --agent node-a=... --agent ADDRESS_OF_B` exits 0, files agent B under the
#     node name it reports (node-b), says on stderr that it pulled series and samples from both
#     agents (and node A's Xid event), and prints schema-v1 JSON lines, each checked field by
#     field. (Fake GPUs on an idle machine give no incident:
#     an Xid from the kernel log alone is not one. The hub's unit tests, tests/hub, prove that it
#     finds what only the union of nodes shows.)
#  2. a long-running hub answers /healthz with both agents up, /api/v1/diagnoses (the same schema
#     v1 document as an agent's) and /metrics with ithbat_hub_agent_up 1 for both;
#  3. agent B is killed: after the next round the hub reports it down (once in its log) and
#     node-b stale, and still answers /api/v1/diagnoses.
source "$(dirname "$0")/common.bash"
require curl
require python3

fake_node_tools

token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$token" >"$WORK/token"
chmod 600 "$WORK/token"
AUTH=(-H "Authorization: Bearer $token")

for n in a b; do
  "$ctl" create "$WORK/node-$n.state" --gpus 2 --model h100 --seed "node-$n" || fail "cannot create node $n's state"
  : >"$WORK/kmsg-$n.log"
done
# start_node NAME: an agent on fake node NAME that diagnoses every second; sets PORT_<NAME>
# and PID_<NAME>.
start_node() {
  : >"$WORK/$1.log"
  ITHBAT_FAKE_STATE="$WORK/node-$1.state" start_agent "$1" --node "node-$1" --nvml-library "$fake" \
    --kmsg "$WORK/kmsg-$1.log" --interval 200ms --diagnose-interval 1s --token-file "$WORK/token"
  printf -v "PORT_$1" '%s' "${AGENT_URL##*:}"
  printf -v "PID_$1" '%s' "$AGENT_PID"
}
start_node a
start_node b
wait_until 30 "agent A's GPU series" answer_has "http://127.0.0.1:$PORT_a/metrics" '^ithbat_gpu_' "${AUTH[@]}"
wait_until 30 "agent B's GPU series" answer_has "http://127.0.0.1:$PORT_b/metrics" '^ithbat_gpu_' "${AUTH[@]}"

# The fault: node A's first GPU falls off the bus. The fake GPUs' PCI ids are in `show`.
pci=$("$ctl" show "$WORK/node-a.state" | grep -Eo '[0-9a-fA-F]{8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.0' | head -n 1 || true)
[[ -n $pci ]] || pci="00000000:01:00.0"
echo "NVRM: Xid (PCI:${pci#0000}): 79, pid=4242, GPU has fallen off the bus." >>"$WORK/kmsg-a.log"
wait_until 20 "agent A's Xid event" answer_has "http://127.0.0.1:$PORT_a/api/v1/events?kind=xid" '"kind":"xid"' "${AUTH[@]}"

# validate FILE: every line is one schema-v1 diagnosis (the fields docs/diagnoses.md requires,
# with their types and enum values); prints "cause node,node" per line.
cat >"$WORK/validate.py" <<'PY'
import json, sys
VERDICTS = {"job", "infrastructure", "inconclusive"}
STATES = {"open", "updated", "resolved"}
def check(d):
    assert d["schema"] == "ithbat.diagnosis/v1", d.get("schema")
    for k in ("id", "cause", "summary", "fix", "opened_at", "updated_at"):
        assert isinstance(d[k], str), k
    assert d["verdict"] in VERDICTS, d["verdict"]
    assert d["state"] in STATES, d["state"]
    assert isinstance(d["provisional"], bool)
    s = d["subjects"]
    for k in ("nodes", "ranks", "gpus", "other_jobs"):
        assert isinstance(s[k], list), k
    assert isinstance(s["job"], str) and isinstance(s["resource"], str)
    for g in s["gpus"]:
        assert isinstance(g["node"], str) and isinstance(g["index"], int) and isinstance(g["uuid"], str)
    assert isinstance(d["window"]["start"], str) and isinstance(d["window"]["end"], str)
    assert isinstance(d["evidence"], list)
    for e in d["evidence"]:
        for k in ("signal", "collector", "subject", "unit", "note"):
            assert isinstance(e[k], str), k
    imp = d["impact"]
    for k in ("gpu_hours_lost", "expected_speedup", "productive_share"):
        assert isinstance(imp[k], (int, float)), k
n = 0
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    d = json.loads(line)
    check(d)
    nodes = set(d["subjects"]["nodes"]) | {g["node"] for g in d["subjects"]["gpus"]} | {r["node"] for r in d["subjects"]["ranks"]}
    print(d["cause"], ",".join(sorted(nodes)))
    n += 1
print("lines", n, file=sys.stderr)
PY

# 1. One round. The agents keep their default 15 minutes; the hub pulls all of it. Agent B is
# given by address only: the hub files its data under the node name it reports (--node node-b),
# which every node-b check below then relies on.
"$ITHBAT" hub --once --agent "node-a=127.0.0.1:$PORT_a" --agent "127.0.0.1:$PORT_b" \
  --agent-token-file "$WORK/token" >"$WORK/once.jsonl" 2>"$WORK/once.log" || fail "hub --once failed"
python3 "$WORK/validate.py" "$WORK/once.jsonl" >"$WORK/once.txt" || fail "hub --once printed a line that is not schema v1"
cat "$WORK/once.log"
# pulled NODE: "SERIES SAMPLES EVENTS" from the --once summary line of NODE.
pulled() {
  sed -n "s/.*(node $1): up; pulled \([0-9]*\) series, \([0-9]*\) samples, \([0-9]*\) events.*/\1 \2 \3/p" "$WORK/once.log"
}
read -r series_a samples_a events_a <<<"$(pulled node-a)"
read -r series_b samples_b events_b <<<"$(pulled node-b)"
((${series_a:-0} > 0 && ${samples_a:-0} > ${series_a:-0})) || fail "hub --once pulled no series from agent A"
((${series_b:-0} > 0 && ${samples_b:-0} > ${series_b:-0})) || fail "hub --once pulled no series from agent B"
((${events_a:-0} >= 1)) || fail "hub --once did not pull agent A's Xid event"
echo "hub --once: $(wc -l <"$WORK/once.jsonl") diagnosis line(s), all schema v1"

# 2. The long-running hub.
"$ITHBAT" hub --agent "node-a=127.0.0.1:$PORT_a" --agent "127.0.0.1:$PORT_b" \
  --agent-token-file "$WORK/token" --listen 127.0.0.1 --port 0 --interval 500ms 2>"$WORK/hub.log" &
HUB_PID=$!
STARTED_PIDS+=("$HUB_PID")
port=$(listen_port "the hub" "$HUB_PID" "$WORK/hub.log") || exit 1
HUB="http://127.0.0.1:$port"

# health_is UP_A UP_B STALE: /healthz says so ("1"/"0" per agent, stale nodes comma-separated).
health_is() {
  "${CURL[@]}" "$HUB/healthz" | python3 -c '
import json, sys
h = json.load(sys.stdin)
up = {a["node"]: a["up"] for a in h["agents"]}
ok = (h["status"] == "ok" and up.get("node-a") == (sys.argv[1] == "1") and up.get("node-b") == (sys.argv[2] == "1")
      and ",".join(h["stale"]) == sys.argv[3])
sys.exit(0 if ok else 1)' "$@"
}
wait_until 20 "the hub's /healthz with both agents up" health_is 1 1 ""
hub_diagnoses() {
  "${CURL[@]}" "$HUB/api/v1/diagnoses" | python3 -c '
import json, sys
doc = json.load(sys.stdin)
assert doc["schema"] == "ithbat.diagnosis/v1"
for d in doc["diagnoses"]:
    print(json.dumps(d))' >"$WORK/served.jsonl" &&
    python3 "$WORK/validate.py" "$WORK/served.jsonl" >"$WORK/served.txt" 2>/dev/null
}
wait_until 20 "the hub serving /api/v1/diagnoses" hub_diagnoses
[[ $(metric_value "$HUB" "ithbat_hub_agent_up{agent=\"127.0.0.1:$PORT_a\",node=\"node-a\"}") == 1 ]] ||
  fail "ithbat_hub_agent_up of agent A is not 1"
[[ $(metric_value "$HUB" "ithbat_hub_agent_up{agent=\"127.0.0.1:$PORT_b\",node=\"node-b\"}") == 1 ]] ||
  fail "ithbat_hub_agent_up of agent B is not 1"

# `ithbat diagnose` asks the hub, and the agents, for the same schema v1 (exit 0: every source answered).
"$ITHBAT" diagnose --hub "127.0.0.1:$port" --json >"$WORK/diagnose-hub.jsonl" || fail "ithbat diagnose --hub failed"
python3 "$WORK/validate.py" "$WORK/diagnose-hub.jsonl" >/dev/null || fail "ithbat diagnose --hub printed a line that is not schema v1"
"$ITHBAT" diagnose --agent "127.0.0.1:$PORT_a" --agent "127.0.0.1:$PORT_b" --token-file "$WORK/token" --color always \
  >"$WORK/diagnose-agents.txt" || fail "ithbat diagnose --agent failed"
grep -Eq "no diagnosis|: " "$WORK/diagnose-agents.txt" || fail "ithbat diagnose --agent printed nothing"
if "$ITHBAT" diagnose --agent "127.0.0.1:$PORT_a" 2>"$WORK/diagnose-noauth.err" >/dev/null; then
  fail "ithbat diagnose --agent without the token succeeded"
fi
grep -q "127.0.0.1:$PORT_a" "$WORK/diagnose-noauth.err" || fail "no clear error naming the agent: $(cat "$WORK/diagnose-noauth.err")"

# 3. Agent B goes away; the hub goes on.
kill -KILL "$PID_b"
wait "$PID_b" 2>/dev/null || true
wait_until 20 "the hub reporting agent B down and node-b stale" health_is 1 0 "node-b"
hub_diagnoses || fail "the hub no longer serves /api/v1/diagnoses after agent B died"
wait_until 10 "ithbat_hub_agent_up of agent B at 0" test \
  "$(metric_value "$HUB" "ithbat_hub_agent_up{agent=\"127.0.0.1:$PORT_b\",node=\"node-b\"}")" == 0
grep -q 'agent 127.0.0.1:'"$PORT_b"' (node node-b) is down' "$WORK/hub.log" || fail "the hub did not log agent B going down"
[[ $(grep -c "(node node-b) is down" "$WORK/hub.log") == 1 ]] || fail "the hub logged agent B's outage more than once"
echo "hub: both agents pulled; agent B killed → reported down once, node-b stale, the hub still answers"
