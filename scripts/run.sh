#!/usr/bin/env bash
# The main job: builds the CLI, checks the shipped golden cases, then runs the simulator on its
# embedded default configuration on the CPU. Extra arguments go to `specstate simulate`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target specstate_cli
./build/examples/specstate check-golden tests/data/golden/golden_caseA.safetensors \
  tests/data/golden/golden_caseC.safetensors
./build/examples/specstate simulate "$@"
