// The state manager: slot lifetimes, round bookkeeping and validation. Every public entry point
// validates its whole input here, once, before the backend is handed resolved work; a rejected
// call therefore changes nothing.
#include "specstate/pool.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <variant>

#include "backend.h"
#include "layers/gdn.h"
#include "layers/mamba2.h"
#include "layout.h"
#include "logging.h"
#include "pool_access.h"
#include "slot_allocator.h"
#include "specstate/safetensors.h"
#include "strategy/strategy.h"
#include "validate.h"

namespace specstate {

using detail::check_optional_view;
using detail::check_view;
using detail::DTypeRule;
using detail::fail;

namespace {

std::atomic<uint64_t> next_pool_id{1};

std::string handle_string(const SlotHandle& handle) {
  return "{slot " + std::to_string(handle.slot) + ", generation " +
         std::to_string(handle.generation) + ", pool " + std::to_string(handle.pool_id) + "}";
}

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
  static void run(detail::BackendImpl& b, const detail::PoolStorage& s, const detail::LayerRun& r,
                  const Mamba2Weights& w, const Inputs& in, const Outputs& out) {
    b.run_mamba2(s, r, w, in, out);
  }
};

}  // namespace

struct StatePool::Impl {
  ModelConfig config;
  PoolOptions options;
  uint64_t pool_id = 0;
  std::unique_ptr<detail::BackendImpl> backend;
  std::unique_ptr<detail::StrategyImpl> strategy;
  detail::PoolStorage storage;
  detail::SlotAllocator slots;
  // Each layer's weights of its last verify / advance (of the pool's kind): what materialize
  // replays with.
  std::vector<std::variant<std::monostate, GdnWeights, Mamba2Weights>> last_weights;

  bool round_open = false;
  VerifyBatch batch;
  detail::RoundPlan plan;
  std::vector<bool> verified;  // [L] layers verified in the open round
  // Row of each slot in the open round (-1: none). A row whose slot is released mid-round
  // becomes padding (plan.slots[r] = -1, batch.rows[r] = padding); released_rows[r] keeps the
  // handle it had, for the commit's message (padding otherwise).
  std::vector<int32_t> round_row_of_slot;
  std::vector<SlotHandle> released_rows;

  Impl(const ModelConfig& c, const PoolOptions& o) : config(c), options(o), slots(o.num_slots) {}

  Device device() const noexcept { return backend->device(); }

  // Resolves a handle of a live request or throws, naming `what`.
  int resolve(const char* function, const std::string& what, const SlotHandle& handle) const {
    if (handle.pool_id != pool_id) {
      fail(Status::kFailedPrecondition, function,
           what + " = " + handle_string(handle) + " belongs to another pool (this pool is " +
               std::to_string(pool_id) + ")");
    }
    if (handle.slot < 0 || handle.slot >= options.num_slots) {
      fail(Status::kOutOfRange, function,
           what + " = " + handle_string(handle) + ": slot outside [0, " +
               std::to_string(options.num_slots) + ")");
    }
    if (!slots.is_live(handle.slot, handle.generation)) {
      fail(Status::kFailedPrecondition, function,
           what + " = " + handle_string(handle) +
               (slots.is_allocated(handle.slot)
                    ? " is stale: the slot was released and acquired again (generation " +
                          std::to_string(slots.generation(handle.slot)) + ")"
                    : " is not live: the slot was released"));
    }
    return handle.slot;
  }

