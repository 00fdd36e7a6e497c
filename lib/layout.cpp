#include "layout.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

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

  Layout l;
  l.layers = config.num_layers;
  l.slots = options.num_slots;
  l.max_rows = options.max_rows;
  l.max_window = options.max_window;
  l.strategy = options.strategy;
  l.shapes = layer_shapes(config);
  if (options.strategy == Strategy::kReplay) {
    if (options.replay_ring < 0 ||
        (options.replay_ring > 0 && options.replay_ring / 2 < options.max_window)) {
      throw Error(Status::kInvalidArgument,
                  std::string(fn) +
                      ": options.replay_ring = " + std::to_string(options.replay_ring) +
                      " must be 0 (the default) or at least 2 * max_window = " +
                      std::to_string(2 * int64_t{options.max_window}));
    }
    const int64_t ring =
        options.replay_ring > 0 ? options.replay_ring : default_replay_ring(options.max_window);
    if (ring > std::numeric_limits<int32_t>::max() / 2) {
      throw Error(Status::kInvalidArgument, std::string(fn) +
                                                ": options.replay_ring = " + std::to_string(ring) +
                                                " is too large (at most 2^30 records)");
    }
    l.ring = static_cast<int>(ring);
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

}  // namespace specstate::detail

namespace specstate {

int64_t default_replay_ring(int64_t max_window) noexcept {
  return std::max<int64_t>(2 * max_window, 6);
}

ReplayRingModel replay_ring_model(int max_window, int ring) {
  const int T = max_window;
  if (T < 1) {
    throw Error(Status::kInvalidArgument,
                "replay_ring_model: max_window = " + std::to_string(T) + " must be positive");
  }
  if (ring < 2 * int64_t{T} || ring > (1 << 20)) {
    throw Error(Status::kInvalidArgument,
                "replay_ring_model: ring = " + std::to_string(ring) +
                    " must be in [2 * max_window = " + std::to_string(2 * int64_t{T}) + ", 2^20]");
  }
  // Between two folds the history grows by a per round: a cycle starts at a verify seeing h = a
  // (the round after a fold) and ends at the first verify with h > L = R - 2T (it folds). From a
  // verify seeing h: n[h] verifies to the cycle's end (this one included), s[h] the sum of their
  // histories. h > L: n = 1, s = h; else n = 1 + mean_a n[h + a], s = h + mean_a s[h + a].
  // The sums over a in [1, T] slide with h: O(R) time and memory.
  const int L = ring - 2 * T;
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
