#!/usr/bin/env bash
# The wrong verdict of issue 27 as a test: a healthy world run while an unrelated program keeps
# one of the machine's cores busy (a shell busy loop, as a user's compiler or browser would) must
# get no verdict at all. The lab judges it as `ithbat demo` does: diagnoses required (any
# diagnosis on the healthy control is WRONG), a world the machine could not tell the story of
# run once more, slower (--adapt); the test passes only on PASS.
# Usage: beside_cpu_hog.sh ITHBAT_LAB SCENARIO_FILE
set -euo pipefail
lab=${1:?usage: beside_cpu_hog.sh ITHBAT_LAB SCENARIO_FILE}
scenario=${2:?usage: beside_cpu_hog.sh ITHBAT_LAB SCENARIO_FILE}

( while :; do :; done ) &
hog=$!
trap 'kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true' EXIT
echo "beside_cpu_hog: a busy loop (pid $hog) keeps one core of $(nproc) busy"
"$lab" --quick --require-diagnosis --adapt "$scenario"
