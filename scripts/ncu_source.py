#!/usr/bin/env python3
"""Reports on ncu's source page (`ncu -i REP --page source --csv --print-source cuda,sass`), for
scripts/ncu-source.sh:

- per CUDA source line: warp-stall samples and instructions executed, hottest first by samples;
- the kernel's parts by how often their instructions ran (warp-level): instructions that ran
  equally often form one part (once a warp: the prologue; once a warp and block; once a history
  record; ...), each with its instruction count, its share of the launch and its hottest lines,
  largest first. This is what showed the replay verify's per-CTA prologue share (docs/cuda.md,
  twenty-fourth session).

    python3 scripts/ncu_source.py out/prof-source.csv
"""
import csv
import sys
from collections import defaultdict


def num(x):
    try:
        return float(x.replace(",", "")) if x else 0.0
    except ValueError:
        return 0.0


def parse(path):
    """(lines, sass): lines[(file, line)] = [instructions, samples, text]; sass[address] =
    [instructions, {"file:line", ...}] (an inlined instruction is listed under each of its lines:
    counted once here)."""
    lines, sass = {}, {}
    cur, hdr, line = None, None, None
    for r in csv.reader(open(path)):
        if not r:
            continue
        if r[0] == "File Path":
            cur = r[1].split("/")[-1]
            continue
        if r[0] == "Line No":
            hdr = r
            ie = hdr.index("Instructions Executed")
            ss = hdr.index("Warp Stall Sampling (All Samples)")
            continue
        if hdr is None or r[0] == "Function Name":
            continue
        if r[0]:
            line = (cur, r[0])
            entry = lines.setdefault(line, [0.0, 0.0, ""])
            entry[0] += num(r[ie])
            entry[1] += num(r[ss])
            entry[2] = r[1].strip()
            continue
        if line is not None and len(r) > 3 and r[2].startswith("0x"):
            sass.setdefault(r[2], [num(r[ie]), set()])[1].add(f"{line[0]}:{line[1]}")
    return lines, sass


def per_line(lines, top=40):
    ti = sum(v[0] for v in lines.values()) or 1.0
    ts = sum(v[1] for v in lines.values()) or 1.0
    print(f"== {ti:.4g} warp instructions, {ts:.0f} stall samples (per CUDA line)")
    for k in sorted(lines, key=lambda k: -lines[k][1])[:top]:
        inst, samp, text = lines[k]
        print(f"{samp / ts * 100:5.1f}% stalls {inst / ti * 100:5.1f}% instr  "
              f"{k[0]}:{k[1]}  {text[:90]}")


def parts(sass, top=12):
    groups = defaultdict(lambda: [0, 0.0, defaultdict(float)])
    for n, where in sass.values():
        if n <= 0:
            continue
        g = groups[int(n)]
        g[0] += 1
        g[1] += n
        for w in where:
            g[2][w] += n / len(where)
    total = sum(g[1] for g in groups.values()) or 1.0
    print("== parts by execution count (warp instructions; the share of the launch; hottest lines)")
    for n, (k, t, where) in sorted(groups.items(), key=lambda x: -x[1][1])[:top]:
        hot = ", ".join(w for w, _ in sorted(where.items(), key=lambda x: -x[1])[:4])
        print(f"{n:>10} x {k:4d} instructions  {t / total * 100:5.1f}%  {hot}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_source.py SOURCE.csv")
    lines, sass = parse(sys.argv[1])
    per_line(lines)
    parts(sass)
