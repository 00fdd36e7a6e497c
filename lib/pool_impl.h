// Internal: the state behind the StatePool facade (include/specstate/pool.h), shared by the
// files that implement it (docs/architecture.md lists which file owns what):
//   pool.cpp         construction, memory views, materialize, the non-speculative layer path
//   pool_round.cpp   the verify round: begin_verify, verify, commit, abort_round
//   pool_slots.cpp   slot operations: acquire, adopt, release, copy, fork, reset, export, import
//   pool_bind.cpp    binding a caller's committed-state views (CommittedStateViews)
//   pool_checks.cpp  call validation: handles, batches, layers, aliasing, state buffers
// Every public entry point validates its whole input, once, before the backend is handed
// resolved work; a rejected call therefore changes nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "layers/gdn.h"
#include "layers/kda.h"
#include "layers/mamba2.h"
#include "layout.h"
#include "slot_allocator.h"
#include "specstate/pool.h"
#include "strategy/strategy.h"
#include "validate.h"

namespace specstate {
namespace detail {

// "{slot s, generation g, pool p}", for messages.
std::string handle_string(const SlotHandle& handle);

// The caller's committed-state views (DESIGN.md section 4), checked against the layout and bound
// into `storage` (per-layer addresses and slot strides); throws naming the view (pool_bind.cpp).
void bind_caller_committed(const char* fn, const CommittedStateViews& views, const Layout& l,
                           Device device, PoolStorage& storage);

// A live pool's memory, entered in a process-wide registry for as long as the claim lives (the
// pool's Impl holds it; pool_bind.cpp): the caller's committed views (claim_caller, before the
// pool allocates anything) and every buffer the pool allocated itself (claim_own: its committed
// state, or none where it is the caller's, and its workspace: snapshots, records, factors,
// cursors). claim_caller first refuses caller bytes that any live pool uses, naming the view,
// the other pool's buffer and that pool: two pools over the same memory (the same tensors, or
// another pool's state or workspace views) would each zero or overwrite the other's requests.
class CommittedClaim {
 public:
  CommittedClaim() = default;
  ~CommittedClaim();
  CommittedClaim(const CommittedClaim&) = delete;
  CommittedClaim& operator=(const CommittedClaim&) = delete;
  void claim_caller(const char* fn, uint64_t pool_id, const PoolStorage& storage);
  void claim_own(uint64_t pool_id, const PoolStorage& storage);
  // Takes this pool's entries out of the registry (the destructor's work, done by the pool's
  // close before its memory is freed: another thread's allocator may hand that memory out at
  // once, and a pool built over it was refused as overlapping this one). Idempotent.
  void release() noexcept;

