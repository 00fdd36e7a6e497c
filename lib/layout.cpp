#include "layout.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernel_types.h"
#include "layers/gdn.h"
#include "layers/kda.h"
#include "layers/mamba2.h"
#include "specstate/status.h"
#include "strategy/strategy.h"

namespace specstate::detail {

const char* buf_name(Buf buf) noexcept {
  switch (buf) {
    case Buf::kConv:
      return "conv state";
    case Buf::kSsm:
      return "SSM state";
    case Buf::kSnapConv:
      return "snapshot conv scratch";
    case Buf::kSnapSsm:
      return "snapshot SSM scratch";
    case Buf::kRecords:
      return "replay records";
    case Buf::kPending:
      return "replay pending counts";
    case Buf::kPath:
      return "replay paths";
    case Buf::kFactors:
      return "replay factor records";
    case Buf::kCursor:
      return "replay cursors";
    case Buf::kCount:
      break;
  }
  return "unknown buffer";
}

int64_t Layout::workspace_bytes() const noexcept {
  int64_t total = 0;
  for (int b = static_cast<int>(Buf::kSnapConv); b < static_cast<int>(Buf::kCount); ++b) {
    total += bytes[b];
  }
  return total;
}

int64_t Layout::records_bytes_per_slot() const noexcept {
  if (!has(Buf::kRecords)) return 0;
  return int64_t{layers} * max_window * record_bytes + int64_t{layers} * 4 +
         int64_t{max_window} * 4 + int64_t{layers} * ring * factor_bytes + int64_t{layers} * 8;
}

int64_t Layout::scratch_bytes_per_row() const noexcept {
  if (!has(Buf::kSnapSsm)) return 0;
  return int64_t{layers} * max_window * (conv_bytes + ssm_bytes);
}

std::array<int64_t, 2> Layout::conv_inner_strides() const noexcept {
  const int64_t H = shapes.conv_width - 1;
  if (conv_layout == ConvLayout::kChannelsLast) return {1, shapes.conv_dim};
  return {H, 1};
}

std::vector<int64_t> Layout::ssm_inner_strides() const {
  const auto& st = shapes.ssm_shape;
  std::vector<int64_t> strides(st.size());
  int64_t stride = 1;
  for (std::size_t d = st.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= st[d];
  }
  if (ssm_layout == SsmLayout::kKV && st.size() == 3) {
    // [HV][K][V]: (hv, v, k) at hv * V * K + k * V + v.
    strides[1] = 1;
    strides[2] = st[1];
  }
  return strides;
}

namespace {

// Transposes `count` row-major matrices of rows x cols elements of `esize` bytes each:
// dst[j * rows + i] = src[i * cols + j]. The one permutation every non-canonical layout needs.
void transpose_blocks(const void* src, void* dst, int64_t count, int64_t rows, int64_t cols,
                      std::size_t esize) {
  const auto* in = static_cast<const char*>(src);
  auto* out = static_cast<char*>(dst);
  const int64_t block = rows * cols;
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        std::memcpy(out + (b * block + j * rows + i) * esize,
                    in + (b * block + i * cols + j) * esize, esize);
      }
    }
  }
}

}  // namespace

void Layout::permute_conv(const void* src, void* dst, bool to_layout) const noexcept {
  const std::size_t es = dtype_size(shapes.conv_dtype);
  if (conv_layout == ConvLayout::kChannelsFirst) {
    std::memcpy(dst, src, static_cast<std::size_t>(conv_bytes));
    return;
  }
  const int64_t C = shapes.conv_dim, H = shapes.conv_width - 1;
  // Canonical [C][H] <-> [H][C].
  if (to_layout) {
    transpose_blocks(src, dst, 1, C, H, es);
  } else {
    transpose_blocks(src, dst, 1, H, C, es);
  }
}

void Layout::permute_ssm(const void* src, void* dst, bool to_layout) const noexcept {
  const std::size_t es = dtype_size(shapes.ssm_dtype);
  const auto& st = shapes.ssm_shape;
  if (ssm_layout == SsmLayout::kVK || st.size() != 3) {
    std::memcpy(dst, src, static_cast<std::size_t>(ssm_bytes));
    return;
  }
  // Per head, canonical [V][K] <-> [K][V].
  if (to_layout) {
    transpose_blocks(src, dst, st[0], st[1], st[2], es);
  } else {
    transpose_blocks(src, dst, st[0], st[2], st[1], es);
  }
}

LayerShapes layer_shapes(const ModelConfig& config) {
  switch (config.kind) {
    case LayerKind::kGatedDeltaNet:
      return gdn::shapes(config.gdn);
    case LayerKind::kMamba2:
      return mamba2::shapes(config.mamba);
    case LayerKind::kKda:
      return kda::shapes(config.kda_layer);
  }
  throw Error(Status::kInvalidArgument,
              "ModelConfig: kind = " + std::to_string(static_cast<int>(config.kind)) +
                  " is not a layer kind");
}