  // Resolves the rows of a batch: padding -> -1; rejects foreign, stale and repeated slots.
  std::vector<int32_t> resolve_rows(const char* function, const std::vector<SlotHandle>& rows) {
    std::vector<int32_t> resolved(rows.size(), -1);
    std::vector<int> seen_at(static_cast<std::size_t>(options.num_slots), -1);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      if (rows[r].is_padding()) continue;
      const int slot = resolve(function, "rows[" + std::to_string(r) + "]", rows[r]);
      if (seen_at[slot] >= 0) {
        fail(Status::kInvalidArgument, function,
             "rows[" + std::to_string(r) + "] = " + handle_string(rows[r]) +
                 " repeats the slot of rows[" + std::to_string(seen_at[slot]) +
                 "]: a slot appears at most once per batch");
      }
      seen_at[slot] = static_cast<int>(r);
      resolved[r] = slot;
    }
    return resolved;
  }

  void check_layer(const char* function, int layer) const {
    if (layer < 0 || layer >= config.num_layers) {
      fail(Status::kOutOfRange, function,
           "layer = " + std::to_string(layer) + " outside [0, " +
               std::to_string(config.num_layers) + ")");
    }
  }

  // A layer call with another kind's argument types is refused before anything else.
  template <typename Weights>
  void check_kind(const char* function) const {
    using K = KindArgs<Weights>;
    if (config.kind == K::kKind) return;
    fail(Status::kInvalidArgument, function,
         std::string("called with ") + K::kArgs + " (kind = " + layer_kind_name(K::kKind) +
             ") but the pool's layers are kind = " + layer_kind_name(config.kind));
  }

  template <typename Weights>
  void check_args(const char* function, const Weights& w,
                  const typename KindArgs<Weights>::Inputs& in,
                  const typename KindArgs<Weights>::Outputs& out, int64_t tokens) const {
    KindArgs<Weights>::check(function, config, device(), w, in, out, tokens);
    KindArgs<Weights>::for_each_output(out, [&](const char* name, const TensorView& view) {
      check_no_alias(function, name, view);
    });
  }

  // An output view must not overlap the pool's own memory (committed state or workspace): the
  // call would overwrite what it reads, and the strategy's state with it.
  void check_no_alias(const char* function, const char* name, const TensorView& view) const {
    if (view.empty()) return;
    const auto begin = reinterpret_cast<uintptr_t>(view.data);
    const auto end = begin + static_cast<uintptr_t>(detail::span_bytes(view));
    for (int b = 0; b < static_cast<int>(detail::Buf::kCount); ++b) {
      const int64_t size = storage.layout.bytes[b];
      if (size == 0 || storage.buffers[b] == nullptr) continue;
      const auto base = reinterpret_cast<uintptr_t>(storage.buffers[b]);
      if (begin < base + static_cast<uintptr_t>(size) && base < end) {
        fail(Status::kInvalidArgument, function,
             std::string(name) + " (" + view.describe() + ") overlaps the pool's " +
                 detail::buf_name(static_cast<detail::Buf>(b)) +
                 ": outputs must be the caller's "
                 "own memory");
      }
    }
    if (!storage.layout.caller_committed) return;
    // A caller-owned committed state: each layer's span of slots.
    const auto& l = storage.layout;
    for (int layer = 0; layer < l.layers; ++layer) {
      for (int kind = 0; kind < 2; ++kind) {
        const auto base =
            reinterpret_cast<uintptr_t>(kind == 0 ? storage.conv(layer, 0) : storage.ssm(layer, 0));
        const int64_t last = kind == 0 ? storage.conv_slot_stride : storage.ssm_slot_stride;
        const int64_t size = (l.slots - 1) * last + (kind == 0 ? l.conv_bytes : l.ssm_bytes);
        if (begin < base + static_cast<uintptr_t>(size) && base < end) {
          fail(Status::kInvalidArgument, function,
               std::string(name) + " (" + view.describe() + ") overlaps the committed " +
                   (kind == 0 ? "conv" : "SSM") + " state of layer " + std::to_string(layer) +
                   " (the caller-owned views the pool adopted): outputs must be other memory");
        }
      }
    }
  }

  // A slot that is a row of the open round cannot be advanced (its commit would overwrite it).
  void check_not_in_round(const char* function, const std::string& what, int slot) const {
    if (!round_open || round_row_of_slot[slot] < 0) return;
    fail(Status::kFailedPrecondition, function,
         what + " = slot " + std::to_string(slot) + " is row " +
             std::to_string(round_row_of_slot[slot]) +
             " of the open verify round: commit or abort_round() first");
  }

  template <typename Weights>
  void advance(int layer, std::vector<int32_t> slot_list, int tokens, const Weights& w,
               const typename KindArgs<Weights>::Inputs& in,
               const typename KindArgs<Weights>::Outputs& out, std::vector<int32_t> offsets = {}) {
    detail::LayerRun run;
    run.layer = layer;
    run.tokens_per_row = tokens;
    run.offsets = std::move(offsets);
    run.io = strategy->advance_io(layer, slot_list);
    run.slots = std::move(slot_list);
    KindArgs<Weights>::run(*backend, storage, run, w, in, out);
    last_weights[layer] = w;
    strategy->after_advance(*backend, storage, layer, run.slots, run.io);
  }

  // Re-runs recorded steps of one layer with that layer's last weights (no inputs, no outputs):
  // the pool's one switch on the layer kind.
  void run_recorded(const detail::LayerRun& run) {
    const auto& w = last_weights[static_cast<std::size_t>(run.layer)];
    switch (config.kind) {
      case LayerKind::kGatedDeltaNet:
        if (const auto* g = std::get_if<GdnWeights>(&w)) {
          backend->run_gdn(storage, run, *g, GdnInputs{}, GdnOutputs{});
          return;
        }
        break;
      case LayerKind::kMamba2:
        if (const auto* m = std::get_if<Mamba2Weights>(&w)) {
          backend->run_mamba2(storage, run, *m, Mamba2Inputs{}, Mamba2Outputs{});
          return;
        }
        break;
    }
    fail(Status::kFailedPrecondition, "StatePool::materialize",
         "layer " + std::to_string(run.layer) + " has pending steps but was never run");
  }

  // Runs the strategy's deferred work for `slot_list` (all live slots when empty).
  void materialize_slots(std::vector<int32_t> slot_list) {
    if (!strategy->defers_work()) return;
    if (slot_list.empty()) {
      for (int s = 0; s < options.num_slots; ++s) {
        if (slots.is_allocated(s)) slot_list.push_back(s);
      }
    }
    strategy->materialize(*backend, storage, slot_list,
                          [&](const detail::LayerRun& run) { run_recorded(run); });
  }

  template <typename Weights>
  void prefill(int layer, SlotHandle handle, const Weights& weights,
               const typename KindArgs<Weights>::Inputs& inputs,
               const typename KindArgs<Weights>::Outputs& outputs) {
    using K = KindArgs<Weights>;
    const char* fn = "StatePool::prefill";
    check_kind<Weights>(fn);
    check_layer(fn, layer);
    const int slot = resolve(fn, "handle", handle);
    const TensorView& x = K::token_input(inputs);
    const int64_t tokens = x.ndim >= 1 ? x.shape[0] : 0;
    if (tokens <= 0) {
      fail(Status::kInvalidArgument, fn,
           std::string(K::kTokenInput) + " holds " + std::to_string(tokens) + " tokens (" +
               (x.ndim >= 0 && x.ndim <= TensorView::kMaxDims ? x.describe() : "bad ndim") +
               "), expected at least 1");
    }
    if (tokens > std::numeric_limits<int32_t>::max()) {
      fail(Status::kInvalidArgument, fn,
           std::string(K::kTokenInput) + " holds " + std::to_string(tokens) +
               " tokens: at most 2^31 - 1 per call (split the prefill)");
    }
    check_not_in_round(fn, "handle", slot);
    check_args(fn, weights, inputs, outputs, tokens);
    advance(layer, {slot}, static_cast<int>(tokens), weights, inputs, outputs);
  }

  // Batched variable-length prefill: row r advances by lengths[r] tokens packed at their
  // cumulative offset, in one backend call per layer.
  template <typename Weights>
  void prefill_batch(int layer, const std::vector<SlotHandle>& rows,
                     const std::vector<int32_t>& lengths, const Weights& weights,
                     const typename KindArgs<Weights>::Inputs& inputs,
                     const typename KindArgs<Weights>::Outputs& outputs) {
    const char* fn = "StatePool::prefill";
    check_kind<Weights>(fn);
    check_layer(fn, layer);
    if (rows.empty()) fail(Status::kInvalidArgument, fn, "handles is empty");
    if (lengths.size() != rows.size()) {
      fail(Status::kInvalidArgument, fn,
           "lengths has " + std::to_string(lengths.size()) + " entries, handles " +
               std::to_string(rows.size()));
    }
    std::vector<int32_t> slot_list = resolve_rows(fn, rows);
    std::vector<int32_t> offsets(rows.size() + 1, 0);
    int longest = 0;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const int32_t n = lengths[r];
      if (n < 0) {
        fail(Status::kInvalidArgument, fn,
             "lengths[" + std::to_string(r) + "] = " + std::to_string(n) + " is negative");
      }
      if (int64_t{offsets[r]} + n > std::numeric_limits<int32_t>::max()) {
        fail(Status::kInvalidArgument, fn,
             "lengths sum past 2^31 - 1 tokens at lengths[" + std::to_string(r) +
                 "] (split the prefill)");
      }
      if (slot_list[r] < 0 && n > 0) {
        fail(Status::kInvalidArgument, fn,
             "handles[" + std::to_string(r) + "] is padding but lengths[" + std::to_string(r) +
                 "] = " + std::to_string(n) + ": a padding row has no tokens");
      }
      if (slot_list[r] >= 0)
        check_not_in_round(fn, "handles[" + std::to_string(r) + "]", slot_list[r]);
      offsets[r + 1] = offsets[r] + n;
      longest = std::max(longest, static_cast<int>(n));
    }
    check_args(fn, weights, inputs, outputs, offsets.back());
    advance(layer, std::move(slot_list), longest, weights, inputs, outputs, std::move(offsets));
  }

  template <typename Weights>
  void decode(int layer, const std::vector<SlotHandle>& rows, const Weights& weights,
              const typename KindArgs<Weights>::Inputs& inputs,
              const typename KindArgs<Weights>::Outputs& outputs) {
    const char* fn = "StatePool::decode";
    check_kind<Weights>(fn);
    check_layer(fn, layer);
    if (rows.empty()) fail(Status::kInvalidArgument, fn, "rows is empty");
    std::vector<int32_t> slot_list = resolve_rows(fn, rows);
    for (std::size_t r = 0; r < slot_list.size(); ++r) {
      if (slot_list[r] >= 0)
        check_not_in_round(fn, "rows[" + std::to_string(r) + "]", slot_list[r]);
    }
    check_args(fn, weights, inputs, outputs, static_cast<int64_t>(rows.size()));
    advance(layer, std::move(slot_list), 1, weights, inputs, outputs);
  }

  template <typename Weights>
  void verify(int layer, const Weights& weights, const typename KindArgs<Weights>::Inputs& inputs,
              const typename KindArgs<Weights>::Outputs& outputs) {
    const char* fn = "StatePool::verify";
    if (!round_open) {
      fail(Status::kFailedPrecondition, fn, "no open round: call begin_verify first");
    }
    check_kind<Weights>(fn);
    check_layer(fn, layer);
    check_args(fn, weights, inputs, outputs, plan.num_tokens);
    detail::LayerRun run;
    run.layer = layer;
    run.tokens_per_row = plan.window;
    run.plan = &plan;
    run.io = strategy->verify_io(layer, plan, !verified[layer]);
    KindArgs<Weights>::run(*backend, storage, run, weights, inputs, outputs);
    last_weights[layer] = weights;
    verified[layer] = true;
  }

  // "layers 0, 1, 2" of the layers the open round has verified.
  std::string verified_layers() const {
    std::string out;
    for (std::size_t l = 0; l < verified.size(); ++l) {
      if (!verified[l]) continue;
      out += (out.empty() ? "" : ", ") + std::to_string(l);
    }
    return out;
  }

  // The open round's row `row` becomes padding: its slot was released. The backend gets the
  // round's slot list again (a device backend re-uploads it, so a device-valued commit skips the
  // row); on failure nothing changed.
  void make_row_padding(int row) {
    const int32_t slot = plan.slots[static_cast<std::size_t>(row)];
    plan.slots[static_cast<std::size_t>(row)] = -1;
    try {
      backend->begin_round(storage, plan);
    } catch (...) {
      plan.slots[static_cast<std::size_t>(row)] = slot;
      throw;
    }
    released_rows[static_cast<std::size_t>(row)] = batch.rows[static_cast<std::size_t>(row)];
    batch.rows[static_cast<std::size_t>(row)] = SlotHandle::padding();
    round_row_of_slot[slot] = -1;
  }

  // A slot's committed memory was overwritten with an exact state: no pending steps remain.
  void mark_overwritten(int slot) {
    if (storage.layout.has(detail::Buf::kPending)) {
      backend->clear_pending(storage, 0, config.num_layers, {slot});
    }
    strategy->slot_overwritten(slot);
  }

  // A contiguous 1-D byte-carrying view of exactly ceil(slot_state_bytes / dtype size) elements
  // on a device the backend can copy to / from, not overlapping the pool.
  void check_state_buffer(const char* function, const char* name, const TensorView& v) const {
    const int64_t bytes = storage.layout.committed_bytes_per_slot();
    if (v.dtype != DType::kF32 && v.dtype != DType::kBF16 && v.dtype != DType::kI32) {
      fail(Status::kInvalidArgument, function,
           std::string(name) + ".dtype = " + std::to_string(static_cast<int>(v.dtype)) +
               " is not a dtype (f32, bf16 or i32)");
    }
    const int64_t elem = static_cast<int64_t>(dtype_size(v.dtype));
    const int64_t want = (bytes + elem - 1) / elem;
    if (v.data == nullptr) {
      fail(Status::kInvalidArgument, function, std::string(name) + ".data is null");
    }
    if (v.ndim != 1) {
      fail(Status::kInvalidArgument, function,
           std::string(name) + ".ndim = " + std::to_string(v.ndim) + ", expected 1 (a " +
               dtype_name(v.dtype) + "[" + std::to_string(want) + "] byte buffer)");
    }
    if (v.shape[0] != want) {
      fail(Status::kInvalidArgument, function,
           std::string(name) + " (" + v.describe() + ") holds " + std::to_string(v.shape[0]) +
               " elements, expected " + std::to_string(want) + " (slot_state_bytes() = " +
               std::to_string(bytes) + " bytes as " + dtype_name(v.dtype) + ")");
    }
    if (v.shape[0] > 1 && v.stride[0] != 1) {
      fail(Status::kInvalidArgument, function,
           std::string(name) + " (" + v.describe() + ") has stride " + std::to_string(v.stride[0]) +
               ", expected a contiguous buffer (stride 1)");
    }
    if (v.device != Device::kCpu && v.device != Device::kCuda) {
      fail(Status::kInvalidArgument, function,
           std::string(name) + ".device = " + std::to_string(static_cast<int>(v.device)) +
               " is not a device");
    }
    if (v.device == Device::kCuda && device() != Device::kCuda) {
      fail(Status::kInvalidArgument, function,
           std::string(name) + " (" + v.describe() +
               ") lives on cuda, the pool's backend is cpu: give a host buffer");
    }
    check_no_alias(function, name, v);
  }

  // Variable windows of a batch (DESIGN.md section 2): host lengths become the plan's offsets;
  // a device cu_seqlens view is checked (never read) and handed to the kernels.
  void plan_token_ranges(const char* fn, const VerifyBatch& batch, detail::RoundPlan& plan) const {
    const int rows = plan.rows, T = plan.window;
    if (!batch.lengths.empty() && !batch.cu_seqlens.empty()) {
      fail(Status::kInvalidArgument, fn,
           "batch.lengths and batch.cu_seqlens are both given: pass one of them");
    }
    if (!batch.lengths.empty()) {
      if (batch.lengths.size() != static_cast<std::size_t>(rows)) {
        fail(Status::kInvalidArgument, fn,
             "batch.lengths has " + std::to_string(batch.lengths.size()) + " entries, the batch " +
                 std::to_string(rows) + " rows");
      }
      plan.tokens.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
      for (int r = 0; r < rows; ++r) {
        const int32_t n = batch.lengths[static_cast<std::size_t>(r)];
        if (n < 0 || n > T) {
          fail(Status::kOutOfRange, fn,
               "batch.lengths[" + std::to_string(r) + "] = " + std::to_string(n) + " outside 0.." +
                   std::to_string(T) + " (batch.window)");
        }
        plan.tokens.offsets[static_cast<std::size_t>(r) + 1] =
            plan.tokens.offsets[static_cast<std::size_t>(r)] + n;
      }
      plan.num_tokens = plan.tokens.offsets.back();
      return;
    }
    if (batch.cu_seqlens.empty()) return;
    const TensorView& cu = batch.cu_seqlens;
    if (device() != Device::kCuda || cu.device != Device::kCuda) {
      fail(Status::kInvalidArgument, fn,
           "batch.cu_seqlens (" +
               (cu.ndim >= 0 && cu.ndim <= TensorView::kMaxDims ? cu.describe() : "bad ndim") +
               ") must be device memory of a cuda pool (use batch.lengths for host values)");
    }
    check_view(cu,
               {fn, "batch.cu_seqlens", {rows + 1}, DType::kI32, DTypeRule::kExact, Device::kCuda});
    if (rows + 1 > 1 && cu.stride[0] != 1) {
      fail(Status::kInvalidArgument, fn,
           "batch.cu_seqlens (" + cu.describe() + ") has stride " + std::to_string(cu.stride[0]) +
               ", expected a contiguous int32 [" + std::to_string(rows + 1) + "]");
    }
    check_no_alias(fn, "batch.cu_seqlens", cu);
    plan.tokens.device_offsets = cu;
  }

  void close_round() noexcept {
    for (int32_t slot : plan.slots) {
      if (slot >= 0) round_row_of_slot[slot] = -1;
    }
    released_rows.clear();
    round_open = false;
    batch = VerifyBatch{};
    plan = detail::RoundPlan{};
    verified.assign(static_cast<std::size_t>(config.num_layers), false);
  }
};

