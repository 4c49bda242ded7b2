#!/usr/bin/env bash
# Job output end to end: the real `ithbat agent` (fake NVML), a "rank" process listed on a fake
# GPU with RANK=3 and a Slurm job id in its environment, printing a Megatron-style training log
# into a pipe. The GPU collector publishes it (with the identity it resolved), the job-output
# collector tracks it in the kernel (eBPF), and /api/v1/events?kind=loss must show its loss
# values with its pid, rank 3 and job. Needs root (eBPF); CI runs it as root, and a capture that
# cannot load fails this test with the agent's reason.
#
# The tool and the fake come from the build tree next to the binary, as in two_nodes.sh.
source "$(dirname "$0")/common.bash"
require curl
require python3

fake_node_tools

state="$WORK/node.state"
"$ctl" create "$state" --gpus 2 --model h100 --seed joblog || fail "cannot create the fake node"

# The rank: waits for $WORK/go, then prints three iteration lines (losses 3.25, 3.0, 2.75) into
# its stdout, a pipe (a FIFO read by cat), as a job under a launcher's pipe would.
job=4242
mkfifo "$WORK/out.fifo"
cat "$WORK/out.fifo" >"$WORK/rank.out" &
STARTED_PIDS+=("$!")
line() {  # ITER LOSS: one Megatron-LM iteration line
  printf ' iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration (ms): 250.0 | learning rate: 1.000000E-04 | global batch size:    16 | lm loss: %s | loss scale: 1.0 | grad norm: 0.750 | number of skipped iterations:   0 | number of nan iterations:   0 |' \
    "$1" 100 $(($1 * 16)) "$2"
}
env -i PATH=/usr/bin:/bin SLURM_JOB_ID=$job RANK=3 LOCAL_RANK=0 WORLD_SIZE=4 \
  L1="$(line 1 3.250000E+00)" L2="$(line 2 3.000000E+00)" L3="$(line 3 2.750000E+00)" GO="$WORK/go" \
  sh -c 'while [ ! -e "$GO" ]; do sleep 0.05; done
         printf "%s\n" "$L1"; printf "%s\n" "$L2"; printf "%s\n" "$L3"
         exec sleep 300' >"$WORK/out.fifo" &
rank_pid=$!
STARTED_PIDS+=("$rank_pid")
"$ctl" add-process "$state" --gpu 0 --pid "$rank_pid" --memory 2147483648 || fail "cannot list the rank on GPU 0"

: >"$WORK/agent.log"
ITHBAT_FAKE_STATE=$state start_agent agent --nvml-library "$fake" --kmsg "" --interval 200ms --joblog ebpf

metric() { metric_value "$AGENT_URL" "$1"; }
# Whatever the attachment (fexit, tp_btf, raw_tp), the capture must be eBPF; if it is not, the
# agent's log and the collector's degraded flag say why.
wait_until 20 "the job-output collector's first tick (ithbat_joblog_capture_mode)" \
  answer_has "$AGENT_URL/metrics" '^ithbat_joblog_capture_mode{'
metrics=$("${CURL[@]}" "$AGENT_URL/metrics") || fail "cannot read the agent's /metrics"
if ! grep -q '^ithbat_joblog_capture_mode{[^}]*mode="ebpf"' <<<"$metrics"; then
  grep -E '^ithbat_joblog_capture_mode' <<<"$metrics" >&2 || true
  grep -i "capture" "$WORK/agent.log" >&2 || true
  fail "the agent's job-output capture is not eBPF (the reason is in the agent log above)"
fi

# The agent tracks the rank once the GPU collector has published it.
tracked() { (($(metric ithbat_joblog_tracked_processes) >= 1)); }
wait_until 30 "the agent to track the rank (ithbat_joblog_tracked_processes >= 1)" tracked
touch "$WORK/go"

cat >"$WORK/check.py" <<'PY'
import json, sys
pid, want = int(sys.argv[1]), {1: 3.25, 2: 3.0, 3: 2.75}
d = json.load(sys.stdin)
assert d["status"] == "success", d
got = {}
for e in d["data"]:
    if e.get("pid") != pid:
        continue
    assert e.get("rank") == 3, f"rank {e.get('rank')} in {e}"
    assert e.get("job") == sys.argv[2], f"job {e.get('job')} in {e}"
    got[e["step"]] = float(e["value"])
missing = {s: v for s, v in want.items() if got.get(s) != v}
if missing:
    print(f"want {want}, got {got}", file=sys.stderr)
    sys.exit(1)
PY
losses_ok() {
  "${CURL[@]}" "$AGENT_URL/api/v1/events?kind=loss&pid=$rank_pid" | python3 "$WORK/check.py" "$rank_pid" "$job"
}
deadline=$((SECONDS + 30))
until losses_ok 2>"$WORK/check.err"; do
  if ((SECONDS >= deadline)); then
    cat "$WORK/check.err" >&2
    echo "events the agent holds:" >&2
    "${CURL[@]}" "$AGENT_URL/api/v1/events?kind=loss,step,log_line" >&2 || true
    fail "the agent did not report the rank's losses 3.25, 3.0, 2.75 with pid $rank_pid, rank 3, job $job"
  fi
  sleep 0.2
done
lost=$(metric ithbat_joblog_lost_records_total)
[[ $lost == 0 ]] || fail "records were lost at a few lines per second: ithbat_joblog_lost_records_total=$lost"
echo "joblog capture: the agent reported losses 3.25, 3.0, 2.75 of pid $rank_pid (rank 3, job $job) from its pipe"
