#include "common/presets.h"

#include <stdexcept>

#include "common/gdn_data.h"

namespace specstate::test {

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
  if (name == "gpu_k128") {
    g.num_k_heads = 4;
    g.num_v_heads = 8;
    g.head_k_dim = 128;
    g.head_v_dim = 64;
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

std::vector<EquivalenceCase> cpu_equivalence_cases() {
  return {
      {"f32_chain", "small_f32", false, 5, 5, 40},
      {"f32_tree", "small_f32", true, 6, 5, 40},
      {"bf16_chain", "small_bf16", false, 4, 6, 40},
      {"bf16_tree", "small_bf16", true, 5, 6, 40},
      {"all_bf16_chain", "small_all_bf16", false, 5, 4, 30},
      {"bf16_conv_tree", "small_bf16_conv", true, 4, 4, 30},
  };
}

std::vector<EquivalenceCase> gpu_equivalence_cases() {
  return {
      {"k32_chain", "gpu_k32", false, 5, 6, 24},   {"k32_tree", "gpu_k32", true, 6, 6, 24},
      {"k128_chain", "gpu_k128", false, 4, 5, 16}, {"k128_tree", "gpu_k128", true, 5, 5, 16},
      {"f32_chain", "gpu_f32", false, 8, 3, 12},
  };
}

}  // namespace specstate::test
