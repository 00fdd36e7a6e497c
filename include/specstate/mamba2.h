// Per-layer arguments of a Mamba2 layer: the caller's weights, the per-token inputs and the
// per-token outputs, all as views of the caller's buffers. DESIGN.md section 3 (Mamba2 selective
// state update) and the Mamba2 part of tests/data/golden/README.md.
#pragma once

#include "specstate/tensor_view.h"

namespace specstate {

struct Mamba2Weights {
  TensorView conv_weight;  // [conv_dim, W]: tap W-1 multiplies the current token; f32 or bf16
  TensorView conv_bias;    // [conv_dim], or empty when Mamba2Config::conv_bias is false
  TensorView A_log;        // [nheads]: A = -exp(A_log); f32 or bf16
  TensorView dt_bias;      // [nheads]; f32 or bf16
  TensorView D;            // [nheads] skip coefficient, or empty when Mamba2Config::d_skip is false
};

// Tokens are packed by row: token i of row r at r*T + i (verify), r (decode), i (prefill).
struct Mamba2Inputs {
  TensorView xBC;  // [tokens, conv_dim] = [x: nheads*P | B: G*N | C: G*N], act dtype (pre-conv)
  TensorView dt;   // [tokens, nheads] raw time step (before dt_bias and softplus), act dtype
  TensorView z;    // [tokens, nheads*P] output gate, act dtype; empty unless Mamba2Config::gate
};

struct Mamba2Outputs {
  TensorView conv_out;  // [tokens, conv_dim] conv output after SiLU, act dtype; may be empty
  TensorView y;         // [tokens, nheads, P] selective-state-update output, act dtype
};

}  // namespace specstate
