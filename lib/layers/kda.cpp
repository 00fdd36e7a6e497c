#include "kda.h"

#include <cmath>
#include <limits>
#include <string>

#include "../validate.h"
#include "delta.h"
#include "kernels/kernel_types.h"
#include "specstate/status.h"

namespace specstate::detail::kda {

void validate(const KdaConfig& c) {
  delta::validate_common(c, "kda", int64_t{c.num_v_heads}, "b");
  // g's columns, a tensor of their own, named by the larger factor (head_k_dim was named for a
  // num_v_heads of 65536 beside head_k_dim 32768).
  const int64_t g_cols = int64_t{c.num_v_heads} * c.head_k_dim;
  if (g_cols > std::numeric_limits<int32_t>::max()) {
    const bool heads = c.num_v_heads > c.head_k_dim;
    delta::bad_field("kda", heads ? "num_v_heads" : "head_k_dim",
                     std::to_string(heads ? c.num_v_heads : c.head_k_dim),
                     "num_v_heads * head_k_dim (g's columns) = " + std::to_string(g_cols) +
                         " does not fit in 32 bits");
  }
  if (c.lower_bound && !(std::isfinite(*c.lower_bound) && *c.lower_bound < 0.0f)) {
    delta::bad_field("kda", "lower_bound", float_text(*c.lower_bound),
                     "must be finite and negative (fla's default is -5)");
  }
}

LayerShapes shapes(const KdaConfig& c) {
  return delta::shapes_common(
      c, kernels::kda_factor_layout(c.num_k_heads, c.num_v_heads, c.head_k_dim, c.head_v_dim,
                                    dtype_size(c.act_dtype))
             .bytes);
}

void check_args(const char* function, const KdaConfig& c, Device dev, const KdaWeights& w,
                const KdaInputs& in, const KdaOutputs& out, int64_t tokens) {
  const int64_t d = c.conv_dim(), hv = c.num_v_heads, k = c.head_k_dim;
  const DType act = c.act_dtype;
  check_conv_weights(function, d, c.conv_width, c.conv_bias, w.conv_weight, w.conv_bias, act, dev);
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
