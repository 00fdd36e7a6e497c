#include "specstate/config.h"

#include <cmath>
#include <string>

#include "layers/gdn.h"
#include "layers/kda.h"
#include "layers/mamba2.h"
#include "layout.h"
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
  // The SSM state's elements per layer, exact (each factor was checked to fit 32 bits).
  __int128 ssm = 0;
  switch (kind) {
    case LayerKind::kGatedDeltaNet:
      detail::gdn::validate(gdn);
      ssm = __int128{gdn.num_v_heads} * gdn.head_v_dim * gdn.head_k_dim;
      break;
    case LayerKind::kMamba2:
      detail::mamba2::validate(mamba);
      ssm = __int128{mamba.num_heads} * mamba.head_dim * mamba.d_state;
      break;
    case LayerKind::kKda:
      detail::kda::validate(kda_layer);
      ssm = __int128{kda_layer.num_v_heads} * kda_layer.head_v_dim * kda_layer.head_k_dim;
      break;
    default:
      throw Error(Status::kInvalidArgument,
                  "ModelConfig: kind = " + std::to_string(static_cast<int>(kind)) +
                      " is not a layer kind (gated_delta_net = 0, mamba2 = 1, kda = 2)");
  }
  // Every size computed from the config (conv_state_elems, ssm_state_elems, slot_bytes, a pool's
  // buffers) is then exact in 64 bits: a slot's state over all layers is at most 2^48 bytes.
  const __int128 conv = __int128{conv_dim()} * (conv_width() - 1);
  const __int128 slot = __int128{num_layers} * (conv * int64_t(dtype_size(conv_state_dtype())) +
                                                ssm * int64_t(dtype_size(ssm_state_dtype())));
  if (slot > kMaxSlotBytes) {
    const auto text = detail::int128_text;
    throw Error(Status::kInvalidArgument,
                "ModelConfig: one slot's state over the " + std::to_string(num_layers) +
                    " layers is " + text(slot) + " bytes (conv_width = " +
                    std::to_string(conv_width()) + ", conv_dim = " + std::to_string(conv_dim()) +
                    ", " + text(ssm) + " SSM state elements a layer), more than 2^48");
  }
}

}  // namespace specstate
