#!/usr/bin/env bash
# Puts cuobjdump and nvdisasm on PATH for the SASS scripts (sass-loops.sh, sass-statements.sh):
# from PATH where the CUDA install has them, else from the nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm wheels (PyPI), unpacked once into ~/.cache/specstate/cuobjdump.
# Sourced, not run.
if ! command -v cuobjdump >/dev/null 2>&1 || ! command -v nvdisasm >/dev/null 2>&1; then
  sass_tools="$HOME/.cache/specstate/cuobjdump"
  if [ ! -x "$sass_tools/nvidia/cu13/bin/cuobjdump" ] ||
     [ ! -x "$sass_tools/nvidia/cu13/bin/nvdisasm" ]; then
    mkdir -p "$sass_tools/whl"
    for pkg in cuobjdump nvdisasm; do  # cuobjdump -sass runs nvdisasm
      python3 -m pip download --quiet --no-deps "nvidia-cuda-$pkg" -d "$sass_tools/whl"
      python3 -m zipfile -e "$sass_tools"/whl/nvidia_cuda_$pkg-*.whl "$sass_tools"
    done
    chmod +x "$sass_tools"/nvidia/cu13/bin/*
  fi
  PATH="$sass_tools/nvidia/cu13/bin:$PATH"
fi