 private:
  bool held_ = false;
};

// The per-kind side of the layer entry points (prefill, decode, verify): the argument types, their
// validation, the outputs that must not alias the pool, and the backend's run_<kind>. Everything
// else of those entry points is kind-agnostic (Impl's templates below).
template <typename Weights>
struct KindArgs;

template <>
struct KindArgs<GdnWeights> {
  using Inputs = GdnInputs;
  using Outputs = GdnOutputs;
  static constexpr LayerKind kKind = LayerKind::kGatedDeltaNet;
  static constexpr const char* kArgs = "GdnWeights / GdnInputs / GdnOutputs";
  static constexpr const char* kTokenInput = "inputs.mixed_qkv";  // its rows are the tokens
  static const TensorView& token_input(const Inputs& in) { return in.mixed_qkv; }
  static void check(const char* fn, const ModelConfig& c, Device dev, const GdnWeights& w,
                    const Inputs& in, const Outputs& out, int64_t tokens) {
    detail::gdn::check_args(fn, c.gdn, dev, w, in, out, tokens);
  }
  template <typename F>
  static void for_each_output(const Outputs& out, F&& f) {
    f("outputs.conv_out", out.conv_out);
    f("outputs.core_out", out.core_out);
  }
  // Every view the call reads (weights and inputs; empty optional ones included).
  template <typename F>
  static void for_each_read(const GdnWeights& w, const Inputs& in, F&& f) {
    f("weights.conv_weight", w.conv_weight);
    f("weights.conv_bias", w.conv_bias);
    f("weights.A_log", w.A_log);
    f("weights.dt_bias", w.dt_bias);
    f("inputs.mixed_qkv", in.mixed_qkv);
    f("inputs.a", in.a);
    f("inputs.b", in.b);
  }
  static void run(detail::BackendImpl& b, const detail::PoolStorage& s, const detail::LayerRun& r,
                  const GdnWeights& w, const Inputs& in, const Outputs& out) {
    b.run_gdn(s, r, w, in, out);
  }
};

template <>
struct KindArgs<Mamba2Weights> {
  using Inputs = Mamba2Inputs;
  using Outputs = Mamba2Outputs;
  static constexpr LayerKind kKind = LayerKind::kMamba2;
  static constexpr const char* kArgs = "Mamba2Weights / Mamba2Inputs / Mamba2Outputs";
  static constexpr const char* kTokenInput = "inputs.xBC";
  static const TensorView& token_input(const Inputs& in) { return in.xBC; }
  static void check(const char* fn, const ModelConfig& c, Device dev, const Mamba2Weights& w,
                    const Inputs& in, const Outputs& out, int64_t tokens) {
    detail::mamba2::check_args(fn, c.mamba, dev, w, in, out, tokens);
  }
  template <typename F>
  static void for_each_output(const Outputs& out, F&& f) {
    f("outputs.conv_out", out.conv_out);
    f("outputs.y", out.y);
  }
  template <typename F>
  static void for_each_read(const Mamba2Weights& w, const Inputs& in, F&& f) {
    f("weights.conv_weight", w.conv_weight);
    f("weights.conv_bias", w.conv_bias);
    f("weights.A_log", w.A_log);
    f("weights.dt_bias", w.dt_bias);
    f("weights.D", w.D);
    f("inputs.xBC", in.xBC);
    f("inputs.dt", in.dt);
    f("inputs.z", in.z);
  }
  static void run(detail::BackendImpl& b, const detail::PoolStorage& s, const detail::LayerRun& r,
                  const Mamba2Weights& w, const Inputs& in, const Outputs& out) {
    b.run_mamba2(s, r, w, in, out);
  }
};

template <>
struct KindArgs<KdaWeights> {
  using Inputs = KdaInputs;
  using Outputs = KdaOutputs;
  static constexpr LayerKind kKind = LayerKind::kKda;
  static constexpr const char* kArgs = "KdaWeights / KdaInputs / KdaOutputs";
  static constexpr const char* kTokenInput = "inputs.mixed_qkv";
  static const TensorView& token_input(const Inputs& in) { return in.mixed_qkv; }
  static void check(const char* fn, const ModelConfig& c, Device dev, const KdaWeights& w,
                    const Inputs& in, const Outputs& out, int64_t tokens) {
    detail::kda::check_args(fn, c.kda_layer, dev, w, in, out, tokens);
  }
  template <typename F>
  static void for_each_output(const Outputs& out, F&& f) {
    f("outputs.conv_out", out.conv_out);
    f("outputs.core_out", out.core_out);
  }
  template <typename F>
  static void for_each_read(const KdaWeights& w, const Inputs& in, F&& f) {
    f("weights.conv_weight", w.conv_weight);
    f("weights.conv_bias", w.conv_bias);
    f("weights.A_log", w.A_log);
    f("weights.dt_bias", w.dt_bias);
    f("inputs.mixed_qkv", in.mixed_qkv);
    f("inputs.g", in.g);
    f("inputs.b", in.b);
  }
  static void run(detail::BackendImpl& b, const detail::PoolStorage& s, const detail::LayerRun& r,
                  const KdaWeights& w, const Inputs& in, const Outputs& out) {
    b.run_kda(s, r, w, in, out);
  }
};

}  // namespace detail

struct StatePool::Impl {
  ModelConfig config;
  PoolOptions options;
  uint64_t pool_id = 0;
  std::unique_ptr<detail::BackendImpl> backend;
  std::unique_ptr<detail::StrategyImpl> strategy;
  detail::PoolStorage storage;
  detail::SlotAllocator slots{0};  // sized once the pool's size has been checked
  // Released by close() once no work of the pool touches its memory, before the backend frees it
  // (its destructor releases what a pool that never closed still holds).
  detail::CommittedClaim claim;

