#include "specstate/config.h"

#include <cmath>
#include <string>

#include "specstate/status.h"

namespace specstate {

float GdnConfig::effective_scale() const noexcept {
  return scale ? *scale : 1.0f / std::sqrt(static_cast<float>(head_k_dim));
}

int64_t ModelConfig::slot_bytes() const noexcept {
  return int64_t{num_layers} * (conv_state_elems() * int64_t(dtype_size(conv_state_dtype())) +
                                ssm_state_elems() * int64_t(dtype_size(ssm_state_dtype())));
}

namespace {
[[noreturn]] void bad_field(const char* field, const std::string& value, const char* why) {
  throw Error(Status::kInvalidArgument,
              std::string("ModelConfig: ") + field + " = " + value + ": " + why);
}
void check_positive(const char* field, int value) {
  if (value <= 0) bad_field(field, std::to_string(value), "must be positive");
}
void check_float_dtype(const char* field, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    bad_field(field, dtype_name(dtype), "must be f32 or bf16");
  }
}
}  // namespace

void ModelConfig::validate() const {
  if (kind != LayerKind::kGatedDeltaNet) {
    throw Error(Status::kNotSupported,
                "ModelConfig: kind = " + std::to_string(static_cast<int>(kind)) +
                    ": only Gated DeltaNet layers are implemented");
  }
  check_positive("num_layers", num_layers);
  check_positive("gdn.num_k_heads", gdn.num_k_heads);
  check_positive("gdn.num_v_heads", gdn.num_v_heads);
  check_positive("gdn.head_k_dim", gdn.head_k_dim);
  check_positive("gdn.head_v_dim", gdn.head_v_dim);
  if (gdn.num_v_heads % gdn.num_k_heads != 0) {
    bad_field("gdn.num_v_heads", std::to_string(gdn.num_v_heads),
              ("must be a multiple of num_k_heads = " + std::to_string(gdn.num_k_heads)).c_str());
  }
  if (gdn.conv_width < 2)
    bad_field("gdn.conv_width", std::to_string(gdn.conv_width), "must be >= 2");
  if (gdn.scale && !(std::isfinite(*gdn.scale) && *gdn.scale > 0.0f)) {
    bad_field("gdn.scale", std::to_string(*gdn.scale), "must be finite and positive");
  }
  check_float_dtype("gdn.act_dtype", gdn.act_dtype);
  check_float_dtype("gdn.conv_state_dtype", gdn.conv_state_dtype);
  check_float_dtype("gdn.ssm_state_dtype", gdn.ssm_state_dtype);
}

}  // namespace specstate
