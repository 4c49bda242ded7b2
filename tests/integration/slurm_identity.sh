#!/usr/bin/env bash
# Process identity against a real one-node Slurm cluster (slurm-wlm + munge, no systemd):
# `srun -n2 sleep` under a private slurm.conf, then tests/collect/identity_probe must resolve
# each task to the job id squeue shows, step 0, ranks {0,1}, and scontrol's name/partition.
#
# Usage: slurm_identity.sh ITHBAT_BINARY [IDENTITY_PROBE]
# CTest passes both (tests/CMakeLists.txt); without the second, the probe is looked up next to
# the binary's build tree: $(dirname ITHBAT_BINARY)/tests/identity_probe.
#
# Everything lives in a temp dir (config, munge key and socket, spool, state, logs) on free
# loopback ports; every daemon is stopped by pid in the EXIT trap. If Slurm does not come up
# the test FAILS with the daemons' log tails: it never skips.
set -euo pipefail

ithbat=${1:?usage: slurm_identity.sh ITHBAT_BINARY [IDENTITY_PROBE]}
probe=${2:-$(dirname "$ithbat")/tests/identity_probe}
[[ -x $probe ]] || { echo "FAIL: identity_probe not found at $probe" >&2; exit 1; }
for tool in munged mungekey slurmctld slurmd srun squeue sinfo scontrol scancel python3; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not installed (scripts/install-deps.sh)" >&2; exit 1; }
done
[[ $(id -u) -eq 0 ]] || { echo "FAIL: needs root (SlurmUser=root, slurmd)" >&2; exit 1; }

tmp=$(mktemp -d /tmp/ithbat-slurm.XXXXXX)
chmod 700 "$tmp"
daemon_pids=()
srun_pid=
job_id=

logs() {
  for f in "$tmp"/munged.log "$tmp"/slurmctld.log "$tmp"/slurmd.log "$tmp"/srun.out; do
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
cleanup() {
  set +e
  if [[ -n $job_id ]]; then
    timeout 5 scancel "$job_id" >/dev/null 2>&1
    # Let the step end cleanly (srun returns, slurmstepd exits) before the daemons go.
    for _ in $(seq 50); do
      [[ -z $(timeout 5 squeue -h -j "$job_id" 2>/dev/null) ]] && ! kill -0 "$srun_pid" 2>/dev/null && break
      sleep 0.2
    done
  fi
  [[ -n $srun_pid ]] && stop_pid "$srun_pid"
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

host=$(hostname -s)
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
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=ithbat Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

slurmctld -D -c -i >>"$tmp/slurmctld.log" 2>&1 &
daemon_pids+=($!)
slurmd -D -N "$host" >>"$tmp/slurmd.log" 2>&1 &
daemon_pids+=($!)

state=
for _ in $(seq 60); do
  for p in "${daemon_pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "daemon pid $p exited"; done
  state=$(timeout 5 sinfo -h -N -n "$host" -o '%T' 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.5
done
[[ $state == idle ]] || fail "node $host not idle after 30 s (sinfo says '${state}')"

srun -n2 -J ithbat-identity sleep 30 >"$tmp/srun.out" 2>&1 &
srun_pid=$!

# The two tasks: `sleep` processes whose environment names a Slurm job and two of them.
task_pids=()
for _ in $(seq 60); do
  job_id=$(timeout 5 squeue -h -n ithbat-identity -t RUNNING -o '%i' 2>/dev/null | head -n 1 || true)
  task_pids=()
  if [[ -n $job_id ]]; then
    for d in /proc/[0-9]*; do
      [[ $(cat "$d/comm" 2>/dev/null) == sleep ]] || continue
      grep -zqxF "SLURM_JOB_ID=$job_id" "$d/environ" 2>/dev/null || continue
      task_pids+=("${d#/proc/}")
    done
  fi
  [[ ${#task_pids[@]} -eq 2 ]] && break
  kill -0 "$srun_pid" 2>/dev/null || fail "srun exited early"
  sleep 0.5
done
[[ ${#task_pids[@]} -eq 2 ]] || fail "expected 2 srun tasks of job '${job_id}', found ${#task_pids[@]}"

out=$("$probe" --slurm "${task_pids[@]}") || fail "identity_probe failed: $out"
echo "$out"
JOB="$job_id" python3 - "$out" <<'PY' || fail "identity check failed"
import json, os, sys
job = os.environ["JOB"]
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
assert len(rows) == 2, rows
for r in rows:
    assert r["job"] == job, (r, job)
    assert r["slurm_job"] == job, r
    assert r["slurm_step"] == "0", r
    assert r["job_source"] == "env", r
    assert r["world_size"] == 2, r
    s = r.get("slurm")
    assert s, r
    assert s["name"] == "ithbat-identity", s
    assert s["partition"] == "ithbat", s
    assert s["state"] == "RUNNING", s
    assert s["user"] == "root", s
    assert s["num_nodes"] == 1, s
assert sorted(r["rank"] for r in rows) == [0, 1], rows
assert sorted(r["local_rank"] for r in rows) == [0, 1], rows
print("slurm identity: ok (job %s)" % job)
PY
