#!/usr/bin/env python3
"""Tables of Google Benchmark JSON files written by the specstate benchmarks (their "us" counter,
per benchmark), for scripts/bench-compare.sh and scripts/bench-sweep.sh.

    bench_json.py compare A1.json B.json A2.json        # A, A again, B, B / mean(A)
    bench_json.py sweep VAR "v1 v2 .." F1.json ... Fn.json FIRST_AGAIN.json
"""
import json
import sys


def load(path):
    # The benchmarks print their copy-bandwidth probe and a summary table to stdout too: the JSON
    # is the first object, with the probe's lines taken out.
    text = "\n".join(line for line in open(path).read().splitlines()
                     if not line.startswith("copy bandwidth"))
    out = {}
    for bm in json.JSONDecoder().raw_decode(text)[0]["benchmarks"]:
        if "us" in bm:
            out[bm["name"].removesuffix("/manual_time")] = bm["us"]
    return out


def compare(a1_path, b_path, a2_path):
    a1, b, a2 = load(a1_path), load(b_path), load(a2_path)
    print(f"{'benchmark':48} {'A us':>10} {'A again':>10} {'B us':>10} {'B/A':>6}")
    for name, ua in a1.items():
        if name not in b:
            continue
        ub, ua2 = b[name], a2.get(name, float("nan"))
        print(f"{name:48} {ua:10.1f} {ua2:10.1f} {ub:10.1f} {ub / ((ua + ua2) / 2):6.3f}")


def sweep(var, values, paths):
    runs = [load(p) for p in paths]
    heads = [f"{var}={v or 'unset'}" for v in values.split(" ")] + ["first again"]
    print(f"{'benchmark':44} " + " ".join(f"{h[-14:]:>14}" for h in heads) +
          "  ratios to the first")
    for name in runs[0]:
        us = [r.get(name, float("nan")) for r in runs]
        base = (us[0] + us[-1]) / 2
        print(f"{name:44} " + " ".join(f"{u:14.1f}" for u in us) + "  " +
              " ".join(f"{u / base:5.3f}" for u in us[1:-1]))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "compare":
        compare(*sys.argv[2:5])
    elif len(sys.argv) >= 6 and sys.argv[1] == "sweep":
        sweep(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)
