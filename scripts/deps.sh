#!/usr/bin/env bash
# Installs the Debian packages specstate builds with, where missing. Sourced by the other scripts.
set -euo pipefail
SPECSTATE_PACKAGES=(cmake ninja-build g++ libeigen3-dev libspdlog-dev nlohmann-json3-dev
                    libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev clang-format)
missing=()
for pkg in "${SPECSTATE_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "specstate: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The Python package's build and test requirements (scripts/test.sh): pip-installs what is missing.
SPECSTATE_PY_PACKAGES=(nanobind scikit-build-core numpy ml_dtypes pytest)
specstate_python_deps() {
  local py="${PYTHON:-python3}" missing=() pkg mod
  for pkg in "${SPECSTATE_PY_PACKAGES[@]}"; do
    mod="${pkg//-/_}"
    "$py" -c "import $mod" 2>/dev/null || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "specstate: pip-installing ${missing[*]}" >&2
    "$py" -m pip install -q --disable-pip-version-check "${missing[@]}"
  fi
}