int64_t SizeCalc::mul(int64_t a, int64_t b) const {
  if (a < 0 || b < 0 || (a != 0 && b > std::numeric_limits<int64_t>::max() / a)) {
    throw Error(Status::kInvalidArgument, std::string(function) + ": " + field + ": " +
                                              std::to_string(a) + " x " + std::to_string(b) +
                                              " overflows 64-bit sizes");
  }
  return a * b;
}

int64_t SizeCalc::add(int64_t a, int64_t b) const {
  if (a > std::numeric_limits<int64_t>::max() - b) {
    throw Error(Status::kInvalidArgument, std::string(function) + ": " + field + ": " +
                                              std::to_string(a) + " + " + std::to_string(b) +
                                              " overflows 64-bit sizes");
  }
  return a + b;
}

Layout make_layout(const ModelConfig& config, const PoolOptions& options) {
  const char* fn = "StatePool";
  config.validate();
  auto positive = [&](const char* name, int value) {
    if (value <= 0) {
      throw Error(Status::kInvalidArgument, std::string(fn) + ": options." + name + " = " +
                                                std::to_string(value) + " must be positive");
    }
  };
  positive("num_slots", options.num_slots);
  positive("max_rows", options.max_rows);
  positive("max_window", options.max_window);
  auto at_most = [&](const char* name, int value, int bound, const char* bound_name) {
    if (value > bound) {
      throw Error(Status::kInvalidArgument, std::string(fn) + ": options." + name + " = " +
                                                std::to_string(value) + " is larger than " +
                                                bound_name + " = " + std::to_string(bound));
    }
  };
  at_most("max_rows", options.max_rows, PoolOptions::kMaxRows, "PoolOptions::kMaxRows");
  at_most("max_window", options.max_window, PoolOptions::kMaxWindow, "PoolOptions::kMaxWindow");
  if (int64_t{options.max_rows} * options.max_window > PoolOptions::kMaxRoundTokens) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": options.max_rows x options.max_window = " +
                    std::to_string(options.max_rows) + " x " + std::to_string(options.max_window) +
                    " = " + std::to_string(int64_t{options.max_rows} * options.max_window) +
                    " tokens a round, more than PoolOptions::kMaxRoundTokens = " +
                    std::to_string(PoolOptions::kMaxRoundTokens));
  }

  Layout l;
  l.layers = config.num_layers;
  l.slots = options.num_slots;
  l.max_rows = options.max_rows;
  l.max_window = options.max_window;
  l.strategy = options.strategy;
  l.shapes = layer_shapes(config);
  if (options.conv_layout != ConvLayout::kChannelsFirst &&
      options.conv_layout != ConvLayout::kChannelsLast) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": options.conv_layout = " +
                    std::to_string(static_cast<int>(options.conv_layout)) +
                    " is not a ConvLayout (0 = channels_first, 1 = channels_last)");
  }
  if (options.ssm_layout != SsmLayout::kVK && options.ssm_layout != SsmLayout::kKV) {
    throw Error(Status::kInvalidArgument, std::string(fn) + ": options.ssm_layout = " +
                                              std::to_string(static_cast<int>(options.ssm_layout)) +
                                              " is not an SsmLayout (0 = vk, 1 = kv)");
  }
  if (options.ssm_layout == SsmLayout::kKV && !layer_shapes(config).kv_layout) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) +
                    ": options.ssm_layout = kv is for the delta-rule kinds (gated_delta_net, "
                    "kda: [HV][K][V]); a mamba2 state is [nheads][P][N] (vk)");
  }
  l.conv_layout = options.conv_layout;
  l.ssm_layout = options.ssm_layout;
  // Negative ring and fold-row values are refused under every strategy (snapshot pools ignore
  // the fields otherwise).
  if (options.replay_ring < 0) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": options.replay_ring = " + std::to_string(options.replay_ring) +
                    " must be 0 (the default) or at least 2 * max_window = " +
                    std::to_string(2 * int64_t{options.max_window}));
  }
  if (options.replay_fold_rows < 0) {
    throw Error(Status::kInvalidArgument, std::string(fn) + ": options.replay_fold_rows = " +
                                              std::to_string(options.replay_fold_rows) +
                                              " must be 0 (the default) or positive");
  }
  if (options.strategy == Strategy::kReplay) {
    if (options.replay_ring > 0 && options.replay_ring / 2 < options.max_window) {
      throw Error(Status::kInvalidArgument,
                  std::string(fn) +
                      ": options.replay_ring = " + std::to_string(options.replay_ring) +
                      " must be 0 (the default) or at least 2 * max_window = " +
                      std::to_string(2 * int64_t{options.max_window}));
    }
    const int64_t ring = options.replay_ring > 0
                             ? options.replay_ring
                             : default_replay_ring(config.kind, options.max_window);
    if (ring > PoolOptions::kMaxReplayRing) {
      throw Error(Status::kInvalidArgument,
                  std::string(fn) + ": options.replay_ring = " + std::to_string(ring) +
                      " is too large (at most PoolOptions::kMaxReplayRing = " +
                      std::to_string(PoolOptions::kMaxReplayRing) + " records)");
    }
    l.ring = static_cast<int>(ring);
    if (options.replay_fold_rows < 0) {
      throw Error(Status::kInvalidArgument,
                  std::string(fn) + ": options.replay_fold_rows = " +
                      std::to_string(options.replay_fold_rows) + " must be 0 (the default, " +
                      std::to_string(default_replay_fold_rows(config.kind)) + " for " +
                      layer_kind_name(config.kind) + ") or positive");
    }
    l.fold_rows = options.replay_fold_rows > 0 ? options.replay_fold_rows
                                               : default_replay_fold_rows(config.kind);
  }

  SizeCalc c{fn, "conv state (conv_dim x (conv_width - 1))"};
  l.conv_elems = c.mul(l.shapes.conv_dim, l.shapes.conv_width - 1);
  l.conv_bytes = c.mul(l.conv_elems, dtype_size(l.shapes.conv_dtype));
  c.field = "SSM state (product of the state shape)";
  l.ssm_elems = 1;
  for (int64_t extent : l.shapes.ssm_shape) l.ssm_elems = c.mul(l.ssm_elems, extent);
  l.ssm_bytes = c.mul(l.ssm_elems, dtype_size(l.shapes.ssm_dtype));
  c.field = "replay record (elements per token)";
  l.record_bytes = c.mul(l.shapes.record_elems, dtype_size(l.shapes.act_dtype));
  l.factor_bytes = l.shapes.factor_bytes;

  c.field = "committed conv state (num_layers x num_slots x conv state)";
  const int64_t layer_slots = c.mul(l.layers, l.slots);
  l.bytes[static_cast<int>(Buf::kConv)] = c.mul(layer_slots, l.conv_bytes);
  c.field = "committed SSM state (num_layers x num_slots x SSM state)";
  l.bytes[static_cast<int>(Buf::kSsm)] = c.mul(layer_slots, l.ssm_bytes);
  c.field = "committed state (conv + SSM)";
  c.add(l.bytes[static_cast<int>(Buf::kConv)], l.bytes[static_cast<int>(Buf::kSsm)]);

  strategy_workspace(l);
  // The total must fit too (callers add it up).
  c.field = "total pool bytes";
  int64_t total = 0;
  for (int64_t b : l.bytes) total = c.add(total, b);
  return l;
}

