#!/usr/bin/env bash
# One call on a GPU machine (the H200 device machine, or any CUDA box): configure for sm_90,
# build the CUDA backend, run the GPU tests, run them again under compute-sanitizer (memcheck and
# racecheck), run the GPU benchmarks (GDN, Mamba2, KDA's C++ rounds: stage kdarounds, and KDA
# against fla: stage kdabench) and print short tables. Logs go to $OUT (default: ./out).
#
#   scripts/gpu-check.sh                      # everything
#   STAGES="build tests bench" scripts/gpu-check.sh
#   STAGES="build tests ab" scripts/gpu-check.sh   # against .ab-base (scripts/ab-base.sh REV):
#                                                  # GDN, Mamba2 and (base permitting) KDA rounds
#                                                  # (the base's build folder is built afresh
#                                                  # when .ab-base holds another revision)
#   AB_BASE=.ab-base2 AB_BUILD=build-gpu-base2 STAGES=ab scripts/gpu-check.sh   # a second base
#   STAGES="build tests layout" scripts/gpu-check.sh   # the rounds under each state layout
#   STAGES="build overlap" scripts/gpu-check.sh   # layers overlapping off / rule / any rows
#   STAGES="build conv" scripts/gpu-check.sh   # the replay conv of chains: narrow loop vs lean
#   STAGES="kdaab" KDA_AB_ARGS="--B 1,8" scripts/gpu-check.sh   # KDA rounds against .ab-base
#   STAGES="kdaab" KDAAB_TREE_CUDA_FLAGS=-DSPECSTATE_GDN_MULTI2_MIN_CTAS=5 ...  # a knob (ab-base.sh HEAD)
#   STAGES="build rings" scripts/gpu-check.sh   # replay rings against the default, every kind
#   STAGES="build ringbench" scripts/gpu-check.sh   # GDN replay vs SGLang's ring on this GPU
#                                                   # (carry .whl/sglang-0.5.23-src)
#   STAGES="build ncu" scripts/gpu-check.sh   # one line per replay-round kernel at T = 4, B = 128
#                                             # (NCU_T, NCU_B): duration, DRAM and SM throughput,
#                                             # issue, occupancy, registers (ncu's speed of light)
#
# Dependencies: the Debian packages of scripts/deps.sh, or (machines with no package access) a
# prefix holding their headers, libraries and CMake configs in ./.gpudeps (CMAKE_PREFIX_PATH and
# LD_LIBRARY_PATH are pointed there when it exists). If the build fails and prebuilt binaries
# exist in ./.gpudeps/prebuilt, those are run instead, and the log says so.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
OUT="${OUT:-$root/out}"
mkdir -p "$OUT"
STAGES="${STAGES:-build tests sanitizer bench ringbench kdarounds m2bench kdabench sim tp}"
BUILD="${BUILD_DIR:-$root/build-gpu}"
JOBS="${JOBS:-$(nproc)}"
status=0
has() { [[ " $STAGES " == *" $1 "* ]]; }

echo "== machine [t=${SECONDS}s]"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv || true
nvcc --version | tail -2 || true
(g++ --version | head -1; grep PRETTY_NAME /etc/os-release) 2>/dev/null || true

deps="$root/.gpudeps"
cmake_extra=()
if [ -d "$deps" ]; then
  export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cmake_extra+=("-DCMAKE_PREFIX_PATH=$deps")
  # libspdlog/libbenchmark of the prefix may need a newer libstdc++ than the machine has.
  if ! strings "$(g++ -print-file-name=libstdc++.so.6 2>/dev/null)" 2>/dev/null |
      grep -q GLIBCXX_3.4.30 && [ -f "$deps/fallback/libstdc++.so.6" ]; then
    export LD_LIBRARY_PATH="$deps/fallback:$LD_LIBRARY_PATH"
  fi
fi

# A base tree's build folder (the ab and kdaab stages) made fresh where it was built from another
# revision: scripts/ab-base.sh writes the tree with git archive, whose files carry their commit's
# time, so an older base's sources are older than the objects a newer base left behind and ninja
# would keep those objects (a stale base timed its own predecessor: every B / A 1.000, 2026-12-07).
base_build_dir() {  # base_build_dir SOURCE BUILD_DIR
  local want have
  want="$(cat "$1/.ab-revision" 2>/dev/null || echo unknown)"
  have="$(cat "$2/.ab-revision" 2>/dev/null || echo none)"
  if [ "$want" != "$have" ] || [ "$want" = unknown ]; then
    [ -d "$2" ] && echo "base build $2 was $have, the base is $want: built afresh"
    rm -rf "$2"
  fi
  mkdir -p "$2" && echo "$want" >"$2/.ab-revision"
}

