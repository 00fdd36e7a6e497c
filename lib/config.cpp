#include "specstate/config.h"

#include <cmath>
#include <limits>
#include <string>

#include "layers/gdn.h"
#include "layers/kda.h"
#include "layers/mamba2.h"
#include "layout.h"
#include "specstate/status.h"

namespace specstate {

namespace {
// a * b and a + b saturated at the int64 range (the configs' size accessors: a config that has
// not been validated may hold any int).
int64_t sat_mul(int64_t a, int64_t b) noexcept {
  int64_t r;
  if (!__builtin_mul_overflow(a, b, &r)) return r;
  return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                            : std::numeric_limits<int64_t>::max();
}
int64_t sat_add(int64_t a, int64_t b) noexcept {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b < 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
}
}  // namespace

int64_t GdnConfig::conv_dim() const noexcept {
  return sat_add(sat_mul(sat_mul(2, num_k_heads), head_k_dim), sat_mul(num_v_heads, head_v_dim));
}
int64_t GdnConfig::ssm_state_elems() const noexcept {
  return sat_mul(sat_mul(num_v_heads, head_v_dim), head_k_dim);
}
int64_t KdaConfig::conv_dim() const noexcept {
  return sat_add(sat_mul(sat_mul(2, num_k_heads), head_k_dim), sat_mul(num_v_heads, head_v_dim));
}
int64_t KdaConfig::ssm_state_elems() const noexcept {
  return sat_mul(sat_mul(num_v_heads, head_v_dim), head_k_dim);
}
int64_t Mamba2Config::conv_dim() const noexcept {
  return sat_add(sat_mul(num_heads, head_dim), sat_mul(sat_mul(2, n_groups), d_state));
}
int64_t Mamba2Config::ssm_state_elems() const noexcept {
  return sat_mul(sat_mul(num_heads, head_dim), d_state);
}
int64_t ModelConfig::conv_state_elems() const noexcept {
  return sat_mul(conv_dim(), int64_t{conv_width()} - 1);
}

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
  return sat_mul(num_layers,
                 sat_add(sat_mul(conv_state_elems(), int64_t(dtype_size(conv_state_dtype()))),
                         sat_mul(ssm_state_elems(), int64_t(dtype_size(ssm_state_dtype())))));
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
