#!/usr/bin/env bash
# Runs one named stage of the build and prints how long it took, in a form .ci/run collects:
#   ==> stage NAME: 12.3 s (ok)
# Usage: scripts/stage.sh NAME COMMAND [ARGS...]
set -uo pipefail
name=$1
shift
start=$(date +%s.%N)
"$@"
rc=$?
end=$(date +%s.%N)
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
if [[ $rc -eq 0 ]]; then
  echo "==> stage $name: $secs s (ok)"
else
  echo "==> stage $name: $secs s (FAILED, exit $rc)"
fi
exit $rc
