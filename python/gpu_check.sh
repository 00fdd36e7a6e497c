#!/usr/bin/env bash
# The Python package on a GPU machine with no package access (the H200 device machine: torch,
# transformers, nanobind, pytest; no scikit-build-core, no Debian -dev packages). Carry
# .gpudeps (scripts/make-gpudeps.sh) and .whl (pip download scikit-build-core pathspec packaging
# --no-deps -d .whl; scripts/device-prep.sh makes both). Builds the package with the CUDA backend
# (sm_90), runs tests/python (GPU tests included) and the real client on the GPU for both
# strategies. Logs to $OUT (./out).
# PY_STAGES="build" stops once the package is built and installed (for tools/kda_bench.py);
# "build pytest" runs tests/python without the clients.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
OUT="${OUT:-$root/out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
deps="$root/.gpudeps"
if [ -d "$deps" ]; then
  export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CMAKE_PREFIX_PATH="$deps"
  if ! strings "$(g++ -print-file-name=libstdc++.so.6 2>/dev/null)" 2>/dev/null |
      grep -q GLIBCXX_3.4.30 && [ -f "$deps/fallback/libstdc++.so.6" ]; then
    export LD_LIBRARY_PATH="$deps/fallback:$LD_LIBRARY_PATH"
  fi
fi
status=0
echo "== build [t=${SECONDS}s]"
"$PY" -c "import scikit_build_core" 2>/dev/null ||
  "$PY" -m pip install -q --no-index --find-links .whl scikit-build-core >"$OUT/pip-deps.log" 2>&1
export CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc)}"
if "$PY" -m pip install --no-build-isolation --no-index --no-deps . \
     -Ccmake.define.SPECSTATE_CUDA=ON -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90 \
     >"$OUT/py-build.log" 2>&1; then
  echo "pip install . ok"
  unset PYTHONPATH
else
  tail -20 "$OUT/py-build.log"
  echo "pip install . FAILED: building with CMake, PYTHONPATH=build-pyg/python"
  cmake -S . -B build-pyg -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECSTATE_PYTHON=ON \
    -DSPECSTATE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DSPECSTATE_BUILD_TESTS=OFF \
    -DSPECSTATE_BUILD_BENCH=OFF -DSPECSTATE_BUILD_EXAMPLES=OFF -DSPECSTATE_INSTALL=OFF \
    >>"$OUT/py-build.log" 2>&1 &&
    cmake --build build-pyg --target _specstate >>"$OUT/py-build.log" 2>&1 ||
    { tail -30 "$OUT/py-build.log"; exit 1; }
  export PYTHONPATH="$root/build-pyg/python"
fi
"$PY" -c "import torch, specstate; print('specstate', specstate.__version__, 'torch', torch.__version__)" ||
  { echo "import torch, specstate: FAILED"; status=1; }
"$PY" -X faulthandler -c "import specstate, torch; print('import order specstate, torch: ok', flush=True)" ||
  { echo "import specstate before torch: aborted (rc $?)"; status=1; }
[[ " ${PY_STAGES:-build pytest clients} " == *" pytest "* ]] || exit $status
echo "== pytest tests/python [t=${SECONDS}s]"
"$PY" -m pytest -q -rs tests/python 2>&1 | tee "$OUT/pytest.log" | tail -25
[ "${PIPESTATUS[0]}" -ne 0 ] && status=1
if [[ " ${PY_STAGES:-build pytest clients} " == *" clients "* ]]; then
# The real clients (examples/python/*_spec.py, issue 18.5): float32 token-exact on CUDA for both
# strategies; bf16 reports where the tokens first differ and the logit gap there.
for client in qwen3_next qwen3_5 nemotron_h kimi_linear; do
  for strategy in snapshot replay; do
    echo "== client $client: --device cuda --strategy $strategy [t=${SECONDS}s]"
    "$PY" "examples/python/${client}_spec.py" --device cuda --strategy "$strategy" 2>&1 |
      grep -v "falling back\|FutureWarning\|output = func" | tee "$OUT/client-$client-$strategy.log"
    [ "${PIPESTATUS[0]}" -ne 0 ] && status=1
  done
  echo "== client $client: --device cuda --dtype bfloat16 [t=${SECONDS}s]"
  "$PY" "examples/python/${client}_spec.py" --device cuda --dtype bfloat16 2>&1 |
    grep -v "falling back\|FutureWarning\|output = func" | tee "$OUT/client-$client-bf16.log"
  # bf16 tokens may differ (the client reports where, exit 0); a nonzero exit is a crash
  [ "${PIPESTATUS[0]}" -ne 0 ] && status=1
done
# KDA over tensors shaped as vLLM's cache (the layout vLLM's KDA backend allocates).
echo "== client kimi_linear: --device cuda --state-layout vllm [t=${SECONDS}s]"
"$PY" examples/python/kimi_linear_spec.py --device cuda --state-layout vllm 2>&1 |
  grep -v "falling back\|FutureWarning\|output = func" | tee "$OUT/client-kimi_linear-vllm.log"
[ "${PIPESTATUS[0]}" -ne 0 ] && status=1
fi
# The summary last, so that a caller reading the tail of the output sees every verdict.
echo "== summary"
echo "pytest: $(tail -1 "$OUT/pytest.log")"
for log in "$OUT"/client-*.log; do
  echo "$(basename "$log" .log): $(grep -E "^tokens:" "$log" || echo "no verdict (see the log)")"
done
echo "python/gpu_check.sh status=$status"
exit $status
