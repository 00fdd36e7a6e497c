#!/usr/bin/env bash
# One benchmark target built once per value of a compile-time knob (a macro of the kernels, such as
# SPECSTATE_GDN_MULTI_MIN_CTAS or SPECSTATE_MAMBA2_MULTI_MIN_CTAS: launch bounds, which no
# environment variable can change), each build run on the same GPU in one call, the first build
# run again at the end (the spread): prints per benchmark the "us" counter under each value and
# each value / the first. Run on a GPU machine (the device tool); builds go to build-macro-<value>.
#
#   scripts/bench-macro-sweep.sh SPECSTATE_MAMBA2_MULTI_MIN_CTAS "7 6 5" \
#       specstate_mamba2_bench 'BM_M2Rounds4Replay/T:4/'
#
# ENV (optional) is set for every run, e.g. ENV="SPECSTATE_GDN_RPT=2". MACRO_BASE_BUILD (optional):
# a build directory of the default code (no -D) that stands for the first value, not rebuilt (the
# first value must then be the macro's default).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
macro="$1"
read -r -a values <<<"$2"
target="$3"
filter="$4"
OUT="${OUT:-$root/out}"
mkdir -p "$OUT"
extra=()
if [ -d "$root/.gpudeps" ]; then
  export LD_LIBRARY_PATH="$root/.gpudeps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  extra+=("-DCMAKE_PREFIX_PATH=$root/.gpudeps")
fi
dir_of() {  # the build directory of value $1
  if [ -n "${MACRO_BASE_BUILD:-}" ] && [ "$1" = "${values[0]}" ]; then
    echo "$MACRO_BASE_BUILD"
  else
    echo "$root/build-macro-$1"
  fi
}
for v in "${values[@]}"; do
  build="$(dir_of "$v")"
  if [ -n "${MACRO_BASE_BUILD:-}" ] && [ "$v" = "${values[0]}" ]; then
    cmake --build "$build" -j "$(nproc)" --target "$target" >"$OUT/macro-$macro-$v-build.log" 2>&1 ||
      { echo "bench-macro-sweep: $target in $build failed"; exit 1; }
    continue
  fi
  log="$OUT/macro-$macro-$v-build.log"
  if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
           -DSPECSTATE_CUDA=ON -DSPECSTATE_INSTALL=OFF "-DCMAKE_CUDA_FLAGS=-D$macro=$v" \
           "${extra[@]}" >"$log" 2>&1 &&
         cmake --build "$build" -j "$(nproc)" --target "$target" >>"$log" 2>&1; }; then
    tail -20 "$log"
    echo "bench-macro-sweep: the build with $macro=$v failed ($log)"
    exit 1
  fi
done
files=()
for v in "${values[@]}" "${values[0]}"; do
  f="$OUT/macro-$macro-$v-${#files[@]}.json"
  bin="$(find "$(dir_of "$v")" -name "$target" -type f -perm -u+x | head -1)"
  # shellcheck disable=SC2086  # ENV holds VAR=value words
  env ${ENV:-} "$bin" --benchmark_filter="$filter" --benchmark_format=json >"$f" 2>"$f.err"
  files+=("$f")
done
python3 "$(dirname "${BASH_SOURCE[0]}")/bench_json.py" sweep "$macro" "${values[*]}" "${files[@]}"
