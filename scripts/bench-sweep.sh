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
python3 - "$var" "${values[*]}" "${files[@]}" <<'PY'
import json, sys
var, values, paths = sys.argv[1], sys.argv[2].split(" "), sys.argv[3:]
def load(path):
    text = "\n".join(l for l in open(path).read().splitlines()
                     if not l.startswith("copy bandwidth"))
    out = {}
    for bm in json.JSONDecoder().raw_decode(text)[0]["benchmarks"]:
        if "us" in bm:
            out[bm["name"].removesuffix("/manual_time")] = bm["us"]
    return out
runs = [load(p) for p in paths]
heads = [f"{var}={v or 'unset'}" for v in values] + ["first again"]
print(f"{'benchmark':44} " + " ".join(f"{h[-14:]:>14}" for h in heads) + "  ratios to the first")
for name, u0 in runs[0].items():
    us = [r.get(name, float("nan")) for r in runs]
    base = (us[0] + us[-1]) / 2
    print(f"{name:44} " + " ".join(f"{u:14.1f}" for u in us) + "  " +
          " ".join(f"{u / base:5.3f}" for u in us[1:-1]))
PY
