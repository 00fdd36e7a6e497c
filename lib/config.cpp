#include "specstate/config.h"

#include <cmath>
#include <string>

#include "layers/gdn.h"
#include "layers/kda.h"
#include "layers/mamba2.h"
#include "specstate/status.h"

namespace specstate {

float GdnConfig::effective_scale() const noexcept {
  return scale ? *scale : 1.0f / std::sqrt(static_cast<float>(head_k_dim));
}

float KdaConfig::effective_scale() const noexcept {
  return scale ? *scale : 1.0f / std::sqrt(static_cast<float>(head_k_dim));
}

const char* layer_kind_name(LayerKind kind) noexcept {
  switch (kind) {
    case LayerKind::kGatedDeltaNet:
      return "gated_delta_net";
    case LayerKind::kMamba2:
      return "mamba2";
    case LayerKind::kKda:
      return "kda";
  }
  return "unknown";
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
    case LayerKind::kMamba2:
      detail::mamba2::validate(mamba);
      return;
    case LayerKind::kKda:
      detail::kda::validate(kda_layer);
      return;
  }
  throw Error(Status::kInvalidArgument,
              "ModelConfig: kind = " + std::to_string(static_cast<int>(kind)) +
                  " is not a layer kind (gated_delta_net = 0, mamba2 = 1, kda = 2)");
}

}  // namespace specstate