  bool round_open = false;
  VerifyBatch batch;
  detail::RoundPlan plan;
  std::vector<bool> verified;  // [L] layers verified in the open round
  // A row whose slot is released mid-round becomes padding (plan.slots[r] = -1, batch.rows[r] =
  // padding); released_rows[r] keeps the handle it had, for the commit's message (padding
  // otherwise).
  std::vector<SlotHandle> released_rows;
  // The row of `slot` in the open round, or -1 (none, or no round open): a scan of the round's
  // rows (at most max_rows), so that nothing on the host grows with num_slots.
  int round_row(int slot) const noexcept {
    if (!round_open) return -1;
    for (std::size_t r = 0; r < plan.slots.size(); ++r) {
      if (plan.slots[r] == slot) return static_cast<int>(r);
    }
    return -1;
  }

  // `verified` is sized here, so that close_round (noexcept) never allocates.
  Impl(const ModelConfig& c, const PoolOptions& o)
      : config(c), options(o), verified(static_cast<std::size_t>(c.num_layers), false) {}

  Device device() const noexcept { return backend->device(); }

  // --- call validation (pool_checks.cpp) ---
  // Resolves a handle of a live request or throws, naming `what`: a padding handle
  // (kInvalidArgument), another pool's, one outside the pool, a released or stale one.
  int resolve(const char* function, const std::string& what, const SlotHandle& handle) const;

  // Resolves the rows of a batch: padding -> -1; rejects foreign, stale and repeated slots.
  std::vector<int32_t> resolve_rows(const char* function, const std::vector<SlotHandle>& rows);

  // Resolves handles[i] of a call over a set of slots (materialize): rejects foreign, stale,
  // padding and repeated handles, naming the index.
  std::vector<int32_t> resolve_handles(const char* function,
                                       const std::vector<SlotHandle>& handles);

  void check_layer(const char* function, int layer) const;

  // A layer call with another kind's argument types is refused before anything else.
  template <typename Weights>
  void check_kind(const char* function) const {
    using K = detail::KindArgs<Weights>;
    if (config.kind == K::kKind) return;
    detail::fail(Status::kInvalidArgument, function,
                 std::string("called with ") + K::kArgs + " (kind = " + layer_kind_name(K::kKind) +
                     ") but the pool's layers are kind = " + layer_kind_name(config.kind));
  }

  template <typename Weights>
  void check_args(const char* function, const Weights& w,
                  const typename detail::KindArgs<Weights>::Inputs& in,
                  const typename detail::KindArgs<Weights>::Outputs& out, int64_t tokens) const {
    using K = detail::KindArgs<Weights>;
    K::check(function, config, device(), w, in, out, tokens);
    K::for_each_output(out, [&](const char* name, const TensorView& view) {
      if (!view.empty()) detail::check_no_self_overlap(function, name, view);
      check_no_alias(function, name, view);
    });
    // No output may share a byte with what the call reads or with another output: a kernel
    // overwrites a token's inputs (or the weights every token reads) while other tokens, rows
    // or heads still read them, so the result would depend on the order of execution.
    std::vector<std::pair<const char*, const TensorView*>> outputs;
    K::for_each_output(out, [&](const char* name, const TensorView& view) {
      for (const auto& earlier : outputs) {
        check_no_overlap(function, earlier.first, *earlier.second, name, view);
      }
      outputs.emplace_back(name, &view);
    });
    // Nor may what the call reads lie in the pool's own memory: a row's advance rewrites its slot
    // (or the workspace) while a later row still reads it.
    K::for_each_read(w, in, [&](const char* name, const TensorView& view) {
      check_no_alias(function, name, view);
      for (const auto& o : outputs) check_no_overlap(function, o.first, *o.second, name, view);
    });
  }

