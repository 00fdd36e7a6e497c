#!/usr/bin/env bash
# Makes the git-ignored inputs a device call carries, none of which survives a new checkout:
#   .gpudeps  the Debian packages' headers and libraries (scripts/make-gpudeps.sh);
#   .whl      SGLang 0.5.23's ring kernels (the ringbench stage, tools/sglang_ring_bench.py), the
#             fla-core 0.6.0 and einops wheels (the kdabench / kdaab stages) and the Python
#             package's build requirements the device lacks (scikit-build-core, pathspec,
#             packaging: python/gpu_check.sh, and the kdabench stage, which builds the package);
#   .ab-base  the tree of REV for the ab stages (scripts/ab-base.sh), when REV is given.
# Then: the device tool's run with carry [".gpudeps", ".whl", ".ab-base"] (about 32 MB).
#
#   scripts/device-prep.sh            # .gpudeps and .whl
#   scripts/device-prep.sh HEAD~3     # and .ab-base at HEAD~3
#
# Needs PyPI (pip download) and the Debian mirror (apt-get, through scripts/deps.sh); each part
# already present is kept.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -d .gpudeps ] || scripts/make-gpudeps.sh
mkdir -p .whl
src=.whl/sglang-0.5.23-src
if [ ! -d "$src" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q sglang==0.5.23 --no-deps -d "$tmp"
  # The four files tools/sglang_ring_bench.py loads (its docstring), nothing else of the wheel.
  python3 - "$tmp"/sglang-0.5.23-*.whl "$src" <<'PY'
import sys, zipfile
wheel, dst = sys.argv[1], sys.argv[2]
names = ["sglang/kernels/ops/attention/linear/gdn_replayssm_spec_decode.py",
         "sglang/kernels/ops/mamba/causal_conv1d_triton.py",
         "sglang/kernels/ops/mamba/mamba_state_scatter_triton.py",
         "sglang/kernels/ops/memory/ptr_table.py"]
with zipfile.ZipFile(wheel) as z:
    for n in names:
        z.extract(n, dst)
PY
fi
ls .whl/fla_core-*.whl >/dev/null 2>&1 ||
  python3 -m pip download -q fla-core==0.6.0 --no-deps -d .whl
for pkg in einops scikit_build_core pathspec packaging; do
  ls .whl/"$pkg"-*.whl >/dev/null 2>&1 || python3 -m pip download -q "$pkg" --no-deps -d .whl
done
[ $# -gt 0 ] && scripts/ab-base.sh "$1"
du -sh .gpudeps .whl ${1:+.ab-base} | tr '\n' ' '
echo