namespace {

// The caller's committed-state views (DESIGN.md section 4), checked against the layout and bound
// into `storage` (per-layer addresses and slot strides); throws naming the view.
void bind_caller_committed(const char* fn, const CommittedStateViews& views,
                           const detail::Layout& l, Device device, detail::PoolStorage& storage) {
  const int L = l.layers;
  const auto count = static_cast<std::size_t>(L);
  if (views.conv.size() != count || views.ssm.size() != count) {
    fail(Status::kInvalidArgument, fn,
         "committed has " + std::to_string(views.conv.size()) + " conv and " +
             std::to_string(views.ssm.size()) + " ssm views, expected " + std::to_string(L) +
             " of each (config.num_layers)");
  }
  const auto& st = l.shapes.ssm_shape;
  struct Span {
    uintptr_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  int64_t conv_stride = -1, ssm_stride = -1;
  auto bind = [&](const TensorView& v, const std::string& name, bool conv, int layer) {
    const DType dtype = conv ? l.shapes.conv_dtype : l.shapes.ssm_dtype;
    if (conv) {
      check_view(v, {fn,
                     name.c_str(),
                     {l.slots, l.shapes.conv_dim, l.shapes.conv_width - 1},
                     dtype,
                     DTypeRule::kExact,
                     device});
    } else {
      check_view(
          v, {fn, name.c_str(), {l.slots, st[0], st[1], st[2]}, dtype, DTypeRule::kExact, device});
    }
    // Each slot's state contiguous.
    int64_t inner = 1;
    for (int d = v.ndim - 1; d >= 1; --d) {
      if (v.shape[d] > 1 && v.stride[d] != inner) {
        fail(Status::kInvalidArgument, fn,
             name + " (" + v.describe() + ") stride " + std::to_string(d) + " = " +
                 std::to_string(v.stride[d]) + ", expected " + std::to_string(inner) +
                 ": each slot's state must be contiguous");
      }
      inner *= v.shape[d];
    }
    const int64_t stride = l.slots > 1 ? v.stride[0] : inner;
    if (stride < inner) {
      fail(Status::kInvalidArgument, fn,
           name + " (" + v.describe() + ") slot stride " + std::to_string(stride) +
               " is below one slot's state (" + std::to_string(inner) +
               " elements): slots would overlap");
    }
    int64_t& kind_stride = conv ? conv_stride : ssm_stride;
    if (kind_stride >= 0 && stride != kind_stride) {
      fail(Status::kInvalidArgument, fn,
           name + " slot stride " + std::to_string(stride) + " differs from layer 0's (" +
               std::to_string(kind_stride) + "): every layer must have the same slot stride");
    }
    kind_stride = stride;
    const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
    if (device == Device::kCuda &&
        (reinterpret_cast<uintptr_t>(v.data) % 16 != 0 || (stride * elem) % 16 != 0)) {
      fail(Status::kInvalidArgument, fn,
           name + " (" + v.describe() + "): a cuda pool needs 16-byte aligned views and slot " +
               "strides (address % 16 = " +
               std::to_string(reinterpret_cast<uintptr_t>(v.data) % 16) +
               ", slot stride bytes % 16 = " + std::to_string((stride * elem) % 16) + ")");
    }
    const auto begin = reinterpret_cast<uintptr_t>(v.data);
    const Span mine{begin, begin + static_cast<uintptr_t>(detail::span_bytes(v)), name};
    for (const Span& other : spans) {
      if (mine.begin < other.end && other.begin < mine.end) {
        fail(Status::kInvalidArgument, fn, name + " overlaps " + other.name);
      }
    }
    spans.push_back(mine);
    auto& table = conv ? storage.conv_layers : storage.ssm_layers;
    table[static_cast<std::size_t>(layer)] = static_cast<char*>(v.data);
  };
  storage.conv_layers.assign(count, nullptr);
  storage.ssm_layers.assign(count, nullptr);
  for (int layer = 0; layer < L; ++layer) {
    bind(views.conv[static_cast<std::size_t>(layer)],
         "committed.conv[" + std::to_string(layer) + "]", true, layer);
    bind(views.ssm[static_cast<std::size_t>(layer)], "committed.ssm[" + std::to_string(layer) + "]",
         false, layer);
  }
  storage.conv_slot_stride = conv_stride * static_cast<int64_t>(dtype_size(l.shapes.conv_dtype));
  storage.ssm_slot_stride = ssm_stride * static_cast<int64_t>(dtype_size(l.shapes.ssm_dtype));
}

}  // namespace

StatePool::StatePool(const ModelConfig& config, const PoolOptions& options)
    : StatePool(Construct{}, config, options, nullptr) {}

StatePool::StatePool(const ModelConfig& config, const PoolOptions& options,
                     const CommittedStateViews& committed)
    : StatePool(Construct{}, config, options, &committed) {}

StatePool::StatePool(Construct, const ModelConfig& config, const PoolOptions& options,
                     const CommittedStateViews* committed) {
  const char* fn = "StatePool";
  // Every size is validated and overflow-checked before any memory is touched.
  detail::Layout layout = detail::make_layout(config, options);
  layout.caller_committed = committed != nullptr;
  auto impl = std::make_unique<Impl>(config, options);
  impl->pool_id = next_pool_id.fetch_add(1);
  switch (options.backend) {
    case Backend::kCpu:
      impl->backend = detail::make_cpu_backend();
      break;
    case Backend::kCuda:
      impl->backend = detail::make_cuda_backend(options);
      break;
    default:
      fail(Status::kInvalidArgument, fn,
           "options.backend = " + std::to_string(static_cast<int>(options.backend)));
  }
  std::string why;
  const Status can = impl->backend->can_implement(layout, config, &why);
  if (can != Status::kSuccess) fail(can, fn, why);
  impl->strategy = detail::make_strategy(layout);
  impl->storage.config = config;
  impl->storage.layout = layout;
  if (committed) {
    bind_caller_committed(fn, *committed, layout, impl->backend->device(), impl->storage);
  }
  impl->backend->allocate(impl->storage);
  impl->last_weights.resize(static_cast<std::size_t>(config.num_layers));
  impl->round_row_of_slot.assign(static_cast<std::size_t>(options.num_slots), -1);
  impl->close_round();
  detail::logger().debug(
      "pool {}: {} slots, {} layers, {} strategy, {} committed bytes, {} workspace bytes on {}",
      impl->pool_id, options.num_slots, config.num_layers, strategy_name(options.strategy),
      layout.committed_bytes(), layout.workspace_bytes(), backend_name(options.backend));
  impl_ = std::move(impl);
}

StatePool::~StatePool() noexcept {
  if (impl_ && impl_->backend) impl_->backend->free(impl_->storage);
}

StatePool::StatePool(StatePool&&) noexcept = default;
StatePool& StatePool::operator=(StatePool&& other) noexcept {
  if (this != &other) {
    if (impl_ && impl_->backend) impl_->backend->free(impl_->storage);
    impl_ = std::move(other.impl_);
  }
  return *this;
}

const detail::PoolStorage& detail::PoolAccess::storage(const StatePool& pool) {
  return pool.impl_->storage;
}

const ModelConfig& StatePool::config() const noexcept { return impl_->config; }
const PoolOptions& StatePool::options() const noexcept { return impl_->options; }

SlotHandle StatePool::adopt(int slot) {
  const char* fn = "StatePool::adopt";
  if (slot < 0 || slot >= impl_->options.num_slots) {
    fail(Status::kOutOfRange, fn,
         "slot = " + std::to_string(slot) + " outside [0, " +
             std::to_string(impl_->options.num_slots) + ") (options.num_slots)");
  }
  uint32_t generation = 0;
  if (!impl_->slots.take(slot, generation)) {
    fail(Status::kFailedPrecondition, fn,
         "slot = " + std::to_string(slot) + " is live (a request holds it): release it first");
  }
  try {
    impl_->mark_overwritten(slot);  // no pending steps: the memory is the state
    impl_->strategy->reset_slot(slot);
  } catch (...) {
    impl_->slots.free(slot);
    throw;
  }
  detail::logger().trace("pool {}: adopt slot {} generation {}", impl_->pool_id, slot, generation);
  return SlotHandle{slot, generation, impl_->pool_id};
}

SlotHandle StatePool::acquire() {
  uint32_t generation = 0;
  const int slot = impl_->slots.allocate(generation);
  if (slot < 0) {
    fail(Status::kResourceExhausted, "StatePool::acquire",
         "all " + std::to_string(impl_->options.num_slots) +
             " slots are in use (options.num_slots = " + std::to_string(impl_->options.num_slots) +
             ")");
  }
  try {
    impl_->backend->zero_slot(impl_->storage, slot);
    impl_->strategy->reset_slot(slot);
  } catch (...) {
    impl_->slots.free(slot);
    throw;
  }
  detail::logger().trace("pool {}: acquire slot {} generation {}", impl_->pool_id, slot,
                         generation);
  return SlotHandle{slot, generation, impl_->pool_id};
}

void StatePool::release(SlotHandle handle) {
  const int slot = impl_->resolve("StatePool::release", "handle", handle);
  const int row = impl_->round_open ? impl_->round_row_of_slot[slot] : -1;
  if (row >= 0) impl_->make_row_padding(row);
  impl_->slots.free(slot);
  // The slot's host-side deferred work is dropped here; its device-side pending counts (stale
  // for layers the open round verified) are zeroed by the next acquire's zero_slot.
  impl_->strategy->reset_slot(slot);
  detail::logger().trace(
      "pool {}: release slot {}{}", impl_->pool_id, slot,
      row >= 0 ? " (row " + std::to_string(row) + " of the round is padding now)" : std::string());
}

bool StatePool::is_live(SlotHandle handle) const noexcept {
  return handle.pool_id == impl_->pool_id && impl_->slots.is_live(handle.slot, handle.generation);
}

int StatePool::free_slots() const noexcept { return impl_->slots.free_count(); }

int StatePool::slot_index(SlotHandle handle) const {
  return impl_->resolve("StatePool::slot_index", "handle", handle);
}

TensorView StatePool::conv_state(int layer) const {
  impl_->check_layer("StatePool::conv_state", layer);
  impl_->materialize_slots({});
  const auto& s = impl_->storage;
  const auto& l = s.layout;
  // Slot stride: the pool's own buffers are contiguous; a caller's views keep their stride.
  return TensorView::strided(
      s.conv(layer, 0), l.shapes.conv_dtype, {l.slots, l.shapes.conv_dim, l.shapes.conv_width - 1},
      {s.conv_slot_stride / static_cast<int64_t>(dtype_size(l.shapes.conv_dtype)),
       l.shapes.conv_width - 1, 1},
      impl_->device());
}

TensorView StatePool::ssm_state(int layer) const {
  impl_->check_layer("StatePool::ssm_state", layer);
  impl_->materialize_slots({});
  const auto& s = impl_->storage;
  const auto& l = s.layout;
  TensorView v;
  v.data = s.ssm(layer, 0);
  v.dtype = l.shapes.ssm_dtype;
  v.device = impl_->device();
  v.ndim = 1 + static_cast<int>(l.shapes.ssm_shape.size());
  v.shape[0] = l.slots;
  for (std::size_t i = 0; i < l.shapes.ssm_shape.size(); ++i)
    v.shape[i + 1] = l.shapes.ssm_shape[i];
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 1; --i) {
    v.stride[i] = stride;
    stride *= v.shape[i];
  }
  v.stride[0] = s.ssm_slot_stride / static_cast<int64_t>(dtype_size(l.shapes.ssm_dtype));
  return v;
}

