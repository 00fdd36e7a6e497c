#include "mamba2.h"

#include <cmath>
#include <limits>
#include <string>

#include "../validate.h"
#include "kernels/kernel_types.h"
#include "specstate/status.h"

namespace specstate::detail::mamba2 {

namespace {
[[noreturn]] void bad_field(const char* field, const std::string& value, const std::string& why) {
  throw Error(Status::kInvalidArgument,
              std::string("ModelConfig: mamba.") + field + " = " + value + ": " + why);
}
void check_positive(const char* field, int value) {
  if (value <= 0) bad_field(field, std::to_string(value), "must be positive");
}
void check_float_dtype(const char* field, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    bad_field(field, detail::dtype_value_text(dtype), "must be f32 or bf16");
  }
}
}  // namespace

void validate(const Mamba2Config& m) {
  check_positive("num_heads", m.num_heads);
  check_positive("head_dim", m.head_dim);
  check_positive("d_state", m.d_state);
  check_positive("n_groups", m.n_groups);
  if (m.num_heads % m.n_groups != 0) {
    bad_field("num_heads", std::to_string(m.num_heads),
              "must be a multiple of n_groups = " + std::to_string(m.n_groups));
  }
  if (m.conv_width < 2) bad_field("conv_width", std::to_string(m.conv_width), "must be >= 2");
  // Every per-token extent must fit an int (kernels and views index channels with int).
  // (In 128 bits: with every field near INT_MAX the 64-bit sum, m.conv_dim(), would overflow.)
  // Naming the larger factor of the larger of conv_dim's two terms, with the sum it compares
  // (dt's num_heads columns included): the check named d_state for a head_dim near 2^31.
  const __int128 x = __int128{m.num_heads} * m.head_dim;
  const __int128 bc = 2 * __int128{m.n_groups} * m.d_state;
  if (x + bc + m.num_heads > std::numeric_limits<int32_t>::max()) {
    const auto larger = [](const char* a, int va, const char* b, int vb) {
      return va > vb ? std::make_pair(a, va) : std::make_pair(b, vb);
    };
    const auto [field, value] = x >= bc ? larger("num_heads", m.num_heads, "head_dim", m.head_dim)
                                        : larger("n_groups", m.n_groups, "d_state", m.d_state);
    bad_field(field, std::to_string(value),
              "conv_dim + dt (a token's columns) = num_heads * head_dim + 2 * n_groups * d_state + "
              "num_heads = " +
                  int128_text(x + bc + m.num_heads) + " does not fit in 32 bits");
  }
  if (int64_t{m.head_dim} * m.d_state > std::numeric_limits<int32_t>::max()) {
    bad_field("d_state", std::to_string(m.d_state), "head_dim * d_state does not fit in 32 bits");
  }
  if (m.dt_min && !(std::isfinite(*m.dt_min) && *m.dt_min >= 0.0f)) {
    bad_field("dt_min", float_text(*m.dt_min), "must be finite and >= 0");
  }
  if (m.dt_max && !(*m.dt_max > 0.0f)) {  // +inf is allowed (no upper clamp); NaN is not
    bad_field("dt_max", float_text(*m.dt_max), "must be positive");
  }
  if (m.dt_min && m.dt_max && !(*m.dt_min <= *m.dt_max)) {
    bad_field("dt_min", float_text(*m.dt_min), "must be <= dt_max = " + float_text(*m.dt_max));
  }
  check_float_dtype("act_dtype", m.act_dtype);
  check_float_dtype("conv_state_dtype", m.conv_state_dtype);
  check_float_dtype("ssm_state_dtype", m.ssm_state_dtype);
}

LayerShapes shapes(const Mamba2Config& m) {
  LayerShapes s;
  s.conv_dim = m.conv_dim();
  s.conv_width = m.conv_width;
  s.ssm_shape = {m.num_heads, m.head_dim, m.d_state};
  s.record_elems = s.conv_dim;
  s.factor_bytes = kernels::mamba2_factor_layout(m.num_heads, m.head_dim, m.n_groups, m.d_state,
                                                 dtype_size(m.act_dtype))
                       .bytes;
  s.act_dtype = m.act_dtype;
  s.conv_dtype = m.conv_state_dtype;
  s.ssm_dtype = m.ssm_state_dtype;
  return s;
}

void check_args(const char* function, const Mamba2Config& m, Device dev, const Mamba2Weights& w,
                const Mamba2Inputs& in, const Mamba2Outputs& out, int64_t tokens) {
  const int64_t d = m.conv_dim(), h = m.num_heads, p = m.head_dim;
  const DType act = m.act_dtype;
  check_conv_weights(function, d, m.conv_width, m.conv_bias, w.conv_weight, w.conv_bias, act, dev);
  check_view(w.A_log, {function, "weights.A_log", {h}, act, DTypeRule::kAnyFloat, dev});
  check_view(w.dt_bias, {function, "weights.dt_bias", {h}, act, DTypeRule::kAnyFloat, dev});
  check_flagged(w.D, {function, "weights.D", {h}, act, DTypeRule::kAnyFloat, dev}, m.d_skip,
                "d_skip");
  check_view(in.xBC, {function, "inputs.xBC", {tokens, d}, act, DTypeRule::kExact, dev});
  check_view(in.dt, {function, "inputs.dt", {tokens, h}, act, DTypeRule::kExact, dev});
  check_flagged(in.z, {function, "inputs.z", {tokens, h * p}, act, DTypeRule::kExact, dev}, m.gate,
                "gate");
  check_optional_view(out.conv_out,
                      {function, "outputs.conv_out", {tokens, d}, act, DTypeRule::kExact, dev});
  check_view(out.y, {function, "outputs.y", {tokens, h, p}, act, DTypeRule::kExact, dev});
}

}  // namespace specstate::detail::mamba2
