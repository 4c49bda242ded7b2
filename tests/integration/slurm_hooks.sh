#!/usr/bin/env bash
# Slurm's Prolog/Epilog → `ithbat slurm-hook` → the agent, against a real one-node cluster
# (tests/integration/slurm_cluster.bash): three batch jobs — one that succeeds, one that exits 3,
# one killed by SIGKILL — must reach the agent as job start/end events with the user, partition
# and cluster slurmd gave the hooks, the exit code or the signal, counters by outcome, and a
# diagnosis for each failed job that says how it ended ("exited with code 3", "was ended by
# signal 9"); the successful job gets none. The identity comes from slurmd's environment for the
# hooks, not from any job process's /proc.
#
# Usage: slurm_hooks.sh ITHBAT_BINARY
set -euo pipefail

ithbat=$(realpath "${1:?usage: slurm_hooks.sh ITHBAT_BINARY}")
source "$(dirname "${BASH_SOURCE[0]}")/slurm_cluster.bash"
command -v curl >/dev/null || fail "curl not installed"

spool=$tmp/ithbat-spool
# slurm.conf(5): Prolog/Epilog run as SlurmdUser (root) on the node; PrologFlags=Alloc runs the
# prolog when the job is allocated, so a batch job's start is recorded before it runs.
# The shipped hooks (packaging/slurm/), pointed at this build and a private spool.
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for which in prolog epilog; do
  sed -e "s|/usr/local/bin/ithbat|$ithbat|g" -e "s|slurm-hook $which\$|slurm-hook $which --spool-dir $spool|" \
    "$src/packaging/slurm/$which" >"$tmp/$which.sh"
  grep -q -- "--spool-dir $spool" "$tmp/$which.sh" || fail "packaging/slurm/$which: no 'exec … slurm-hook $which' line"
  chmod 755 "$tmp/$which.sh"
done
start_slurm_cluster "Prolog=$tmp/prolog.sh
Epilog=$tmp/epilog.sh
PrologFlags=Alloc"

ok=$(sbatch --parsable -J ithbat-ok -o "$tmp/ok.out" --wrap 'true') || fail "sbatch ok"
failed=$(sbatch --parsable -J ithbat-fail -o "$tmp/fail.out" --wrap 'exit 3') || fail "sbatch fail"
killed=$(sbatch --parsable -J ithbat-killed -o "$tmp/killed.out" --wrap 'kill -9 $$') || fail "sbatch killed"
echo "jobs: ok=$ok failed=$failed killed=$killed"

# All three done and their epilogs run: three end records in the spool (the agent is not yet
# there to take them; they wait for it).
deadline=$((SECONDS + 60))
until [[ -z $(cluster_jobs) && $(find "$spool" -name '*-end.json' 2>/dev/null | wc -l) -eq 3 ]]; do
  ((SECONDS < deadline)) || fail "jobs or epilogs not done in 60 s: queue '$(cluster_jobs)', spool: $(ls "$spool" 2>&1)"
  sleep 0.5
