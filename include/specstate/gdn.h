// Per-layer arguments of a Gated DeltaNet layer: the caller's weights, the per-token inputs and
// the per-token outputs, all as views of the caller's buffers. DESIGN.md section 3.
#pragma once

#include "specstate/tensor_view.h"

namespace specstate {

struct GdnWeights {
  TensorView conv_weight;  // [conv_dim, W]: tap W-1 multiplies the current token; f32 or bf16
  TensorView conv_bias;    // [conv_dim], or empty when GdnConfig::conv_bias is false
  TensorView A_log;        // [HV]; f32 or bf16
  TensorView dt_bias;      // [HV]; f32 or bf16
};

// Tokens are packed by row: token i of row r at r*T + i (verify), r (decode), i (prefill).
struct GdnInputs {
  TensorView mixed_qkv;  // [tokens, conv_dim] = [q: H*K | k: H*K | v: HV*V], act dtype
  TensorView a;          // [tokens, HV] gate input (decay), act dtype
  TensorView b;          // [tokens, HV] gate input (beta), act dtype
};

struct GdnOutputs {
  TensorView conv_out;  // [tokens, conv_dim] conv output after SiLU, act dtype; may be empty
  TensorView core_out;  // [tokens, HV, V] recurrence output, act dtype
};

}  // namespace specstate
