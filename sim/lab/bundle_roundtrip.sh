#!/usr/bin/env bash
# Evidence bundle round trip on a real world (issue 7, "Bundle round-trip"): the world case02's
# lab test kept (real agents' stores on disk, two nodes) is recorded with `ithbat record`, then
#   - `ithbat diagnose BUNDLE --json` re-diagnoses it offline and must give exactly the recorded
#     diagnoses (exit 0; 3 would mean they differ), every line schema v1, the storage incident;
#   - the bundle reads with plain SQLite (python3's sqlite3) through the documented tables;
#   - `ithbat report` writes the self-contained HTML report of it.
# The world is removed afterwards (its checkpoint files are 2 GB).
# Usage: bundle_roundtrip.sh ITHBAT WORLD_ROOT
set -euo pipefail
ithbat=$1
root=$2
fail() { echo "bundle_roundtrip: FAIL: $*" >&2; exit 1; }
trap 'rm -rf "$root"' EXIT

world=$(ls -dt "$root"/case02-checkpoint-stall-*/ 2>/dev/null | head -n 1)
world=${world%/}
[[ -n $world && -f $world/world.json ]] || fail "no kept case02 world under $root (lab.case02-checkpoint-stall keeps it)"

# The job id the agents labelled and each node's data directory, from the world's manifest.
read -r job data_dirs < <(python3 - "$world/world.json" <<'EOF'
import json, sys
w = json.load(open(sys.argv[1]))
job = next(j for j in w["jobs"] if j["id"] == "pretrain-13b")
root = sys.argv[1].rsplit("/", 1)[0]
dirs = " ".join(f"--data-dir={n['name']}={n.get('agent_data_dir') or root + '/nodes/' + n['name'] + '/agent'}"
                for n in w["nodes"])
print(job["slurm_job_id"], dirs)
EOF
)
work=$(mktemp -d)
trap 'rm -rf "$root" "$work"' EXIT
bundle=$work/incident.ithbat

# shellcheck disable=SC2086  # data_dirs is a list of flags
"$ithbat" record --job "$job" -o "$bundle" $data_dirs | tee "$work/record.txt"
grep -q "1 diagnosis(es)" "$work/record.txt" || fail "record did not store the storage diagnosis"
# A bundle is evidence: never overwritten.
if "$ithbat" record --job "$job" -o "$bundle" $data_dirs 2>"$work/again.err"; then fail "record overwrote a bundle"; fi
grep -q "never overwritten" "$work/again.err" || fail "no clear error for an existing bundle: $(cat "$work/again.err")"

rc=0
"$ithbat" diagnose "$bundle" --json >"$work/diagnoses.jsonl" 2>"$work/diagnose.err" || rc=$?
cat "$work/diagnose.err" >&2
[[ $rc -eq 0 ]] || fail "diagnose exited $rc (3: the offline re-diagnosis differs from the recorded one)"
python3 - "$work/diagnoses.jsonl" "$bundle" <<'EOF'
import json, sqlite3, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(lines) == 1, f"expected one diagnosis, got {len(lines)}"
d = lines[0]
assert d["schema"] == "ithbat.diagnosis/v1", d.get("schema")
assert (d["verdict"], d["cause"]) == ("infrastructure", "storage"), (d["verdict"], d["cause"])
assert d["subjects"]["resource"].endswith("/projects/mnt"), d["subjects"]["resource"]
db = sqlite3.connect(f"file:{sys.argv[2]}?mode=ro", uri=True)
meta = dict(db.execute("SELECT key, value FROM meta"))
assert meta["format"] == "ithbat.bundle/v1", meta
recorded = [json.loads(j) for (j,) in db.execute("SELECT json FROM diagnoses ORDER BY ord")]
assert recorded == lines, "the JSON lines differ from the diagnoses table"
n = db.execute("SELECT COUNT(*) FROM samples s JOIN series r ON r.id = s.series_id "
               "JOIN metrics m ON m.id = r.metric_id WHERE m.name = 'ithbat_gpu_utilization_ratio'").fetchone()[0]
assert n > 1000, f"only {n} GPU utilisation samples"
saves = db.execute("SELECT COUNT(*) FROM events WHERE kind = 'checkpoint_end' AND job = ?", (meta["job"],)).fetchone()[0]
assert saves >= 2, f"{saves} checkpoint_end events"
print(f"bundle_roundtrip: {len(lines)} diagnosis, {n} utilisation samples, {saves} saves read with sqlite3")
EOF

"$ithbat" report "$bundle" -o "$work/report.html"
grep -q "<svg" "$work/report.html" || fail "the report has no chart"
if grep -Eq "(src|href)=\"https?:" "$work/report.html"; then fail "the report loads something from outside"; fi
echo "bundle_roundtrip: PASS"
