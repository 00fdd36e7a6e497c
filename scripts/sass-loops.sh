#!/usr/bin/env bash
# The instruction mix of every innermost loop of the kernels of one translation unit, from the
# sm_90 SASS, without a GPU: how many of a loop's instructions are floating-point arithmetic
# (FFMA, FMUL, FADD, ...) against shared / global memory, shuffles, barriers and the rest (address
# arithmetic, predicates, loop control). The static check before a kernel rewrite that claims to
# remove instructions from a hot loop, and the record of what a hot loop executes.
#
#   scripts/sass-loops.sh kernels/gdn_recurrence_bf16.cu                 # every kernel
#   scripts/sass-loops.sh kernels/gdn_recurrence_bf16.cu 'bfloat16fLb0ELi128ELi8ELi1ELi16ELb1ELb0ELi2ELb1'
#   MIN_INSTR=40 scripts/sass-loops.sh kernels/mamba2_recurrence_f32.cu  # loops of >= 40 instr.
#   NVCC_EXTRA=-DSPECSTATE_GDN_MULTI2_MIN_CTAS=5 scripts/sass-loops.sh ...  # a build-time knob
#
# The second argument is a regular expression on the mangled kernel name (the template arguments
# in order: gdn_recurrence_kernel<Act, St, kKda, K, LANES, kItems, kChunk, kReplay, kTree, RPT,
# kMulti, kKV>). A loop is an address range [target, branch] of a backward branch; "innermost":
# no other backward branch inside it. A loop's body also holds its conditional blocks (e.g. a
# prefetch issued at t == 0 only): the counts are static, not executed, instructions.
# cuobjdump and nvdisasm are not in every CUDA install: scripts/sass-tools.sh takes them from PATH
# or from the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels (PyPI), unpacked once into
# ~/.cache/specstate/cuobjdump.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
unit="${1:?usage: scripts/sass-loops.sh kernels/UNIT.cu [KERNEL_REGEX]}"
filter="${2:-.}"
min="${MIN_INSTR:-16}"

source scripts/sass-tools.sh

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
nvcc -I. -Iinclude -O3 -DNDEBUG -arch=sm_90 --expt-relaxed-constexpr -std=c++17 ${NVCC_EXTRA:-} -cubin \
  -o "$work/unit.cubin" "$unit"
cuobjdump -sass "$work/unit.cubin" >"$work/unit.sass"

python3 - "$work/unit.sass" "$filter" "$min" <<'EOF'
import collections, re, subprocess, sys

path, pattern, min_instr = sys.argv[1], re.compile(sys.argv[2]), int(sys.argv[3])
FP = re.compile(r"^(FFMA|FMUL|FADD|FMNMX|FSETP|MUFU|HFMA2|HMUL2|HADD2|FCHK|FSEL)")
GROUPS = [
    ("fp", FP),
    ("lds", re.compile(r"^LDS")), ("sts", re.compile(r"^STS")),
    ("ldg", re.compile(r"^(LDG|LDGSTS|LD\.)")), ("stg", re.compile(r"^(STG|ST\.|RED|ATOM)")),
    ("shfl", re.compile(r"^SHFL")), ("bar", re.compile(r"^(BAR|DEPBAR|LDGDEPBAR)")),
    ("cvt", re.compile(r"^(F2F|F2FP|I2F|F2I|PRMT)")),
    ("ctrl", re.compile(r"^(BRA|BSSY|BSYNC|ISETP|UISETP|PLOP3|EXIT|WARPSYNC)")),
]

kernels = []  # (name, [(address, opcode)])
for line in open(path):
    m = re.search(r"Function : (\S+)", line)
    if m:
        kernels.append((m.group(1), []))
        continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
    if m and kernels:
        ins = re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip())
        target = re.match(r"BRA(?:\.\S+)?\s+(?:!?U?P\w+,\s*)?(0x[0-9a-f]+)", ins)
        kernels[-1][1].append((int(m.group(1), 16), ins.split()[0],
                               int(target.group(1), 16) if target else None))

def demangle(name):
    try:
        return subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
    except OSError:
        return name

for name, code in kernels:
    if not pattern.search(name):
        continue
    loops = [(t, a) for a, _, t in code if t is not None and t <= a]
    inner = [(lo, hi) for lo, hi in loops
             if not any((l2, h2) != (lo, hi) and lo <= l2 and h2 <= hi for l2, h2 in loops)]
    rows = []
    for lo, hi in sorted(set(inner)):
        ops = [op for a, op, _ in code if lo <= a <= hi]
        if len(ops) < min_instr:
            continue
        counts = collections.Counter()
        for op in ops:
            group = next((g for g, rx in GROUPS if rx.match(op)), "other")
            counts[group] += 1
        rows.append((lo, hi, len(ops), counts, collections.Counter(ops).most_common(6)))
    if not rows:
        continue
    print(f"== {demangle(name)}\n   {name}: {len(code)} instructions")
    for lo, hi, n, c, top in rows:
        parts = " ".join(f"{g} {c[g]}" for g, _ in GROUPS + [("other", None)] if c[g])
        print(f"   loop {lo:#07x}-{hi:#07x}: {n:4d} instr, fp {100 * c['fp'] / n:3.0f}%  ({parts})")
        print("      top: " + ", ".join(f"{op} {k}" for op, k in top))
EOF
