#!/usr/bin/env bash
# The history applied before the conv's wait (05f705d + d7fb93e, reverted on main in 18e4ce6:
# never run on a GPU), checked and timed in one device call. Here, first:
#
#   git revert --no-commit 18e4ce6      # the patch into the working tree (the device machine
#                                       # gets the working tree, not the history)
#   scripts/make-gpudeps.sh             # .gpudeps, carried with the call
#
# then on the GPU (carry [".gpudeps"]):  scripts/hist-early-check.sh
#
# It builds three targets, runs ReplayHistEarlyGpu (both settings, one and two V blocks a CTA,
# one and two rows a thread, folds every round, vLLM's order) with the strategy-equivalence
# suites, then the GDN and KDA replay rounds under SPECSTATE_GDN_HIST_EARLY 0 / 1 / 0
# (scripts/bench-sweep.sh: each value / the first, and the repeat's spread). The default rule
# (kernels::gdn_hist_early: early at <= 16 rows) is tentative; set it from this sweep.
# HE_SHAPES: the rounds' T and B (default T 2, 4, 8 at B 1, 4, 8, 16). Logs in $OUT (./out).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export OUT="${OUT:-$root/out}"
mkdir -p "$OUT"
SECONDS=0
if ! grep -q hist_early kernels/gdn_recurrence.h; then
  echo "hist-early-check: the patch is not in this tree (git revert --no-commit 18e4ce6 first)"
  exit 2
fi
deps="$root/.gpudeps"
cmake_extra=()
if [ -d "$deps" ]; then
  export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cmake_extra+=("-DCMAKE_PREFIX_PATH=$deps")
  strings "$(g++ -print-file-name=libstdc++.so.6)" 2>/dev/null | grep -q GLIBCXX_3.4.30 ||
    export LD_LIBRARY_PATH="$deps/fallback:$LD_LIBRARY_PATH"
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
B="${BUILD_DIR:-$root/build-gpu}"
if ! { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
         -DSPECSTATE_CUDA=ON -DSPECSTATE_BUILD_EXAMPLES=ON -DSPECSTATE_INSTALL=OFF \
         "${cmake_extra[@]}" >"$OUT/build.log" 2>&1 &&
       cmake --build "$B" -j "$(nproc)" --target specstate_gpu_tests specstate_gpu_bench \
         specstate_kda_bench >>"$OUT/build.log" 2>&1; }; then
  tail -30 "$OUT/build.log"
  echo "build FAILED [t=${SECONDS}s]"
  exit 1
fi
echo "== built [t=${SECONDS}s]"
status=0
"$B/tests/gpu/specstate_gpu_tests" --gtest_color=no \
  --gtest_filter='*HistEarly*:*StrategyEquivalence*:*Vblocks*:*Rpt*' >"$OUT/gpu_tests.log" 2>&1 ||
  status=1
grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure" "$OUT/gpu_tests.log" | head -20
echo "== tests rc=$status [t=${SECONDS}s]"
shapes="${HE_SHAPES:-T:(2|4|8)/B:(1|4|8|16)/}"
scripts/bench-sweep.sh "$B/tests/bench/specstate_gpu_bench" SPECSTATE_GDN_HIST_EARLY "0 1" \
  "BM_Rounds4Replay/$shapes" "$OUT/he_gdn" || status=1
echo "== KDA [t=${SECONDS}s]"
scripts/bench-sweep.sh "$B/tests/bench/specstate_kda_bench" SPECSTATE_GDN_HIST_EARLY "0 1" \
  "BM_KdaRounds4Replay/$shapes" "$OUT/he_kda" || status=1
echo "== done [t=${SECONDS}s]"
exit $status
