#include "kda.h"

#include <cmath>
#include <limits>
#include <string>

#include "../validate.h"
#include "kernels/kernel_types.h"
#include "specstate/status.h"

namespace specstate::detail::kda {

namespace {
[[noreturn]] void bad_field(const char* field, const std::string& value, const std::string& why) {
  throw Error(Status::kInvalidArgument,
              std::string("ModelConfig: kda.") + field + " = " + value + ": " + why);
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

void validate(const KdaConfig& c) {
  check_positive("num_k_heads", c.num_k_heads);
  check_positive("num_v_heads", c.num_v_heads);
  check_positive("head_k_dim", c.head_k_dim);
  check_positive("head_v_dim", c.head_v_dim);
  if (c.num_v_heads % c.num_k_heads != 0) {
    bad_field("num_v_heads", std::to_string(c.num_v_heads),
              "must be a multiple of num_k_heads = " + std::to_string(c.num_k_heads));
  }
  if (c.conv_width < 2) bad_field("conv_width", std::to_string(c.conv_width), "must be >= 2");
  // Every per-token extent must fit an int (views index channels with int).
  const int64_t conv_dim = c.conv_dim();
  if (conv_dim + int64_t{c.num_v_heads} > std::numeric_limits<int32_t>::max()) {
    bad_field("head_k_dim", std::to_string(c.head_k_dim),
              "conv_dim = 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim = " +
                  std::to_string(conv_dim) + " does not fit in 32 bits");
  }
  if (int64_t{c.num_v_heads} * c.head_k_dim > std::numeric_limits<int32_t>::max()) {
    bad_field("head_k_dim", std::to_string(c.head_k_dim),
              "num_v_heads * head_k_dim (the gate's columns) does not fit in 32 bits");
  }
  if (int64_t{c.num_v_heads} * c.head_v_dim > std::numeric_limits<int32_t>::max()) {
    bad_field("head_v_dim", std::to_string(c.head_v_dim),
              "num_v_heads * head_v_dim does not fit in 32 bits");
  }
  if (c.scale && !(std::isfinite(*c.scale) && *c.scale > 0.0f)) {
    bad_field("scale", std::to_string(*c.scale), "must be finite and positive");
  }
  if (c.lower_bound && !(std::isfinite(*c.lower_bound) && *c.lower_bound < 0.0f)) {
    bad_field("lower_bound", std::to_string(*c.lower_bound),
              "must be finite and negative (fla's default is -5)");
  }
  check_float_dtype("act_dtype", c.act_dtype);
  check_float_dtype("conv_state_dtype", c.conv_state_dtype);
  check_float_dtype("ssm_state_dtype", c.ssm_state_dtype);
}

LayerShapes shapes(const KdaConfig& c) {
  LayerShapes s;
  s.conv_dim = c.conv_dim();
  s.conv_width = c.conv_width;
  s.ssm_shape = {c.num_v_heads, c.head_v_dim, c.head_k_dim};
  s.record_elems = s.conv_dim;
  s.factor_bytes = kernels::kda_factor_layout(c.num_k_heads, c.num_v_heads, c.head_k_dim,
                                              c.head_v_dim, dtype_size(c.act_dtype))
                       .bytes;
  s.act_dtype = c.act_dtype;
  s.conv_dtype = c.conv_state_dtype;
  s.ssm_dtype = c.ssm_state_dtype;
  return s;
}

void check_args(const char* function, const KdaConfig& c, Device dev, const KdaWeights& w,
                const KdaInputs& in, const KdaOutputs& out, int64_t tokens) {
  const int64_t d = c.conv_dim(), hv = c.num_v_heads, k = c.head_k_dim;
  const DType act = c.act_dtype;
  check_view(w.conv_weight,
             {function, "weights.conv_weight", {d, c.conv_width}, act, DTypeRule::kAnyFloat, dev});
  if (c.conv_bias) {
    check_view(w.conv_bias, {function, "weights.conv_bias", {d}, act, DTypeRule::kAnyFloat, dev});
  } else if (!w.conv_bias.empty()) {
    fail(Status::kInvalidArgument, function,
         "weights.conv_bias is given (" + w.conv_bias.describe() +
             ") but the layer config has conv_bias = false");
  }
  check_view(w.A_log, {function, "weights.A_log", {hv}, act, DTypeRule::kAnyFloat, dev});
  check_view(w.dt_bias, {function, "weights.dt_bias", {hv, k}, act, DTypeRule::kAnyFloat, dev});
  check_view(in.mixed_qkv,
             {function, "inputs.mixed_qkv", {tokens, d}, act, DTypeRule::kExact, dev});
  check_view(in.g, {function, "inputs.g", {tokens, hv, k}, act, DTypeRule::kExact, dev});
  check_view(in.b, {function, "inputs.b", {tokens, hv}, act, DTypeRule::kExact, dev});
  check_optional_view(out.conv_out,
                      {function, "outputs.conv_out", {tokens, d}, act, DTypeRule::kExact, dev});
  check_view(
      out.core_out,
      {function, "outputs.core_out", {tokens, hv, c.head_v_dim}, act, DTypeRule::kExact, dev});
}

}  // namespace specstate::detail::kda
