#!/usr/bin/env bash
# Makes the git-ignored inputs a device call carries, none of which survives a new checkout:
#   .gpudeps  the Debian packages' headers and libraries (scripts/make-gpudeps.sh);
#   .whl      SGLang's ring kernels (the ringbench stage: tools/sglang_ring_bench.py's modules), the
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
# SGLang's version and the modules tools/sglang_ring_bench.py loads, read from the bench itself
# (SGLANG_VERSION, MODULES), so that the two cannot disagree.
sglang_version="$(python3 - <<'PY'
import ast
tree = ast.parse(open("tools/sglang_ring_bench.py").read())
for node in tree.body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SGLANG_VERSION":
        print(ast.literal_eval(node.value))
PY
)"
if [ -z "$sglang_version" ]; then
  echo "device-prep: no SGLANG_VERSION in tools/sglang_ring_bench.py" >&2
  exit 1
fi
src=".whl/sglang-$sglang_version-src"
if [ ! -d "$src" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q "sglang==$sglang_version" --no-deps -d "$tmp"
  # Only the bench's modules' files; extracted beside, then moved into place whole.
  python3 - "$tmp"/sglang-"$sglang_version"-*.whl "$tmp/src" <<'PY'
import ast, sys, zipfile
wheel, dst = sys.argv[1], sys.argv[2]
tree = ast.parse(open("tools/sglang_ring_bench.py").read())
modules = next(ast.literal_eval(n.value) for n in tree.body
               if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "MODULES")
with zipfile.ZipFile(wheel) as z:
    for module in modules.values():
        z.extract(module.replace(".", "/") + ".py", dst)
PY
  mv "$tmp/src" "$src"
fi
ls .whl/fla_core-*.whl >/dev/null 2>&1 ||
  python3 -m pip download -q fla-core==0.6.0 --no-deps -d .whl
for pkg in einops scikit_build_core pathspec packaging; do
  ls .whl/"$pkg"-*.whl >/dev/null 2>&1 || python3 -m pip download -q "$pkg" --no-deps -d .whl
done
[ $# -gt 0 ] && scripts/ab-base.sh "$1"
du -sh .gpudeps .whl ${1:+.ab-base} | tr '\n' ' '
echo
