// Internal: what the delta-rule layer kinds (GDN: gdn.cpp, KDA: kda.cpp) share in their traits:
// the config checks of the fields both configs have, and the state and record shapes. The kinds
// differ in the gate (GDN: a [HV] per token; KDA: g [HV, K]) and in the factor record's e^g.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "../layout.h"
#include "../validate.h"
#include "specstate/status.h"

namespace specstate::detail::delta {

// "ModelConfig: <kind>.<field> = <value>: <why>" as Error(kInvalidArgument).
[[noreturn]] inline void bad_field(const char* kind, const char* field, const std::string& value,
                                   const std::string& why) {
  throw Error(Status::kInvalidArgument,
              std::string("ModelConfig: ") + kind + "." + field + " = " + value + ": " + why);
}

// The checks of the fields every delta-rule config has (heads, dims, width, scale, dtypes).
// `gate_cols`: the per-token columns the kind's gate inputs add to conv_dim, named `gate_name` in
// messages (GDN: a and b, 2 HV, "gate inputs"; KDA: b, HV, "b"; KDA's g, a tensor of its own, is
// checked by kda.cpp).
template <typename Config>
void validate_common(const Config& c, const char* kind, int64_t gate_cols, const char* gate_name) {
  const auto positive = [&](const char* field, int value) {
    if (value <= 0) bad_field(kind, field, std::to_string(value), "must be positive");
  };
  positive("num_k_heads", c.num_k_heads);
  positive("num_v_heads", c.num_v_heads);
  positive("head_k_dim", c.head_k_dim);
  positive("head_v_dim", c.head_v_dim);
  if (c.num_v_heads % c.num_k_heads != 0) {
    bad_field(kind, "num_v_heads", std::to_string(c.num_v_heads),
              "must be a multiple of num_k_heads = " + std::to_string(c.num_k_heads));
  }
  if (c.conv_width < 2) {
    bad_field(kind, "conv_width", std::to_string(c.conv_width), "must be >= 2");
  }
  // Every per-token extent must fit an int (kernels and views index channels with int). Computed
  // in 128 bits: with every field near INT_MAX the 64-bit sum (c.conv_dim()) would overflow.
  // The value heads' extent first, then the whole token's columns (conv_dim and the gate
  // inputs), naming the larger factor of the largest term (the gate inputs: num_v_heads): the
  // check named head_k_dim for a head_v_dim near 2^31, with a sum that left out the gate
  // columns it compared.
  const __int128 qk = 2 * __int128{c.num_k_heads} * c.head_k_dim;
  const __int128 vv = __int128{c.num_v_heads} * c.head_v_dim;
  const auto larger = [&](const char* a, int va, const char* b, int vb) {
    return va > vb ? std::make_pair(a, va) : std::make_pair(b, vb);
  };
  if (vv > std::numeric_limits<int32_t>::max()) {
    const auto [field, value] = larger("num_v_heads", c.num_v_heads, "head_v_dim", c.head_v_dim);
    bad_field(kind, field, std::to_string(value),
              "num_v_heads * head_v_dim = " + int128_text(vv) + " does not fit in 32 bits");
  }
  if (qk + vv + gate_cols > std::numeric_limits<int32_t>::max()) {
    const auto [field, value] =
        gate_cols > qk && gate_cols > vv
            ? std::make_pair("num_v_heads", c.num_v_heads)
            : (qk >= vv ? larger("num_k_heads", c.num_k_heads, "head_k_dim", c.head_k_dim)
                        : larger("num_v_heads", c.num_v_heads, "head_v_dim", c.head_v_dim));
    bad_field(kind, field, std::to_string(value),
              std::string("conv_dim + ") + gate_name +
                  " (a token's columns) = 2 * num_k_heads * head_k_dim + "
                  "num_v_heads * head_v_dim + " +
                  std::to_string(gate_cols) + " = " + int128_text(qk + vv + gate_cols) +
                  " does not fit in 32 bits");
  }
  if (c.scale && !(std::isfinite(*c.scale) && *c.scale > 0.0f)) {
    bad_field(kind, "scale", float_text(*c.scale), "must be finite and positive");
  }
  for (const auto& [field, dtype] : {std::pair<const char*, DType>{"act_dtype", c.act_dtype},
                                     {"conv_state_dtype", c.conv_state_dtype},
                                     {"ssm_state_dtype", c.ssm_state_dtype}}) {
    if (dtype != DType::kF32 && dtype != DType::kBF16) {
      bad_field(kind, field, detail::dtype_value_text(dtype), "must be f32 or bf16");
    }
  }
}

// conv window [conv_dim, W-1]; SSM state [HV, V, K]; a conv record is one token's conv input
// (mixed_qkv, act dtype); `factor_bytes`: the kind's factor record.
template <typename Config>
LayerShapes shapes_common(const Config& c, int64_t factor_bytes) {
  LayerShapes s;
  s.conv_dim = c.conv_dim();
  s.conv_width = c.conv_width;
  s.ssm_shape = {c.num_v_heads, c.head_v_dim, c.head_k_dim};
  s.record_elems = s.conv_dim;
  s.factor_bytes = factor_bytes;
  s.act_dtype = c.act_dtype;
  s.conv_dtype = c.conv_state_dtype;
  s.ssm_dtype = c.ssm_state_dtype;
  s.kv_layout = true;
  return s;
}

}  // namespace specstate::detail::delta
