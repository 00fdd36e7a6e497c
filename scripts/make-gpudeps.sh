#!/usr/bin/env bash
# Makes ./.gpudeps: the headers, libraries and CMake configs of this machine's Debian packages
# (Eigen, spdlog/fmt, nlohmann_json, GoogleTest, Google Benchmark) for a GPU machine that has the
# CUDA toolkit but cannot install packages. scripts/gpu-check.sh uses it when present; carry it
# with the working tree (it is git-ignored).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/deps.sh
D=.gpudeps
mkdir -p $D/include $D/lib/x86_64-linux-gnu/cmake $D/share/cmake $D/share/eigen3 $D/fallback
cp -r /usr/include/{eigen3,spdlog,fmt,nlohmann,gtest,gmock,benchmark,CLI} $D/include/
cp -r /usr/lib/x86_64-linux-gnu/cmake/{GTest,benchmark,fmt,spdlog} $D/lib/x86_64-linux-gnu/cmake/
cp -r /usr/share/eigen3/cmake $D/share/eigen3/
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 $D/share/cmake/
cp -a /usr/lib/x86_64-linux-gnu/{libgtest*.a,libgmock*.a,libbenchmark*,libspdlog.so*,libfmt.so*} \
  $D/lib/x86_64-linux-gnu/
cp -L /usr/lib/x86_64-linux-gnu/libstdc++.so.6 $D/fallback/  # used only if the machine's is older
grep -qx '/.gpudeps/' .gitignore || echo '/.gpudeps/' >> .gitignore
du -sh $D