TensorView StatePool::conv_state(int layer, SlotHandle handle) const {
  const char* fn = "StatePool::conv_state";
  impl_->check_layer(fn, layer);
  const int slot = impl_->resolve(fn, "handle", handle);
  impl_->materialize_slots({slot});
  const auto& s = impl_->storage;
  const auto& l = s.layout;
  return TensorView::contiguous(s.conv(layer, slot), l.shapes.conv_dtype,
                                {l.shapes.conv_dim, l.shapes.conv_width - 1}, impl_->device());
}

TensorView StatePool::ssm_state(int layer, SlotHandle handle) const {
  const char* fn = "StatePool::ssm_state";
  impl_->check_layer(fn, layer);
  const int slot = impl_->resolve(fn, "handle", handle);
  impl_->materialize_slots({slot});
  const auto& s = impl_->storage;
  const auto& st = s.layout.shapes.ssm_shape;
  return TensorView::contiguous(s.ssm(layer, slot), s.layout.shapes.ssm_dtype,
                                {st[0], st[1], st[2]}, impl_->device());
}

TensorView StatePool::workspace(Workspace which, int layer) const {
  const char* fn = "StatePool::workspace";
  impl_->check_layer(fn, layer);
  const auto& s = impl_->storage;
  const auto& l = s.layout;
  const Device dev = impl_->device();
  auto need = [&](detail::Buf b, const char* name) {
    if (!l.has(b)) {
      fail(Status::kFailedPrecondition, fn,
           std::string("which = ") + name + ": the " + strategy_name(l.strategy) +
               " strategy keeps no " + detail::buf_name(b));
    }
  };
  switch (which) {
    case Workspace::kSnapshotConv:
      need(detail::Buf::kSnapConv, "kSnapshotConv");
      return TensorView::contiguous(
          s.snap_conv(layer, 0, 0), l.shapes.conv_dtype,
          {l.max_rows, l.max_window, l.shapes.conv_dim, l.shapes.conv_width - 1}, dev);
    case Workspace::kSnapshotSsm: {
      need(detail::Buf::kSnapSsm, "kSnapshotSsm");
      const auto& st = l.shapes.ssm_shape;
      return TensorView::contiguous(s.snap_ssm(layer, 0, 0), l.shapes.ssm_dtype,
                                    {l.max_rows, l.max_window, st[0], st[1], st[2]}, dev);
    }
    case Workspace::kRecords:
      need(detail::Buf::kRecords, "kRecords");
      return TensorView::contiguous(s.record(layer, 0, 0), l.shapes.act_dtype,
                                    {l.slots, l.max_window, l.shapes.record_elems}, dev);
  }
  fail(Status::kInvalidArgument, fn,
       "which = " + std::to_string(static_cast<int>(which)) + " is not a workspace");
}

