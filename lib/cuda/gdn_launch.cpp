#include "gdn_launch.h"

#include "../layers/gdn.h"

namespace specstate::detail::cuda {
namespace {

char* offset_bytes(const TensorView& view, int64_t elems) {
  if (view.empty()) return nullptr;
  return static_cast<char*>(view.data) + elems * static_cast<int64_t>(dtype_size(view.dtype));
}

}  // namespace

GdnLaunch build_gdn_launch(const GdnLaunchArgs& a) {
  namespace k = specstate::kernels;
  const PoolStorage& s = *a.storage;
  const Layout& lay = s.layout;
  const GdnConfig& g = s.config.gdn;
  const GdnWeights& w = *a.weights;
  const GdnInputs& in = *a.inputs;
  const GdnOutputs& out = *a.outputs;
  const StateIO& io = a.io;
  const int d = static_cast<int>(g.conv_dim());
  const int hist = g.conv_width - 1;
  const bool user_conv_out = !out.conv_out.empty();
  void* conv_out = user_conv_out ? offset_bytes(out.conv_out, a.token0 * out.conv_out.stride[0])
                                 : a.scratch.conv_out;
  const int64_t conv_out_stride_token = user_conv_out ? out.conv_out.stride[0] : d;
  const int64_t conv_out_stride_c = user_conv_out ? out.conv_out.stride[1] : 1;
  const bool replay = io.replay && s.base(Buf::kPending) != nullptr;
  const bool records = s.base(Buf::kRecords) != nullptr;
  const int64_t T_max = lay.max_window;

  GdnLaunch L;
  L.act = elem(g.act_dtype);
  L.conv_state = elem(g.conv_state_dtype);
  L.ssm_state = elem(g.ssm_state_dtype);

  k::ConvUpdateParams& c = L.conv;
  c.rows = a.rows;
  c.tokens = a.tokens;
  c.conv_dim = d;
  c.width = g.conv_width;
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
    c.x_stride_token = in.mixed_qkv.stride[0];
    c.x_stride_c = in.mixed_qkv.stride[1];
    c.x = offset_bytes(in.mixed_qkv, a.token0 * in.mixed_qkv.stride[0]);
    c.out = conv_out;
    c.out_stride_token = conv_out_stride_token;
    c.out_stride_c = conv_out_stride_c;
    c.extra[0] = offset_bytes(in.a, a.token0 * in.a.stride[0]);
    c.extra[1] = offset_bytes(in.b, a.token0 * in.b.stride[0]);
    c.extra_stride_token[0] = in.a.stride[0];
    c.extra_stride_c[0] = in.a.stride[1];
    c.extra_stride_token[1] = in.b.stride[0];
    c.extra_stride_c[1] = in.b.stride[1];
  }
  c.extra_count = 2;
  c.extra_cols = g.num_v_heads;
  c.state_stride_slot = int64_t{d} * hist;
  c.state = s.conv(a.layer, 0);
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
    c.replay_out = a.scratch.replay_qkv;
    c.replay_out_from = g.num_k_heads * g.head_k_dim;
    c.replay_out_stride_t = d;
    c.replay_out_stride_row = int64_t{d} * T_max;
    c.replay_extra = a.scratch.replay_gates;
    c.replay_extra_stride_t = 2 * int64_t{g.num_v_heads};
    c.replay_extra_stride_row = c.replay_extra_stride_t * T_max;
  }

  k::GdnRecurrenceParams& r = L.rec;
  r.rows = a.rows;
  r.tokens = a.tokens;
  r.num_k_heads = g.num_k_heads;
  r.num_v_heads = g.num_v_heads;
  r.head_k_dim = g.head_k_dim;
  r.head_v_dim = g.head_v_dim;
  r.scale = g.effective_scale();
  r.store_replayed = io.store_replayed;
  r.store_final = io.store_final;
  r.a_log_dtype = elem(w.A_log.dtype);
  r.dt_bias_dtype = elem(w.dt_bias.dtype);
  r.a_log_stride = w.A_log.stride[0];
  r.dt_bias_stride = w.dt_bias.stride[0];
  r.A_log = w.A_log.data;
  r.dt_bias = w.dt_bias.data;
  if (a.tokens > 0) {
    r.qkv_stride_token = conv_out_stride_token;
    r.qkv_stride_c = conv_out_stride_c;
    r.a_stride_token = in.a.stride[0];
    r.a_stride_h = in.a.stride[1];
    r.b_stride_token = in.b.stride[0];
    r.b_stride_h = in.b.stride[1];
    r.out_stride_token = out.core_out.stride[0];
    r.out_stride_h = out.core_out.stride[1];
    r.out_stride_v = out.core_out.stride[2];
    r.qkv = conv_out;
    r.a = offset_bytes(in.a, a.token0 * in.a.stride[0]);
    r.b = offset_bytes(in.b, a.token0 * in.b.stride[0]);
    r.out = offset_bytes(out.core_out, a.token0 * out.core_out.stride[0]);
  }
  r.state_stride_slot = lay.ssm_elems;
  r.state = s.ssm(a.layer, 0);
  if (io.store_tokens) {
    r.snap_stride_t = lay.ssm_elems;
    r.snap_stride_row = lay.ssm_elems * T_max;
    r.snap = s.snap_ssm(a.layer, 0, 0);
  }
  if (replay) {
    r.pending = c.pending;
    r.replay_qkv = a.scratch.replay_qkv;
    r.replay_qkv_stride_t = d;
    r.replay_qkv_stride_row = int64_t{d} * T_max;
    r.replay_gates = a.scratch.replay_gates;
    r.replay_gates_stride_t = 2 * int64_t{g.num_v_heads};
    r.replay_gates_stride_row = r.replay_gates_stride_t * T_max;
  }

  if (a.device_slots) {
    c.slots = r.slots = a.device_slots;
  } else {
    for (int i = 0; i < a.rows; ++i) c.slot_inline[i] = r.slot_inline[i] = a.inline_slots[i];
  }
  c.parents = r.parents = a.device_parents;
  return L;
}

}  // namespace specstate::detail::cuda
