#!/usr/bin/env bash
# One benchmark binary run once per value of an environment variable (a tuning knob such as
# SPECSTATE_GDN_VBLOCKS or SPECSTATE_BENCH_RING), on the same GPU in one call: prints per
# benchmark the "us" counter under each value (an empty value: the variable unset), the first
# value run again at the end (the repeat shows the run-to-run spread), and each value / the first.
#
#   scripts/bench-sweep.sh BIN SPECSTATE_GDN_VBLOCKS "1 2 4 8" 'BM_Rounds4Replay/T:4/' [prefix]
set -euo pipefail
bin="$1"
var="$2"
read -r -a values <<<"$3"
filter="$4"
prefix="${5:-${OUT:-/tmp}/sweep}"
files=()
for v in "${values[@]}" "${values[0]}"; do
  f="$prefix-${var}-${v:-unset}-${#files[@]}.json"
  if [ -n "$v" ]; then
    env "$var=$v" "$bin" --benchmark_filter="$filter" --benchmark_format=json >"$f" 2>"$f.err"
  else
    env -u "$var" "$bin" --benchmark_filter="$filter" --benchmark_format=json >"$f" 2>"$f.err"
  fi
  files+=("$f")
done
python3 "$(dirname "${BASH_SOURCE[0]}")/bench_json.py" sweep "$var" "${values[*]}" "${files[@]}"
