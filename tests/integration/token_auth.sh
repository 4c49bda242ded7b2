#!/usr/bin/env bash
# --token-file reaches the server: without the token /metrics is refused, with it served, and
# /healthz stays open (for liveness probes that hold no secret).
source "$(dirname "$0")/common.bash"
require curl

token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$token" >"$WORK/token"
chmod 600 "$WORK/token"
start_agent agent --token-file "$WORK/token" --interval 200ms

code() { curl --silent --max-time 5 --output /dev/null --write-out '%{http_code}' "$@"; }
[[ $(code "$AGENT_URL/metrics") == 401 ]] || fail "/metrics without a token was not refused"
[[ $(code -H "Authorization: Bearer wrong" "$AGENT_URL/metrics") == 401 ]] || fail "a wrong token was accepted"
[[ $(code -H "Authorization: Bearer $token" "$AGENT_URL/metrics") == 200 ]] || fail "the right token was refused"
[[ $(code "$AGENT_URL/healthz") == 200 ]] || fail "/healthz needs no token but was refused"
echo "token auth: 401 without or with a wrong token, 200 with it, /healthz open"