# "N passed, M skipped, F failed" of a GoogleTest log (a line that survives filters of gtest's
# bracketed lines, e.g. a caller's grep -v '^\[').
gtest_counts() {
  local passed skipped failed
  passed="$(grep -oE '^\[  PASSED  \] [0-9]+' "$1" | tail -1 | grep -oE '[0-9]+$')"
  skipped="$(grep -oE '^\[  SKIPPED \] [0-9]+' "$1" | tail -1 | grep -oE '[0-9]+$')"
  failed="$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$1" | tail -1 | grep -oE '^[^0-9]*[0-9]+' |
    grep -oE '[0-9]+$')"
  echo "${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed"
}

tests_bin="$BUILD/tests/gpu/specstate_gpu_tests"
cpu_tests_bin="$BUILD/tests/specstate_cpu_tests"  # holds the golden cases' CUDA halves
bench_bin="$BUILD/tests/bench/specstate_gpu_bench"
m2_bench_bin="$BUILD/tests/bench/specstate_mamba2_bench"
kda_bench_bin="$BUILD/tests/bench/specstate_kda_bench"
if has build; then
  echo "== configure + build (CMAKE_CUDA_ARCHITECTURES=90) [t=${SECONDS}s]"
  if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
       -DSPECSTATE_CUDA=ON -DSPECSTATE_BUILD_EXAMPLES=ON -DSPECSTATE_INSTALL=OFF \
       "${cmake_extra[@]}" >"$OUT/build.log" 2>&1 &&
     cmake --build "$BUILD" -j "$JOBS" --target specstate_gpu_tests specstate_gpu_bench \
       specstate_mamba2_bench specstate_kda_bench specstate_cpu_tests \
       >>"$OUT/build.log" 2>&1; then
    grep -E "warning" "$OUT/build.log" | grep -v "Wno" | head -5
    echo "build ok"
  else
    tail -30 "$OUT/build.log"
    if [ -x "$deps/prebuilt/specstate_gpu_tests" ]; then
      # (The run still fails: the prebuilt binaries are not this tree's code.)
      echo "build FAILED on this machine: running the prebuilt binaries of .gpudeps/prebuilt"
      tests_bin="$deps/prebuilt/specstate_gpu_tests"
      bench_bin="$deps/prebuilt/specstate_gpu_bench"
      status=1
    else
      echo "build FAILED"
      exit 1
    fi
  fi
fi

if has tests; then
  echo "== GPU tests [t=${SECONDS}s]"
  "$tests_bin" --gtest_color=no >"$OUT/gpu_tests.log" 2>&1
  rc=$?
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure|error|expected|Which is" \
    "$OUT/gpu_tests.log" | head -60
  echo "gpu tests: $(gtest_counts "$OUT/gpu_tests.log"), rc=$rc"
  [ $rc -ne 0 ] && status=1
  echo "== golden cases and float64 references on CUDA (GDN A and C, bf16, realistic sizes, Mamba2 A,"
  echo "   KDA A and LB from fla; both strategies)"
  "$cpu_tests_bin" --gtest_color=no \
    --gtest_filter='*GoldenCuda*:*GoldenMamba2Cuda*:*GoldenKdaCuda*:*ReferenceF64*Cuda*' \
    >"$OUT/golden_cuda.log" 2>&1
  rc=$?
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure" "$OUT/golden_cuda.log" | head -20
  grep -E "max_rel|vs f64|tensor" "$OUT/golden_cuda.log" | head -40 >"$OUT/golden_cuda_summary.log"
  echo "golden cuda: $(gtest_counts "$OUT/golden_cuda.log"), rc=$rc"
  [ $rc -ne 0 ] && status=1
fi

