// Internal: the KDA (Kimi Delta Attention) layer kind's traits (DESIGN.md section 3): config
// validation, state and record shapes, and the validation of a layer call's weights, inputs and
// outputs.
#pragma once

#include <cstdint>

#include "../layout.h"
#include "specstate/config.h"
#include "specstate/kda.h"
#include "specstate/tensor_view.h"

namespace specstate::detail::kda {

// Throws Error(kInvalidArgument) naming the first field out of range (prefix "ModelConfig: kda.").
void validate(const KdaConfig& config);

// conv window [conv_dim, W-1]; SSM state [HV, V, K] (as GDN's); a conv record is one token's conv
// input (mixed_qkv, act dtype); a factor record is kernels::kda_factor_layout (u, e^g per key
// channel, kf, k).
LayerShapes shapes(const KdaConfig& config);

// Validates one call's views: `tokens` tokens of inputs and outputs on `device`.
void check_args(const char* function, const KdaConfig& config, Device device,
                const KdaWeights& weights, const KdaInputs& inputs, const KdaOutputs& outputs,
                int64_t tokens);

}  // namespace specstate::detail::kda
