// The Kimi Delta Attention (KDA, Kimi-Linear) layer kind: its config and the per-layer arguments
// of a layer call (the caller's weights, per-token inputs and outputs, all as views of the
// caller's buffers). DESIGN.md section 3 (KDA step) and docs/kda.md (the references: fla's
// naive_recurrent_kda and naive_kda_gate / naive_kda_lowerbound_gate, transformers' kimi_linear).
#pragma once

#include <cstdint>
#include <optional>

#include "specstate/dtype.h"
#include "specstate/tensor_view.h"

namespace specstate {

// One KDA layer: the GDN step with a decay per key channel. Defaults: Kimi-Linear-48B-A3B at TP1
// (linear_attn_config: num_heads 32, head_dim 128, short_conv_kernel_size 4).
struct KdaConfig {
  int num_k_heads = 32;        // H: query/key heads
  int num_v_heads = 32;        // HV: value heads, a multiple of H (fla's grouped value heads)
  int head_k_dim = 128;        // K
  int head_v_dim = 128;        // V
  int conv_width = 4;          // W: conv taps; the conv state keeps W-1 columns
  std::optional<float> scale;  // query scale; K^-1/2 when unset
  bool conv_bias = false;      // whether the weights carry a conv bias (Kimi-Linear has none)
  // The gate (per value head hv and key channel i, x = g_raw[hv][i] + dt_bias[hv][i]):
  //   unset: g = -exp(A_log[hv]) * softplus(x)                   (fla naive_kda_gate)
  //   set:   g = lower_bound * sigmoid(exp(A_log[hv]) * x)       (fla naive_kda_lowerbound_gate)
  // A lower bound must be finite and negative (fla's default is -5).
  std::optional<float> lower_bound;
  DType act_dtype = DType::kBF16;         // mixed_qkv, g, b, conv_out, core_out
  DType conv_state_dtype = DType::kBF16;  // committed conv window and its snapshots
  DType ssm_state_dtype = DType::kF32;    // committed SSM state and its snapshots

  // The conv column [q: H*K | k: H*K | v: HV*V] (the model's three short convs concatenated).
  // (Saturated where an unvalidated config's product passes 64 bits, as GdnConfig's.)
  int64_t conv_dim() const noexcept;
  float effective_scale() const noexcept;
  // Elements of one SSM state: HV * V * K (stored [HV][V][K], K contiguous, as GDN's).
  int64_t ssm_state_elems() const noexcept;
};

struct KdaWeights {
  TensorView conv_weight;  // [conv_dim, W]: tap W-1 multiplies the current token; f32 or bf16
  TensorView conv_bias;    // [conv_dim], or empty when KdaConfig::conv_bias is false
  TensorView A_log;        // [HV]; f32 or bf16
  TensorView dt_bias;      // [HV, K] (fla's layout: one bias per key channel); f32 or bf16
};

// Tokens are packed by row: token i of row r at r*T + i (verify), r (decode), i (prefill).
struct KdaInputs {
  TensorView mixed_qkv;  // [tokens, conv_dim] = [q: H*K | k: H*K | v: HV*V], act dtype (pre-conv)
  TensorView g;          // [tokens, HV, K] raw gate (before dt_bias and the gate), act dtype
  TensorView b;          // [tokens, HV] beta logits, act dtype
};

struct KdaOutputs {
  TensorView conv_out;  // [tokens, conv_dim] conv output after SiLU, act dtype; may be empty
  TensorView core_out;  // [tokens, HV, V] recurrence output, act dtype
};

}  // namespace specstate
