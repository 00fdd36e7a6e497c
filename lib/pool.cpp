// The StatePool facade (include/specstate/pool.h): construction, memory views, materialize and
// the non-speculative layer path (prefill, decode). The round, slot operations, caller-owned
// binding and call validation live in pool_round.cpp, pool_slots.cpp, pool_bind.cpp and
// pool_checks.cpp (docs/architecture.md); the state they share is StatePool::Impl
// (pool_impl.h).
#include "specstate/pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "logging.h"
#include "pool_access.h"
#include "pool_impl.h"

namespace specstate {

using detail::fail;

namespace {

std::atomic<uint64_t> next_pool_id{1};

}  // namespace

template <typename Weights>
void StatePool::Impl::advance(int layer, std::vector<int32_t> slot_list, int tokens,
                              const Weights& w,
                              const typename detail::KindArgs<Weights>::Inputs& in,
                              const typename detail::KindArgs<Weights>::Outputs& out,
                              std::vector<int32_t> offsets) {
  detail::LayerRun run;
  run.layer = layer;
  run.tokens_per_row = tokens;
  run.offsets = std::move(offsets);
  if (backend->capturing()) strategy->captured();
  run.io = strategy->advance_io(layer, slot_list);
  run.slots = std::move(slot_list);
  detail::KindArgs<Weights>::run(*backend, storage, run, w, in, out);
  strategy->after_advance(*backend, storage, layer, run.slots, run.io);
}

// Runs the strategy's deferred work for `slot_list` (all live slots when empty).
void StatePool::Impl::materialize_slots(std::vector<int32_t> slot_list) {
  if (!strategy->defers_work()) return;
  if (slot_list.empty()) slot_list = slots.live_slots();
  if (backend->capturing()) strategy->captured();
  strategy->materialize(*backend, storage, slot_list);
}

template <typename Weights>
void StatePool::Impl::prefill(int layer, SlotHandle handle, const Weights& weights,
                              const typename detail::KindArgs<Weights>::Inputs& inputs,
                              const typename detail::KindArgs<Weights>::Outputs& outputs) {
  using K = detail::KindArgs<Weights>;
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
void StatePool::Impl::prefill_batch(int layer, const std::vector<SlotHandle>& rows,
                                    const std::vector<int32_t>& lengths, const Weights& weights,
                                    const typename detail::KindArgs<Weights>::Inputs& inputs,
                                    const typename detail::KindArgs<Weights>::Outputs& outputs) {
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
void StatePool::Impl::decode(int layer, const std::vector<SlotHandle>& rows, const Weights& weights,
                             const typename detail::KindArgs<Weights>::Inputs& inputs,
                             const typename detail::KindArgs<Weights>::Outputs& outputs) {
  const char* fn = "StatePool::decode";
  check_kind<Weights>(fn);
  check_layer(fn, layer);
  if (rows.empty()) fail(Status::kInvalidArgument, fn, "rows is empty");
  std::vector<int32_t> slot_list = resolve_rows(fn, rows);
  for (std::size_t r = 0; r < slot_list.size(); ++r) {
    if (slot_list[r] >= 0) check_not_in_round(fn, "rows[" + std::to_string(r) + "]", slot_list[r]);
  }
  check_args(fn, weights, inputs, outputs, static_cast<int64_t>(rows.size()));
  advance(layer, std::move(slot_list), 1, weights, inputs, outputs);
}

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
    case Backend::kCuda: {
      // A layer kind without CUDA kernels is refused before a device is opened.
      std::string why;
      const Status kind_ok = detail::cuda_supports_kind(config, &why);
      if (kind_ok != Status::kSuccess) fail(kind_ok, fn, why);
      impl->backend = detail::make_cuda_backend(options);
      break;
    }
    default:
      fail(Status::kInvalidArgument, fn,
           "options.backend = " + std::to_string(static_cast<int>(options.backend)));
  }
  std::string why;
  const Status can = impl->backend->can_implement(layout, config, &why);
  if (can != Status::kSuccess) fail(can, fn, why);
  // Only now that the backend accepted the sizes: what grows with num_slots.
  impl->slots = detail::SlotAllocator(options.num_slots);
  impl->strategy = detail::make_strategy(layout);
  impl->storage.config = config;
  impl->storage.layout = layout;
  if (committed) {
    detail::bind_caller_committed(fn, *committed, layout, impl->backend->device(), impl->storage);
    // The caller's memory checked against every live pool's (pool_impl.h, CommittedClaim) and
    // entered in the registry before anything is allocated.
    impl->claim.claim_caller(fn, impl->pool_id, impl->storage);
  }
  impl->backend->allocate(impl->storage);
  try {
    impl->claim.claim_own(impl->pool_id, impl->storage);  // may run out of memory
    impl->close_round();
  } catch (...) {
    impl->backend->free(impl->storage);  // Impl frees nothing itself: the pool never existed
    throw;
  }
  detail::logger().debug(
      "pool {}: {} slots, {} layers, {} strategy, {} committed bytes, {} workspace bytes on {}",
      impl->pool_id, options.num_slots, config.num_layers, strategy_name(options.strategy),
      layout.committed_bytes(), layout.workspace_bytes(), backend_name(options.backend));
  impl_ = std::move(impl);
}

void StatePool::Impl::close(bool materialize_caller) noexcept {
  if (!backend) return;
  // A caller-owned pool: the caller's memory outlives the pool and is what the engine keeps of
  // its requests (as release() leaves it), so every live slot's deferred steps (replay) are
  // applied before the pool goes: the memory then holds the committed states, whatever the
  // strategy (on the pool's stream, which must outlive the pool). A failure here (a device
  // fault) cannot be thrown from a destructor: it is logged, and the memory keeps the
  // checkpoints.
  if (storage.layout.caller_committed && materialize_caller) {
    // First every queued use of the pool finishes (its stream or another; and none runs while
    // the pool's stream is being captured into a graph).
    if (!backend->settle_for_close()) {
      detail::logger().error(
          "pool {}: its live slots were not materialized into the caller's memory before the "
          "pool was destroyed (the device failed, or the pool's stream is being captured); call "
          "materialize() before dropping a caller-owned pool",
          pool_id);
    } else {
      try {
        materialize_slots({});
      } catch (const std::exception& e) {
        detail::logger().error(
            "pool {}: its live slots could not be materialized into the caller's memory before "
            "the pool was destroyed ({}); call materialize() before dropping a caller-owned pool "
            "to see the error",
            pool_id, e.what());
      }
    }
  }
  // The registry lets go of the pool's memory once no work of the pool touches it any more, and
  // before it is freed: freed first, another thread's allocator could hand it out at once, and a
  // pool built over it was refused as overlapping this one ("which is alive"). (A pool whose
  // stream is being captured cannot wait here; its memory is let go all the same.)
  backend->settle_for_close();
  claim.release();
  backend->free(storage);  // waits for the device's work (the materialize's too)
}

StatePool::~StatePool() noexcept {
  if (impl_) impl_->close();
}

void StatePool::discard() noexcept {
  if (!impl_) return;
  if (impl_->storage.layout.caller_committed && impl_->backend->capturing()) {
    detail::logger().error(
        "pool {}: discarded while its stream is being captured into a graph: its memory is "
        "freed under the capture",
        impl_->pool_id);
  }
  impl_->close(/*materialize_caller=*/false);
  impl_ = std::unique_ptr<Impl>();
}

StatePool::StatePool(StatePool&&) noexcept = default;
StatePool& StatePool::operator=(StatePool&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

const detail::PoolStorage& detail::PoolAccess::storage(const StatePool& pool) {
  return pool.impl_->storage;
}

StatePool::ImplPtr::ImplPtr() noexcept = default;
StatePool::ImplPtr::ImplPtr(ImplPtr&&) noexcept = default;
StatePool::ImplPtr& StatePool::ImplPtr::operator=(ImplPtr&&) noexcept = default;
StatePool::ImplPtr::~ImplPtr() = default;
StatePool::ImplPtr& StatePool::ImplPtr::operator=(std::unique_ptr<Impl> p) noexcept {
  p_ = std::move(p);
  return *this;
}

void StatePool::ImplPtr::moved_from() {
  throw Error(Status::kFailedPrecondition,
              "StatePool: the pool was moved from (a moved-from pool can only be assigned to or "
              "destroyed)");
}

const ModelConfig& StatePool::config() const noexcept {
  static const ModelConfig kMovedFrom{};
  return impl_ ? impl_.get()->config : kMovedFrom;
}
const PoolOptions& StatePool::options() const noexcept {
  static const PoolOptions kMovedFrom{};
  return impl_ ? impl_.get()->options : kMovedFrom;
}

TensorView StatePool::conv_state(int layer) const {
  impl_->check_layer("StatePool::conv_state", layer);
  impl_->materialize_slots({});
  const auto& s = impl_->storage;
  const auto& l = s.layout;
  // Slot stride: the pool's own buffers are contiguous; a caller's views keep their stride. The
  // inner strides are the layout's (options.conv_layout).
  const auto cs = l.conv_inner_strides();
  return TensorView::strided(
      s.conv(layer, 0), l.shapes.conv_dtype, {l.slots, l.shapes.conv_dim, l.shapes.conv_width - 1},
      {s.conv_slot_stride / static_cast<int64_t>(dtype_size(l.shapes.conv_dtype)), cs[0], cs[1]},
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
  const std::vector<int64_t> inner = l.ssm_inner_strides();  // options.ssm_layout
  for (std::size_t i = 0; i < l.shapes.ssm_shape.size(); ++i) {
    v.shape[i + 1] = l.shapes.ssm_shape[i];
    v.stride[i + 1] = inner[i];
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
  const auto cs = l.conv_inner_strides();
  return TensorView::strided(s.conv(layer, slot), l.shapes.conv_dtype,
                             {l.shapes.conv_dim, l.shapes.conv_width - 1}, {cs[0], cs[1]},
                             impl_->device());
}

TensorView StatePool::ssm_state(int layer, SlotHandle handle) const {
  const char* fn = "StatePool::ssm_state";
  impl_->check_layer(fn, layer);
  const int slot = impl_->resolve(fn, "handle", handle);
  impl_->materialize_slots({slot});
  const auto& s = impl_->storage;
  const auto& st = s.layout.shapes.ssm_shape;
  const std::vector<int64_t> in = s.layout.ssm_inner_strides();
  return TensorView::strided(s.ssm(layer, slot), s.layout.shapes.ssm_dtype, {st[0], st[1], st[2]},
                             {in[0], in[1], in[2]}, impl_->device());
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
    case Workspace::kSnapshotConv: {
      need(detail::Buf::kSnapConv, "kSnapshotConv");
      const auto cs = l.conv_inner_strides();
      return TensorView::strided(
          s.snap_conv(layer, 0, 0), l.shapes.conv_dtype,
          {l.max_rows, l.max_window, l.shapes.conv_dim, l.shapes.conv_width - 1},
          {l.max_window * l.conv_elems, l.conv_elems, cs[0], cs[1]}, dev);
    }
    case Workspace::kSnapshotSsm: {
      need(detail::Buf::kSnapSsm, "kSnapshotSsm");
      const auto& st = l.shapes.ssm_shape;
      const std::vector<int64_t> in = l.ssm_inner_strides();
      return TensorView::strided(s.snap_ssm(layer, 0, 0), l.shapes.ssm_dtype,
                                 {l.max_rows, l.max_window, st[0], st[1], st[2]},
                                 {l.max_window * l.ssm_elems, l.ssm_elems, in[0], in[1], in[2]},
                                 dev);
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
  return impl_ ? impl_.get()->storage.layout.committed_bytes() : 0;
}

int64_t StatePool::workspace_bytes() const noexcept {
  return impl_ ? impl_.get()->storage.layout.workspace_bytes() : 0;
}

void StatePool::materialize(const std::vector<SlotHandle>& handles) {
  const char* fn = "StatePool::materialize";
  const std::vector<int32_t> slot_list = impl_->resolve_handles(fn, handles);
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

void StatePool::prefill(int layer, SlotHandle handle, const KdaWeights& weights,
                        const KdaInputs& inputs, const KdaOutputs& outputs) {
  impl_->prefill(layer, handle, weights, inputs, outputs);
}

void StatePool::prefill(int layer, const std::vector<SlotHandle>& handles,
                        const std::vector<int32_t>& lengths, const KdaWeights& weights,
                        const KdaInputs& inputs, const KdaOutputs& outputs) {
  impl_->prefill_batch(layer, handles, lengths, weights, inputs, outputs);
}

void StatePool::decode(int layer, const std::vector<SlotHandle>& rows, const KdaWeights& weights,
                       const KdaInputs& inputs, const KdaOutputs& outputs) {
  impl_->decode(layer, rows, weights, inputs, outputs);
}
}  // namespace specstate
