#include "gdn.h"

#include <cmath>
#include <limits>
#include <string>

#include "../validate.h"
#include "delta.h"
#include "kernels/kernel_types.h"
#include "specstate/status.h"

namespace specstate::detail::gdn {

void validate(const GdnConfig& g) {
  delta::validate_common(g, "gdn", 2 * int64_t{g.num_v_heads}, "gate inputs");
}

LayerShapes shapes(const GdnConfig& g) {
  return delta::shapes_common(
      g, kernels::gdn_factor_layout(g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim,
                                    dtype_size(g.act_dtype))
             .bytes);
}

void check_args(const char* function, const GdnConfig& g, Device dev, const GdnWeights& w,
                const GdnInputs& in, const GdnOutputs& out, int64_t tokens) {
  const int64_t d = g.conv_dim(), hv = g.num_v_heads;
  const DType act = g.act_dtype;
  check_conv_weights(function, d, g.conv_width, g.conv_bias, w.conv_weight, w.conv_bias, act, dev);
  check_view(w.A_log, {function, "weights.A_log", {hv}, act, DTypeRule::kAnyFloat, dev});
  check_view(w.dt_bias, {function, "weights.dt_bias", {hv}, act, DTypeRule::kAnyFloat, dev});
  check_view(in.mixed_qkv,
             {function, "inputs.mixed_qkv", {tokens, d}, act, DTypeRule::kExact, dev});
  check_view(in.a, {function, "inputs.a", {tokens, hv}, act, DTypeRule::kExact, dev});
  check_view(in.b, {function, "inputs.b", {tokens, hv}, act, DTypeRule::kExact, dev});
  check_optional_view(out.conv_out,
                      {function, "outputs.conv_out", {tokens, d}, act, DTypeRule::kExact, dev});
  check_view(
      out.core_out,
      {function, "outputs.core_out", {tokens, hv, g.head_v_dim}, act, DTypeRule::kExact, dev});
}

}  // namespace specstate::detail::gdn