if has sanitizer; then
  echo "== compute-sanitizer [t=${SECONDS}s]"
  # memcheck over every GPU test; racecheck (shared-memory hazards) over the smaller ones.
  timeout 420 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 \
    "$tests_bin" --gtest_color=no --gtest_filter="${MEMCHECK_FILTER:-*}" \
    >"$OUT/memcheck.log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|LEAK SUMMARY|tests ran|FAILED" "$OUT/memcheck.log" | head -10
  echo "memcheck rc=$rc"
  [ $rc -ne 0 ] && status=1
  # (125 tests, about 340 s on an H100 at 2026-12-05: 300 s cut it at the 115th.)
  timeout "${RACECHECK_TIMEOUT:-420}" compute-sanitizer --tool racecheck --error-exitcode 3 \
    "$tests_bin" --gtest_color=no \
    --gtest_filter="${RACECHECK_FILTER:-*small*:*odd*:*k32*:CommitChecks.*:ReplayCommitChecks.*:*Graph*}" \
    >"$OUT/racecheck.log" 2>&1
  rc=$?
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|tests ran|FAILED" "$OUT/racecheck.log" | head -10
  if [ $rc -eq 124 ]; then
    # Cut before its summary: what it saw up to the limit (hazards print as they are found).
    echo "racecheck timed out (RACECHECK_TIMEOUT=${RACECHECK_TIMEOUT:-420} s) after" \
      "$(grep -c '^\[       OK' "$OUT/racecheck.log") passed tests with" \
      "$(grep -ciE '^=+ +(error|warning):.*(race|hazard)' "$OUT/racecheck.log") hazard reports; the last test:"
    grep -E "^\[ RUN" "$OUT/racecheck.log" | tail -1
  fi
  echo "racecheck rc=$rc"
  [ $rc -ne 0 ] && status=1
fi

if has bench; then
  echo "== benchmarks [t=${SECONDS}s]"
  "$bench_bin" --benchmark_out="$OUT/bench.json" --benchmark_out_format=json \
    ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
  rc=$?
  grep -E "copy bandwidth" "$OUT/bench.log"
  sed -n '/specstate CUDA vs SGLang/,$p' "$OUT/bench.log"
  echo "bench rc=$rc"
  [ $rc -ne 0 ] && { tail -20 "$OUT/bench.log"; status=1; }
fi

if has ringbench; then
  # GDN replay rounds against SGLang's circular ReplaySSM ring on this GPU (issue 16's ratios on
  # the card at hand): tools/sglang_ring_bench.py runs SGLang 0.5.23's own Triton kernels from
  # .whl/sglang-0.5.23-src (its docstring says how to make that folder; carry it), our bench runs
  # before and after it (the spread), scripts/bench_json.py ring prints the table.
  echo "== GDN replay against SGLang's ring on this GPU [t=${SECONDS}s]"
  ring_t="${RING_T:-2|4|8}" ring_b="${RING_B:-1|8|32|128}"
  ring_t="${ring_t//,/|}" ring_b="${ring_b//,/|}"  # either separator
  ring_filter="BM_Rounds4Replay/T:($ring_t)/B:($ring_b)/"
  if [ ! -d .whl/sglang-0.5.23-src ]; then
    echo "ringbench SKIPPED: .whl/sglang-0.5.23-src is missing (tools/sglang_ring_bench.py says how"
    echo "  to make it from the PyPI wheel; carry it)"
  else
    # Ours, SGLang's, ours again; a failure of any of them (or of the table) fails the stage.
    ours() {
      "$bench_bin" --benchmark_filter="$ring_filter" --benchmark_format=json >"$OUT/ring_$1.json" \
        2>"$OUT/ring_$1.err" && grep -q '"us"' "$OUT/ring_$1.json" ||
        { echo "ringbench: our bench wrote no rounds for '$ring_filter':"; tail -5 "$OUT/ring_$1.err"; false; }
    }
    rc=1
    if ours ours1; then
      timeout "${RING_TIMEOUT:-400}" python3 tools/sglang_ring_bench.py --T "${ring_t//|/,}" \
        --B "${ring_b//|/,}" --json "$OUT/sglang_ring.json" >"$OUT/sglang_ring.log" 2>&1
      rc=$?
      [ $rc -ne 0 ] && tail -20 "$OUT/sglang_ring.log"
      ours ours2 || rc=1
      [ $rc -eq 0 ] && { python3 scripts/bench_json.py ring "$OUT/ring_ours1.json" \
        "$OUT/sglang_ring.json" "$OUT/ring_ours2.json" || rc=1; }
    fi
    echo "ring bench rc=$rc"
    [ $rc -ne 0 ] && status=1
  fi
fi

if has kdarounds; then
  # KDA rounds of the C++ bench (specstate only; fla's round is the kdabench stage's).
  echo "== KDA rounds (C++) [t=${SECONDS}s]"
  "$kda_bench_bin" --benchmark_out="$OUT/kda_rounds.json" --benchmark_out_format=json \
    ${KDA_ROUNDS_ARGS:-} >"$OUT/kda_rounds.log" 2>&1
  rc=$?
  sed -n '/KDA rounds/,$p' "$OUT/kda_rounds.log"
  echo "kda rounds rc=$rc"
  [ $rc -ne 0 ] && { tail -20 "$OUT/kda_rounds.log"; status=1; }