int round_fold_limit(const Layout& layout, int rows) {
  return layout.ring > 0
             ? kernels::replay_fold_limit(layout.max_window, layout.ring, rows, layout.fold_rows)
             : 0;
}

}  // namespace specstate::detail

namespace specstate {

namespace {
void check_default_ring_window(int64_t max_window) {
  if (max_window < 1 || max_window > PoolOptions::kMaxWindow) {
    throw Error(Status::kInvalidArgument,
                "default_replay_ring: max_window = " + std::to_string(max_window) +
                    " must be in [1, " + std::to_string(PoolOptions::kMaxWindow) + "]");
  }
}
}  // namespace

int64_t default_replay_ring(int64_t max_window) {
  check_default_ring_window(max_window);
  return std::max<int64_t>(2 * max_window, 6);
}

namespace {
void check_kind(const char* fn, LayerKind kind) {
  if (kind != LayerKind::kGatedDeltaNet && kind != LayerKind::kMamba2 && kind != LayerKind::kKda) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": kind = " + std::to_string(static_cast<int>(kind)) +
                    " is not a LayerKind (0 = gated_delta_net, 1 = mamba2, 2 = kda)");
  }
}
}  // namespace

int64_t default_replay_ring(LayerKind kind, int64_t max_window) {
  check_kind("default_replay_ring", kind);
  check_default_ring_window(max_window);
  // From T = 2, a ring of 3T (at least 8) where the longest replay it allows (history L + T =
  // 2T, then the window: 3T tokens) fits the verify's chunk (16 tokens: up to T = 5). Gated
  // DeltaNet: measured on the H200 (T = 2, R = 8 against 6: 0.959 / 0.989 / 0.973x at B = 8 /
  // 32 / 128; T = 4, R = 12 against 8: 0.929-0.985x from B = 16). Mamba2: measured on the H100
  // once its verify ran two channels a thread (docs/cuda.md, "Replay rings of Mamba2 and KDA";
  // Nemotron-H rounds, T = 4, R = 12 against 8: 0.973 / 0.984 / 0.916 / 0.942 / 0.957x at B = 8 /
  // 16 / 32 / 64 / 128; T = 2, R = 8 against 6: 0.966 / 0.971 / 0.986x at B = 8 / 32 / 128; T = 8,
  // R = 20 or 24, past the chunk, 1.01-1.10x). KDA: a ring of at most max(2T, 8): its records
  // carry e^g as a K-vector per value head (about 1.6% of the state each at K = V = 128), so 3T
  // at T = 4 would be 27% of the committed state (issue 16's budget is 20%); R = 8 at T = 2
  // against 6: 0.974 / 0.955 / 0.954x at B = 8 / 32 / 128 (Kimi-Linear rounds, H100). Below
  // 8 rows a round folds at the small limit whatever R (replay_fold_limit): B = 1..4 unchanged.
  const bool kda = kind == LayerKind::kKda;
  const int64_t chunk = kind == LayerKind::kMamba2 ? kernels::kMamba2Chunk : kernels::kGdnChunk;
  if (max_window >= 2 && 3 * max_window <= chunk)
    return std::max<int64_t>(kda ? 2 * max_window : 3 * max_window, 8);
  return default_replay_ring(max_window);
}