TensorView StatePool::snapshot_conv(int layer) const {
  return workspace(Workspace::kSnapshotConv, layer);
}

TensorView StatePool::snapshot_ssm(int layer) const {
  return workspace(Workspace::kSnapshotSsm, layer);
}

int64_t StatePool::committed_bytes() const noexcept {
  return impl_->storage.layout.committed_bytes();
}

int64_t StatePool::workspace_bytes() const noexcept {
  return impl_->storage.layout.workspace_bytes();
}

void StatePool::materialize(const std::vector<SlotHandle>& handles) {
  const char* fn = "StatePool::materialize";
  std::vector<int32_t> slot_list;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    const std::string what = "handles[" + std::to_string(i) + "]";
    slot_list.push_back(impl_->resolve(fn, what, handles[i]));
  }
  // A row of the open round may be materialized too: a layer it has verified has nothing
  // pending any more, a layer it has not verified replays nothing after this.
  if (handles.empty() || !slot_list.empty()) impl_->materialize_slots(slot_list);
}

void StatePool::prefill(int layer, SlotHandle handle, const GdnWeights& weights,
                        const GdnInputs& inputs, const GdnOutputs& outputs) {
  impl_->prefill(layer, handle, weights, inputs, outputs);
}

void StatePool::prefill(int layer, SlotHandle handle, const Mamba2Weights& weights,
                        const Mamba2Inputs& inputs, const Mamba2Outputs& outputs) {
  impl_->prefill(layer, handle, weights, inputs, outputs);
}

