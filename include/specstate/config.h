// Layer and model configuration, and the options a state pool is created with.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "specstate/dtype.h"
#include "specstate/kda.h"

namespace specstate {

// One Gated DeltaNet layer (Qwen3-Next). DESIGN.md section 3.
struct GdnConfig {
  int num_k_heads = 16;                   // H: query/key heads
  int num_v_heads = 32;                   // HV: value heads, a multiple of H
  int head_k_dim = 128;                   // K
  int head_v_dim = 128;                   // V
  int conv_width = 4;                     // W: conv taps; the conv state keeps W-1 columns
  std::optional<float> scale;             // query scale; K^-1/2 when unset
  bool conv_bias = false;                 // whether verify/decode take a conv bias
  DType act_dtype = DType::kBF16;         // mixed_qkv, a, b, conv_out, core_out
  DType conv_state_dtype = DType::kBF16;  // committed conv window and its snapshots
  DType ssm_state_dtype = DType::kF32;    // committed SSM state and its snapshots

  // The conv column: 2 * H * K + HV * V. Like every size accessor of the configs, exact for a
  // config that validates, else saturated (INT64_MAX / INT64_MIN where the exact value passes
  // 64 bits), never wrapped.
  int64_t conv_dim() const noexcept;
  float effective_scale() const noexcept;
  // Elements of one SSM state: HV * V * K.
  int64_t ssm_state_elems() const noexcept;
};

// One Mamba2 layer (Nemotron-H, Falcon-H1, Granite-4.0-H): a causal conv over xBC followed by
// the selective state update. DESIGN.md section 3. Defaults: Nemotron-H-8B at TP1.
struct Mamba2Config {
  int num_heads = 128;    // nheads
  int head_dim = 64;      // P: channels per head
  int d_state = 128;      // N: state size per channel
  int n_groups = 8;       // G: groups of B and C; num_heads is a multiple of G
  int conv_width = 4;     // W: conv taps; the conv state keeps W-1 columns
  bool conv_bias = true;  // whether the weights carry a conv bias
  bool d_skip = true;     // y += D[h] * x (weights.D given)
  bool gate = false;      // y *= silu(z) (inputs.z given); Nemotron-H gates later
  // Optional clamp of softplus(dt + dt_bias) from below / above. The engines' decode kernels
  // clamp nothing (unset, the default); mamba_ssm's chunked kernels clamp to the model's
  // time_step_limit; transformers' torch fallback clamps from below at time_step_min (its
  // issue #47246), which otherwise only sets the initialisation range of dt_bias. Give the clamp
  // of the path being matched (examples/python/nemotron_h_spec.py picks its reference's).
  std::optional<float> dt_min;
  std::optional<float> dt_max;
  DType act_dtype = DType::kBF16;         // xBC, dt, z, conv_out, y
  DType conv_state_dtype = DType::kBF16;  // committed conv window and its snapshots
  DType ssm_state_dtype = DType::kF32;    // committed SSM state and its snapshots

  // The xBC column: x (num_heads * P) | B (G * N) | C (G * N).
  int64_t conv_dim() const noexcept;
  // Elements of one SSM state: nheads * P * N (N contiguous).
  int64_t ssm_state_elems() const noexcept;
};

enum class LayerKind : int32_t { kGatedDeltaNet = 0, kMamba2 = 1, kKda = 2 };
// "gated_delta_net", "mamba2", "kda" (or "unknown").
const char* layer_kind_name(LayerKind kind) noexcept;

// A model is `num_layers` recurrent layers of one configuration (the pool is layer-major, so a
// slot's layers are one launch). Attention layers are not specstate's business.
struct ModelConfig {
  LayerKind kind = LayerKind::kGatedDeltaNet;
  int num_layers = 1;
  GdnConfig gdn;        // kind == kGatedDeltaNet
  Mamba2Config mamba;   // kind == kMamba2
  KdaConfig kda_layer;  // kind == kKda (ModelConfig::kda is the factory)

  static ModelConfig gated_delta_net(int num_layers, const GdnConfig& layer) {
    ModelConfig config;
    config.kind = LayerKind::kGatedDeltaNet;
    config.num_layers = num_layers;
    config.gdn = layer;
    return config;
  }
  static ModelConfig mamba2(int num_layers, const Mamba2Config& layer) {
    ModelConfig config;
    config.kind = LayerKind::kMamba2;
    config.num_layers = num_layers;
    config.mamba = layer;
    return config;
  }
  static ModelConfig kda(int num_layers, const KdaConfig& layer) {
    ModelConfig config;
    config.kind = LayerKind::kKda;
    config.num_layers = num_layers;
    config.kda_layer = layer;
    return config;
  }

