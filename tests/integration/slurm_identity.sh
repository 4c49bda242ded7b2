#!/usr/bin/env bash
# Process identity against a real one-node Slurm cluster (slurm-wlm + munge, no systemd):
# `srun -n2 sleep` under a private slurm.conf, then tests/collect/identity_probe must resolve
# each task to the job id squeue shows, step 0, ranks {0,1}, and scontrol's name/partition.
#
# Usage: slurm_identity.sh ITHBAT_BINARY [IDENTITY_PROBE]
# CTest passes both (tests/CMakeLists.txt); without the second, the probe is looked up next to
# the binary's build tree: $(dirname ITHBAT_BINARY)/tests/identity_probe.
#
# The cluster (tests/integration/slurm_cluster.bash) lives in a temp dir on free loopback ports;
# every daemon is stopped by pid in the EXIT trap. If Slurm does not come up the test FAILS with
# the daemons' log tails: it never skips.
set -euo pipefail

ithbat=${1:?usage: slurm_identity.sh ITHBAT_BINARY [IDENTITY_PROBE]}
probe=${2:-$(dirname "$ithbat")/tests/identity_probe}
[[ -x $probe ]] || { echo "FAIL: identity_probe not found at $probe" >&2; exit 1; }
# The cluster: tests/integration/slurm_cluster.bash (its trap stops everything).
source "$(dirname "${BASH_SOURCE[0]}")/slurm_cluster.bash"
start_slurm_cluster

srun -n2 -J ithbat-identity sleep 30 >"$tmp/srun.out" 2>&1 &
srun_pid=$!
bg_pids+=("$srun_pid")

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
