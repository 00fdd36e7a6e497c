#!/usr/bin/env bash
# Where a kernel's instructions go: builds the GPU benchmark with -lineinfo, profiles one launch of
# a kernel with ncu (full set, source imported) and prints the per-CUDA-line and per-SASS-line
# instruction counts, hottest first. Run on a GPU machine (the device tool), logs under $OUT.
#
#   KERNEL=gdn_recurrence FILTER='BM_Rounds4Replay/4/128' SKIP=100 scripts/ncu-source.sh
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
    cmake --build "$BUILD" -j "$(nproc)" --target specstate_gpu_bench specstate_mamba2_bench \
      >>"$OUT/$TAG-build.log" 2>&1 || { tail -30 "$OUT/$TAG-build.log"; exit 1; }
fi
bench="$BUILD/tests/bench/specstate_gpu_bench"
[[ "$FILTER" == *Mamba2* || "$KERNEL" == *mamba2* ]] && bench="$BUILD/tests/bench/specstate_mamba2_bench"
ncu --kernel-name "regex:$KERNEL" --launch-skip "$SKIP" --launch-count 1 --set full \
  --import-source yes -f -o "$OUT/$TAG" "$bench" --benchmark_filter="$FILTER" \
  --benchmark_min_time=0.05 >"$OUT/$TAG-ncu.log" 2>&1 || tail -20 "$OUT/$TAG-ncu.log"
ncu -i "$OUT/$TAG.ncu-rep" --page details >"$OUT/$TAG-details.txt" 2>&1
grep -E "Duration|DRAM Throughput|Compute \(SM\)|Executed Ipc|Issue Slots|Registers Per|Achieved Occ|Warp Cycles Per Issued|Executed Instructions " \
  "$OUT/$TAG-details.txt" | head -20
for view in cuda sass; do
  ncu -i "$OUT/$TAG.ncu-rep" --page source --csv --print-source "$view" \
    >"$OUT/$TAG-$view.csv" 2>"$OUT/$TAG-$view.err" || head -3 "$OUT/$TAG-$view.err"
done
python3 - "$OUT/$TAG-cuda.csv" "$OUT/$TAG-sass.csv" <<'PY'
import csv, sys
for path in sys.argv[1:]:
    try:
        rows = list(csv.reader(open(path)))
    except Exception as e:
        print(path, e); continue
    hdr = None
    for i, r in enumerate(rows):
        if any("Instructions Executed" in c for c in r):
            hdr = i; break
    if hdr is None:
        print(path, "no header;", rows[:2]); continue
    h = rows[hdr]
    ie = next(j for j, c in enumerate(h) if c.strip() == "Instructions Executed" or c.startswith("Instructions Executed"))
    src = next((j for j, c in enumerate(h) if c.strip() in ("Source", "Address")), 1)
    data = []
    for r in rows[hdr + 1:]:
        try: data.append((float(r[ie].replace(",", "")), r))
        except Exception: pass
    tot = sum(d[0] for d in data) or 1
    print(f"== {path}: {tot:.4g} warp instructions; columns {h[:4]}")
    for n, r in sorted(data, key=lambda d: -d[0])[:45]:
        print(f"{n/tot*100:5.1f}% {n:10.4g} | " + " | ".join(c.strip()[:90] for c in r[:3]))
PY
