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

// conv window [conv_dim, W-1]; SSM state [HV, V, K]; a record is one token's layer inputs:
// [mixed_qkv (conv_dim) | a (HV) | b (HV)] in the activation dtype, so that replaying the token
// re-runs exactly the step verify ran.
LayerShapes shapes(const GdnConfig& config);

// Record columns.
inline int64_t record_a_offset(const GdnConfig& c) { return c.conv_dim(); }
inline int64_t record_b_offset(const GdnConfig& c) { return c.conv_dim() + c.num_v_heads; }

// Validates one call's views: `tokens` tokens of inputs and outputs on `device`.
void check_args(const char* function, const GdnConfig& config, Device device,
                const GdnWeights& weights, const GdnInputs& inputs, const GdnOutputs& outputs,
                int64_t tokens);

}  // namespace specstate::detail::gdn
