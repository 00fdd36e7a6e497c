#!/usr/bin/env bash
# Where a kernel's SASS instructions come from, statement by statement, without a GPU: compiles
# one translation unit for sm_90 with line information, disassembles it (nvdisasm -gi: each
# instruction with its chain of inlined call sites) and counts, for one kernel, the instructions
# whose chain passes through a statement of FILE between lines FIRST and LAST (the innermost such
# frame: the call site in that function, e.g. a device function's calls of its helpers). Prints
# line, count and the line's source, then the totals. Static counts: a loop's body counts once.
# How often each runs needs ncu on a GPU (scripts/ncu-source.sh); this is the first look.
#
#   scripts/sass-statements.sh kernels/gdn_recurrence_bf16.cu \
#     'bfloat16fLb0ELi128ELi8ELi1ELi16ELb1ELb0ELi2ELb1' kernels/gdn_recurrence.cuh 474 681
#   NVCC_EXTRA=-DSPECSTATE_GDN_MULTI2_MIN_CTAS=5 scripts/sass-statements.sh ...   # a knob
#
# KERNEL_REGEX is matched against the mangled names (scripts/sass-loops.sh says how they read);
# it must pick exactly one kernel. nvdisasm comes from PATH or its wheel (scripts/sass-tools.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ $# -ne 5 ]; then
  echo "usage: scripts/sass-statements.sh kernels/UNIT.cu KERNEL_REGEX FILE FIRST LAST" >&2
  exit 2
fi
unit="$1" pattern="$2" file="$3" first="$4" last="$5"
[ -f "$unit" ] || { echo "sass-statements: no translation unit $unit" >&2; exit 2; }
[ -f "$file" ] || { echo "sass-statements: no source file $file" >&2; exit 2; }
[[ "$first" =~ ^[0-9]+$ && "$last" =~ ^[0-9]+$ && "$first" -le "$last" ]] ||
  { echo "sass-statements: FIRST and LAST must be line numbers, FIRST <= LAST ($first, $last)" >&2
    exit 2; }
source scripts/sass-tools.sh

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086  # NVCC_EXTRA holds several flags
nvcc -I. -Iinclude -O3 -DNDEBUG -lineinfo -arch=sm_90 --expt-relaxed-constexpr -std=c++17 \
  ${NVCC_EXTRA:-} -cubin -o "$work/unit.cubin" "$unit"
nvdisasm -gi "$work/unit.cubin" >"$work/unit.sass"

python3 - "$work/unit.sass" "$pattern" "$file" "$first" "$last" <<'PY'
import collections, os, re, sys

path, pattern, src_file, first, last = sys.argv[1], re.compile(sys.argv[2]), sys.argv[3], \
    int(sys.argv[4]), int(sys.argv[5])
base = os.path.basename(src_file)
LOC = re.compile(r'//## File "([^"]+)", line (\d+)')
INSTR = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+\S")
LABEL = re.compile(r"^(\S+):\s*$")

# Split the listing into kernels (.text.NAME: sections), keep the one the pattern picks.
kernels, name, body = {}, None, []
for line in open(path):
    m = LABEL.match(line)
    if m and m.group(1).startswith(".text."):
        if name:
            kernels[name] = body
        name, body = m.group(1)[len(".text."):], []
        continue
    if name:
        body.append(line)
if name:
    kernels[name] = body
picked = [k for k in kernels if pattern.search(k)]
if len(picked) != 1:
    sys.exit(f"sass-statements: the pattern picks {len(picked)} kernels, not one: "
             + ", ".join(k[:80] for k in picked[:6]))
lines = kernels[picked[0]]

counts, total, inside = collections.Counter(), 0, 0
chain, fresh = [], True
for line in lines:
    locs = LOC.findall(line)
    if locs:
        if fresh:
            chain, fresh = [], False
        chain.append(locs)  # one annotation line: innermost frame first, then the call sites
        continue
    if INSTR.match(line):
        fresh = True
        total += 1
        site = None
        for group in chain:
            for f, ln in group:
                if os.path.basename(f) == base and first <= int(ln) <= last:
                    site = int(ln)
                    break
            if site is not None:
                break
        if site is not None:
            inside += 1
            counts[site] += 1

source = open(src_file).read().split("\n")
print(f"{picked[0]}")
for ln in sorted(counts):
    print(f"{ln:6d} {counts[ln]:6d}  {source[ln - 1].strip()[:100]}")
print(f"{inside} of the kernel's {total} instructions pass through {src_file}:{first}-{last}")
PY
