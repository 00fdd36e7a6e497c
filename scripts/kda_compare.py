#!/usr/bin/env python3
"""KDA rounds of two builds (tools/kda_bench.py --json): A, B, A again, as scripts/gpu-check.sh's
kdaab stage runs them. Prints per (T, B) the replay and snapshot rounds of each run and B / A
(A = the mean of the two A runs; the A-A spread shows the run-to-run noise).

    python3 scripts/kda_compare.py a1.json b.json a2.json
"""

import json
import sys


def rows(path):
    with open(path) as fh:
        return {(r["T"], r["B"]): r for r in json.load(fh)["rows"]}


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    a1, b, a2 = (rows(p) for p in argv[1:])
    shapes = [k for k in a1 if k in b and k in a2]
    if not shapes:
        print("kda_compare: no shape in all three runs", file=sys.stderr)
        return 1
    print(f"{'T':>2} {'B':>4} | {'replay A':>9} {'A again':>9} {'B':>9} {'B/A':>6} | "
          f"{'snap A':>9} {'A again':>9} {'B':>9} {'B/A':>6} | {'fla (A)':>9}")
    for key in sorted(shapes):
        line = f"{key[0]:>2} {key[1]:>4} |"
        for col in ("replay", "snapshot"):
            x1, x2, y = a1[key][col], a2[key][col], b[key][col]
            line += f" {x1:9.1f} {x2:9.1f} {y:9.1f} {y / ((x1 + x2) / 2):6.3f} |"
        line += f" {a1[key]['fla']:9.1f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