  // Calls f(layer) with the config of the model's layer kind (`gdn`, `mamba`, `kda_layer`): the one
  // place that maps the kind to its config. Every layer config has conv_dim(), conv_width, the
  // three dtypes and ssm_state_elems(), so each value below is one expression over the kinds.
  template <typename F>
  decltype(auto) visit_layer(F&& f) const {
    switch (kind) {
      case LayerKind::kMamba2:
        return f(mamba);
      case LayerKind::kKda:
        return f(kda_layer);
      case LayerKind::kGatedDeltaNet:
      default:
        return f(gdn);
    }
  }

  // The layer kind's values (whatever the kind). The sizes (conv_dim, *_elems, slot_bytes, and
  // the layer configs' own) are exact for a config that validate()s; an unvalidated one's are
  // saturated where its product of fields passes 64 bits (INT64_MAX, or INT64_MIN for negative
  // fields; they overflowed, which is undefined). (The Python methods validate before they
  // compute.)
  int64_t conv_dim() const noexcept {
    return visit_layer([](const auto& c) { return c.conv_dim(); });
  }
  int conv_width() const noexcept {
    return visit_layer([](const auto& c) { return c.conv_width; });
  }
  DType act_dtype() const noexcept {
    return visit_layer([](const auto& c) { return c.act_dtype; });
  }
  DType conv_state_dtype() const noexcept {
    return visit_layer([](const auto& c) { return c.conv_state_dtype; });
  }
  DType ssm_state_dtype() const noexcept {
    return visit_layer([](const auto& c) { return c.ssm_state_dtype; });
  }
  int64_t conv_state_elems() const noexcept;
  int64_t ssm_state_elems() const noexcept {
    return visit_layer([](const auto& c) { return c.ssm_state_elems(); });
  }
  // Committed bytes of one slot over all layers (conv + SSM).
  int64_t slot_bytes() const noexcept;
  // validate() refuses a config whose slot_bytes() would pass this (2^48: every size derived
  // from a valid config is exact in 64 bits).
  static constexpr int64_t kMaxSlotBytes = int64_t{1} << 48;

