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
run() { "$1" --benchmark_filter="$filter" --benchmark_format=json >"$2" 2>"$2.err"; }
run "$a" "$prefix-a1.json"
run "$b" "$prefix-b.json"
run "$a" "$prefix-a2.json"
python3 - "$prefix-a1.json" "$prefix-b.json" "$prefix-a2.json" <<'PY'
import json, sys
def load(path):
    # The benchmarks print their copy-bandwidth probe and a summary table to stdout too: the
    # JSON is the first object, with the probe's lines taken out.
    text = "\n".join(l for l in open(path).read().splitlines()
                     if not l.startswith("copy bandwidth"))
    out = {}
    for bm in json.JSONDecoder().raw_decode(text)[0]["benchmarks"]:
        if "us" in bm:
            out[bm["name"].removesuffix("/manual_time")] = bm["us"]
    return out
a1, b, a2 = (load(p) for p in sys.argv[1:4])
print(f"{'benchmark':48} {'A us':>10} {'A again':>10} {'B us':>10} {'B/A':>6}")
for name, ua in a1.items():
    if name not in b:
        continue
    ub, ua2 = b[name], a2.get(name, float("nan"))
    mean_a = (ua + ua2) / 2
    print(f"{name:48} {ua:10.1f} {ua2:10.1f} {ub:10.1f} {ub / mean_a:6.3f}")
PY