fi

if has m2bench; then
  echo "== Mamba2 benchmarks [t=${SECONDS}s]"
  "$m2_bench_bin" --benchmark_out="$OUT/mamba2_bench.json" --benchmark_out_format=json \
    ${M2_BENCH_ARGS:-} >"$OUT/mamba2_bench.log" 2>&1
  rc=$?
  sed -n '/Mamba2 rounds/,$p' "$OUT/mamba2_bench.log"
  echo "mamba2 bench rc=$rc"
  [ $rc -ne 0 ] && { tail -20 "$OUT/mamba2_bench.log"; status=1; }
fi

if has ab; then
  # The working tree against a base tree (scripts/ab-base.sh REV writes it into .ab-base/; carry
  # it): the base's benchmarks are built beside this tree's, then each kind's rounds run A, B, A
  # again (scripts/bench-compare.sh: B / A and the A-A spread). How a kernel change is decided.
  base="${AB_BASE:-$root/.ab-base}"
  base_build="${AB_BUILD:-$BUILD-base}"  # a second base tree needs a build folder of its own
  echo "== A/B against $(cat "$base/.ab-revision" 2>/dev/null || echo "$base") [t=${SECONDS}s]"
  if [ ! -f "$base/CMakeLists.txt" ]; then
    echo "ab: no base tree at $base (scripts/ab-base.sh REV makes one)"
    status=1
  elif base_build_dir "$base" "$base_build" &&
       cmake -S "$base" -B "$base_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_CUDA_ARCHITECTURES=90 -DSPECSTATE_CUDA=ON -DSPECSTATE_INSTALL=OFF \
         "${cmake_extra[@]}" >"$OUT/ab_build.log" 2>&1 &&
       cmake --build "$base_build" -j "$JOBS" --target specstate_gpu_bench specstate_mamba2_bench \
         >>"$OUT/ab_build.log" 2>&1; then
    scripts/bench-compare.sh "$base_build/tests/bench/specstate_gpu_bench" "$bench_bin" \
      "${AB_GDN_FILTER:-BM_Rounds4Replay/T:(2|4|8)/B:(1|8|32|128)/}" "$OUT/ab_gdn" || status=1
    scripts/bench-compare.sh "$base_build/tests/bench/specstate_mamba2_bench" "$m2_bench_bin" \
      "${AB_M2_FILTER:-BM_M2Rounds4Replay/T:(2|4|8)/B:(1|8|32|128)/}" "$OUT/ab_m2" || status=1
    # KDA's C++ rounds, where the base has the binary (from 2026-12-05's eleventh session).
    if cmake --build "$base_build" -j "$JOBS" --target specstate_kda_bench >>"$OUT/ab_build.log" 2>&1
    then
      scripts/bench-compare.sh "$base_build/tests/bench/specstate_kda_bench" "$kda_bench_bin" \
        "${AB_KDA_FILTER:-BM_KdaRounds4Replay/T:(2|4|8)/B:(1|8|32|128)/}" "$OUT/ab_kda" || status=1
    else
      echo "ab: the base has no specstate_kda_bench (KDA: the kdaab stage)"
    fi
  else
    tail -30 "$OUT/ab_build.log"
    echo "ab: the base did not build"
    status=1
  fi
fi

if has layout; then
  # The state layouts (PoolOptions::conv_layout / ssm_layout, SPECSTATE_BENCH_LAYOUT): the same
  # rounds in specstate's order, with channels-last conv windows, with [HV][K][V] states and with
  # both (vLLM's order before its PR #33291; today's vLLM is conv_last), the first again at the end (the run-to-run spread). LAYOUT_GDN_FILTER /
  # LAYOUT_M2_FILTER pick the shapes.
  echo "== state layouts (SPECSTATE_BENCH_LAYOUT) [t=${SECONDS}s]"
  scripts/bench-sweep.sh "$bench_bin" SPECSTATE_BENCH_LAYOUT "default conv_last kv vllm" \
    "${LAYOUT_GDN_FILTER:-BM_Rounds4(Replay|Snapshot)/T:4/B:(1|8|32|128)/}" "$OUT/layout_gdn" ||
    status=1
  scripts/bench-sweep.sh "$m2_bench_bin" SPECSTATE_BENCH_LAYOUT "default conv_last" \
    "${LAYOUT_M2_FILTER:-BM_M2Rounds4Replay/T:4/B:(1|8|32|128)/}" "$OUT/layout_m2" || status=1
