#!/usr/bin/env bash
# Runs the CTest suite one label group at a time (core, store, agent, collect, joblog, probes, serve, detect,
# investigate, bundle, report, remote, notify, hub, cli, sim — which
# takes every sim_* label too —, scenario, lab, integration, then any test carrying none of those labels) and prints how long each group
# took, so a slow module shows up in every CI log. Every group runs even when an earlier one
# fails; the exit status is non-zero if any test failed.
# Usage: scripts/run-tests.sh BUILD_DIR [JOBS]
set -uo pipefail

build=${1:?usage: run-tests.sh BUILD_DIR [JOBS]}
jobs=${2:-2}
groups=(core store agent collect joblog probes serve detect investigate bundle report net remote notify hub cli sim scenario lab integration)
# A group's label pattern: the group's own label; sim also takes the simulator's parts
# (sim_workload, sim_node, sim_runner, sim_lab, ...).
pattern() { if [[ $1 == sim ]]; then echo 'sim(_[a-z]+)?'; else echo "$1"; fi; }
known=$(for g in "${groups[@]}"; do pattern "$g"; done | paste -sd'|')

total_pass=0
total_fail=0
status=0
table=()
log=$(mktemp)
lab_log=$(mktemp)
trap 'rm -f "$log" "$lab_log"' EXIT

for g in "${groups[@]}" other; do
  if [[ $g == other ]]; then
    select=(-LE "^(${known})\$")
  else
    select=(-L "^($(pattern "$g"))\$")
  fi
  # Integration tests start servers and measure nothing, but they share 2 cores with the
  # build machine's other work: run them one at a time so their bounded waits stay generous.
  j=$jobs
  [[ $g == integration ]] && j=1
  # The lab runs whole simulated worlds (16 ranks, agents) that need both cores each: one at
  # a time, verbose so the log shows every scenario's seed and signal table.
  verbose=()
  [[ $g == lab ]] && { j=1; verbose=(-V); }

  listed=$(ctest --test-dir "$build" -N "${select[@]}" 2>/dev/null | sed -n 's/^Total Tests: \([0-9]*\)$/\1/p')
  if [[ ${listed:-0} -eq 0 ]]; then
    if [[ $g != other ]]; then
      table+=("$(printf '%-12s %8s    no tests' "$g" "-")")
      echo "==> stage test:$g: 0.0 s (no tests)"
    fi
    continue
  fi

  echo "---- test group $g ($listed tests) ----"
  start=$(date +%s.%N)
  ctest --test-dir "$build" "${select[@]}" -j "$j" "${verbose[@]}" --output-on-failure --timeout 900 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  end=$(date +%s.%N)
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  line=$(grep -Eo '[0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  failed=$(awk '{ print $1 }' <<<"$line")
  count=$(awk '{ print $NF }' <<<"$line")
  if [[ -z $line ]]; then  # ctest itself failed (bad build dir, crash while listing)
    failed=1
    count=1
  fi
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then
    failed=1
  fi
  passed=$((count - failed))
  total_pass=$((total_pass + passed))
  total_fail=$((total_fail + failed))
  if [[ $failed -ne 0 || $rc -ne 0 ]]; then
    status=1
    verdict="FAILED"
  else
    verdict="ok"
  fi
  table+=("$(printf '%-12s %8s s  %d passed, %d failed' "$g" "$secs" "$passed" "$failed")")
  echo "==> stage test:$g: $secs s ($verdict, $passed passed, $failed failed)"
  [[ $g == lab ]] && cp "$log" "$lab_log"
done

# libFuzzer (fuzz/README.md): a second build with clang-19 + ASan, every target run for
# FUZZ_SECONDS (default 10; 0 skips the group) from its seed corpus and a 1 MiB line. Each
# target counts as one test: a crash, leak, out-of-memory or timeout fails it.
fuzz_secs=${FUZZ_SECONDS:-10}
if [[ $fuzz_secs -gt 0 ]]; then
  echo "---- test group fuzz (${fuzz_secs} s per target) ----"
  start=$(date +%s.%N)
  bash "$(dirname "$0")/run-fuzz.sh" "$fuzz_secs" "${build}-fuzz" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  end=$(date +%s.%N)
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  passed=$(grep -c '^PASS ' "$log" || true)
  failed=$(grep -c '^FAIL ' "$log" || true)
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi  # the build itself failed
  total_pass=$((total_pass + passed))
  total_fail=$((total_fail + failed))
  verdict=ok
  if [[ $failed -ne 0 ]]; then status=1; verdict=FAILED; fi
  table+=("$(printf '%-12s %8s s  %d passed, %d failed' fuzz "$secs" "$passed" "$failed")")
  echo "==> stage test:fuzz: $secs s ($verdict, $passed passed, $failed failed)"
fi

echo
echo "Test groups:"
printf '  %s\n' "${table[@]}"
# The lab's verbose log is long and a CI report keeps only its head and tail: every world's
# result, story, verdict and pace, then what went wrong in which world (scenario, seed, the story,
# signals and verdicts that were not ok), are repeated here.
if grep -Eq '^([0-9]+: )?  [A-Za-z0-9._-]+ \| (PASS|MISSED|WRONG|INVALID|SKIP|ERROR) \|' "$lab_log"; then
  echo
  echo "Lab worlds (scenario | result | what happened | verdict | first verdict / budget | pace):"
  sed -E 's/^[0-9]+: //' "$lab_log" | grep -E '^  [A-Za-z0-9._-]+ \| (PASS|MISSED|WRONG|INVALID|SKIP|ERROR) \|' |
    cut -c1-400
fi
if grep -Eq '^([0-9]+: )?(MISSED|WRONG|INVALID|ERROR) ' "$lab_log"; then
  echo
  echo "Lab worlds that did not pass (rerun one: build/sim/ithbat-lab --quick --seed SEED scenarios/NAME.yaml):"
  # A world's block runs from its result line to the blank line after it.
  sed -E 's/^[0-9]+: //' "$lab_log" |
    awk '/^(MISSED|WRONG|INVALID|ERROR) / { on = 1; print; next }
         /^$/ { on = 0 }
         on && (/^  error: / || /^  expected / || /^    why: / || /^  INVALID: / || /^  what to do: / ||
                /^  first run INVALID: / || /\[(NO|MISSED|LATE|EXTRA)\]/) { print }' |
    awk '!seen[$0]++' | head -n 80 | cut -c1-400
fi
echo
echo "tests: ${total_pass} passed, ${total_fail} failed"
if [[ $((total_pass + total_fail)) -eq 0 ]]; then
  echo "run-tests: no test ran" >&2
  exit 1
fi
exit $status
