#!/usr/bin/env bash
# A lab stopped while a world runs (Ctrl-C at the terminal, SIGTERM from a CI timeout) stops:
# the world it cut short is reported as interrupted, not judged, not run again slower by --adapt
# (a world stopped early is INVALID, which --adapt would otherwise retry), and the worlds after
# it are not run.
# Usage: interrupted.sh ITHBAT_LAB SCENARIO_FILE OTHER_SCENARIO_FILE
set -euo pipefail
lab=${1:?usage: interrupted.sh ITHBAT_LAB SCENARIO_FILE OTHER_SCENARIO_FILE}
first=${2:?}
second=${3:?}
root=$(mktemp -d /tmp/ithbat-lab-interrupted-XXXXXX)
trap 'rm -rf "$root"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$root/lab.out" >&2; exit 1; }

"$lab" --quick --adapt --root "$root/worlds" "$first" "$second" >"$root/lab.out" 2>&1 &
lab_pid=$!
# The world has started once the runner wrote its world.json; let it run a few seconds more.
for _ in $(seq 1 300); do
  compgen -G "$root/worlds/*/world.json" >/dev/null && break
  sleep 0.1
done
compgen -G "$root/worlds/*/world.json" >/dev/null || fail "no world started within 30 s"
sleep 3
kill -TERM "$lab_pid"
rc=0
wait "$lab_pid" || rc=$?
# Shown indented: the CI summary lists a lab's "ERROR <world>" lines as worlds that did not pass,
# and this one's ERROR is the outcome asked for.
sed 's/^/  | /' "$root/lab.out"
(( rc != 0 )) || fail "the lab exited 0 although its world was interrupted"
grep -q "interrupted by Terminated while the world ran; not judged" "$root/lab.out" ||
  fail "the interrupted world is not reported as interrupted"
grep -q "lab: stopped by Terminated" "$root/lab.out" || fail "the lab did not say it stopped"
if grep -q "running it again" "$root/lab.out"; then fail "--adapt ran the interrupted world again"; fi
second_name=$(basename "$second" .yaml)
if grep -q "^== $second_name" "$root/lab.out"; then fail "the world after the interrupted one was run"; fi
echo "interrupted: the lab stopped after the world it was told to stop"
