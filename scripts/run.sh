#!/usr/bin/env bash
# The main job: builds the CLI, checks every shipped golden case under both strategies, then
# runs the simulator on its embedded default configuration on the CPU. Extra arguments go to
# `specstate simulate`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target specstate_cli
# Every shipped case (GDN chain and tree, Mamba2, KDA and its lower-bound gate) under both
# strategies.
for strategy in snapshot replay; do
  ./build/examples/specstate check-golden tests/data/golden/*.safetensors --strategy "$strategy"
done
./build/examples/specstate simulate "$@"
