#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, the regular build (CUDA code compiled where nvcc
# exists; GPU tests skip visibly without a device), then the CPU build under ASan + UBSan, then
# the Python package (pip install ., CPU backend) and its pytest suite.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
jobs="$(nproc)"

echo "== clang-format"
files=$(git ls-files '*.h' '*.cpp' '*.cuh' '*.cu' 2>/dev/null || true)
if [ -n "$files" ]; then
  clang-format --dry-run -Werror $files
fi

echo "== build + tests (Release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECSTATE_BUILD_TESTS=ON \
  -DSPECSTATE_BUILD_EXAMPLES=ON
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== build + tests (ASan + UBSan, CPU)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSPECSTATE_SANITIZE=ON \
  -DSPECSTATE_CUDA=OFF -DSPECSTATE_BUILD_BENCH=OFF -DSPECSTATE_INSTALL=OFF \
  -DSPECSTATE_BUILD_TESTS=ON -DSPECSTATE_BUILD_EXAMPLES=ON
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE gpu
echo "== Python package (pip install ., CPU backend) + pytest"
specstate_python_deps
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "${PYTHON:-python3}" -m pip install -q --no-build-isolation \
  --disable-pip-version-check . -Ccmake.define.SPECSTATE_CUDA=OFF
"${PYTHON:-python3}" -m pytest -q tests/python
echo "== all tests passed"
