#include "specstate/config.h"

#include <cmath>
#include <string>

#include "layers/gdn.h"
#include "specstate/status.h"

namespace specstate {

float GdnConfig::effective_scale() const noexcept {
  return scale ? *scale : 1.0f / std::sqrt(static_cast<float>(head_k_dim));
}

int64_t ModelConfig::slot_bytes() const noexcept {
  return int64_t{num_layers} * (conv_state_elems() * int64_t(dtype_size(conv_state_dtype())) +
                                ssm_state_elems() * int64_t(dtype_size(ssm_state_dtype())));
}

void ModelConfig::validate() const {
  if (num_layers <= 0) {
    throw Error(Status::kInvalidArgument,
                "ModelConfig: num_layers = " + std::to_string(num_layers) + ": must be positive");
  }
  switch (kind) {
    case LayerKind::kGatedDeltaNet:
      detail::gdn::validate(gdn);
      return;
    default:
      break;
  }
  throw Error(Status::kNotSupported,
              "ModelConfig: kind = " + std::to_string(static_cast<int>(kind)) +
                  ": only Gated DeltaNet layers are implemented");
}

}  // namespace specstate