void StatePool::prefill(int layer, const std::vector<SlotHandle>& handles,
                        const std::vector<int32_t>& lengths, const GdnWeights& weights,
                        const GdnInputs& inputs, const GdnOutputs& outputs) {
  impl_->prefill_batch(layer, handles, lengths, weights, inputs, outputs);
}

void StatePool::prefill(int layer, const std::vector<SlotHandle>& handles,
                        const std::vector<int32_t>& lengths, const Mamba2Weights& weights,
                        const Mamba2Inputs& inputs, const Mamba2Outputs& outputs) {
  impl_->prefill_batch(layer, handles, lengths, weights, inputs, outputs);
}

void StatePool::decode(int layer, const std::vector<SlotHandle>& rows, const GdnWeights& weights,
                       const GdnInputs& inputs, const GdnOutputs& outputs) {
  impl_->decode(layer, rows, weights, inputs, outputs);
}

void StatePool::decode(int layer, const std::vector<SlotHandle>& rows, const Mamba2Weights& weights,
                       const Mamba2Inputs& inputs, const Mamba2Outputs& outputs) {
  impl_->decode(layer, rows, weights, inputs, outputs);
}

void StatePool::begin_verify(const VerifyBatch& batch) {
  const char* fn = "StatePool::begin_verify";
  const int rows = static_cast<int>(batch.rows.size());
  const int T = batch.window;
  if (rows <= 0 || rows > impl_->options.max_rows) {
    fail(rows <= 0 ? Status::kInvalidArgument : Status::kOutOfRange, fn,
         "batch.rows has " + std::to_string(rows) + " rows, expected 1.." +
             std::to_string(impl_->options.max_rows) + " (options.max_rows)");
  }
  if (T <= 0 || T > impl_->options.max_window) {
    fail(T <= 0 ? Status::kInvalidArgument : Status::kOutOfRange, fn,
         "batch.window = " + std::to_string(T) + " outside 1.." +
             std::to_string(impl_->options.max_window) +
             " (the scratch was sized for options.max_window)");
  }
  detail::RoundPlan plan;
  plan.rows = rows;
  plan.window = T;
  plan.is_tree = batch.is_tree();
  plan.slots = impl_->resolve_rows(fn, batch.rows);
  plan.tokens.window = T;
  plan.num_tokens = int64_t{rows} * T;
  impl_->plan_token_ranges(fn, batch, plan);
  plan.parents.resize(static_cast<std::size_t>(rows) * T);
  const std::size_t np = batch.parents.size();
  // Where row r's tree starts in batch.parents: shared (0), padded (r * T) or packed (cu[r]).
  const bool host_lengths = !batch.lengths.empty();
  const auto packed = static_cast<std::size_t>(plan.num_tokens);
  const bool padded = np == static_cast<std::size_t>(rows) * T;
  if (plan.is_tree) {
    const bool ok =
        host_lengths ? (padded || np == packed) : (padded || np == static_cast<std::size_t>(T));
    if (!ok) {
      fail(Status::kInvalidArgument, fn,
           "batch.parents has " + std::to_string(np) + " entries, expected 0 (chain), " +
               (host_lengths ? std::to_string(packed) + " (a tree per row, packed by batch.lengths)"
                             : std::to_string(T) + " (one tree)") +
               " or " + std::to_string(int64_t{rows} * T) + " (a tree per row at r * window)");
    }
  }
  for (int r = 0; r < rows; ++r) {
    // Host lengths: only a row's own tokens are checked; device cu_seqlens: the whole window
    // (any prefix of a valid parent array is a valid tree).
    const int n = host_lengths ? plan.tokens.length(r) : T;
    for (int t = 0; t < T; ++t) {
      int32_t parent = t - 1;
      if (plan.is_tree && t < n) {
        const std::size_t i = padded         ? std::size_t(r) * T + t
                              : host_lengths ? static_cast<std::size_t>(plan.tokens.token0(r)) + t
                                             : static_cast<std::size_t>(t);
        parent = batch.parents[i];
        const bool ok = t == 0 ? parent == -1 : (parent >= 0 && parent < t);
        if (!ok) {
          fail(Status::kInvalidArgument, fn,
               "batch.parents[" + std::to_string(i) + "] = " + std::to_string(parent) +
                   (t == 0 ? ": the root (token 0) must have parent -1"
                           : ": the parent of token " + std::to_string(t) + " must be in [0, " +
                                 std::to_string(t) + ")") +
                   (rows > 1 ? " (row " + std::to_string(r) + ")" : ""));
        }
      }
      plan.parents[static_cast<std::size_t>(r) * T + t] = parent;
    }
  }
  std::string why;
  const Status can = impl_->backend->can_run_round(impl_->storage.layout, plan, &why);
  if (can != Status::kSuccess) fail(can, fn, why);
  if (impl_->round_open) {
    const std::string layers = impl_->verified_layers();
    if (!layers.empty()) {
      fail(Status::kFailedPrecondition, fn,
           "the open round (" + std::to_string(impl_->plan.rows) + " rows, window " +
               std::to_string(impl_->plan.window) + ") has verified layers " + layers + " of " +
               std::to_string(impl_->config.num_layers) +
               " and was not committed: commit it or call abort_round() first");
    }
    // A round that verified nothing has nothing to undo: it is replaced.
    impl_->strategy->discard_round(*impl_->backend, impl_->storage, impl_->plan, impl_->verified);
  }
  impl_->backend->begin_round(impl_->storage, plan);
  impl_->close_round();
  impl_->batch = batch;
  impl_->plan = std::move(plan);
  for (int r = 0; r < rows; ++r) {
    if (impl_->plan.slots[r] >= 0) impl_->round_row_of_slot[impl_->plan.slots[r]] = r;
  }
  impl_->released_rows.assign(static_cast<std::size_t>(rows), SlotHandle::padding());
  impl_->round_open = true;
}

