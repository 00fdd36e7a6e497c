// Test configuration presets (instead of hand-built configs) and the case table over layer kind x
// strategy x backend that the equivalence suites run (CPU in tests/cpu, CUDA in tests/gpu).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "specstate/specstate.h"

namespace specstate::test {

// Named GDN layer configs:
//   small_f32        H=2 HV=4 K=V=8 W=4, conv bias, all f32
//   small_bf16       the same, bf16 activations and conv state, f32 SSM state, no bias
//   small_all_bf16   everything bf16, conv bias
//   small_bf16_conv  f32 activations, bf16 conv state, conv bias
//   gpu_k32          H=2 HV=4 K=32 V=16 W=3 (CUDA-sized heads), bf16 act/conv, f32 SSM
//   gpu_f32          H=2 HV=4 K=V=32 W=4, conv bias, all f32
//   gpu_k64_f32      H=2 HV=4 K=64 V=32 W=4, conv bias, all f32 (tests/gpu/test_cuda_graph.cpp)
//   gpu_h1_f32       H=1 HV=2 K=32 V=16 W=4, conv bias, all f32 (tests/gpu/test_advance_chunks.cpp)
//   gpu_k128         H=4 HV=8 K=128 V=64 W=4, bf16 act/conv, f32 SSM
//   qwen3next_tp1    Qwen3-Next-80B at TP1: H=16 HV=32 K=V=128 W=4, bf16 act/conv, f32 SSM
GdnConfig gdn_preset(const std::string& name);

// Named Mamba2 layer configs (names start with "m2_"); nheads=4 P=8 N=8 G=2 W=4 unless said:
//   m2_small_f32       all f32, conv bias, D skip, z gate (the golden case's options)
//   m2_small_bf16      bf16 activations and conv state, f32 SSM, conv bias, D skip, no gate
//                      (Nemotron-H's options)
//   m2_all_bf16        everything bf16, no conv bias, no D, z gate
//   m2_bf16_conv       f32 activations, bf16 conv state, f32 SSM, D skip, dt clamped to
//                      [0.01, 0.05] (both bounds bind for the preset's dt distribution)
//   m2_g1              nheads=6 P=4 N=16 G=1 W=3, f32, no bias, D skip, gate
//   nemotron_h_8b_tp1  Nemotron-H-8B at TP1: nheads=128 P=64 N=128 G=8 W=4, conv bias, D,
//                      bf16 act/conv, f32 SSM
Mamba2Config mamba2_preset(const std::string& name);
bool is_mamba2_preset(const std::string& name);

// Named KDA layer configs (names start with "kda_"):
//   kda_small_f32      H=2 HV=4 K=V=8 W=4, conv bias, all f32, no lower bound
//   kda_small_bf16     H=2 HV=4 K=8 V=6 W=4, bf16 activations and conv state, f32 SSM, no bias
//   kda_lb_all_bf16    H=1 HV=3 K=6 V=8 W=3 (grouped value heads), everything bf16, conv bias,
//                      lower_bound = -5 (fla's naive_kda_lowerbound_gate)
//   kda_lb_f32         the small f32 config with lower_bound = -5
//   kda_gpu_k128       H=2 HV=4 K=128 V=64 W=4, bf16 act/conv, f32 SSM, no bias (CUDA-sized)
//   kda_gpu_lb_f32     H=2 HV=4 K=32 V=40 W=4, all f32, conv bias, lower_bound = -5 (CUDA-sized;
//                      the last V block of 16 rows half full)
//   kda_gpu_grouped_bf16  H=1 HV=3 K=64 V=48 W=3, everything bf16, conv bias (CUDA-sized)
//   kimi_linear_tp1    Kimi-Linear-48B-A3B at TP1: H=HV=32 K=V=128 W=4, bf16 act/conv, f32 SSM
KdaConfig kda_preset(const std::string& name);
bool is_kda_preset(const std::string& name);

// The layer kind of any preset above (the one place that decides it from the name), and a model
// of `layers` layers of it.
LayerKind preset_kind(const std::string& name);
ModelConfig preset_model(const std::string& name, int layers);

// The options of a test pool: `num_slots` slots, verify batches of up to `max_rows` rows and
// `max_window` tokens, `strategy`; the rest as PoolOptions has it (the CPU backend).
PoolOptions test_pool_options(int num_slots, int max_rows, int max_window,
                              Strategy strategy = Strategy::kSnapshot);

struct EquivalenceCase {
  const char* name;
  const char* preset;  // gdn_preset, mamba2_preset or kda_preset name (the kind follows)
  bool tree;
  int max_window;  // rounds draw T in 1..max_window
  int requests;
  int rounds;
  int ring = 0;  // replay: PoolOptions::replay_ring (0: the default; 2 * max_window folds every
                 // round; larger rings keep long histories)
  // Which pool keeps its state in vLLM's element order of before its PR #33291
  // (vllm_layout_options: the non-default orders, channels-last conv and [K][V]): 0 neither (the
  // default order), kReplayVllm, kSnapshotVllm or both. The states are compared in their logical
  // order, so a layout must change nothing but where each element lies.
  int vllm = 0;
  // replay: PoolOptions::replay_fold_rows. 1 (the cases' default): every round may grow the
  // history to the whole ring, so a ring's long histories are exercised at a handful of rows;
  // 3: rounds of fewer rows fold at the small limit (replay_fold_limit), so the fold limit
  // changes from round to round as the row count does.
  int fold_rows = 1;
};
inline constexpr int kSnapshotVllm = 1, kReplayVllm = 2;

// `o` with vLLM's element order of before its PR #33291 for `kind` (both non-default orders):
// conv windows channels last ([W-1][conv_dim]), the delta-rule kinds' SSM state [HV][K][V]
// (Mamba2 keeps [nheads][P][N]). Today's vLLM keeps [HV][V][K], the default order.
PoolOptions vllm_layout_options(PoolOptions o, LayerKind kind);

// The cases every backend runs (the GPU suite adds the CUDA-sized presets).
std::vector<EquivalenceCase> cpu_equivalence_cases();
std::vector<EquivalenceCase> gpu_equivalence_cases();

inline std::string case_name(const EquivalenceCase& c) { return c.name; }
inline void PrintTo(const EquivalenceCase& c, std::ostream* out) { *out << c.name; }

}  // namespace specstate::test
