// Internal: what every kind's launch builder (delta_launch.cpp, mamba2_launch.cpp) shares: the
// conv kernel's params of a call and the state-I/O fields of the recurrence kernels' params.
#pragma once

#include "launch.h"

namespace specstate::detail::cuda {

// A launch's element types: the config's activation, conv state and SSM state dtypes.
template <typename Launch, typename Config>
void set_elem_types(Launch& L, const Config& c) {
  L.act = elem(c.act_dtype);
  L.conv_state = elem(c.conv_state_dtype);
  L.ssm_state = elem(c.ssm_state_dtype);
}

// The row fields every kernel's params share (same names in each struct): the rows' slots (device
// or inline), a tree's parents, variable windows' offsets.
template <typename Params, typename Args>
void set_row_fields(Params& p, const Args& a) {
  if (a.device_slots) {
    p.slots = a.device_slots;
  } else {
    for (int i = 0; i < a.rows; ++i) p.slot_inline[i] = a.inline_slots[i];
  }
  p.parents = a.device_parents;
  p.varlen = a.varlen;
}

inline char* offset_bytes(const TensorView& view, int64_t elems) {
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
  set_row_fields(c, a);
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
  set_row_fields(r, a);
}

}  // namespace specstate::detail::cuda
