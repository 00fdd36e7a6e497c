#include "gdn_launch.h"

#include "../layers/gdn.h"

namespace specstate::detail::cuda {
namespace {

char* offset_bytes(const TensorView& view, int64_t elems) {
  if (view.empty()) return nullptr;
  return static_cast<char*>(view.data) + elems * static_cast<int64_t>(dtype_size(view.dtype));
}

// The conv kernel's params of a call (shared by the kinds): x is the kind's conv input (the conv
// records hold it).
template <typename Args>
kernels::ConvUpdateParams conv_params(const Args& a, const TensorView& x,
                                      const TensorView& conv_out_view, void** conv_out,
                                      int64_t* out_stride_token, int64_t* out_stride_c) {
  namespace k = specstate::kernels;
  const PoolStorage& s = *a.storage;
  const Layout& lay = s.layout;
  const auto& w = *a.weights;
  const StateIO& io = a.io;
  const int d = static_cast<int>(lay.shapes.conv_dim);
  const int hist = lay.shapes.conv_width - 1;
  const bool user_conv_out = !conv_out_view.empty();
  *conv_out = user_conv_out ? offset_bytes(conv_out_view, a.token0 * conv_out_view.stride[0])
                            : a.scratch.conv_out;
  *out_stride_token = user_conv_out ? conv_out_view.stride[0] : d;
  *out_stride_c = user_conv_out ? conv_out_view.stride[1] : 1;
  const bool replay = io.conv_pending && s.base(Buf::kPending) != nullptr;
  const bool records = s.base(Buf::kRecords) != nullptr;
  const int64_t T_max = lay.max_window;

  k::ConvUpdateParams c;
  c.rows = a.rows;
  c.tokens = a.tokens;
  c.conv_dim = d;
  c.width = lay.shapes.conv_width;
  c.has_bias = !w.conv_bias.empty();
  c.store_replayed = io.store_replayed;
  c.store_final = io.store_final;
  c.write_records = io.write_records && records;
  c.weight_dtype = elem(w.conv_weight.dtype);
  c.bias_dtype = c.has_bias ? elem(w.conv_bias.dtype) : k::ElemType::kF32;
  c.weight_stride_c = w.conv_weight.stride[0];
  c.weight_stride_tap = w.conv_weight.stride[1];
  c.bias_stride = c.has_bias ? w.conv_bias.stride[0] : 0;
  c.weight = w.conv_weight.data;
  c.bias = c.has_bias ? w.conv_bias.data : nullptr;
  if (a.tokens > 0) {
    c.x_stride_token = x.stride[0];
    c.x_stride_c = x.stride[1];
    c.x = offset_bytes(x, a.token0 * x.stride[0]);
    c.out = *conv_out;
    c.out_stride_token = *out_stride_token;
    c.out_stride_c = *out_stride_c;
  }
  c.state_stride_slot =
      s.conv_slot_stride / static_cast<int64_t>(dtype_size(lay.shapes.conv_dtype));
  c.state = s.conv(a.layer, 0);
  c.channels_last = lay.conv_layout == ConvLayout::kChannelsLast;  // committed and snapshots
  if (io.store_tokens) {
    c.snap_stride_t = int64_t{d} * hist;
    c.snap_stride_row = c.snap_stride_t * T_max;
    c.snap = s.snap_conv(a.layer, 0, 0);
  }
  if (records && (replay || c.write_records)) {
    c.records = s.record(a.layer, 0, 0);
    c.record_stride_t = lay.shapes.record_elems;
    c.record_stride_slot = c.record_stride_t * T_max;
  }
  if (replay) {
    c.pending = s.pending() + lay.pending_index(a.layer, 0);
    c.path = s.path();
    c.path_stride_slot = T_max;
  }
  if (a.device_slots) {
    c.slots = a.device_slots;
  } else {
    for (int i = 0; i < a.rows; ++i) c.slot_inline[i] = a.inline_slots[i];
  }
  c.parents = a.device_parents;
  c.varlen = a.varlen;
  return c;
}

// The state-I/O fields every recurrence kernel's params share (same names in each kind's
// struct): rows and slots, committed state, per-token snapshots, store flags, the replay ring.
template <typename Rec, typename Args>
void state_io_params(Rec& r, const Args& a) {
  const PoolStorage& s = *a.storage;
  const Layout& lay = s.layout;
  r.rows = a.rows;
  r.tokens = a.tokens;
  r.store_replayed = a.io.store_replayed;
  r.store_final = a.io.store_final;
  r.state_stride_slot = s.ssm_slot_stride / static_cast<int64_t>(dtype_size(lay.shapes.ssm_dtype));
  r.state = s.ssm(a.layer, 0);
  if (a.io.store_tokens) {
    r.snap_stride_t = lay.ssm_elems;
    r.snap_stride_row = lay.ssm_elems * lay.max_window;
    r.snap = s.snap_ssm(a.layer, 0, 0);
  }
  if (s.base(Buf::kCursor) != nullptr && (a.io.history || a.io.write_records)) {
    // Replay: the layer's cursors and ring (a verify reads its cursor to place its records).
    r.cursor = s.cursor(a.layer, 0);
    r.factors = s.factor(a.layer, 0, 0);
    r.ring = lay.ring;
    r.fold_limit = a.io.fold_limit;
    r.factor_bytes = lay.factor_bytes;
    r.factor_stride_slot = lay.factor_bytes * lay.ring;
    r.fold = a.io.fold;
    r.settled = a.io.settled;
    r.write_factors = a.io.write_records;
  }
  if (a.device_slots) {
    r.slots = a.device_slots;
  } else {
    for (int i = 0; i < a.rows; ++i) r.slot_inline[i] = a.inline_slots[i];
  }
  r.parents = a.device_parents;
  r.varlen = a.varlen;
}

// The fields of a delta-rule kind's launch (GDN and KDA: the same conv over [q | k | v], the same
// recurrence kernel); the gate's fields are the kind's (build_gdn_launch, build_kda_launch).
template <typename Args, typename Config>
GdnLaunch delta_launch(const Args& a, const Config& g, const TensorView& b) {
  namespace k = specstate::kernels;
  const auto& w = *a.weights;
  const auto& in = *a.inputs;
  const auto& out = *a.outputs;
  GdnLaunch L;
  L.act = elem(g.act_dtype);
  L.conv_state = elem(g.conv_state_dtype);
  L.ssm_state = elem(g.ssm_state_dtype);
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
  // The small-batch replay conv (kernels/conv_update.cuh, measured on the H200 with Qwen3-Next TP1
  // rounds): faster from 2 to 16 rows at T >= 4 and from 2 to 8 at T = 2 (one row: the fused
  // launch, or measured slower).
  L.conv.small_rows_lo = 2;
  L.conv.small_rows_hi = 16;
  L.conv.small_rows_short_hi = 8;
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

Mamba2Launch build_mamba2_launch(const Mamba2LaunchArgs& a) {
  namespace k = specstate::kernels;
  const PoolStorage& s = *a.storage;
  const Mamba2Config& m = s.config.mamba;
  const Mamba2Weights& w = *a.weights;
  const Mamba2Inputs& in = *a.inputs;
  const Mamba2Outputs& out = *a.outputs;
  Mamba2Launch L;
  L.act = elem(m.act_dtype);
  L.conv_state = elem(m.conv_state_dtype);
  L.ssm_state = elem(m.ssm_state_dtype);
  void* conv_out = nullptr;
  int64_t conv_out_stride_token = 0, conv_out_stride_c = 1;
  L.conv =
      conv_params(a, in.xBC, out.conv_out, &conv_out, &conv_out_stride_token, &conv_out_stride_c);

  k::Mamba2RecurrenceParams& r = L.rec;
  r.num_heads = m.num_heads;
  r.head_dim = m.head_dim;
  r.d_state = m.d_state;
  r.n_groups = m.n_groups;
  r.d_skip = m.d_skip;
  r.gate = m.gate;
  r.has_dt_min = m.dt_min.has_value();
  r.has_dt_max = m.dt_max.has_value();
  r.dt_min = m.dt_min.value_or(0.0f);
  r.dt_max = m.dt_max.value_or(0.0f);
  r.a_log_dtype = elem(w.A_log.dtype);
  r.dt_bias_dtype = elem(w.dt_bias.dtype);
  r.a_log_stride = w.A_log.stride[0];
  r.dt_bias_stride = w.dt_bias.stride[0];
  r.A_log = w.A_log.data;
  r.dt_bias = w.dt_bias.data;
  if (m.d_skip) {
    r.d_dtype = elem(w.D.dtype);
    r.d_stride = w.D.stride[0];
    r.D = w.D.data;
  }
  if (a.tokens > 0) {
    r.xbc_stride_token = conv_out_stride_token;
    r.xbc_stride_c = conv_out_stride_c;
    r.xbc = conv_out;
    r.dt_stride_token = in.dt.stride[0];
    r.dt_stride_h = in.dt.stride[1];
    r.dt = offset_bytes(in.dt, a.token0 * in.dt.stride[0]);
    if (m.gate) {
      r.z_stride_token = in.z.stride[0];
      r.z_stride_c = in.z.stride[1];
      r.z = offset_bytes(in.z, a.token0 * in.z.stride[0]);
    }
    r.out_stride_token = out.y.stride[0];
    r.out_stride_h = out.y.stride[1];
    r.out_stride_p = out.y.stride[2];
    r.out = offset_bytes(out.y, a.token0 * out.y.stride[0]);
  }
  const auto fl = k::mamba2_factor_layout(m.num_heads, m.head_dim, m.n_groups, m.d_state,
                                          dtype_size(m.act_dtype));
  r.f_dt = fl.dt;
  r.f_dA = fl.dA;
  r.f_x = fl.x;
  r.f_B = fl.B;
  state_io_params(r, a);
  return L;
}

}  // namespace specstate::detail::cuda