void StatePool::abort_round() {
  if (!impl_->round_open) {
    fail(Status::kFailedPrecondition, "StatePool::abort_round", "no open round to abort");
  }
  // Layers the round verified already consumed their deferred work (replay); the strategy
  // keeps the rest pending. Nothing was committed.
  impl_->strategy->discard_round(*impl_->backend, impl_->storage, impl_->plan, impl_->verified);
  detail::logger().trace("pool {}: round of {} rows aborted (verified layers: {})", impl_->pool_id,
                         impl_->plan.rows, impl_->verified_layers());
  impl_->close_round();
}

bool StatePool::round_open() const noexcept { return impl_->round_open; }

void StatePool::verify(int layer, const GdnWeights& weights, const GdnInputs& inputs,
                       const GdnOutputs& outputs) {
  impl_->verify(layer, weights, inputs, outputs);
}

void StatePool::verify(int layer, const Mamba2Weights& weights, const Mamba2Inputs& inputs,
                       const Mamba2Outputs& outputs) {
  impl_->verify(layer, weights, inputs, outputs);
}

namespace {
void check_round_for_commit(const char* fn, bool round_open, const std::vector<bool>& verified) {
  if (!round_open) {
    fail(Status::kFailedPrecondition, fn,
         "no open round: call begin_verify and verify every layer first (a round commits once)");
  }
  for (std::size_t l = 0; l < verified.size(); ++l) {
    if (!verified[l]) {
      fail(Status::kFailedPrecondition, fn,
           "layer " + std::to_string(l) + " was not verified in this round");
    }
  }
}
}  // namespace

void StatePool::commit(const std::vector<int32_t>& accepted) {
  const char* fn = "StatePool::commit";
  check_round_for_commit(fn, impl_->round_open, impl_->verified);
  const auto& plan = impl_->plan;
  if (accepted.size() != static_cast<std::size_t>(plan.rows)) {
    fail(Status::kInvalidArgument, fn,
         "accepted has " + std::to_string(accepted.size()) + " entries, the round has " +
             std::to_string(plan.rows) + " rows");
  }
  detail::CommitWork work;
  work.plan = &plan;
  work.last_step.resize(accepted.size());
  for (int r = 0; r < plan.rows; ++r) {
    const int32_t value = accepted[r];
    // The row's own window: a commit past it would commit the state after another row's
    // tokens (variable windows) or after tokens that were never verified.
    const int T = plan.tokens.length(r);
    const std::string of_row = plan.tokens.offsets.empty()
                                   ? std::string()
                                   : " (row " + std::to_string(r) + " verified " +
                                         std::to_string(T) + " tokens, batch.lengths[" +
                                         std::to_string(r) + "])";
    auto arg = [&] { return "accepted[" + std::to_string(r) + "] = " + std::to_string(value); };
    if (plan.is_tree) {
      if (value < -1 || value >= T) {
        fail(Status::kOutOfRange, fn,
             arg() + ": a tree commit takes the accepted node in [-1, " + std::to_string(T - 1) +
                 "] (-1 = keep)" + of_row);
      }
      work.last_step[r] = value;
    } else {
      if (value < 0 || value > T) {
        fail(Status::kOutOfRange, fn,
             arg() + ": a chain commit takes the accepted length in [0, " + std::to_string(T) +
                 "] (0 = keep)" + of_row);
      }
      work.last_step[r] = value - 1;
    }
    if (plan.slots[r] < 0 && work.last_step[r] >= 0 && !impl_->released_rows[r].is_padding()) {
      fail(Status::kFailedPrecondition, fn,
           arg() + ": batch.rows[" + std::to_string(r) +
               "] = " + handle_string(impl_->released_rows[r]) +
               " was released during the round, so row " + std::to_string(r) +
               " is a padding row now and must keep (" + (plan.is_tree ? "-1" : "0") + ")");
    }
    if (plan.slots[r] < 0 && work.last_step[r] >= 0) {
      fail(Status::kInvalidArgument, fn,
           arg() + ": row " + std::to_string(r) + " is a padding row and must keep (" +
               (plan.is_tree ? "-1" : "0") + ")");
    }
  }
  impl_->strategy->commit(*impl_->backend, impl_->storage, work);
  impl_->close_round();
}

void StatePool::commit(const TensorView& accepted) {
  const char* fn = "StatePool::commit";
  check_round_for_commit(fn, impl_->round_open, impl_->verified);
  const int rows = impl_->plan.rows;
  check_view(accepted, {fn, "accepted", {rows}, DType::kI32, DTypeRule::kExact, accepted.device});
  if (accepted.device == Device::kCpu) {
    std::vector<int32_t> values(static_cast<std::size_t>(rows));
    const auto* data = static_cast<const int32_t*>(accepted.data);
    for (int r = 0; r < rows; ++r) values[r] = data[r * accepted.stride[0]];
    commit(values);
    return;
  }
  if (impl_->device() != Device::kCuda) {
    fail(Status::kInvalidArgument, fn, "accepted lives on cuda, the pool's backend is cpu");
  }
  // A row released mid-round is -1 in the device slot list (make_row_padding): the kernel
  // skips it whatever its value.
  detail::CommitWork work;
  work.plan = &impl_->plan;
  work.device_accepted = accepted;
  impl_->strategy->commit(*impl_->backend, impl_->storage, work);
  impl_->close_round();
}

// --- slot operations ------------------------------------------------------------------------

void StatePool::copy_slot(SlotHandle src, SlotHandle dst) {
  const char* fn = "StatePool::copy_slot";
  const int from = impl_->resolve(fn, "src", src);
  const int to = impl_->resolve(fn, "dst", dst);
  if (from == to) {
    fail(Status::kInvalidArgument, fn,
         "src = dst = " + handle_string(src) + ": copying a slot onto itself does nothing");
  }
  impl_->check_not_in_round(fn, "dst", to);
  impl_->materialize_slots({from});
  impl_->backend->copy_slot(impl_->storage, from, to);
  impl_->mark_overwritten(to);
  detail::logger().trace("pool {}: copy slot {} -> {}", impl_->pool_id, from, to);
}

SlotHandle StatePool::fork(SlotHandle src) {
  impl_->resolve("StatePool::fork", "src", src);
  const SlotHandle dst = acquire();
  try {
    copy_slot(src, dst);
  } catch (...) {
    release(dst);
    throw;
  }
  return dst;
}

void StatePool::reset(SlotHandle handle) {
  const char* fn = "StatePool::reset";
  const int slot = impl_->resolve(fn, "handle", handle);
  impl_->check_not_in_round(fn, "handle", slot);
  impl_->backend->zero_slot(impl_->storage, slot);  // the device pending counts too
  impl_->strategy->slot_overwritten(slot);
}

int64_t StatePool::slot_state_bytes() const noexcept {
  return impl_->storage.layout.committed_bytes_per_slot();
}

