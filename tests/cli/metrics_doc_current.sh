#!/usr/bin/env bash
# docs/metrics.md must be what `ithbat metrics-doc` prints today.
# Usage: metrics_doc_current.sh ITHBAT_BINARY DOCS_METRICS_MD
set -euo pipefail
ithbat=$1
doc=$2
generated=$(mktemp)
trap 'rm -f "$generated"' EXIT
"$ithbat" metrics-doc >"$generated"
if [[ ! -f $doc ]]; then
  echo "$doc does not exist: run make metrics-doc" >&2
  exit 1
fi
if ! diff -u "$doc" "$generated"; then
  echo "$doc is out of date with the collectors' metric descriptions: run make metrics-doc" >&2
  exit 1
fi
echo "$doc is current"
