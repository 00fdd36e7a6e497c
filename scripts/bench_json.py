#!/usr/bin/env python3
"""Tables of Google Benchmark JSON files written by the specstate benchmarks (their "us" counter,
per benchmark), for scripts/bench-compare.sh and scripts/bench-sweep.sh.

    bench_json.py compare A1.json B.json A2.json        # A, A again, B, B / mean(A)
    bench_json.py sweep VAR "v1 v2 .." F1.json ... Fn.json FIRST_AGAIN.json
    bench_json.py ring OURS.json SGLANG.json [OURS_AGAIN.json]
        # GDN replay rounds (BM_Rounds4Replay) against tools/sglang_ring_bench.py's SGLang ring on
        # the same GPU: both figures, ours / SGLang's, and issue 16's target for the shape
"""
import json
import sys


def load_counters(path):
    """{benchmark name: its counters} of the benchmarks with a figure ("us")."""
    # The benchmarks print their copy-bandwidth probe and a summary table to stdout too: the JSON
    # is the first object, with the probe's lines taken out.
    text = "\n".join(line for line in open(path).read().splitlines()
                     if not line.startswith("copy bandwidth"))
    out = {}
    for bm in json.JSONDecoder().raw_decode(text)[0]["benchmarks"]:
        # A benchmark that skipped or flagged an error (SkipWithError: "commit flagged", a pool
        # the device cannot hold) has no figure to compare, whatever its counters say.
        if "us" in bm and not bm.get("error_occurred", False):
            out[bm["name"].removesuffix("/manual_time")] = bm
    return out


def load(path):
    return {name: bm["us"] for name, bm in load_counters(path).items()}


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


# Issue 16's targets against SGLang's ring (ours / theirs), by (T, B); the rest have none.
RING_TARGETS = {(4, 1): 0.6, (4, 8): 0.70, (4, 32): 0.65, (4, 128): 0.65,
                (2, 8): 0.75, (2, 128): 0.75, (8, 8): 0.75, (8, 128): 0.75}


def ring(ours_paths, sglang_path):
    runs = [load_counters(p) for p in ours_paths]
    theirs = json.load(open(sglang_path))
    shapes = theirs.get("shapes", {})
    # Ours is Qwen3-Next's 36 layers with no radix-cache snapshots: say so when theirs is not.
    if shapes.get("layers", 36) != 36 or shapes.get("track_interval", 0) != 0:
        print(f"note: SGLang's run has layers {shapes.get('layers')} and track interval "
              f"{shapes.get('track_interval')}; ours has 36 and none: the ratios are not like "
              "for like")
    print(f"GDN replay rounds against SGLang {theirs['env'].get('sglang', '?')}'s ring of "
          f"{theirs['shapes'].get('ring', '?')} on one GPU ({theirs['env'].get('gpu', '?')}), us a "
          f"round; ours / SGLang with the mean of our runs (their spread beside it; the lower "
          f"of two favoured us); MB: DESIGN.md section 8's bytes of our round, %BW: those bytes "
          f"over our mean time as a fraction of the copy bandwidth the bench measured, x floor: "
          f"our time over those bytes at that bandwidth; both sides replay the same accepted "
          f"lengths (bench_accepted)")
    print(f"{'T':>2} {'B':>4} | {'ours':>9} {'again':>9} {'MB':>9} {'%BW':>5} {'x floor':>7} | "
          f"{'SGLang':>9} {'folds':>5} | {'ours/SGL':>8} {'target':>6}")
    for r in theirs["results"]:
        T, B = r["T"], r["B"]
        bms = [run.get(f"BM_Rounds4Replay/T:{T}/B:{B}/min_time:0.050") or
               next((v for k, v in run.items() if k.startswith(f"BM_Rounds4Replay/T:{T}/B:{B}/")),
                    None) for run in runs]
        bms = [bm for bm in bms if bm]
        if not bms:
            continue
        layers = {bm.get("layers") for bm in bms if bm.get("layers") is not None}
        if layers and layers != {shapes.get("layers", 36)}:
            print(f"note: T={T} B={B}: our run has {sorted(layers)} layers, SGLang's "
                  f"{shapes.get('layers', 36)}: the ratio is not like for like")
        us = [bm["us"] for bm in bms]
        mean = sum(us) / len(us)
        # The bytes of a run over the mean time (each run's MB is the same round's bytes).
        mb = bms[0].get("MB", 0.0)
        frac = bms[0].get("frac_copy_bw", 0.0) * us[0] / mean if mean > 0 else 0.0
        bytes_cols = (f"{mb:9.0f} {frac * 100:4.1f}% "
                      f"{(1 / frac if frac > 0 else float('nan')):7.2f}")
        again = f"{us[1]:9.1f}" if len(us) > 1 else f"{'':9}"
        spread = f" (spread {(max(us) - min(us)) / mean * 100:.1f}%)" if len(us) > 1 else ""
        target = RING_TARGETS.get((T, B))
        ratio = mean / r["round_us"]
        mark = "" if target is None else (" met" if ratio <= target else " MISS")
        print(f"{T:2d} {B:4d} | {us[0]:9.1f} {again} {bytes_cols} | {r['round_us']:9.1f} "
              f"{r.get('fold_rate', float('nan')):5.2f} | {ratio:8.3f} "
              f"{'' if target is None else f'{target:.2f}':>6}{mark}{spread}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "compare":
        compare(*sys.argv[2:5])
    elif len(sys.argv) >= 6 and sys.argv[1] == "sweep":
        sweep(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "ring":
        ring([sys.argv[2]] + sys.argv[4:], sys.argv[3])
    else:
        sys.exit(__doc__)
