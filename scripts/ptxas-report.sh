#!/usr/bin/env bash
# Registers, stack and spills of every kernel entry, as ptxas reports them for sm_90, in the
# working tree against a revision (default HEAD): the check that a kernel change leaves the other
# instantiations' code alone, and the first look at a change's spills, without a GPU (nvcc only).
# Prints the entries whose figures differ (and how many did not).
#
#   scripts/ptxas-report.sh                          # kernels/*.cu against HEAD
#   scripts/ptxas-report.sh c254e92 kernels/gdn_recurrence_f32.cu
#
# Each translation unit is compiled twice (about 40 s each for the recurrence units on two cores).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
rev="${1:-HEAD}"
shift || true
if [ $# -gt 0 ]; then
  units=("$@")
else
  mapfile -t units < <(ls kernels/*.cu)
fi
commit="$(git rev-parse --verify "$rev^{commit}")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base"
git archive "$commit" kernels include | tar -x -C "$work/base"

# "entry<TAB>registers<TAB>stack<TAB>spill stores<TAB>spill loads" per kernel entry of a unit.
report() {
  local tree="$1" unit="$2"
  nvcc -I"$tree" -I"$tree/include" -O3 -DNDEBUG -arch=sm_90 --expt-relaxed-constexpr \
    -std=c++17 -cubin -o "$work/unit.cubin" -Xptxas -v "$tree/$unit" 2>&1 |
    python3 -c '
import re, sys
name = stats = None
for line in sys.stdin:
    m = re.search(r"Compiling entry function .(\S+). for", line)
    if m:
        name, stats = m.group(1), None
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                  line)
    if m and name:
        stats = m.groups()
        continue
    m = re.search(r"Used (\d+) registers", line)
    if m and name and stats:
        print(name, m.group(1), *stats, sep="\t")
        name = None
'
}

for unit in "${units[@]}"; do
  if [ ! -f "$work/base/$unit" ]; then
    echo "$unit: not in $rev (new)"
    continue
  fi
  report "$work/base" "$unit" | sort >"$work/a.tsv"
  report "$root" "$unit" | sort >"$work/b.tsv"
  python3 - "$work/a.tsv" "$work/b.tsv" "$unit" <<'PY'
import subprocess, sys
def load(path):
    out = {}
    for line in open(path):
        name, *vals = line.rstrip("\n").split("\t")
        out[name] = tuple(int(v) for v in vals)
    return out
a, b, unit = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
names = sorted(set(a) | set(b))
demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                           text=True).stdout.split("\n") if names else []
fmt = lambda v: "-" if v is None else f"{v[0]} regs, stack {v[1]}, spill {v[2]}/{v[3]}"
diff = 0
for name, pretty in zip(names, demangled):
    if a.get(name) != b.get(name):
        diff += 1
        print(f"{unit}: {pretty[:160]}\n    {fmt(a.get(name))}  ->  {fmt(b.get(name))}")
print(f"{unit}: {diff} of {len(names)} entries differ", file=sys.stderr)
sys.exit(0)
PY
done
