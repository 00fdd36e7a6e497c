// Internal: the Gated DeltaNet layer kind's traits (DESIGN.md section 3): config validation, state
// and record shapes, and the validation of a layer call's weights, inputs and outputs.
#pragma once

#include <cstdint>

#include "../layout.h"
#include "specstate/config.h"
#include "specstate/gdn.h"
#include "specstate/tensor_view.h"

namespace specstate::detail::gdn {

// Throws Error(kInvalidArgument) naming the first field out of range (prefix "ModelConfig: gdn.").
void validate(const GdnConfig& config);

// conv window [conv_dim, W-1]; SSM state [HV, V, K]; a conv record is one token's conv input
// (mixed_qkv, act dtype); a factor record is kernels::gdn_factor_layout (u, e^g, kf, k).
LayerShapes shapes(const GdnConfig& config);

// Validates one call's views: `tokens` tokens of inputs and outputs on `device`.
void check_args(const char* function, const GdnConfig& config, Device device,
                const GdnWeights& weights, const GdnInputs& inputs, const GdnOutputs& outputs,
                int64_t tokens);

}  // namespace specstate::detail::gdn
