#!/usr/bin/env bash
# Two builds of a benchmark on the same GPU in one call, A then B then A again (the repeat shows
# the run-to-run spread): prints per benchmark the "us" counter of each and B / A. Used to decide
# whether a kernel change lands (issue 16: the candidate against main, in one run).
#
#   scripts/bench-compare.sh A_BIN B_BIN 'BM_Rounds4Replay/T:(2|4)/B:(8|32)/' [out.json prefix]
set -euo pipefail
a="$1"
b="$2"
filter="$3"
prefix="${4:-${OUT:-/tmp}/compare}"
run() {
  "$1" --benchmark_filter="$filter" --benchmark_format=json >"$2" 2>"$2.err" &&
    grep -q '"benchmarks"' "$2" ||
    { echo "bench-compare: $1 wrote no benchmarks (no GPU, or none matched '$filter'):"; tail -5 "$2.err"; exit 1; }
}
run "$a" "$prefix-a1.json"
run "$b" "$prefix-b.json"
run "$a" "$prefix-a2.json"
python3 "$(dirname "${BASH_SOURCE[0]}")/bench_json.py" compare "$prefix-a1.json" "$prefix-b.json" \
  "$prefix-a2.json"
