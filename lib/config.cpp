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
// The configs' sizes computed exactly in 128 bits from fields that may be any int (a config that
// has not been validated) and clamped to int64 once at the end: saturating each step instead gave
// values neither exact nor saturated (INT64_MAX + INT64_MIN = -1) for fields of mixed signs.
using Wide = __int128;
int64_t clamp64(Wide v) noexcept {
  if (v > std::numeric_limits<int64_t>::max()) return std::numeric_limits<int64_t>::max();
  if (v < std::numeric_limits<int64_t>::min()) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}
// |conv_dim| < 2^64, |ssm elements| < 2^94: every product below fits 127 bits.
// The delta-rule kinds (GDN, KDA: the same fields), then Mamba2 (a better match than the template).
template <typename Delta>
Wide conv_dim_wide(const Delta& c) {
  return Wide{2} * c.num_k_heads * c.head_k_dim + Wide{c.num_v_heads} * c.head_v_dim;
}
template <typename Delta>
Wide ssm_wide(const Delta& c) {
  return Wide{c.num_v_heads} * c.head_v_dim * c.head_k_dim;
}
Wide conv_dim_wide(const Mamba2Config& c) {
  return Wide{c.num_heads} * c.head_dim + Wide{2} * c.n_groups * c.d_state;
}
Wide ssm_wide(const Mamba2Config& c) { return Wide{c.num_heads} * c.head_dim * c.d_state; }
template <typename C>
Wide conv_state_wide(const C& c) {  // |.| < 2^96
  return conv_dim_wide(c) * (Wide{c.conv_width} - 1);
}
}  // namespace

int64_t GdnConfig::conv_dim() const noexcept { return clamp64(conv_dim_wide(*this)); }
int64_t GdnConfig::ssm_state_elems() const noexcept { return clamp64(ssm_wide(*this)); }
int64_t KdaConfig::conv_dim() const noexcept { return clamp64(conv_dim_wide(*this)); }
int64_t KdaConfig::ssm_state_elems() const noexcept { return clamp64(ssm_wide(*this)); }
int64_t Mamba2Config::conv_dim() const noexcept { return clamp64(conv_dim_wide(*this)); }
int64_t Mamba2Config::ssm_state_elems() const noexcept { return clamp64(ssm_wide(*this)); }
int64_t ModelConfig::conv_state_elems() const noexcept {
  return visit_layer([](const auto& c) { return clamp64(conv_state_wide(c)); });
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
  // One layer's bytes (|.| < 2^99) held to +-2^64 before the layers multiply it: the sign and
  // the saturation survive, and the product fits.
  const Wide layer = visit_layer([](const auto& c) {
    return conv_state_wide(c) * Wide{int64_t(dtype_size(c.conv_state_dtype))} +
           ssm_wide(c) * Wide{int64_t(dtype_size(c.ssm_state_dtype))};
  });
  const Wide limit = Wide{1} << 64;
  return clamp64(Wide{num_layers} * (layer > limit ? limit : layer < -limit ? -limit : layer));
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
