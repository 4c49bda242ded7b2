#!/usr/bin/env bash
# SIGHUP reloads the agent's configuration without losing data (issue 20: it used to kill it,
# exit 129): a new bearer token in the token file is required from then on, a new log level
# applies, a setting that needs a restart is named as such, a configuration that no longer reads
# changes nothing, and the agent keeps its history and keeps collecting throughout.
source "$(dirname "$0")/common.bash"
require curl

token_a=token-a-$RANDOM$RANDOM
token_b=token-b-$RANDOM$RANDOM
printf '%s\n' "$token_a" >"$WORK/token"
chmod 600 "$WORK/token"
cat >"$WORK/agent.toml" <<TOML
token-file = "$WORK/token"
interval = "200ms"
log-level = "info"
data-dir = "$WORK/data"
TOML
start_agent agent --config "$WORK/agent.toml"

code() { curl --silent --max-time 5 --output /dev/null --write-out '%{http_code}' "$@"; }
appended() {
  local text
  text=$("${CURL[@]}" -H "Authorization: Bearer $1" "$AGENT_URL/metrics") &&
    awk '$1 == "ithbat_store_samples_appended_total" { print $2; exit }' <<<"$text"
}
[[ $(code -H "Authorization: Bearer $token_a" "$AGENT_URL/metrics") == 200 ]] || fail "token A refused at start"
before=$(appended "$token_a")

# A new token and log level, and a setting that needs a restart.
printf '%s\n' "$token_b" >"$WORK/token"
sed -i 's/log-level = "info"/log-level = "debug"/; s/interval = "200ms"/interval = "300ms"/' "$WORK/agent.toml"
kill -HUP "$AGENT_PID"
wait_until 10 "the reload is logged" grep -q 'SIGHUP: reloaded' "$WORK/agent.log"
kill -0 "$AGENT_PID" 2>/dev/null || fail "the agent died on SIGHUP"
[[ $(code -H "Authorization: Bearer $token_b" "$AGENT_URL/metrics") == 200 ]] || fail "token B refused after SIGHUP"
[[ $(code -H "Authorization: Bearer $token_a" "$AGENT_URL/metrics") == 401 ]] || fail "token A still accepted after SIGHUP"
grep -q 'SIGHUP: reloaded log level (debug)' "$WORK/agent.log" || fail "the log level was not reloaded: $(grep SIGHUP "$WORK/agent.log")"
grep -q 'applied at the next start: interval' "$WORK/agent.log" || fail "the interval change was not named as needing a restart"
wait_until 10 "debug lines after the reload" grep -q ' debug ' "$WORK/agent.log"
# The store keeps its samples and the collectors keep adding to them.
grew() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[2]) > float(sys.argv[1]) else 1)' "$before" "$(appended "$token_b")"; }
wait_until 10 "samples appended after the reload beyond the $before before it" grew
after=$(appended "$token_b")

# A configuration that no longer reads changes nothing.
printf 'no-such-key = 1\n' >>"$WORK/agent.toml"
kill -HUP "$AGENT_PID"
wait_until 10 "the refused reload is logged" grep -q 'SIGHUP: .*nothing changed' "$WORK/agent.log"
kill -0 "$AGENT_PID" 2>/dev/null || fail "the agent died on a SIGHUP with a broken configuration"
[[ $(code -H "Authorization: Bearer $token_b" "$AGENT_URL/metrics") == 200 ]] || fail "token B lost after a refused reload"
# The hub: its own token and a webhook, from files, reloaded the same way.
printf 'hub-token-1\n' >"$WORK/hub-token"
chmod 600 "$WORK/hub-token"
cp "$WORK/token" "$WORK/agent-token"
chmod 600 "$WORK/agent-token"
agent_port=${AGENT_URL##*:}
"$ITHBAT" hub --agent "127.0.0.1:$agent_port" --agent-token-file "$WORK/agent-token" --token-file "$WORK/hub-token" \
  --listen 127.0.0.1 --port 0 --interval 500ms 2>"$WORK/hub.log" &
HUB_PID=$!
STARTED_PIDS+=("$HUB_PID")
hub_port=$(listen_port "the hub" "$HUB_PID" "$WORK/hub.log") || exit 1
HUB="http://127.0.0.1:$hub_port"
[[ $(code -H "Authorization: Bearer hub-token-1" "$HUB/api/v1/diagnoses") == 200 ]] || fail "hub token 1 refused at start"
printf 'hub-token-2\n' >"$WORK/hub-token"
kill -HUP "$HUB_PID"
wait_until 10 "the hub logs its reload" grep -q 'SIGHUP: reloaded' "$WORK/hub.log"
kill -0 "$HUB_PID" 2>/dev/null || fail "the hub died on SIGHUP"
[[ $(code -H "Authorization: Bearer hub-token-2" "$HUB/api/v1/diagnoses") == 200 ]] || fail "hub token 2 refused after SIGHUP"
[[ $(code -H "Authorization: Bearer hub-token-1" "$HUB/api/v1/diagnoses") == 401 ]] || fail "hub token 1 still accepted"

echo "sighup: token and log level reloaded, interval named for the next start, a broken config changed nothing, samples $before -> $after"
