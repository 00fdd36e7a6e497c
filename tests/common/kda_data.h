// Test helpers of the KDA layer kind: random weights and inputs shaped like real ones, output
// buffers, the named small configs. Buffer, committed_bytes and sum_squares are gdn_data.h's.
#pragma once

#include <cstdint>
#include <random>

#include "common/gdn_data.h"
#include "specstate/specstate.h"

namespace specstate::test {

struct KdaLayerWeights {
  Buffer conv_weight, conv_bias, A_log, dt_bias;
  KdaWeights view() const;
};

// n tokens of one layer's inputs.
struct KdaTokenInputs {
  Buffer mixed_qkv, g, b;
  KdaInputs view() const;
  KdaInputs rows(int64_t begin, int64_t count) const;
};

struct KdaTokenOutputs {
  Buffer conv_out, core_out;
  KdaOutputs view() const;
  KdaOutputs rows(int64_t begin, int64_t count) const;
};

// H=2 HV=4 K=V=8 W=4, conv bias as given, no lower bound.
KdaConfig small_kda_config(DType act = DType::kF32, DType conv_state = DType::kF32,
                           DType ssm_state = DType::kF32, bool conv_bias = true);
// conv weights x0.5, conv bias x0.1, A = exp(A_log) uniform in [1, 16] per value head,
// dt_bias[hv][i] = softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1] per key channel: decays
// e^g in (0, 1) spread over the channels.
KdaLayerWeights random_weights(const KdaConfig& config, std::mt19937_64& rng);
// mixed_qkv, g, b standard normal.
KdaTokenInputs random_inputs(const KdaConfig& config, int64_t tokens, std::mt19937_64& rng);
KdaTokenOutputs make_outputs(const KdaConfig& config, int64_t tokens);

}  // namespace specstate::test