fi

if has overlap; then
  # Layers overlapping (programmatic dependent launch between layers, docs/cuda.md "Layers
  # overlap"): the rounds with SPECSTATE_LAYER_OVERLAP off and on (the default: wherever safe,
  # kernels::layer_edge_allowed), the first again at the end (the run-to-run spread).
  # OVERLAP_GDN_FILTER / OVERLAP_M2_FILTER pick the shapes.
  echo "== layers overlap (SPECSTATE_LAYER_OVERLAP) [t=${SECONDS}s]"
  scripts/bench-sweep.sh "$bench_bin" SPECSTATE_LAYER_OVERLAP "0 1" \
    "${OVERLAP_GDN_FILTER:-BM_Rounds4Replay/T:(2|4|8)/B:(1|8|16|32|64|128)/}" "$OUT/overlap_gdn" ||
    status=1
  scripts/bench-sweep.sh "$m2_bench_bin" SPECSTATE_LAYER_OVERLAP "0 1" \
    "${OVERLAP_M2_FILTER:-BM_M2Rounds4Replay/T:(2|4|8)/B:(1|8|16|32|64|128)/}" "$OUT/overlap_m2" ||
    status=1
fi

if has conv; then
  # The replay conv of chains: the narrow token loop (SPECSTATE_CONV_LEAN=0) against the lean kernel
  # (1, forced wherever it applies, the small-batch sizes included; the default takes it from
  # kernels::kConvLeanRows rows), the first again at the end (docs/cuda.md, thirty-second session).
  # CONV_GDN_FILTER / CONV_M2_FILTER / CONV_KDA_FILTER pick the shapes.
  echo "== replay conv: narrow token loop -> lean (SPECSTATE_CONV_LEAN) [t=${SECONDS}s]"
  scripts/bench-sweep.sh "$bench_bin" SPECSTATE_CONV_LEAN "0 1" \
    "${CONV_GDN_FILTER:-BM_(Rounds4Replay/T:(2|4|8)/B:(8|16|32|64|128)/|VerifyConvReplay/T:4/B:(32|128)/)}" \
    "$OUT/conv_gdn" || status=1
  scripts/bench-sweep.sh "$m2_bench_bin" SPECSTATE_CONV_LEAN "0 1" \
    "${CONV_M2_FILTER:-BM_M2Rounds4Replay/T:(2|4|8)/B:(8|16|32|128)/}" "$OUT/conv_m2" || status=1
  scripts/bench-sweep.sh "$kda_bench_bin" SPECSTATE_CONV_LEAN "0 1" \
    "${CONV_KDA_FILTER:-BM_KdaRounds4Replay/T:(2|4)/B:(16|32|128)/}" "$OUT/conv_kda" || status=1
fi

if has sim; then
  # The main job on the GPU: specstate simulate --backend cuda, both strategies, checked against
  # plain prefill on the CPU and against each other (GDN, Mamba2 and KDA, chains, a tree,
  # variable windows from a trace of mixed windows).
  echo "== simulate on CUDA [t=${SECONDS}s]"
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
       -DSPECSTATE_CUDA=ON -DSPECSTATE_BUILD_EXAMPLES=ON -DSPECSTATE_INSTALL=OFF \
       "${cmake_extra[@]}" >"$OUT/sim_build.log" 2>&1 ||
     ! cmake --build "$BUILD" -j "$JOBS" --target specstate_cli >>"$OUT/sim_build.log" 2>&1; then
    tail -30 "$OUT/sim_build.log"; echo "simulate build FAILED"; status=1
  else
    trace="$OUT/mixed_windows.jsonl"
    {
      echo '{"format": "specstate-trace", "version": 1, "requests": [1, 2, 3, 4]}'
      for r in 0 1 2 3 4 5; do
        echo "{\"request\": 1, \"round\": $r, \"window\": 4, \"accepted\": $(( (r % 4) + 1 ))}"
        echo "{\"request\": 2, \"round\": $r, \"window\": 1, \"accepted\": 1}"
        echo "{\"request\": 3, \"round\": $r, \"window\": 3, \"accepted\": $(( r % 3 ))}"
        echo "{\"request\": 4, \"round\": $r, \"window\": 4, \"parents\": [-1, 0, 0, 2], \"path\": [0, 2, 3]}"
      done
    } >"$trace"
    sims=("--model small --requests 8 --rounds 12"
          "--model small --requests 4 --rounds 8 --tree=-1,0,0,1,1"
          "--model small --trace $trace --packing variable"
          "--model nemotron-h-8b --requests 4 --rounds 6"
          "--model nemotron-h-8b --trace $trace --packing variable"
          "--model kimi-linear-48b-a3b --requests 4 --rounds 6"
          "--model kimi-linear-48b-a3b --trace $trace --packing variable")
    i=0
    for args in "${sims[@]}"; do
      log="$OUT/sim_$i.log"
      i=$((i + 1))
      # shellcheck disable=SC2086  # $args holds several arguments
      timeout 300 "$BUILD/examples/specstate" simulate $args --backend cuda --strategy both \
        --check --quiet >"$log" 2>&1
      rc=$?
      grep -E "^specstate simulate|time: round|check:" "$log" | head -4
      echo "simulate $args: rc=$rc (log $log)"
      [ $rc -ne 0 ] && { tail -20 "$log"; status=1; }
    done
  fi
