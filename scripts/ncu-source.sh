#!/usr/bin/env bash
# Where a kernel's instructions go: builds the GPU benchmark with -lineinfo, profiles one launch of
# a kernel with ncu (full set, source imported) and prints the stall reasons, the per-CUDA-line
# stall samples and instruction counts, hottest first, and the kernel's parts by how often their
# instructions ran (prologue, per block, per token or record). Run on a GPU machine (the device
# tool), logs under $OUT.
#
#   KERNEL=gdn_recurrence FILTER='BM_Rounds4Replay/4/128' SKIP=100 scripts/ncu-source.sh
#   KERNEL=gdn_fused FILTER='BM_KdaRounds4Replay/T:2/B:1/' SKIP=40 scripts/ncu-source.sh  # KDA
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
OUT="${OUT:-$root/out}"
BUILD="${BUILD_DIR:-$root/build-prof}"
KERNEL="${KERNEL:-gdn_recurrence}"
FILTER="${FILTER:-BM_Rounds4Replay/4/128}"
SKIP="${SKIP:-100}"
TAG="${TAG:-prof}"
mkdir -p "$OUT"
deps="$root/.gpudeps"
extra=()
if [ -d "$deps" ]; then
  export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  extra+=("-DCMAKE_PREFIX_PATH=$deps")
fi
if [ ! -x "$BUILD/tests/bench/specstate_gpu_bench" ] || [ "${REBUILD:-1}" = 1 ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DSPECSTATE_CUDA=ON -DSPECSTATE_INSTALL=OFF -DCMAKE_CUDA_FLAGS=-lineinfo "${extra[@]}" \
    >"$OUT/$TAG-build.log" 2>&1 &&
    cmake --build "$BUILD" -j "$(nproc)" --target specstate_gpu_bench specstate_mamba2_bench specstate_kda_bench \
      >>"$OUT/$TAG-build.log" 2>&1 || { tail -30 "$OUT/$TAG-build.log"; exit 1; }
fi
bench="$BUILD/tests/bench/specstate_gpu_bench"
[[ "$FILTER" == *Mamba2* || "$FILTER" == BM_M2* || "$KERNEL" == *mamba2* ]] && bench="$BUILD/tests/bench/specstate_mamba2_bench"
[[ "$FILTER" == BM_Kda* ]] && bench="$BUILD/tests/bench/specstate_kda_bench"
ncu --kernel-name "regex:$KERNEL" --launch-skip "$SKIP" --launch-count 1 --set full \
  --import-source yes -f -o "$OUT/$TAG" "$bench" --benchmark_filter="$FILTER" \
  --benchmark_min_time=0.05 >"$OUT/$TAG-ncu.log" 2>&1 || tail -20 "$OUT/$TAG-ncu.log"
ncu -i "$OUT/$TAG.ncu-rep" --page details >"$OUT/$TAG-details.txt" 2>&1
grep -E "Duration|DRAM Throughput|Compute \(SM\)|Executed Ipc|Issue Slots|Registers Per|Achieved Occ|Warp Cycles Per Issued|Executed Instructions " \
  "$OUT/$TAG-details.txt" | head -20
# Why warps did not issue: the stall reasons, in warps stalled per issued instruction (the full
# set's WarpStateStats metrics), largest first.
ncu -i "$OUT/$TAG.ncu-rep" --page raw --csv >"$OUT/$TAG-raw.csv" 2>/dev/null &&
  python3 - "$OUT/$TAG-raw.csv" <<'PY'
import csv, re, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) >= 3:
    names, values = rows[0], rows[2]  # header, units, the launch
    rx = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")
    stalls = []
    for n, v in zip(names, values):
        m = rx.match(n)
        if m:
            try:
                stalls.append((float(v.replace(",", "")), m.group(1)))
            except ValueError:
                pass
    total = sum(v for v, _ in stalls) or 1.0
    print("== stalls (warps per issued instruction): " +
          ", ".join(f"{r} {v:.2f} ({v / total * 100:.0f}%)" for v, r in sorted(stalls)[::-1][:8]))
PY
ncu -i "$OUT/$TAG.ncu-rep" --page source --csv --print-source cuda,sass \
  >"$OUT/$TAG-source.csv" 2>"$OUT/$TAG-source.err" || head -3 "$OUT/$TAG-source.err"
# Per CUDA source line (the rows that carry a line number): instructions executed and warp-stall
# samples, hottest first by samples.
python3 - "$OUT/$TAG-source.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
cur, hdr, inst, samp, text = None, None, {}, {}, {}
def num(x):
    try:
        return float(x.replace(",", "")) if x else 0.0
    except ValueError:
        return 0.0
for r in rows:
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
    if hdr is None or not r[0] or r[0] == "Function Name":
        continue
    k = (cur, r[0])
    inst[k] = inst.get(k, 0.0) + num(r[ie])
    samp[k] = samp.get(k, 0.0) + num(r[ss])
    text[k] = r[1].strip()
ti, ts = sum(inst.values()) or 1.0, sum(samp.values()) or 1.0
print(f"== {ti:.4g} warp instructions, {ts:.0f} stall samples (per CUDA line)")
for k in sorted(samp, key=lambda k: -samp[k])[:40]:
    print(f"{samp[k] / ts * 100:5.1f}% stalls {inst[k] / ti * 100:5.1f}% instr  "
          f"{k[0]}:{k[1]}  {text[k][:90]}")
PY
# Per SASS instruction: how many times it ran (warp-level). Instructions that ran equally often
# form one part of the kernel (once a warp: the prologue; once a warp and block; once a history
# record; ...): each part's instruction count, its share of the launch and its hottest source
# lines, largest first. This is what showed the replay verify's per-CTA prologue share.
python3 - "$OUT/$TAG-source.csv" <<'PY'
import csv, sys
from collections import defaultdict
rows = list(csv.reader(open(sys.argv[1])))
def num(x):
    try:
        return float(x.replace(",", "")) if x else 0.0
    except ValueError:
        return 0.0
cur, hdr, line, sass = None, None, None, {}
for r in rows:
    if not r:
        continue
    if r[0] == "File Path":
        cur = r[1].split("/")[-1]
        continue
    if r[0] == "Line No":
        hdr = r
        ie = hdr.index("Instructions Executed")
        continue
    if hdr is None or r[0] == "Function Name":
        continue
    if r[0]:
        line = f"{cur}:{r[0]}"
        continue
    if len(r) > 3 and r[2].startswith("0x"):
        # An instruction is listed under each source line it belongs to (inlining): count it once.
        s = sass.setdefault(r[2], [num(r[ie]), set()])
        s[1].add(line)
groups = defaultdict(lambda: [0, 0.0, defaultdict(float)])
for n, lines in sass.values():
    if n <= 0:
        continue
    g = groups[int(n)]
    g[0] += 1
    g[1] += n
    for l in lines:
        g[2][l] += n / len(lines)
total = sum(g[1] for g in groups.values()) or 1.0
print("== parts by execution count (warp instructions; the share of the launch; hottest lines)")
for n, (k, t, lines) in sorted(groups.items(), key=lambda x: -x[1][1])[:12]:
    top = ", ".join(l for l, _ in sorted(lines.items(), key=lambda x: -x[1])[:4])
    print(f"{n:>10} x {k:4d} instructions  {t / total * 100:5.1f}%  {top}")
PY
