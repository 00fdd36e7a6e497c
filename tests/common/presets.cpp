#include "common/presets.h"

#include <stdexcept>

#include "common/gdn_data.h"
#include "common/kda_data.h"
#include "common/mamba2_data.h"

namespace specstate::test {

PoolOptions test_pool_options(int num_slots, int max_rows, int max_window, Strategy strategy) {
  PoolOptions o;
  o.num_slots = num_slots;
  o.max_rows = max_rows;
  o.max_window = max_window;
  o.strategy = strategy;
  return o;
}

GdnConfig gdn_preset(const std::string& name) {
  if (name == "small_f32") return small_config(DType::kF32, DType::kF32, DType::kF32, true);
  if (name == "small_bf16") return small_config(DType::kBF16, DType::kBF16, DType::kF32, false);
  if (name == "small_all_bf16") {
    return small_config(DType::kBF16, DType::kBF16, DType::kBF16, true);
  }
  if (name == "small_bf16_conv") return small_config(DType::kF32, DType::kBF16, DType::kF32, true);
  GdnConfig g;
  g.act_dtype = DType::kBF16;
  g.conv_state_dtype = DType::kBF16;
  g.ssm_state_dtype = DType::kF32;
  if (name == "gpu_k32") {
    g.num_k_heads = 2;
    g.num_v_heads = 4;
    g.head_k_dim = 32;
    g.head_v_dim = 16;
    g.conv_width = 3;
    g.conv_bias = true;
    return g;
  }
  if (name == "gpu_f32") {
    g.num_k_heads = 2;
    g.num_v_heads = 4;
    g.head_k_dim = 32;
    g.head_v_dim = 32;
    g.conv_width = 4;
    g.conv_bias = true;
    g.act_dtype = g.conv_state_dtype = g.ssm_state_dtype = DType::kF32;
    return g;
  }
  if (name == "gpu_k64_f32") {
    g.num_k_heads = 2;
    g.num_v_heads = 4;
    g.head_k_dim = 64;
    g.head_v_dim = 32;
    g.conv_width = 4;
    g.conv_bias = true;
    g.act_dtype = g.conv_state_dtype = g.ssm_state_dtype = DType::kF32;
    return g;
  }
  if (name == "gpu_h1_f32") {
    g.num_k_heads = 1;
    g.num_v_heads = 2;
    g.head_k_dim = 32;
    g.head_v_dim = 16;
    g.conv_width = 4;
    g.conv_bias = true;
    g.act_dtype = g.conv_state_dtype = g.ssm_state_dtype = DType::kF32;
    return g;
  }
  if (name == "gpu_k128") {
    g.num_k_heads = 4;
    g.num_v_heads = 8;
    g.head_k_dim = 128;
    g.head_v_dim = 64;
    g.conv_width = 4;
    return g;
  }
  if (name == "gpu_k128_bf16") {  // everything bf16, 3 value heads a key head, 3 V blocks of 32
    g.num_k_heads = 2;
    g.num_v_heads = 6;
    g.head_k_dim = 128;
    g.head_v_dim = 96;
    g.conv_width = 4;
    g.ssm_state_dtype = DType::kBF16;
    return g;
  }
  if (name == "gpu_k128_v72") {  // 5 V blocks of 16 rows, the last one half full
    g.num_k_heads = 2;
    g.num_v_heads = 4;
    g.head_k_dim = 128;
    g.head_v_dim = 72;
    g.conv_width = 4;
    return g;
  }
  if (name == "qwen3next_tp1") {
    g.num_k_heads = 16;
    g.num_v_heads = 32;
    g.head_k_dim = 128;
    g.head_v_dim = 128;
    g.conv_width = 4;
    return g;
  }
  throw std::invalid_argument("gdn_preset: unknown preset " + name);
}

bool is_mamba2_preset(const std::string& name) {
  return name.rfind("m2_", 0) == 0 || name == "nemotron_h_8b_tp1";
}

Mamba2Config mamba2_preset(const std::string& name) {
  const DType f32 = DType::kF32, bf16 = DType::kBF16;
  if (name == "m2_small_f32") return small_mamba2_config(f32, f32, f32, true, true, true);
  if (name == "m2_small_bf16") return small_mamba2_config(bf16, bf16, f32, true, true, false);
  if (name == "m2_all_bf16") return small_mamba2_config(bf16, bf16, bf16, false, false, true);
  if (name == "m2_bf16_conv") {
    Mamba2Config m = small_mamba2_config(f32, bf16, f32, true, true, false);
    m.dt_min = 0.01f;
    m.dt_max = 0.05f;
    return m;
  }
  if (name == "m2_g1") {
    Mamba2Config m = small_mamba2_config(f32, f32, f32, false, true, true);
    m.num_heads = 6;
    m.head_dim = 4;
    m.d_state = 16;
    m.n_groups = 1;
    m.conv_width = 3;
    return m;
  }
  if (name == "m2_gpu_bf16") {  // CUDA-sized: N = 64, P = 32 (two channel blocks), z gate
    Mamba2Config m = small_mamba2_config(bf16, bf16, f32, true, true, true);
    m.num_heads = 8;
    m.head_dim = 32;
    m.d_state = 64;
    m.n_groups = 2;
    return m;
  }
  if (name == "m2_gpu_p72") {  // N = 128, P = 72 (5 channel blocks, the last half full), z gate
    Mamba2Config m = small_mamba2_config(bf16, bf16, f32, true, true, true);
    m.num_heads = 4;
    m.head_dim = 72;
    m.d_state = 128;
    m.n_groups = 2;
    return m;
  }
  if (name == "m2_gpu_f32") {  // CUDA-sized: N = 128, P = 24 (a partial channel block), clamp
    Mamba2Config m = small_mamba2_config(f32, f32, f32, false, true, false);
    m.num_heads = 4;
    m.head_dim = 24;
    m.d_state = 128;
    m.n_groups = 1;
    m.conv_width = 3;
    m.dt_min = 0.001f;
    m.dt_max = 0.08f;
    return m;
  }
  if (name == "m2_gpu_n64_p72_f32") {  // f32 activations and states, N = 64, P = 72, z gate
    Mamba2Config m = small_mamba2_config(f32, f32, f32, true, true, true);
    m.num_heads = 4;
    m.head_dim = 72;
    m.d_state = 64;
    m.n_groups = 2;
    return m;
  }
  if (name == "m2_gpu_n32_p72") {  // bf16 activations and states, N = 32, P = 72, no gate
    Mamba2Config m = small_mamba2_config(bf16, bf16, bf16, true, true, false);
    m.num_heads = 4;
    m.head_dim = 72;
    m.d_state = 32;
    m.n_groups = 1;
    return m;
  }
  if (name == "m2_gpu_n256") {  // CUDA-sized: N = 256 (Nemotron-H-47B/56B), all bf16
    Mamba2Config m = small_mamba2_config(bf16, bf16, bf16, true, true, false);
    m.num_heads = 4;
    m.head_dim = 16;
    m.d_state = 256;
    m.n_groups = 2;
    return m;
  }
  if (name == "nemotron_h_8b_tp1") return Mamba2Config{};  // the defaults
  throw std::invalid_argument("mamba2_preset: unknown preset " + name);
}

LayerKind preset_kind(const std::string& name) {
  if (is_mamba2_preset(name)) return LayerKind::kMamba2;
  if (is_kda_preset(name)) return LayerKind::kKda;
  return LayerKind::kGatedDeltaNet;
}

ModelConfig preset_model(const std::string& name, int layers) {
  switch (preset_kind(name)) {
    case LayerKind::kMamba2:
      return ModelConfig::mamba2(layers, mamba2_preset(name));
    case LayerKind::kKda:
      return ModelConfig::kda(layers, kda_preset(name));
    case LayerKind::kGatedDeltaNet:
      break;
  }
  return ModelConfig::gated_delta_net(layers, gdn_preset(name));
}

bool is_kda_preset(const std::string& name) {
  return name.rfind("kda_", 0) == 0 || name == "kimi_linear_tp1";
}

KdaConfig kda_preset(const std::string& name) {
  const DType f32 = DType::kF32, bf16 = DType::kBF16;
  if (name == "kda_small_f32") return small_kda_config(f32, f32, f32, true);
  if (name == "kda_small_bf16") {
    KdaConfig c = small_kda_config(bf16, bf16, f32, false);
    c.head_v_dim = 6;
    return c;
  }
  if (name == "kda_lb_all_bf16") {
    KdaConfig c = small_kda_config(bf16, bf16, bf16, true);
    c.num_k_heads = 1;
    c.num_v_heads = 3;
    c.head_k_dim = 6;
    c.head_v_dim = 8;
    c.conv_width = 3;
    c.lower_bound = -5.0f;
    return c;
  }
  if (name == "kda_lb_f32") {
    KdaConfig c = small_kda_config(f32, f32, f32, true);
    c.lower_bound = -5.0f;
    return c;
  }
  // CUDA-sized (head_k_dim 32, 64 or 128).
  if (name == "kda_gpu_k128") {  // bf16 activations and conv state, f32 SSM, no bias
    KdaConfig c = small_kda_config(bf16, bf16, f32, false);
    c.num_k_heads = 2;
    c.num_v_heads = 4;
    c.head_k_dim = 128;
    c.head_v_dim = 64;
    return c;
  }
  if (name == "kda_gpu_lb_f32") {  // all f32, conv bias, fla's lower bound; K = 32, V = 40
    KdaConfig c = small_kda_config(f32, f32, f32, true);
    c.head_k_dim = 32;
    c.head_v_dim = 40;
    c.lower_bound = -5.0f;
    return c;
  }
  if (name == "kda_gpu_grouped_bf16") {  // everything bf16, 3 value heads per key head, K = 64
    KdaConfig c = small_kda_config(bf16, bf16, bf16, true);
    c.num_k_heads = 1;
    c.num_v_heads = 3;
    c.head_k_dim = 64;
    c.head_v_dim = 48;
    c.conv_width = 3;
    return c;
  }
  if (name == "kimi_linear_tp1") return KdaConfig{};  // the defaults
  throw std::invalid_argument("kda_preset: unknown preset " + name);
}

PoolOptions vllm_layout_options(PoolOptions o, LayerKind kind) {
  o.conv_layout = ConvLayout::kChannelsLast;
  o.ssm_layout = kind == LayerKind::kMamba2 ? SsmLayout::kVK : SsmLayout::kKV;
  return o;
}

std::vector<EquivalenceCase> cpu_equivalence_cases() {
  return {
      {"f32_chain", "small_f32", false, 5, 5, 40},
      {"f32_tree", "small_f32", true, 6, 5, 40},
      {"bf16_chain", "small_bf16", false, 4, 6, 40},
      {"bf16_tree", "small_bf16", true, 5, 6, 40},
      {"all_bf16_chain", "small_all_bf16", false, 5, 4, 30},
      {"bf16_conv_tree", "small_bf16_conv", true, 4, 4, 30},
      {"mamba2_f32_chain", "m2_small_f32", false, 5, 5, 40},
      {"mamba2_f32_tree", "m2_small_f32", true, 6, 5, 40},
      {"mamba2_bf16_chain", "m2_small_bf16", false, 4, 6, 40},
      {"mamba2_bf16_tree", "m2_small_bf16", true, 5, 6, 40},
      {"mamba2_all_bf16_chain", "m2_all_bf16", false, 5, 4, 30},
      {"mamba2_bf16_conv_clamp_tree", "m2_bf16_conv", true, 4, 4, 30},
      {"mamba2_g1_chain", "m2_g1", false, 3, 4, 30},
      // Replay rings: R = 2 T_max folds at every verify with history; R = 40 keeps long
      // histories (folds on a few rounds, different rows on different rounds); wrap-around over
      // 100+ rounds.
      {"f32_chain_ring2t", "small_f32", false, 4, 5, 40, 8},
      {"bf16_tree_ring2t", "small_bf16", true, 5, 6, 40, 10},
      {"bf16_chain_ring40_long", "small_bf16", false, 4, 4, 120, 40},
      {"f32_tree_ring13", "small_f32", true, 6, 4, 60, 13},
      {"mamba2_f32_chain_ring2t", "m2_small_f32", false, 4, 5, 40, 8},
      {"mamba2_bf16_tree_ring2t", "m2_small_bf16", true, 5, 5, 40, 10},
      {"mamba2_bf16_chain_ring40_long", "m2_small_bf16", false, 4, 4, 120, 40},
      {"kda_f32_chain", "kda_small_f32", false, 5, 5, 40},
      {"kda_f32_tree", "kda_small_f32", true, 6, 5, 40},
      {"kda_bf16_chain", "kda_small_bf16", false, 4, 6, 40},
      {"kda_bf16_tree", "kda_small_bf16", true, 5, 6, 40},
      {"kda_lb_all_bf16_tree", "kda_lb_all_bf16", true, 4, 4, 30},
      {"kda_lb_f32_chain", "kda_lb_f32", false, 5, 4, 30},
      // vLLM's element order before its PR #33291 (channels-last conv windows, [HV][K][V]
      // states) in one pool or both: bit-identical to the default order, element for element.
      {"vllm_f32_tree_replay", "small_f32", true, 5, 4, 30, 0, kReplayVllm},
      {"vllm_bf16_chain_snapshot", "small_bf16", false, 4, 4, 30, 8, kSnapshotVllm},
      {"vllm_all_bf16_tree_both", "small_all_bf16", true, 4, 4, 30, 0, kSnapshotVllm | kReplayVllm},
      {"vllm_mamba2_bf16_tree_replay", "m2_small_bf16", true, 5, 4, 30, 0, kReplayVllm},
      {"vllm_mamba2_f32_chain_snapshot", "m2_small_f32", false, 4, 4, 30, 8, kSnapshotVllm},
      {"vllm_kda_bf16_tree_replay", "kda_small_bf16", true, 5, 4, 30, 0, kReplayVllm},
      {"vllm_kda_lb_f32_chain_both", "kda_lb_f32", false, 5, 4, 30, 10,
       kSnapshotVllm | kReplayVllm},
      {"kda_f32_chain_ring2t", "kda_small_f32", false, 4, 5, 40, 8},
      {"kda_bf16_tree_ring2t", "kda_small_bf16", true, 5, 5, 40, 10},
      {"kda_bf16_chain_ring40_long", "kda_small_bf16", false, 4, 4, 120, 40},
      // The fold limit per round (replay_fold_limit): rounds of 1-2 rows fold at the small
      // limit, rounds of 3 or more rows at the whole ring's, on the default ring (GDN: 3T) and
      // on longer ones.
      {"f32_chain_fold_rows3", "small_f32", false, 4, 6, 80, 0, 0, 3},
      {"bf16_tree_ring16_fold_rows3", "small_bf16", true, 4, 6, 80, 16, 0, 3},
      {"mamba2_f32_chain_ring12_fold_rows3", "m2_small_f32", false, 4, 6, 80, 12, 0, 3},
      {"kda_bf16_chain_ring12_fold_rows3", "kda_small_bf16", false, 4, 6, 80, 12, 0, 3},
  };
}

std::vector<EquivalenceCase> gpu_equivalence_cases() {
  return {
      {"k32_chain", "gpu_k32", false, 5, 6, 24},
      {"k32_tree", "gpu_k32", true, 6, 6, 24},
      {"k128_chain", "gpu_k128", false, 4, 5, 16},
      {"k128_tree", "gpu_k128", true, 5, 5, 16},
      {"f32_chain", "gpu_f32", false, 8, 3, 12},
      {"mamba2_bf16_chain", "m2_gpu_bf16", false, 5, 5, 16},
      {"mamba2_bf16_tree", "m2_gpu_bf16", true, 6, 5, 16},
      {"mamba2_f32_clamp_chain", "m2_gpu_f32", false, 8, 3, 12},
      {"mamba2_f32_clamp_tree", "m2_gpu_f32", true, 5, 3, 12},
      {"mamba2_n256_tree", "m2_gpu_n256", true, 4, 3, 10},
      {"k128_chain_ring2t", "gpu_k128", false, 4, 5, 24, 8},
      {"k128_tree_ring2t", "gpu_k128", true, 5, 5, 24, 10},
      {"k32_chain_ring40_long", "gpu_k32", false, 4, 4, 110, 40},
      {"k32_tree_ring13", "gpu_k32", true, 6, 4, 40, 13},
      {"mamba2_bf16_chain_ring2t", "m2_gpu_bf16", false, 4, 5, 24, 8},
      {"mamba2_bf16_tree_ring40_long", "m2_gpu_bf16", true, 4, 3, 110, 40},
      {"kda_k128_chain", "kda_gpu_k128", false, 4, 5, 16},
      {"kda_k128_tree", "kda_gpu_k128", true, 5, 5, 16},
      {"kda_lb_f32_chain", "kda_gpu_lb_f32", false, 8, 3, 12},
      {"kda_grouped_bf16_tree", "kda_gpu_grouped_bf16", true, 5, 4, 12},
      {"kda_k128_chain_ring2t", "kda_gpu_k128", false, 4, 5, 24, 8},
      {"kda_lb_f32_tree_ring40_long", "kda_gpu_lb_f32", true, 4, 3, 110, 40},
      {"k128_chain_fold_rows3", "gpu_k128", false, 4, 6, 40, 0, 0, 3},
      {"k32_tree_ring16_fold_rows3", "gpu_k32", true, 4, 6, 40, 16, 0, 3},
      {"mamba2_bf16_chain_ring12_fold_rows3", "m2_gpu_bf16", false, 4, 6, 40, 12, 0, 3},
      {"kda_k128_chain_ring12_fold_rows3", "kda_gpu_k128", false, 4, 6, 40, 12, 0, 3},
      // vLLM's element order (vllm_layout_options), bit-identical to the default order.
      {"vllm_k128_tree_replay", "gpu_k128", true, 5, 4, 16, 0, kReplayVllm},
      {"vllm_k128_chain_snapshot", "gpu_k128", false, 4, 4, 16, 0, kSnapshotVllm},
      {"vllm_k32_chain_both_ring2t", "gpu_k32", false, 4, 4, 24, 8, kSnapshotVllm | kReplayVllm},
      {"vllm_f32_chain_replay", "gpu_f32", false, 8, 3, 12, 0, kReplayVllm},
      {"vllm_mamba2_bf16_tree_replay", "m2_gpu_bf16", true, 5, 4, 16, 0, kReplayVllm},
      {"vllm_kda_k128_chain_replay", "kda_gpu_k128", false, 4, 5, 16, 0, kReplayVllm},
      {"vllm_kda_grouped_bf16_tree_snapshot", "kda_gpu_grouped_bf16", true, 5, 4, 12, 0,
       kSnapshotVllm},
  };
}

}  // namespace specstate::test