int default_replay_fold_rows(LayerKind kind) {
  check_kind("default_replay_fold_rows", kind);
  return kind == LayerKind::kMamba2 ? 1 : kernels::kFoldFullRows;
}

namespace {
void check_ring_args(const char* fn, int max_window, int64_t ring, int rows, int fold_rows) {
  if (max_window < 1) {
    throw Error(Status::kInvalidArgument, std::string(fn) + ": max_window = " +
                                              std::to_string(max_window) + " must be positive");
  }
  if (ring < 2 * int64_t{max_window} || ring > PoolOptions::kMaxReplayRing) {
    throw Error(
        Status::kInvalidArgument,
        std::string(fn) + ": ring = " + std::to_string(ring) +
            " must be in [2 * max_window = " + std::to_string(2 * int64_t{max_window}) +
            ", PoolOptions::kMaxReplayRing = " + std::to_string(PoolOptions::kMaxReplayRing) + "]");
  }
  if (rows < 1) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": rows = " + std::to_string(rows) + " must be positive");
  }
  if (fold_rows < 0) {
    throw Error(Status::kInvalidArgument, std::string(fn) +
                                              ": fold_rows = " + std::to_string(fold_rows) +
                                              " must be 0 (the default) or positive");
  }
}
}  // namespace

int replay_fold_limit(int max_window, int ring, int rows, int fold_rows) {
  check_ring_args("replay_fold_limit", max_window, ring, rows, fold_rows);
  return kernels::replay_fold_limit(max_window, ring, rows, fold_rows);
}

ReplayRingModel replay_ring_model(int max_window, int ring) {
  return replay_ring_model(max_window, ring, kernels::kFoldFullRows, 0);
}

ReplayRingModel replay_ring_model(int max_window, int ring, int rows, int fold_rows) {
  check_ring_args("replay_ring_model", max_window, ring, rows, fold_rows);
  const int T = max_window;
  const int L = kernels::replay_fold_limit(T, ring, rows, fold_rows);
  // Between two folds the history grows by a per round: a cycle starts at a verify seeing h = a
  // (the round after a fold) and ends at the first verify with h > L, the fold limit. From a
  // verify seeing h: n[h] verifies to the cycle's end (this one included), s[h] the sum of their
  // histories. h > L: n = 1, s = h; else n = 1 + mean_a n[h + a], s = h + mean_a s[h + a].
  // The sums over a in [1, T] slide with h: O(R) time and memory.
  const auto size = static_cast<std::size_t>(L + 2 * T + 2);
  std::vector<double> n(size, 0.0), s(size, 0.0);
  double wn = 0, ws = 0;  // sums of n[h + 1 .. h + T] and s[h + 1 .. h + T]
  for (int h = L + T; h >= 1; --h) {
    wn += n[h + 1] - n[h + 1 + T];
    ws += s[h + 1] - s[h + 1 + T];
    n[h] = h > L ? 1.0 : 1.0 + wn / T;
    s[h] = h > L ? double(h) : h + ws / T;
  }
  double cycle = 0, sum = 0;
  for (int a = 1; a <= T; ++a) {
    cycle += n[a] / T;
    sum += s[a] / T;
  }
  return ReplayRingModel{1.0 / cycle, sum / cycle};
}

}  // namespace specstate