done
ls -l "$spool"
[[ $(stat -c %a "$spool") == 700 ]] || fail "spool mode $(stat -c %a "$spool"), expected 700"
grep -q '"exit_code":3' "$spool"/*-"$failed"-end.json || fail "job $failed's record: $(cat "$spool"/*-"$failed"-end.json)"
grep -q '"signal":9' "$spool"/*-"$killed"-end.json || fail "job $killed's record: $(cat "$spool"/*-"$killed"-end.json)"

# `--once` reads the spool without taking the records from the agent that runs next.
once=$("$ithbat" agent --once --nvml-library /nonexistent/libnvidia-ml.so.1 --kmsg "" --joblog off \
  --sched-io off --probe-budget 0 --slurm-spool "$spool" 2>"$tmp/once.log") || fail "agent --once failed"
grep -qx 'ithbat_slurm_job_starts_total 3' <<<"$once" || fail "--once: starts: $(grep slurm <<<"$once")"
[[ $(find "$spool" -name '*.json' | wc -l) -eq 6 ]] || fail "--once took records from the spool"

"$ithbat" agent --listen 127.0.0.1:0 --nvml-library /nonexistent/libnvidia-ml.so.1 --kmsg "" --joblog off \
  --sched-io off --slurm-spool "$spool" --diagnose-interval 1s 2>"$tmp/agent.log" &
agent_pid=$!
bg_pids+=("$agent_pid")
port=
for _ in $(seq 100); do
  kill -0 "$agent_pid" 2>/dev/null || fail "agent exited"
  port=$(grep -Eo 'listening on 127\.0\.0\.1:[0-9]+' "$tmp/agent.log" | head -n 1 | sed 's/.*://' || true)
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || fail "agent did not listen"
url=http://127.0.0.1:$port
CURL=(curl --silent --show-error --max-time 5)

metric() {  # metric SERIES: its value in /metrics, empty when absent
  local text
  text=$("${CURL[@]}" "$url/metrics") && awk -v s="$1" '$1 == s { print $2; exit }' <<<"$text"
}
deadline=$((SECONDS + 20))
until [[ $(metric 'ithbat_slurm_job_ends_total{outcome="signaled"}') == 1 ]]; do
  ((SECONDS < deadline)) || fail "the agent did not count the ends: $("${CURL[@]}" "$url/metrics" | grep slurm)"
  sleep 0.2
done
for want in 'ithbat_slurm_job_starts_total 3' 'ithbat_slurm_job_ends_total{outcome="completed"} 1' \
  'ithbat_slurm_job_ends_total{outcome="failed"} 1' 'ithbat_slurm_jobs_running 0' \
  'ithbat_slurm_hook_records_rejected_total 0'; do
  [[ $(metric "${want% *}") == "${want##* }" ]] || fail "expected $want, got '$(metric "${want% *}")'"
done
[[ -z $(find "$spool" -name '*.json') ]] || fail "the agent left records in the spool: $(ls "$spool")"

events=$("${CURL[@]}" "$url/api/v1/events?kind=job_start,job_end") || fail "events API"
diagnoses=
deadline=$((SECONDS + 20))
until grep -q "exited with code 3" <<<"$diagnoses" && grep -q "was ended by signal 9" <<<"$diagnoses"; do
  ((SECONDS < deadline)) || fail "no diagnosis of the failed jobs: $diagnoses"
  sleep 0.5
  diagnoses=$("${CURL[@]}" "$url/api/v1/diagnoses") || true
done
OK=$ok FAILED=$failed KILLED=$killed HOST=$host python3 - "$events" "$diagnoses" <<'PY' || fail "check failed"
import json, os, sys
events = json.loads(sys.argv[1])["data"]
diagnoses = json.loads(sys.argv[2])["diagnoses"]
ok, failed, killed, host = (os.environ[k] for k in ("OK", "FAILED", "KILLED", "HOST"))
by = {(e["job"], e["kind"]): e for e in events}
for job in (ok, failed, killed):
    for kind in ("job_start", "job_end"):
        e = by.get((job, kind))
        assert e, (job, kind, events)
        a = e["attrs"]
        assert a["user"] == "root" and a["uid"] == "0", e
        assert a["partition"] == "ithbat", e
        assert a["cluster"] == "ithbattest", e
        assert a["slurm_node"] == host, e
        assert e["source"] == "slurm", e
    assert by[(job, "job_start")]["time_unix_ns"] <= by[(job, "job_end")]["time_unix_ns"]
assert by[(ok, "job_end")]["attrs"]["exit_code"] == "0", by[(ok, "job_end")]
assert by[(failed, "job_end")]["attrs"]["exit_code"] == "3"
assert by[(failed, "job_end")]["value"] == "3"
assert by[(killed, "job_end")]["attrs"]["signal"] == "9"
assert "exit_code" not in by[(killed, "job_end")]["attrs"]
assert by[(killed, "job_end")]["value"] == "137"
jobs = {d["subjects"]["job"]: d for d in diagnoses}
assert ok not in jobs, jobs[ok]
for job, words in ((failed, "exited with code 3"), (killed, "was ended by signal 9")):
    d = jobs[job]
    assert d["verdict"] == "inconclusive" and d["cause"] == "unknown", d
    assert words in d["summary"], d
    assert any(e["collector"] == "slurm" for e in d["evidence"]), d
print("slurm hooks: ok (jobs %s %s %s)" % (ok, failed, killed))
PY