  // Throws Error(kInvalidArgument) naming the first field out of range.
  void validate() const;
};

// Where the pool's memory lives and where its kernels run.
enum class Backend : int32_t { kCpu = 0, kCuda = 1 };

// How verify records what commit needs (DESIGN.md section 6); the results are bit-identical.
//   kSnapshot: verify stores the state after every window token in row-indexed scratch; commit
//              copies the accepted one into the slot (T states of scratch per row).
//   kReplay:   the slot holds a checkpoint and a ring of PoolOptions::replay_ring factor records
//              per layer (the step's rank-1 update u, k^, e^g: kilobytes per token). Verify
//              applies the slot's history records to the checkpoint in registers, runs the
//              window and writes its records; it stores the checkpoint only when the ring would
//              fill (a fold). Commit moves cursors only. The committed memory lags the committed
//              state until StatePool::materialize.
enum class Strategy : int32_t { kSnapshot = 0, kReplay = 1 };

// The element order of one slot's state, per layer (DESIGN.md section 4), for the committed state
// (the pool's own, or the caller's views) and the snapshot scratch alike. Views of the state keep
// their logical shape and index order ([slots, conv_dim, W-1], [slots, HV, V, K]); the layout
// only changes their strides, and every result is bit-identical under every layout.
//   kChannelsFirst: [conv_dim][W-1], oldest column first: specstate's and SGLang's order, vLLM's
//                   "DS" (VLLM_SSM_CONV_STATE_LAYOUT=DS).
//   kChannelsLast:  [W-1][conv_dim]: vLLM v1's default ("SD", the conv_state tensor of every
//                   Mamba2 / GDN / KDA layer, (W-1, conv_dim) per block). A caller-owned pool
//                   takes such a tensor as its transpose, a [slots, conv_dim, W-1] view with
//                   strides (slot, 1, conv_dim).
enum class ConvLayout : int32_t { kChannelsFirst = 0, kChannelsLast = 1 };
//   kVK: [HV][V][K] (Mamba2 [nheads][P][N]): SGLang's, vLLM's GDN and KDA states (since its PR
//        #33291 of 2026-01), fla's state_v_first.
//   kKV: [HV][K][V]: fla's default, vLLM's GDN and KDA states before PR #33291 (GDN and KDA
//        only). A
//        caller-owned pool takes such a tensor as a [slots, HV, V, K] view with strides
//        (slot, K * V, 1, V) (torch: state.transpose(-1, -2)).
enum class SsmLayout : int32_t { kVK = 0, kKV = 1 };

const char* backend_name(Backend backend) noexcept;
const char* strategy_name(Strategy strategy) noexcept;
const char* conv_layout_name(ConvLayout layout) noexcept;  // "channels_first" / "channels_last"
const char* ssm_layout_name(SsmLayout layout) noexcept;    // "vk" / "kv"

// The replay ring R a pool gets for PoolOptions::replay_ring = 0 (see there). The generic rule
// (the overload without a kind): max(2 * max_window, 6). The rule of a pool of `kind`: from
// T = 2, where the longest replay a ring of 3T allows (history plus window, 3T) fits the verify's
// chunk of 16 tokens (T <= 5), Gated DeltaNet and Mamba2 max(3T, 8) (8 at T = 2, 12 at T = 4),
// KDA max(2T, 8) (its records, with e^g per key channel, are about 1.6% of the state each: 3T
// would pass 20% of the committed state); otherwise the generic rule. Throws Error
// (kInvalidArgument) for a max_window outside [1, PoolOptions::kMaxWindow], the windows a pool
// accepts, and for a kind that is no LayerKind.
int64_t default_replay_ring(int64_t max_window);
int64_t default_replay_ring(LayerKind kind, int64_t max_window);

// The replay_fold_rows a pool of `kind` gets for PoolOptions::replay_fold_rows = 0 (see there):
// 1 for Mamba2 (its verify, two channels a thread, applies a history record for less than the
// state write it saves, in rounds of any size: Nemotron-H rounds at B = 1 / 2 / 4 0.954-0.985x
// with the whole ring, H100, docs/cuda.md "Replay rings of Mamba2 and KDA"), 8 for Gated DeltaNet
// and KDA (below 8 rows their rounds are latency-bound, and the small limit won). Throws Error
// (kInvalidArgument) for a kind that is no LayerKind.
int default_replay_fold_rows(LayerKind kind);

// The fold limit L of a verify round of `rows` rows on a replay ring of R = `ring` records with
// windows of up to T = max_window tokens: a verify whose slot has h history records folds
// (stores the checkpoint) iff h > L. R - 2T, the whole ring, from 8 rows on; below, at most
// max(2T, 6) - 2T (small rounds are latency-bound: each history record costs a dependent token
// step, more than the state write it saves). `fold_rows` (PoolOptions::replay_fold_rows) moves
// the 8: 0 keeps 8, 1 uses the whole ring in every round (a pool passes its own, 0 resolved to
// default_replay_fold_rows(kind): 1 for Mamba2). Any L gives the same bits (a
// fold stores the state the history gives). Throws Error(kInvalidArgument) naming the argument
// for max_window < 1, ring < 2 * max_window, ring > 2^20, rows < 1 or fold_rows < 0.
int replay_fold_limit(int max_window, int ring, int rows, int fold_rows = 0);

// The cursor of one slot under replay with ring R and windows of T = max_window tokens, when
// every round accepts a in [1, T] tokens uniformly (DESIGN.md section 6: a verify with history h
// folds iff h > L, replay_fold_limit of the round's `rows` and `fold_rows`, R - 2T for the
// overload without;
// commit then adds a): the long-run folds per round (1 at L = 0) and the mean history a verify
// applies ((T + 1) / 2 at L = 0). Exact (a renewal argument over the cursor's values, O(R T)
// time). Throws Error(kInvalidArgument) naming the argument for max_window < 1, ring < 2 *
// max_window, ring > 2^20, rows < 1 or fold_rows < 0.
struct ReplayRingModel {
  double fold_rate = 0;
  double mean_history = 0;
};
ReplayRingModel replay_ring_model(int max_window, int ring);
ReplayRingModel replay_ring_model(int max_window, int ring, int rows, int fold_rows = 0);

struct PoolOptions {
  // The largest replay_ring (records a slot): the pool and the ring helpers
  // (replay_fold_limit, replay_ring_model) take the same range. 2T for the largest window is
  // 2^17.
  static constexpr int kMaxReplayRing = 1 << 20;
  // Sanity bounds, far above any engine's round, the same as the protocol layer's
  // (spec::kMaxBatchRows, spec::kMaxWindowNodes): a larger value is rejected by name instead of
  // sizing the scratch for it (max_window = 2^20 made a pool of gigabytes of workspace).
  static constexpr int kMaxRows = 1 << 20;
  static constexpr int kMaxWindow = 1 << 16;
  // ... and max_rows x max_window, the tokens of the largest round, at most 2^26 (the protocol's
  // spec::kMaxBatchTokens): a round's token offsets are int32 and its host plan holds a parent
  // per row and window token (2^20 rows of a 2^16 window asked 256 GiB of a one-token round).
  static constexpr int64_t kMaxRoundTokens = int64_t{1} << 26;

