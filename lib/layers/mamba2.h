// Internal: the Mamba2 layer kind's traits (DESIGN.md section 3): config validation, state and
// record shapes, and the validation of a layer call's weights, inputs and outputs.
#pragma once

#include <cstdint>

#include "../layout.h"
#include "specstate/config.h"
#include "specstate/mamba2.h"
#include "specstate/tensor_view.h"

namespace specstate::detail::mamba2 {

// Throws Error(kInvalidArgument) naming the first field out of range (prefix
// "ModelConfig: mamba.").
void validate(const Mamba2Config& config);

// conv window [conv_dim, W-1]; SSM state [nheads, P, N] (N contiguous); a conv record is the
// token's xBC (conv_dim, the activation dtype); the SSM's factor record is
// kernels::mamba2_factor_layout's.
LayerShapes shapes(const Mamba2Config& config);

// Validates one call's views: `tokens` tokens of inputs and outputs on `device`.
void check_args(const char* function, const Mamba2Config& config, Device device,
                const Mamba2Weights& weights, const Mamba2Inputs& inputs,
                const Mamba2Outputs& outputs, int64_t tokens);

}  // namespace specstate::detail::mamba2
