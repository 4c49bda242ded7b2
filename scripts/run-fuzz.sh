#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang-19) and runs each for SECONDS, one after another,
# from the seed corpus in fuzz/corpus/<target>/ plus a generated 1 MiB line. Prints one line per
# target and exits non-zero when any target found a crash, a leak, an out-of-memory or a
# timeout (the input that did it is kept as BUILD_DIR/fuzz/artifacts/<target>-*).
#
#   scripts/run-fuzz.sh SECONDS_PER_TARGET [BUILD_DIR]     (default BUILD_DIR: build-fuzz)
#
# ITHBAT_FUZZ_JOBS: parallel compile jobs (default: ninja's choice). ITHBAT_FUZZ_TARGETS: a
# space-separated subset to run. See fuzz/README.md for longer runs.
set -euo pipefail

usage() { echo "usage: $0 SECONDS_PER_TARGET [BUILD_DIR]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
secs=$1
[[ $secs =~ ^[0-9]+$ && $secs -gt 0 ]] || usage
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build-fuzz}

mkdir -p "$build"
CC=clang-19 CXX=clang++-19 cmake -S "$root" -B "$build" -G Ninja -DITHBAT_FUZZ=ON >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; echo "run-fuzz: configure failed" >&2; exit 1; }
ninja -C "$build" ${ITHBAT_FUZZ_JOBS:+-j "$ITHBAT_FUZZ_JOBS"} fuzzers >/dev/null ||
  { ninja -C "$build" -j1 fuzzers; echo "run-fuzz: build failed" >&2; exit 1; }

targets=${ITHBAT_FUZZ_TARGETS:-$(cat "$build/fuzz/targets.txt")}
work=$build/fuzz/work
artifacts=$build/fuzz/artifacts
mkdir -p "$work" "$artifacts"

# A 1 MiB line with secrets, numbers and escapes but no newline: the bounds are tried on it
# from the first run (mutation alone grows inputs slowly). Libfuzzer's -max_len admits it.
big=$work/big_line.seed
if [[ ! -f $big ]]; then
  python3 - "$big" <<'PY'
import sys
chunk = "loss: 1.25 lr=3e-4 password=hunter2 \x1b[31m step 10 | " 
data = (chunk * (1048600 // len(chunk) + 1))[:1048600]
open(sys.argv[1], "w").write(data)
PY
fi

failed=0
for t in $targets; do
  bin=$build/fuzz/$t
  out=$work/$t
  mkdir -p "$out"
  cp -n "$big" "$out/" 2>/dev/null || true
  seeds=$root/fuzz/corpus/$t
  [[ -d $seeds ]] || seeds=
  log=$work/$t.log
  set +e
  "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=1100000 -timeout=60 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$t-" "$out" $seeds >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  set -e
  if [[ $rc -eq 0 ]]; then
    printf 'PASS %-28s %8s runs  cov %-6s peak %s MB\n' "$t" "${execs:-?}" "${cov:-?}" "${rss:-?}"
  else
    failed=1
    why=$(grep -m1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)[^(]*|invariant broken: .*' "$log" || echo "exit $rc")
    printf 'FAIL %-28s %s (log %s)\n' "$t" "$why" "$log"
  fi
done
exit $failed