void StatePool::export_slot(SlotHandle handle, const TensorView& dst) {
  const char* fn = "StatePool::export_slot";
  const int slot = impl_->resolve(fn, "handle", handle);
  impl_->check_state_buffer(fn, "dst", dst);
  impl_->materialize_slots({slot});
  impl_->backend->export_slot(impl_->storage, slot, dst.data, dst.device);
}

void StatePool::import_slot(SlotHandle handle, const TensorView& src) {
  const char* fn = "StatePool::import_slot";
  const int slot = impl_->resolve(fn, "handle", handle);
  impl_->check_not_in_round(fn, "handle", slot);
  impl_->check_state_buffer(fn, "src", src);
  impl_->backend->import_slot(impl_->storage, slot, src.data, src.device);
  impl_->mark_overwritten(slot);
}

namespace {

constexpr const char* kSlotStateFormat = "specstate.slot_state";
constexpr const char* kSlotStateVersion = "1";

SafetensorsDType safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return SafetensorsDType::kF32;
    case DType::kBF16:
      return SafetensorsDType::kBF16;
    case DType::kI32:
      return SafetensorsDType::kI32;
  }
  return SafetensorsDType::kF32;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

std::string layer_tensor_name(int layer, const char* what) {
  return "layers." + std::to_string(layer) + "." + what;
}

}  // namespace

void StatePool::export_slot(SlotHandle handle, const std::string& path) {
  const char* fn = "StatePool::export_slot";
  const int slot = impl_->resolve(fn, "handle", handle);
  if (path.empty()) fail(Status::kInvalidArgument, fn, "path is empty");
  const auto& l = impl_->storage.layout;
  std::vector<uint8_t> bytes(static_cast<std::size_t>(l.committed_bytes_per_slot()));
  impl_->materialize_slots({slot});
  impl_->backend->export_slot(impl_->storage, slot, bytes.data(), Device::kCpu);
  const std::vector<int64_t> conv_shape = {l.shapes.conv_dim, l.shapes.conv_width - 1};
  std::vector<SafetensorsFile::NewTensor> tensors;
  const uint8_t* at = bytes.data();
  for (int layer = 0; layer < l.layers; ++layer) {
    SafetensorsFile::NewTensor conv{layer_tensor_name(layer, "conv_state"),
                                    safetensors_dtype(l.shapes.conv_dtype), conv_shape,
                                    std::vector<uint8_t>(at, at + l.conv_bytes)};
    at += l.conv_bytes;
    SafetensorsFile::NewTensor ssm{layer_tensor_name(layer, "ssm_state"),
                                   safetensors_dtype(l.shapes.ssm_dtype), l.shapes.ssm_shape,
                                   std::vector<uint8_t>(at, at + l.ssm_bytes)};
    at += l.ssm_bytes;
    tensors.push_back(std::move(conv));
    tensors.push_back(std::move(ssm));
  }
  const std::map<std::string, std::string> metadata = {
      {"format", kSlotStateFormat},
      {"version", kSlotStateVersion},
      {"kind", layer_kind_name(impl_->config.kind)},
      {"num_layers", std::to_string(l.layers)},
      {"conv_dim", std::to_string(l.shapes.conv_dim)},
      {"conv_width", std::to_string(l.shapes.conv_width)},
      {"ssm_shape", shape_text(l.shapes.ssm_shape)},
      {"conv_dtype", dtype_name(l.shapes.conv_dtype)},
      {"ssm_dtype", dtype_name(l.shapes.ssm_dtype)},
  };
  const std::vector<uint8_t> file = SafetensorsFile::serialize(tensors, metadata);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out.write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
  if (out) out.flush();
  if (!out) {
    const int err = errno;
    fail(Status::kInvalidArgument, fn,
         "path = '" + path + "': cannot write the file (" + std::strerror(err) + ")");
  }
}

void StatePool::import_slot(SlotHandle handle, const std::string& path) {
  const char* fn = "StatePool::import_slot";
  const int slot = impl_->resolve(fn, "handle", handle);
  impl_->check_not_in_round(fn, "handle", slot);
  if (path.empty()) fail(Status::kInvalidArgument, fn, "path is empty");
  const SafetensorsFile file(path);  // throws naming the file when it is no safetensors file
  const auto& l = impl_->storage.layout;
  auto mismatch = [&](const std::string& what) {
    fail(Status::kInvalidArgument, fn, "'" + path + "': " + what);
  };
  auto expect_meta = [&](const char* key, const std::string& want) {
    const std::string got = file.metadata_value(key);
    if (!got.empty() && got != want) {
      mismatch(std::string("metadata ") + key + " = '" + got + "', the pool has '" + want + "'");
    }
  };
  expect_meta("format", kSlotStateFormat);
  expect_meta("kind", layer_kind_name(impl_->config.kind));
  expect_meta("num_layers", std::to_string(l.layers));
  const std::vector<int64_t> conv_shape = {l.shapes.conv_dim, l.shapes.conv_width - 1};
  struct Expected {
    std::string name;
    SafetensorsDType dtype;
    const std::vector<int64_t>* shape;
  };
  std::vector<Expected> expected;
  for (int layer = 0; layer < l.layers; ++layer) {
    expected.push_back({layer_tensor_name(layer, "conv_state"),
                        safetensors_dtype(l.shapes.conv_dtype), &conv_shape});
    expected.push_back({layer_tensor_name(layer, "ssm_state"),
                        safetensors_dtype(l.shapes.ssm_dtype), &l.shapes.ssm_shape});
  }
  for (const Expected& e : expected) {
    if (!file.contains(e.name)) {
      mismatch("no tensor named '" + e.name + "' (the pool has " + std::to_string(l.layers) + " " +
               layer_kind_name(impl_->config.kind) + " layers)");
    }
    const SafetensorsTensorInfo& info = file.info(e.name);
    if (info.dtype != e.dtype || info.shape != *e.shape) {
      mismatch("tensor '" + e.name + "' is " + info.describe() + ", the pool expects " +
               safetensors_dtype_name(e.dtype) + shape_text(*e.shape));
    }
  }
  if (file.size() != expected.size()) {
    for (const std::string& name : file.names()) {
      bool known = false;
      for (const Expected& e : expected) known = known || e.name == name;
      if (!known) {
        mismatch("tensor '" + name + "' is not part of a slot state of this pool (expected " +
                 "layers.{0.." + std::to_string(l.layers - 1) + "}.conv_state / .ssm_state)");
      }
    }
  }
  std::vector<uint8_t> bytes;
  bytes.reserve(static_cast<std::size_t>(l.committed_bytes_per_slot()));
  for (const Expected& e : expected) {
    const SafetensorsTensorInfo& info = file.info(e.name);
    const uint8_t* data = file.raw_data(e.name);
    bytes.insert(bytes.end(), data, data + (info.data_end - info.data_begin));
  }
  impl_->backend->import_slot(impl_->storage, slot, bytes.data(), Device::kCpu);
  impl_->mark_overwritten(slot);
}

Status StatePool::last_commit_status() const { return impl_->backend->last_commit_status(); }

const VerifyBatch& StatePool::current_batch() const noexcept { return impl_->batch; }

}  // namespace specstate
