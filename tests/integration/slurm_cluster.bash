# A real one-node Slurm cluster (slurm-wlm + munge, no systemd) for the integration scripts that
# need one (slurm_identity.sh, slurm_hooks.sh). Sourced, not run: CTest picks up *.sh only.
#
# Everything lives in $tmp (config, munge key and socket, spool, state, logs) on free loopback
# ports; the EXIT trap cancels the cluster's jobs, stops every daemon by pid and every process
# that carries this cluster's SLURM_CONF, and removes $tmp. If Slurm does not come up the test
# FAILS with the daemons' log tails: it never skips.
#
# Use: source it, set up what the test needs, call `start_slurm_cluster [EXTRA slurm.conf LINES]`;
# SLURM_CONF is exported, $host is the node name. Add the pids of processes the test starts
# (srun in the background) to bg_pids so the trap stops them before the daemons.
set -euo pipefail

for tool in munged mungekey slurmctld slurmd srun sbatch squeue sinfo scontrol scancel python3; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not installed (scripts/install-deps.sh)" >&2; exit 1; }
done
[[ $(id -u) -eq 0 ]] || { echo "FAIL: needs root (SlurmUser=root, slurmd)" >&2; exit 1; }

tmp=$(mktemp -d /tmp/ithbat-slurm.XXXXXX)
chmod 700 "$tmp"
daemon_pids=()
bg_pids=()
host=$(hostname -s)

logs() {
  for f in "$tmp"/*.log "$tmp"/*.out; do
    [[ -f $f ]] && { echo "---- tail $f"; tail -n 40 "$f"; }
  done
  return 0
}
fail() { echo "FAIL: $*" >&2; logs >&2; exit 1; }

stop_pid() {  # TERM, bounded wait, then KILL
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}
# Processes this test started indirectly (srun, slurmstepd, tasks): they carry our SLURM_CONF.
ours() {
  local d
  for d in /proc/[0-9]*; do
    grep -zqxF "SLURM_CONF=$tmp/slurm.conf" "$d/environ" 2>/dev/null && echo "${d#/proc/}"
  done
  return 0
}
# Jobs of this cluster still queued or running.
cluster_jobs() { timeout 5 squeue -h -o '%i' 2>/dev/null || true; }

cleanup() {
  set +e
  if [[ -n ${SLURM_CONF:-} && ${#daemon_pids[@]} -gt 0 ]]; then
    # Let the jobs end cleanly (srun returns, slurmstepd exits) before the daemons go.
    local jobs
    jobs=$(cluster_jobs)
    [[ -n $jobs ]] && timeout 5 scancel $jobs >/dev/null 2>&1
    for _ in $(seq 50); do
      local alive=0 p
      for p in "${bg_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
      [[ -z $(cluster_jobs) && $alive -eq 0 ]] && break
      sleep 0.2
    done
  fi
  local p
  for p in "${bg_pids[@]}"; do stop_pid "$p"; done
  # Reverse order: slurmd, slurmctld, munged.
  for ((i = ${#daemon_pids[@]} - 1; i >= 0; i--)); do stop_pid "${daemon_pids[i]}"; done
  for p in $(ours); do [[ $p != "$$" && $p != "$BASHPID" ]] && stop_pid "$p"; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_slurm_cluster [EXTRA]: munged, slurmctld and slurmd on free ports, EXTRA appended to
# slurm.conf (Prolog=, Epilog=, ...); returns once the node is idle.
start_slurm_cluster() {
  local extra=${1:-}
  local node_line ctld_port slurmd_port
  node_line=$(slurmd -C | head -n 1)  # "NodeName=<host> CPUs=.. RealMemory=.." as slurmd sees it
  [[ $node_line == NodeName=* ]] || fail "slurmd -C printed: $node_line"
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  [[ $ctld_port != "$slurmd_port" ]] || slurmd_port=$((ctld_port + 1))
  mkdir -p "$tmp/state" "$tmp/spool"

  # munge: own key and socket, so the system's munged (if any) is neither needed nor touched.
  mungekey --create --keyfile="$tmp/munge.key" >/dev/null 2>&1 || fail "mungekey --create failed"
  chmod 600 "$tmp/munge.key"
  munged -F --force --socket="$tmp/munge.sock" --key-file="$tmp/munge.key" \
    --pid-file="$tmp/munged.pid" --log-file="$tmp/munged.log" --seed-file="$tmp/munged.seed" \
    >>"$tmp/munged.log" 2>&1 &
  daemon_pids+=($!)
  for _ in $(seq 100); do [[ -S $tmp/munge.sock ]] && break; sleep 0.1; done
  [[ -S $tmp/munge.sock ]] || fail "munged did not create its socket"

  export SLURM_CONF=$tmp/slurm.conf
  cat >"$SLURM_CONF" <<CONF
ClusterName=ithbattest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmctldDebug=info
SlurmdDebug=info
$extra
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=ithbat Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

  slurmctld -D -c -i >>"$tmp/slurmctld.log" 2>&1 &
  daemon_pids+=($!)
  slurmd -D -N "$host" >>"$tmp/slurmd.log" 2>&1 &
  daemon_pids+=($!)

  local state=
  for _ in $(seq 60); do
    for p in "${daemon_pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "daemon pid $p exited"; done
    state=$(timeout 5 sinfo -h -N -n "$host" -o '%T' 2>/dev/null || true)
    [[ $state == idle ]] && break
    sleep 0.5
  done
  [[ $state == idle ]] || fail "node $host not idle after 30 s (sinfo says '${state}')"
}