  int num_slots = 1;   // requests whose committed state the pool holds
  int max_rows = 1;    // largest verify batch (rows, padding included), at most kMaxRows
  int max_window = 1;  // largest window T (tokens per row per round), at most kMaxWindow
  Backend backend = Backend::kCpu;
  Strategy strategy = Strategy::kSnapshot;
  // Replay only: R, the factor records each slot and layer keeps (DESIGN.md section 6). A verify
  // folds (writes the checkpoint) when the slot's history exceeds the round's fold limit
  // (replay_fold_limit: R - 2 * max_window from replay_fold_rows rows on, 8 by default, Mamba2's
  // every round; at most max(2T, 6) - 2T below), so a
  // larger R writes the state less often in large rounds but applies longer histories and costs
  // R records of memory. 0: the default, default_replay_ring(kind, max_window): Gated DeltaNet
  // and Mamba2 max(3T, 8) for 2 <= T <= 5 (8 at T = 2, 12 at T = 4), KDA max(2T, 8) there,
  // otherwise max(2T, 6). Measured on the
  // H200 (docs/cuda.md, "Two rows a thread at B = 8, the ring at T = 4 and the per-round fold
  // limit"; docs/strategies.md, "The fold limit is the round's"): Qwen3-Next T = 4, R = 12 against
  // 8 at B = 16 / 32 / 64 / 128 0.985 / 0.966 / 0.933 / 0.929 (fewer folds); T = 8, R = 24 against
  // 16 1.29-1.52x (the longest replay no longer fits the verify's chunk of 16 tokens); Nemotron-H
  // (Mamba2) T = 4, R = 12 against 8 1.011-1.031x at B = 8 / 32 / 128 before its verify ran two
  // channels a thread, 0.916-0.984x at B = 8..128 since (H100, docs/cuda.md "Replay rings of
  // Mamba2 and KDA"); Qwen3-Next T = 2, R = 8 against 6 0.959 / 0.989 / 0.973x at B = 8 / 32 / 128
  // (R = 4 1.09-1.23x, R = 10 0.98-1.01x); KDA at T = 2, R = 8 against 6 0.954-0.974x from B = 8
  // (H100), at T = 4, R = 12 against 8 0.880-0.937x from B = 8 for 27% of the committed state in
  // records instead of 20% (so not the default: set R = 12 to take it). Must be 0 or in
  // [2 * max_window, kMaxReplayRing] (any strategy refuses a negative value; snapshot pools
  // ignore the rest).
  int replay_ring = 0;
  // Replay only: rounds of at least this many verify rows let a slot's history grow to the whole
  // ring (fold limit R - 2 * max_window); smaller rounds, latency-bound, fold as a ring of
  // max(2 * max_window, 6) would (replay_fold_limit). 0: the default,
  // default_replay_fold_rows(kind): 8 for Gated DeltaNet and KDA (measured: B = 8 0.971x with the
  // whole ring, B = 1 1.020x; docs/strategies.md), 1 for Mamba2; 1: the whole ring in every
  // round. The bits are the same under any value; must be >= 0.
  int replay_fold_rows = 0;
  // Element order of each slot's conv window and SSM state (see ConvLayout / SsmLayout): the
  // defaults are specstate's; vLLM's tensors are kChannelsLast (and kVK, or kKV before its PR
  // #33291: specstate/vllm.h). kKV is rejected for Mamba2.
  ConvLayout conv_layout = ConvLayout::kChannelsFirst;
  SsmLayout ssm_layout = SsmLayout::kVK;
  int device = 0;  // CUDA device ordinal (kCuda only)
  // cudaStream_t the pool's work runs on (kCuda only; null = default), a stream of
  // options.device (another GPU's is refused). It must outlive the pool: a caller-owned replay
  // pool's destructor materializes its live slots on it.
  void* stream = nullptr;
};

}  // namespace specstate
