// Internal: where everything of a pool lives. One value computed once from the model config, the
// pool options and the strategy (DESIGN.md section 4); the only place that knows where slot s of
// layer l, snapshot (row, t) or record (slot, t) is. Every size is overflow-checked when the
// layout is made, so offsets computed from it never wrap.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "specstate/config.h"
#include "specstate/dtype.h"

namespace specstate::detail {

// A float field's stored value for a message (%.9g: -1.00000001e-10 for a float32 set from
// -1e-10, not std::to_string's -0.000000; nan, inf).
inline std::string float_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// A 128-bit integer's decimal text (sizes checked in 128 bits before they are trusted in 64).
inline std::string int128_text(__int128 v) {
  const bool negative = v < 0;
  unsigned __int128 u = negative ? -static_cast<unsigned __int128>(v) : v;
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  } while (u > 0);
  return negative ? "-" + s : s;
}

// The buffers a pool may own. A strategy decides which of the workspace buffers exist (a size of
// zero means absent).
enum class Buf : int {
  kConv = 0,  // committed conv   [L][slots][conv_dim][W-1]          conv dtype
  kSsm,       // committed SSM    [L][slots][state...]               ssm dtype
  kSnapConv,  // snapshot conv    [L][max_rows][max_window][conv_dim][W-1]
  kSnapSsm,   // snapshot SSM     [L][max_rows][max_window][state...]
  kRecords,   // replay conv records [L][slots][max_window][conv_dim] act dtype (window inputs)
  kPending,   // replay: pending conv steps per layer and slot, int32 [L][slots]
  kPath,      // replay: window index of each pending conv step, int32 [slots][max_window]
  kFactors,   // replay factor ring [L][slots][R][factor record] (layer kind's layout)
  kCursor,    // replay ring cursors, int32 [L][slots][2] = (base, h)
  kCount
};
const char* buf_name(Buf buf) noexcept;

// Shapes of one layer kind, from its traits (lib/layers/<kind>.h).
struct LayerShapes {
  int64_t conv_dim = 0;
  int conv_width = 0;
  std::vector<int64_t> ssm_shape;  // one slot's SSM state, e.g. {HV, V, K}
  int64_t record_elems = 0;        // one token's conv record: its conv input (act dtype)
  int64_t factor_bytes = 0;        // one token's factor record (16-byte multiple)
  DType act_dtype = DType::kF32;
  DType conv_dtype = DType::kF32;
  DType ssm_dtype = DType::kF32;
  // The kind's state may be stored with its last two dimensions swapped (SsmLayout::kKV: the
  // delta-rule kinds' [HV][K][V]); a Mamba2 state is [nheads][P][N] only.
  bool kv_layout = false;
};

struct Layout {
  int layers = 0;
  int slots = 0;
  int max_rows = 0;
  int max_window = 0;
  int ring = 0;       // replay: R factor records per slot and layer (0 under snapshot)
  int fold_rows = 0;  // replay: PoolOptions::replay_fold_rows, 0 resolved to
                      // default_replay_fold_rows(kind) (replay_fold_limit)
  Strategy strategy = Strategy::kSnapshot;
  bool caller_committed = false;  // the committed state lives in caller-owned views
  // The element order of every slot's state, committed and snapshot scratch (PoolOptions).
  ConvLayout conv_layout = ConvLayout::kChannelsFirst;
  SsmLayout ssm_layout = SsmLayout::kVK;
  LayerShapes shapes;

  int64_t conv_elems = 0;  // one slot, one layer: conv_dim * (W-1)
  int64_t ssm_elems = 0;   // one slot, one layer
  int64_t conv_bytes = 0;  // of one slot-layer conv window
  int64_t ssm_bytes = 0;
  int64_t record_bytes = 0;                                    // one token's conv record
  int64_t factor_bytes = 0;                                    // one token's factor record
  std::array<int64_t, static_cast<int>(Buf::kCount)> bytes{};  // whole buffers

  bool has(Buf b) const noexcept { return bytes[static_cast<int>(b)] > 0; }
  int64_t size(Buf b) const noexcept { return bytes[static_cast<int>(b)]; }

