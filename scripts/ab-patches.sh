#!/usr/bin/env bash
# Kernel experiments as patches, built, tested and timed against the working tree on a GPU
# machine in three calls (the device tool's 600 s a call), instead of one call an experiment.
# Each PATCH_DIR/NAME.patch (git format-patch main..BRANCH) is applied to a copy of the tree in
# br/NAME and built in build-br-NAME beside the tree's build-gpu (kept between calls on a warm
# machine). PATCH_DIR/NAME.env (optional) sets the experiment's GPU test filter and A/B shapes:
#   GT='Fused*:*Kda*'  AB_G='BM_Rounds4Replay/T:2/B:(1|2)/'  AB_M=''  AB_K='BM_KdaRounds4Replay/T:2/B:1/'
# (defaults: every GPU test; GDN, Mamba2 and KDA rounds at T = 2 / 4, B = 1 / 8).
#
#   MODE=build scripts/ab-patches.sh   # build the tree and every experiment (in parallel)
#   MODE=test  scripts/ab-patches.sh   # each experiment's GPU tests (bit-exactness)
#   MODE=ab    scripts/ab-patches.sh   # A/B/A of each experiment against the tree (bench-compare.sh)
#   NAMES="a b" ...                    # a subset
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
OUT="${OUT:-$root/out}"
mkdir -p "$OUT"
PATCH_DIR="${PATCH_DIR:-$root/.gpudeps/patches}"
deps="$root/.gpudeps"
[ -d "$deps" ] && export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -z "${NAMES:-}" ]; then
  NAMES=""
  for f in "$PATCH_DIR"/*.patch; do [ -f "$f" ] && NAMES="$NAMES $(basename "$f" .patch)"; done
fi
names="$NAMES"
[ -n "$names" ] || { echo "ab-patches: no patches in $PATCH_DIR"; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo "ab-patches: no nvidia-smi"
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSPECSTATE_CUDA=ON
     -DSPECSTATE_INSTALL=OFF -DSPECSTATE_BUILD_EXAMPLES=OFF)
[ -d "$deps" ] && cfg+=("-DCMAKE_PREFIX_PATH=$deps")
targets=(specstate_gpu_tests specstate_gpu_bench specstate_mamba2_bench specstate_kda_bench)
settings() {  # the experiment's filters into GT, AB_G, AB_M, AB_K
  GT='*'
  AB_G='BM_Rounds4Replay/T:(2|4)/B:(1|8)/'
  AB_M='BM_M2Rounds4Replay/T:(2|4)/B:(1|8)/'
  AB_K='BM_KdaRounds4Replay/T:(2|4)/B:(1|8)/'
  # shellcheck disable=SC1090
  [ -f "$PATCH_DIR/$1.env" ] && . "$PATCH_DIR/$1.env"
}
status=0
case "${MODE:-build}" in
  build)
    jobs=${JOBS:-$(( $(nproc) / 4 ))}; [ "$jobs" -lt 2 ] && jobs=2
    ( cmake -S . -B build-gpu "${cfg[@]}" && cmake --build build-gpu -j "$jobs" --target "${targets[@]}" ) \
      >"$OUT/build-tree.log" 2>&1 &
    for n in $names; do
      rm -rf "br/$n"
      mkdir -p "br/$n"
      tar -cf - --exclude='./build*' --exclude='./br' --exclude='./.ab-base*' --exclude='./.gpudeps' \
        --exclude='./out' --exclude='./.git' . | tar -xf - -C "br/$n"
      # From the root with --directory: `git apply` run inside br/$n (a folder of the repository)
      # ignores every path outside that folder, i.e. the whole patch, and still exits 0 (the
      # thirteenth session's first A/B of six branches measured six copies of the tree).
      if ! { git apply --directory="br/$n" "$PATCH_DIR/$n.patch" 2>/dev/null ||
             (cd "br/$n" && patch -p1 -s <"$PATCH_DIR/$n.patch"); }; then
        echo "$n: the patch does not apply"; status=1; continue
      fi
      first=$(grep -m1 '^+++ b/' "$PATCH_DIR/$n.patch" | cut -c7-)
      if [ -z "$first" ] || cmp -s "$first" "br/$n/$first"; then
        echo "$n: the patch changed nothing (${first:-no file}): not built"; status=1; continue
      fi
      ( cmake -S "br/$n" -B "build-br-$n" "${cfg[@]}" &&
        cmake --build "build-br-$n" -j "$jobs" --target "${targets[@]}" ) >"$OUT/build-$n.log" 2>&1 &
    done
    wait
    for n in tree $names; do echo "$n: $(tail -1 "$OUT/build-$n.log" 2>/dev/null)"; done
    ;;
  test)
    for n in $names; do
      settings "$n"
      timeout "${TEST_TIMEOUT:-120}" "build-br-$n/tests/gpu/specstate_gpu_tests" --gtest_filter="$GT" \
        >"$OUT/gtest-$n.log" 2>&1
      rc=$?
      [ $rc -ne 0 ] && status=1
      echo "$n: gtest rc=$rc, $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/gtest-$n.log" | head -2 | tr '\n' ' ')"
      grep -E "Failure|Expected|Which is" "$OUT/gtest-$n.log" | head -6
    done
    ;;
  ab)
    for n in $names; do
      settings "$n"
      echo "== $n"
      [ -n "$AB_G" ] && { scripts/bench-compare.sh build-gpu/tests/bench/specstate_gpu_bench \
        "build-br-$n/tests/bench/specstate_gpu_bench" "$AB_G" "$OUT/ab-$n-gdn" || status=1; }
      [ -n "$AB_M" ] && { scripts/bench-compare.sh build-gpu/tests/bench/specstate_mamba2_bench \
        "build-br-$n/tests/bench/specstate_mamba2_bench" "$AB_M" "$OUT/ab-$n-m2" || status=1; }
      [ -n "$AB_K" ] && { scripts/bench-compare.sh build-gpu/tests/bench/specstate_kda_bench \
        "build-br-$n/tests/bench/specstate_kda_bench" "$AB_K" "$OUT/ab-$n-kda" || status=1; }
    done
    ;;
  *) echo "ab-patches: MODE is build, test or ab"; exit 2 ;;
esac
exit $status
