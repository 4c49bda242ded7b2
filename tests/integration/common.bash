# Shared by the integration scripts (sourced, not run: CTest picks up *.sh only).
# Each script gets the ithbat binary as $1, works in a fresh temp directory, and kills every
# process it started when it exits, however it exits.
set -euo pipefail

ITHBAT=${1:?usage: $0 ITHBAT_BINARY}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ithbat-it-XXXXXX")
STARTED_PIDS=()
CURL=(curl --silent --show-error --max-time 5)

cleanup() {
  local rc=$?
  local pid
  for pid in "${STARTED_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${STARTED_PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [[ $rc -ne 0 ]]; then
    local f
    for f in "$WORK"/*.log; do
      [[ -f $f ]] || continue
      echo "---- last lines of $(basename "$f")" >&2
      tail -n 30 "$f" >&2
    done
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

require() {
  command -v "$1" >/dev/null 2>&1 || fail "$1 is not installed (scripts/install-deps.sh installs it)"
}

# fake_node_tools: sets $ctl (ithbat-fake-state, which makes and changes a fake node's state file)
# and $fake (the fake libnvidia-ml.so.1 that reads it) from the build tree next to $ITHBAT, and
# fails when either is not built.
fake_node_tools() {
  local build
  build=$(cd "$(dirname "$ITHBAT")" && pwd)
  ctl="$build/sim/ithbat-fake-state"
  fake="$build/sim/lib/libnvidia-ml.so.1"
  [[ -x $ctl ]] || fail "ithbat-fake-state not found at $ctl (build the ithbat_fake_state_ctl target)"
  [[ -f $fake ]] || fail "the fake NVML not found at $fake (build the ithbat_fake_nvml target)"
}

# wait_until SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s until it succeeds.
wait_until() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then fail "timed out after ${seconds}s waiting for: $what"; fi
    sleep 0.2
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# listen_port NAME PID LOG: waits until the process PID logs "listening on 127.0.0.1:PORT" in
# LOG (20 s at most; fails if it exits first) and prints PORT.
listen_port() {
  local name=$1 pid=$2 log=$3
  local deadline=$((SECONDS + 20))
  local port=""
  while [[ -z $port ]]; do
    kill -0 "$pid" 2>/dev/null || fail "$name exited before it listened"
    ((SECONDS < deadline)) || fail "$name did not log 'listening on' within 20s"
    port=$(grep -Eo 'listening on 127\.0\.0\.1:[0-9]+' "$log" | head -n 1 | sed 's/.*://' || true)
    [[ -n $port ]] || sleep 0.1
  done
  echo "$port"
}

# start_agent NAME ARGS...: starts `ithbat agent` on a free loopback port with stderr in
# $WORK/NAME.log; sets AGENT_PID and AGENT_URL once it logs "listening on".
start_agent() {
  local name=$1
  shift
  local log="$WORK/$name.log"
  "$ITHBAT" agent --listen 127.0.0.1:0 "$@" 2>"$log" &
  AGENT_PID=$!
  STARTED_PIDS+=("$AGENT_PID")
  local port
  port=$(listen_port "agent $name" "$AGENT_PID" "$log") || exit 1
  AGENT_URL="http://127.0.0.1:$port"
}

# start_prometheus: a real Prometheus (Debian's) scraping the agent at $AGENT_URL every second as
# scrape job "ithbat", on a free loopback port; sets $prom_url. Stopped with the test.
start_prometheus() {
  local port
  port=$(free_port)
  prom_url="http://127.0.0.1:$port"
  cat >"$WORK/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ithbat
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: ["${AGENT_URL#http://}"]
YAML
  prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$port" --log.level=warn >"$WORK/prometheus.log" 2>&1 &
  STARTED_PIDS+=("$!")
}

# Answers are read whole before they are searched: a reader that stops at its match (grep -q,
# awk's exit) closes the pipe while curl is still writing, curl fails with "(23) Failed writing
# body", and pipefail turns that into a failed test.

# answer_has URL PATTERN [CURL ARGS...]: succeeds when the answer at URL has a line matching
# the basic regex PATTERN (a poll for wait_until).
answer_has() {
  local url=$1 pattern=$2 text
  shift 2
  text=$("${CURL[@]}" "$@" "$url") && grep -q -- "$pattern" <<<"$text"
}

# metric_value URL SERIES: the value of one series (name plus labels exactly as exposed) in
# the Prometheus text at URL/metrics; empty if absent.
metric_value() {
  local text
  text=$("${CURL[@]}" "$1/metrics") && awk -v s="$2" '$1 == s { print $2; exit }' <<<"$text"
}

# has_metric URL SERIES: succeeds once URL/metrics exposes SERIES (for wait_until: the
# command substitution must run on every poll, not once when wait_until is called).
has_metric() {
  test -n "$(metric_value "$1" "$2")"
}