  // A view a call writes or reads (an output, an input, a weight, an imported state) must not
  // overlap the pool's own memory (committed state or workspace): the call would overwrite what
  // it reads, and the strategy's state with it.
  void check_no_alias(const char* function, const char* name, const TensorView& view) const;

  // Rejects (kInvalidArgument, naming both views) an output `out` sharing a byte with `other`
  // (an input, a weight or another output of the same call). Exact along the views' leading
  // dimension (views interleaved token by token in one buffer are fine), conservative within one
  // index (its span). Both views are checked (check_view) or empty.
  static void check_no_overlap(const char* function, const char* out_name, const TensorView& out,
                               const char* other_name, const TensorView& other);

  // A slot that is a row of the open round cannot be advanced (its commit would overwrite it).
  void check_not_in_round(const char* function, const std::string& what, int slot) const;

  // A contiguous 1-D byte-carrying view of exactly ceil(slot_state_bytes / dtype size) elements
  // on a device the backend can copy to / from, not overlapping the pool.
  void check_state_buffer(const char* function, const char* name, const TensorView& v) const;

  // --- the layer path and deferred work (pool.cpp) ---
  template <typename Weights>
  void advance(int layer, std::vector<int32_t> slot_list, int tokens, const Weights& w,
               const typename detail::KindArgs<Weights>::Inputs& in,
               const typename detail::KindArgs<Weights>::Outputs& out,
               std::vector<int32_t> offsets = {});

  // Runs the strategy's deferred work for `slot_list` (all live slots when empty).
  void materialize_slots(std::vector<int32_t> slot_list);
  // The pool's end (destructor, move-assignment): a caller-owned pool's live slots materialized
  // into the caller's memory (errors logged), then the pool's own memory freed.
  // `materialize_caller`: a caller-owned pool's live slots are materialized into its memory
  // first (the destructor); false: discard().
  void close(bool materialize_caller = true) noexcept;

  template <typename Weights>
  void prefill(int layer, SlotHandle handle, const Weights& weights,
               const typename detail::KindArgs<Weights>::Inputs& inputs,
               const typename detail::KindArgs<Weights>::Outputs& outputs);

  // Batched variable-length prefill: row r advances by lengths[r] tokens packed at their
  // cumulative offset, in one backend call per layer.
  template <typename Weights>
  void prefill_batch(int layer, const std::vector<SlotHandle>& rows,
                     const std::vector<int32_t>& lengths, const Weights& weights,
                     const typename detail::KindArgs<Weights>::Inputs& inputs,
                     const typename detail::KindArgs<Weights>::Outputs& outputs);

  template <typename Weights>
  void decode(int layer, const std::vector<SlotHandle>& rows, const Weights& weights,
              const typename detail::KindArgs<Weights>::Inputs& inputs,
              const typename detail::KindArgs<Weights>::Outputs& outputs);

  // --- the verify round (pool_round.cpp) ---
  template <typename Weights>
  void verify(int layer, const Weights& weights,
              const typename detail::KindArgs<Weights>::Inputs& inputs,
              const typename detail::KindArgs<Weights>::Outputs& outputs);

  // "layers 0, 1, 2" of the layers the open round has verified.
  std::string verified_layers() const;

  // The open round's row `row` becomes padding: its slot was released. The backend gets the
  // round's slot list again (a device backend re-uploads it, so a device-valued commit skips the
  // row); on failure nothing changed.
  void make_row_padding(int row);

  // Variable windows of a batch (DESIGN.md section 2): host lengths become the plan's offsets;
  // a device cu_seqlens view is checked (never read) and handed to the kernels.
  void plan_token_ranges(const char* fn, const VerifyBatch& batch, detail::RoundPlan& plan) const;

  void close_round() noexcept;

  // --- slot operations (pool_slots.cpp) ---
  // A slot's committed memory was overwritten with an exact state: no pending steps remain.
  void mark_overwritten(int slot);
};

}  // namespace specstate
