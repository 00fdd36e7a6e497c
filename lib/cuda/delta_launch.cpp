// The launches of the delta-rule kinds (Gated DeltaNet, KDA): the shared conv and GDN's recurrence
// kernel, with the kind's gate.
#include "launch_common.h"

namespace specstate::detail::cuda {
namespace {

// The fields of a delta-rule kind's launch (GDN and KDA: the same conv over [q | k | v], the same
// recurrence kernel); the gate's fields are the kind's (build_gdn_launch, build_kda_launch).
template <typename Args, typename Config>
GdnLaunch delta_launch(const Args& a, const Config& g, const TensorView& b) {
  namespace k = specstate::kernels;
  const auto& w = *a.weights;
  const auto& in = *a.inputs;
  const auto& out = *a.outputs;
  GdnLaunch L;
  set_elem_types(L, g);
  void* conv_out = nullptr;
  int64_t conv_out_stride_token = 0, conv_out_stride_c = 1;
  L.conv = conv_params(a, in.mixed_qkv, out.conv_out, &conv_out, &conv_out_stride_token,
                       &conv_out_stride_c);
  L.user_conv_out = !out.conv_out.empty();
  k::GdnRecurrenceParams& r = L.rec;
  r.num_k_heads = g.num_k_heads;
  r.num_v_heads = g.num_v_heads;
  r.head_k_dim = g.head_k_dim;
  r.head_v_dim = g.head_v_dim;
  r.scale = g.effective_scale();
  r.a_log_dtype = elem(w.A_log.dtype);
  r.dt_bias_dtype = elem(w.dt_bias.dtype);
  r.a_log_stride = w.A_log.stride[0];
  r.dt_bias_stride = w.dt_bias.stride[0];
  r.A_log = w.A_log.data;
  r.dt_bias = w.dt_bias.data;
  if (a.tokens > 0) {
    r.qkv_stride_token = conv_out_stride_token;
    r.qkv_stride_c = conv_out_stride_c;
    r.b_stride_token = b.stride[0];
    r.b_stride_h = b.stride[1];
    r.out_stride_token = out.core_out.stride[0];
    r.out_stride_h = out.core_out.stride[1];
    r.out_stride_v = out.core_out.stride[2];
    r.qkv = conv_out;
    r.b = offset_bytes(b, a.token0 * b.stride[0]);
    r.out = offset_bytes(out.core_out, a.token0 * out.core_out.stride[0]);
  }
  state_io_params(r, a);
  r.state_kv = a.storage->layout.ssm_layout == SsmLayout::kKV;  // committed and snapshots
  return L;
}

template <typename Layout>
void set_factor_offsets(kernels::GdnRecurrenceParams& r, const Layout& fl) {
  r.f_u = fl.u;
  r.f_eg = fl.eg;
  r.f_kf = fl.kf;
  r.f_k = fl.k;
}

}  // namespace

GdnLaunch build_gdn_launch(const GdnLaunchArgs& a) {
  const GdnConfig& g = a.storage->config.gdn;
  GdnLaunch L = delta_launch(a, g, a.inputs->b);
  // The small-batch replay conv (kernels/conv_update.cuh) from 2 to 8 rows at every T (one row:
  // the fused launch, or measured slower; kernels::kGdnConvSmallRowsHi has the rounds), where the
  // lean conv does not take the launch (chains from ConvUpdateParams::lean_rows = 8 rows).
  L.conv.small_rows_lo = kernels::kGdnConvSmallRowsLo;
  L.conv.small_rows_hi = kernels::kGdnConvSmallRowsHi;
  L.conv.small_rows_short_hi = kernels::kGdnConvSmallRowsShortHi;
  kernels::GdnRecurrenceParams& r = L.rec;
  if (a.tokens > 0) {
    const TensorView& gate = a.inputs->a;
    r.a_stride_token = gate.stride[0];
    r.a_stride_h = gate.stride[1];
    r.a = offset_bytes(gate, a.token0 * gate.stride[0]);
  }
  set_factor_offsets(r, kernels::gdn_factor_layout(g.num_k_heads, g.num_v_heads, g.head_k_dim,
                                                   g.head_v_dim, dtype_size(g.act_dtype)));
  return L;
}

GdnLaunch build_kda_launch(const KdaLaunchArgs& a) {
  const KdaConfig& c = a.storage->config.kda_layer;
  GdnLaunch L = delta_launch(a, c, a.inputs->b);
  // The small-batch replay conv up to 6 rows at T in 4..7 (8 for Mamba2; kKdaConvSmallRowsHi).
  L.conv.small_rows_hi = kernels::kKdaConvSmallRowsHi;
  // The lean replay conv from 4 rows (8 for GDN and Mamba2; kernels::conv_lean_choice).
  L.conv.lean_rows = kernels::kKdaConvLeanRows;
  kernels::GdnRecurrenceParams& r = L.rec;
  if (!a.weights->dt_bias.empty()) r.dt_bias_stride_k = a.weights->dt_bias.stride[1];
  r.has_lower_bound = c.lower_bound.has_value();
  r.lower_bound = c.lower_bound.value_or(0.0f);
  if (a.tokens > 0) {
    const TensorView& gate = a.inputs->g;  // [tokens, HV, K]
    r.a_stride_token = gate.stride[0];
    r.a_stride_h = gate.stride[1];
    r.a_stride_k = gate.stride[2];
    r.a = offset_bytes(gate, a.token0 * gate.stride[0]);
  }
  set_factor_offsets(r, kernels::kda_factor_layout(c.num_k_heads, c.num_v_heads, c.head_k_dim,
                                                   c.head_v_dim, dtype_size(c.act_dtype)));
  return L;
}

}  // namespace specstate::detail::cuda
