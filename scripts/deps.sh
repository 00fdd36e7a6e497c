#!/usr/bin/env bash
# Installs the Debian packages specstate builds with, where missing. Sourced by the other scripts.
set -euo pipefail
SPECSTATE_PACKAGES=(cmake ninja-build g++ libeigen3-dev libspdlog-dev nlohmann-json3-dev
                    libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev clang-format)
# The Python package's build on Debian (scripts/test.sh): the venv module (ensurepip is split out
# of the interpreter) and Python.h (nanobind's build). Not needed by the simulator.
SPECSTATE_PY_DEB_PACKAGES=(python3-venv python3-dev)

# apt-get installs those of the named packages that are not installed.
specstate_install_packages() {
  local missing=() pkg sudo=""
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "specstate: installing ${missing[*]}" >&2
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}
specstate_install_packages "${SPECSTATE_PACKAGES[@]}"

# The Python package's build and test requirements, pip-installed into scripts/test.sh's venv.
SPECSTATE_PY_PACKAGES=(nanobind scikit-build-core numpy ml_dtypes pytest)