fi

if has tp; then
  # examples/tp_verify_loop (docs/multi_gpu.md): NCCL from python3's nvidia-nccl wheel (torch's),
  # NCCL_ROOT or libnccl-dev. TP=1 and the hand-off always (one GPU: a same-device copy, labelled);
  # TP=2/4/8 where the machine has the GPUs.
  echo "== tensor-parallel verify loop and slot hand-off (NCCL) [t=${SECONDS}s]"
  tp_bin="$BUILD/examples/tp_verify_loop/tp_verify_loop"
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
       -DSPECSTATE_CUDA=ON -DSPECSTATE_BUILD_EXAMPLES=ON -DSPECSTATE_INSTALL=OFF \
       "${cmake_extra[@]}" >"$OUT/tp_build.log" 2>&1; then
    tail -30 "$OUT/tp_build.log"; echo "tp configure FAILED"; status=1
  elif grep -q "tp_verify_loop skipped" "$OUT/tp_build.log"; then
    grep "tp_verify_loop skipped" "$OUT/tp_build.log"
  elif ! cmake --build "$BUILD" -j "$JOBS" --target tp_verify_loop >>"$OUT/tp_build.log" 2>&1; then
    tail -30 "$OUT/tp_build.log"; echo "tp build FAILED"; status=1
  else
    grep "specstate: tp_verify_loop" "$OUT/tp_build.log"
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
    q="--model qwen3-next-80b --batch 4 --rounds 4"
    runs=("--tp 1" "--tp 1 $q" "--tp 1 $q --strategy replay" "--handoff" "--handoff $q")
    [ "$ngpu" -ge 2 ] && runs+=("--tp 2" "--tp 2 $q")
    [ "$ngpu" -ge 4 ] && runs+=("--tp 4 $q")
    [ "$ngpu" -ge 8 ] && runs+=("--tp 8 $q")
    i=0
    for args in "${runs[@]}"; do
      log="$OUT/tp_$i.log"
      i=$((i + 1))
      # shellcheck disable=SC2086  # $args holds several arguments
      timeout 300 "$tp_bin" $args >"$log" 2>&1
      rc=$?
      grep -E "^(SKIP|NOTE|PASS|FAIL)|median|GB/s|DIFFER|rank .*: |tp_verify_loop:" "$log" | head -24
      echo "tp_verify_loop $args: rc=$rc (log $log)"
      [ $rc -ne 0 ] && [ $rc -ne 77 ] && { tail -20 "$log"; status=1; }
    done
  fi
fi
# fla-core (+ einops) for tools/kda_bench.py: importable already, or installed from the wheels in
# ./.whl into a temporary folder (fla_path, to prepend to PYTHONPATH; empty when importable).
fla_on_path() {
  fla_path=""
  if ! python3 -c "import fla" 2>/dev/null; then
    fla_path="$(mktemp -d)"
    python3 -m pip install -q --no-deps --target "$fla_path" .whl/fla_core-*.whl .whl/einops-*.whl \
      >"$OUT/fla_install.log" 2>&1 || { tail -5 "$OUT/fla_install.log"; status=1; }
  fi
}

