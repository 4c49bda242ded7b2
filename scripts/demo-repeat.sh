#!/usr/bin/env bash
# Runs `ithbat demo --quick` (the five demo worlds, fresh seeds) N times in a row and prints one
# markdown table row per world and run — run, world, seed, result, first verdict against its
# budget, the slowest job's pace — then how many of each result. With --busy, one core is kept
# busy by an unrelated shell loop for the whole time (issue 27: the demo must pass beside other
# programs). docs/diagnoses.md records the table this prints.
#
# Usage: scripts/demo-repeat.sh N [--busy] [BUILD_DIR]     (as root, after `make demo` built it)
#   e.g. scripts/demo-repeat.sh 10 > quiet.md; scripts/demo-repeat.sh 10 --busy > busy.md
# DEMO_REPEAT_RESULTS=FILE appends each world's raw result line there as it comes and keeps the
# file, so a series cut short still has its finished runs (N=0 then prints FILE's table).
set -euo pipefail

runs=${1:?usage: demo-repeat.sh N [--busy] [BUILD_DIR]}
shift
busy=0
if [[ ${1:-} == --busy ]]; then
  busy=1
  shift
fi
build=${1:-build}
ithbat="$build/ithbat"
[[ -x $ithbat ]] || { echo "demo-repeat: $ithbat is not built (make demo builds it)" >&2; exit 1; }

hog=
if [[ $busy -eq 1 ]]; then
  ( while :; do :; done ) &
  hog=$!
fi
if [[ -n ${DEMO_REPEAT_RESULTS:-} ]]; then
  jsonl=$DEMO_REPEAT_RESULTS
  touch "$jsonl"
  trap '[[ -n $hog ]] && kill "$hog" 2>/dev/null; rm -f "$jsonl.run"' EXIT
else
  jsonl=$(mktemp /tmp/ithbat-demo-repeat-XXXXXX.jsonl)
  trap '[[ -n $hog ]] && kill "$hog" 2>/dev/null; rm -f "$jsonl" "$jsonl.run"' EXIT
fi

# Runs already in a kept results file keep their numbers; this series numbers on from them.
done_before=$(cut -f1 "$jsonl" | sort -n | tail -1)
done_before=${done_before:-0}
echo "demo-repeat: $runs run(s) of '$ithbat demo --quick' on $(nproc) cores$([[ $busy -eq 1 ]] && echo ", one core kept busy by a shell loop")" >&2
for ((i = 1; i <= runs; i++)); do
  start=$(date +%s)
  rc=0
  "$ithbat" demo --quick --json >"$jsonl.run" 2>&1 || rc=$?
  # Only the lab's result lines (one per world); the diagnosis lines and progress are left out.
  grep -E '^\{"' "$jsonl.run" | grep '"result":' | sed "s/^/$((done_before + i))\t/" >>"$jsonl" || true
  echo "demo-repeat: run $((done_before + i)) exited $rc after $(($(date +%s) - start)) s" >&2
  rm -f "$jsonl.run"
done

python3 - "$jsonl" <<'EOF'
import json, sys, collections
rows, count = [], collections.Counter()
for line in open(sys.argv[1]):
    run, text = line.rstrip("\n").split("\t", 1)
    r = json.loads(text)
    firsts = []
    for e in r.get("diagnosis", {}).get("expected", []):
        b = e.get("budget")
        if b:
            used = b.get("used")
            firsts.append(f"{used:.3g} of {b['allowed']:g} {b['unit']}" if used is not None else f"never of {b['allowed']:g} {b['unit']}")
    story = r.get("story", {})
    pace = story.get("pace")
    pace_text = f"{pace:.2f}" if pace is not None else "-"
    if r.get("slowdown"):
        pace_text += f" ({r['slowdown']:.1f}× slower)"
    result = r.get("result", "?")
    count[result] += 1
    rows.append(f"| {run} | {r.get('scenario', '?')} | {r.get('seed')} | {result} | {', '.join(firsts) or '-'} | {pace_text} |")
print("| run | world | seed | result | first verdict / budget | pace |")
print("|---|---|---|---|---|---|")
print("\n".join(rows))
print()
print(", ".join(f"{k} {v}" for k, v in sorted(count.items())) or "no results")
EOF
