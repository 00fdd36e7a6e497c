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
ncu --clock-control none --kernel-name "regex:$KERNEL" --launch-skip "$SKIP" --launch-count 1 --set full \
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
# Per CUDA source line: stall samples and instructions, hottest first; then the kernel's parts by
# how often their instructions ran (scripts/ncu_source.py).
python3 "$root/scripts/ncu_source.py" "$OUT/$TAG-source.csv"