if has kdabench; then
  # KDA against fla (tools/kda_bench.py, issue 18.4): the Python package with the CUDA backend
  # (python/gpu_check.sh PY_STAGES=build) and fla-core (+ einops) from the wheels in ./.whl, or
  # already importable; both strategies and fla's verify path timed in one process.
  echo "== KDA rounds against fla [t=${SECONDS}s]"
  fla_on_path
  # PY_BUILT=1: python/gpu_check.sh already installed this tree's package in this call.
  if [ -n "${PY_BUILT:-}" ] ||
      PY_STAGES=build OUT="$OUT/py" python/gpu_check.sh >"$OUT/kda_py_build.log" 2>&1; then
    PYTHONPATH="$fla_path${PYTHONPATH:+:$PYTHONPATH}" timeout 300 python3 tools/kda_bench.py ${KDA_BENCH_ARGS:-} \
      --json "$OUT/kda_bench.json" >"$OUT/kda_bench.log" 2>&1
    rc=$?
    sed -n '/KDA rounds/,$p' "$OUT/kda_bench.log"
    echo "kda bench rc=$rc"
    [ $rc -ne 0 ] && { tail -20 "$OUT/kda_bench.log"; status=1; }
  else
    tail -20 "$OUT/kda_py_build.log"; echo "kda bench: the Python package did not build"; status=1
  fi
fi
if has kdaab; then
  # KDA rounds A/B/A (tools/kda_bench.py has no second build in one process): the base tree's
  # Python extension (.ab-base, scripts/ab-base.sh REV; carry it and .whl) and this tree's, each
  # built with CMake, the bench run with the base, this tree, the base again (the spread), fla
  # from ./.whl; scripts/kda_compare.py prints replay and snapshot B / A per shape.
  echo "== KDA A/B against $(cat "$root/.ab-base/.ab-revision" 2>/dev/null || echo "?") [t=${SECONDS}s]"
  fla_on_path
  kda_ok=1
  for side in base tree; do
    src="$root"; [ "$side" = base ] && src="$root/.ab-base"
    # KDAAB_TREE_CUDA_FLAGS: the tree side's CUDA flags (a kernel knob against the same revision
    # as base, e.g. "-DSPECSTATE_GDN_MULTI2_MIN_CTAS=5" with scripts/ab-base.sh HEAD).
    side_flags=()
    [ "$side" = tree ] && [ -n "${KDAAB_TREE_CUDA_FLAGS:-}" ] &&
      side_flags=("-DCMAKE_CUDA_FLAGS=$KDAAB_TREE_CUDA_FLAGS")
    [ "$side" = base ] && base_build_dir "$src" "$BUILD-py-base"
    if ! { cmake -S "$src" -B "$BUILD-py-$side" -G Ninja -DCMAKE_BUILD_TYPE=Release \
             -DSPECSTATE_PYTHON=ON -DSPECSTATE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
             -DSPECSTATE_BUILD_TESTS=OFF -DSPECSTATE_BUILD_BENCH=OFF -DSPECSTATE_BUILD_EXAMPLES=OFF \
             -DSPECSTATE_INSTALL=OFF "${cmake_extra[@]}" "${side_flags[@]}" \
             >"$OUT/kdaab_$side.log" 2>&1 &&
           cmake --build "$BUILD-py-$side" -j "$JOBS" --target _specstate \
             >>"$OUT/kdaab_$side.log" 2>&1; }; then
      tail -20 "$OUT/kdaab_$side.log"; echo "kdaab: the $side extension did not build"
      kda_ok=0; status=1
    fi
  done
  if [ $kda_ok = 1 ]; then
    for run in base:a1 tree:b base:a2; do
      side="${run%%:*}"; tag="${run##*:}"
      PYTHONPATH="$BUILD-py-$side/python${fla_path:+:$fla_path}" timeout 300 python3 tools/kda_bench.py \
        ${KDA_AB_ARGS:-} --json "$OUT/kdaab-$tag.json" >"$OUT/kdaab-$tag.log" 2>&1 ||
        { tail -10 "$OUT/kdaab-$tag.log"; status=1; }
    done
    python3 scripts/kda_compare.py "$OUT/kdaab-a1.json" "$OUT/kdaab-b.json" "$OUT/kdaab-a2.json" ||
      status=1
  fi