  // Byte offsets into their buffers.
  int64_t conv_offset(int layer, int slot) const noexcept {
    return (int64_t{layer} * slots + slot) * conv_bytes;
  }
  int64_t ssm_offset(int layer, int slot) const noexcept {
    return (int64_t{layer} * slots + slot) * ssm_bytes;
  }
  int64_t snap_index(int layer, int row, int t) const noexcept {
    return (int64_t{layer} * max_rows + row) * max_window + t;
  }
  int64_t snap_conv_offset(int layer, int row, int t) const noexcept {
    return snap_index(layer, row, t) * conv_bytes;
  }
  int64_t snap_ssm_offset(int layer, int row, int t) const noexcept {
    return snap_index(layer, row, t) * ssm_bytes;
  }
  int64_t record_offset(int layer, int slot, int t) const noexcept {
    return ((int64_t{layer} * slots + slot) * max_window + t) * record_bytes;
  }
  int64_t factor_offset(int layer, int slot, int pos) const noexcept {
    return ((int64_t{layer} * slots + slot) * ring + pos) * factor_bytes;
  }
  // Element offsets of the int32 replay bookkeeping.
  int64_t cursor_index(int layer, int slot) const noexcept {
    return (int64_t{layer} * slots + slot) * 2;
  }
  int64_t pending_index(int layer, int slot) const noexcept {
    return int64_t{layer} * slots + slot;
  }
  int64_t path_index(int slot, int i) const noexcept { return int64_t{slot} * max_window + i; }

  int64_t committed_bytes() const noexcept { return size(Buf::kConv) + size(Buf::kSsm); }
  // Everything the strategy needs besides the committed state.
  int64_t workspace_bytes() const noexcept;
  int64_t total_bytes() const noexcept { return committed_bytes() + workspace_bytes(); }
  // What the pool allocates itself: everything but a caller-owned committed state.
  int64_t owned_bytes() const noexcept {
    return caller_committed ? workspace_bytes() : total_bytes();
  }
  // Whether kConv and kSsm are the caller's memory (DESIGN.md section 4): never allocated,
  // zeroed or freed by the pool; PoolStorage addresses them.
  bool owns(Buf b) const noexcept {
    return has(b) && !(caller_committed && (b == Buf::kConv || b == Buf::kSsm));
  }
  // Per slot (all layers): committed bytes and replay records; per row: snapshot scratch.
  int64_t committed_bytes_per_slot() const noexcept {
    return int64_t{layers} * (conv_bytes + ssm_bytes);
  }
  int64_t records_bytes_per_slot() const noexcept;
  int64_t scratch_bytes_per_row() const noexcept;

  // Element strides of one slot's state in its logical index order, which every view of the
  // state keeps: conv (channel, column) of [conv_dim][W-1]; SSM the dims of shapes.ssm_shape.
  std::array<int64_t, 2> conv_inner_strides() const noexcept;
  std::vector<int64_t> ssm_inner_strides() const;
  // Both orders are specstate's own (channels first, [HV][V][K]): states are plain bytes.
  bool canonical() const noexcept {
    return conv_layout == ConvLayout::kChannelsFirst && ssm_layout == SsmLayout::kVK;
  }
  // One slot-layer state copied between the canonical order and this layout's (to_layout:
  // canonical -> layout, else layout -> canonical); src and dst do not overlap.
  void permute_conv(const void* src, void* dst, bool to_layout) const noexcept;
  void permute_ssm(const void* src, void* dst, bool to_layout) const noexcept;
};

// The fold limit of a verify round of `rows` rows on this layout (RoundPlan::fold_limit, set by
// begin_verify; 0 under snapshot): kernels::replay_fold_limit of its window, ring and fold rows.
// The benches build kernel launches with it too, so that they fold as the pool's rounds do.
int round_fold_limit(const Layout& layout, int rows);

// Overflow-checked size arithmetic; the error names the function and the field.
struct SizeCalc {
  const char* function;
  const char* field;
  int64_t mul(int64_t a, int64_t b) const;
  int64_t add(int64_t a, int64_t b) const;
};

LayerShapes layer_shapes(const ModelConfig& config);
// Validates the options' sizes and computes every buffer size with overflow checks; throws
// Error(kInvalidArgument) naming the field whose product overflows.
Layout make_layout(const ModelConfig& config, const PoolOptions& options);

}  // namespace specstate::detail
