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

// conv window [conv_dim, W-1]; SSM state [nheads, P, N] (N contiguous); a record is what
// re-running one token's step needs: [xBC (conv_dim) | dt (nheads)] in the activation dtype (z
// only gates the output, and a replayed step has none).
LayerShapes shapes(const Mamba2Config& config);

// Record columns.
inline int64_t record_dt_offset(const Mamba2Config& c) { return c.conv_dim(); }

// Validates one call's views: `tokens` tokens of inputs and outputs on `device`.
void check_args(const char* function, const Mamba2Config& config, Device device,
                const Mamba2Weights& weights, const Mamba2Inputs& inputs,
                const Mamba2Outputs& outputs, int64_t tokens);

}  // namespace specstate::detail::mamba2