fi
if has ncu; then
  # What bounds each kernel of a replay round (issue 16's closing note: DRAM %, SM %, issue),
  # one launch each (GDN's conv and recurrence, Mamba2's, KDA's recurrence), at the clocks the
  # card runs (--clock-control none: by default ncu locks them to base, a change of the card's
  # settings that METHOD.md rules out, and its durations came out about 16% above the round's).
  T="${NCU_T:-4}" Bsz="${NCU_B:-128}"
  echo "== ncu of the replay round's kernels at T = $T, B = $Bsz [t=${SECONDS}s]"
  printf "%-28s %9s %6s %6s %6s %6s %6s %5s\n" kernel "us" "DRAM%" "SM%" "issue%" "occ%" "theo%" regs
  ncu_line() {  # name, kernel regex, bench binary, benchmark filter, launches to skip
    local f="$OUT/ncu-$1.txt"
    timeout 180 ncu --clock-control none --kernel-name "regex:$2" --launch-skip "$5" --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
      --section ComputeWorkloadAnalysis \
      "$3" --benchmark_filter="$4" --benchmark_min_time=0.05 >"$f" 2>&1 ||
      { echo "$1: ncu failed (rc $?, $f)"; status=1; return; }
    python3 - "$1" "$f" <<'PY'
import re, sys
name, path = sys.argv[1], sys.argv[2]
text = open(path, errors="replace").read()
def metric(label):
    m = re.search(r"^\s*" + re.escape(label) + r"\s+\S+\s+([\d.,]+)", text, re.M)
    return float(m.group(1).replace(",", "")) if m else float("nan")
us = metric("Duration")
unit = re.search(r"^\s*Duration\s+(\S+)", text, re.M)
if unit and unit.group(1) in ("ms", "msecond"):
    us *= 1000.0
elif unit and unit.group(1) in ("ns", "nsecond"):
    us /= 1000.0
print(f"{name:<28} {us:9.1f} {metric('DRAM Throughput'):6.1f} {metric('Compute (SM) Throughput'):6.1f} "
      f"{metric('Issue Slots Busy'):6.1f} {metric('Achieved Occupancy'):6.1f} "
      f"{metric('Theoretical Occupancy'):6.1f} {metric('Registers Per Thread'):5.0f}")
PY
  }
  ncu_line gdn_conv "conv_(update|lean)" "$bench_bin" "BM_Rounds4Replay/T:$T/B:$Bsz/" 100
  ncu_line gdn_recurrence gdn_recurrence "$bench_bin" "BM_Rounds4Replay/T:$T/B:$Bsz/" 100
  ncu_line mamba2_conv "conv_(update|lean)" "$m2_bench_bin" "BM_M2Rounds4Replay/T:$T/B:$Bsz/" 100
  ncu_line mamba2_recurrence mamba2_recurrence "$m2_bench_bin" "BM_M2Rounds4Replay/T:$T/B:$Bsz/" 100
  ncu_line kda_recurrence gdn_recurrence "$kda_bench_bin" "BM_KdaRounds4Replay/T:$T/B:$Bsz/" 60
fi

if has rings; then
  # The replay ring R against the default, per kind (how default_replay_ring was chosen; docs/
  # cuda.md, the tenth session): GDN and Mamba2 rounds under SPECSTATE_BENCH_RING (RINGS_GDN /
  # RINGS_M2: the values, 0 = the default, run first and again last; RINGS_FILTER /
  # RINGS_M2_FILTER: the shapes), KDA's through tools/kda_bench.py --replay-only --ring
  # (RINGS_KDA, RINGS_KDA_ARGS). A ring shorter than 2T gives NaN (GDN, Mamba2) or an error line
  # (KDA) for that T.
  echo "== replay rings [t=${SECONDS}s]"
  scripts/bench-sweep.sh "$bench_bin" SPECSTATE_BENCH_RING "${RINGS_GDN:-0 8 12 16}" \
    "${RINGS_FILTER:-BM_Rounds4Replay/T:(2|4)/B:(8|32|128)/}" "$OUT/rings-gdn" || status=1
  scripts/bench-sweep.sh "$m2_bench_bin" SPECSTATE_BENCH_RING "${RINGS_M2:-0 8 12}" \
    "${RINGS_M2_FILTER:-BM_M2Rounds4Replay/T:(2|4)/B:(8|128)/}" "$OUT/rings-m2" || status=1
  if PY_STAGES=build OUT="$OUT/py" python/gpu_check.sh >"$OUT/rings_py_build.log" 2>&1; then
    for R in ${RINGS_KDA:-0 8 12 0}; do
      echo "KDA ring ${R/#0/default}: $(timeout 200 python3 tools/kda_bench.py --replay-only \
        --ring "$R" ${RINGS_KDA_ARGS:---T 2,4 --B 1,8 --reps 10} 2>&1 |
        grep -E '^T=|Error' | sed -E 's/ +\(replay_ring [^)]*\)//; s/ +/ /g' | tr '\n' ';')"
    done
  else
    tail -20 "$OUT/rings_py_build.log"; echo "rings: the Python package did not build"; status=1
  fi
fi
exit $status
