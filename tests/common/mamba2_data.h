// Test helpers of the Mamba2 layer kind: random weights and inputs shaped like real ones (the
// golden README's distributions), output buffers, and the named small configs. The GDN side is
// common/gdn_data.h (Buffer, committed_bytes, sum_squares are shared).
#pragma once

#include <cstdint>
#include <random>

#include "common/gdn_data.h"
#include "specstate/specstate.h"

namespace specstate::test {

struct Mamba2LayerWeights {
  Buffer conv_weight, conv_bias, A_log, dt_bias, D;
  Mamba2Weights view() const;
};

// n tokens of one layer's inputs.
struct Mamba2TokenInputs {
  Buffer xBC, dt, z;  // z is empty unless the config has a gate
  Mamba2Inputs view() const;
  Mamba2Inputs rows(int64_t begin, int64_t count) const;
};

struct Mamba2TokenOutputs {
  Buffer conv_out, y;
  Mamba2Outputs view() const;
  Mamba2Outputs rows(int64_t begin, int64_t count) const;
};

// nheads=4 P=8 N=8 G=2 W=4 (two heads per group), conv bias, D skip, z gate as given.
Mamba2Config small_mamba2_config(DType act = DType::kF32, DType conv_state = DType::kF32,
                                 DType ssm_state = DType::kF32, bool conv_bias = true,
                                 bool d_skip = true, bool gate = true);
// conv weights x0.5, conv bias x0.1, A = exp(A_log) uniform in [1, 16], dt_bias =
// softplus^-1(dt0) with dt0 log-uniform in [1e-3, 1e-1], D = 1 + 0.1 N(0, 1).
Mamba2LayerWeights random_weights(const Mamba2Config& config, std::mt19937_64& rng);
// xBC, dt, z standard normal.
Mamba2TokenInputs random_inputs(const Mamba2Config& config, int64_t tokens, std::mt19937_64& rng);
Mamba2TokenOutputs make_outputs(const Mamba2Config& config, int64_t tokens);

}  // namespace specstate::test
