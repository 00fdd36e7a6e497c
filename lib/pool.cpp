// The state manager: slot lifetimes, round bookkeeping and validation. Every public entry point
// validates its whole input here, once, before the backend is handed resolved work; a rejected
// call therefore changes nothing.
#include "specstate/pool.h"

#include <atomic>
#include <string>
#include <utility>

#include "backend.h"
#include "logging.h"
#include "slot_allocator.h"
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

}  // namespace

struct StatePool::Impl {
  ModelConfig config;
  PoolOptions options;
  uint64_t pool_id = 0;
  std::unique_ptr<detail::BackendImpl> backend;
  detail::PoolStorage storage;
  detail::SlotAllocator slots;

  bool round_open = false;
  VerifyBatch batch;
  detail::RoundPlan plan;
  std::vector<bool> verified;  // [L] layers verified in the open round
  // Row of each slot in the open round (-1: none), and the first row whose slot was released
  // since begin_verify: verify and commit check one integer instead of every handle.
  std::vector<int32_t> round_row_of_slot;
  int released_row = -1;

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

  void check_gdn(const char* function, const GdnWeights& w, const GdnInputs& in,
                 const GdnOutputs& out, int64_t tokens) const {
    const GdnConfig& g = config.gdn;
    const int64_t d = g.conv_dim(), hv = g.num_v_heads;
    const Device dev = device();
    const DType act = g.act_dtype;
    check_view(
        w.conv_weight,
        {function, "weights.conv_weight", {d, g.conv_width}, act, DTypeRule::kAnyFloat, dev});
    if (g.conv_bias) {
      check_view(w.conv_bias, {function, "weights.conv_bias", {d}, act, DTypeRule::kAnyFloat, dev});
    } else if (!w.conv_bias.empty()) {
      fail(Status::kInvalidArgument, function,
           "weights.conv_bias is given (" + w.conv_bias.describe() +
               ") but the layer config has conv_bias = false");
    }
    check_view(w.A_log, {function, "weights.A_log", {hv}, act, DTypeRule::kAnyFloat, dev});
    check_view(w.dt_bias, {function, "weights.dt_bias", {hv}, act, DTypeRule::kAnyFloat, dev});
    check_view(in.mixed_qkv,
               {function, "inputs.mixed_qkv", {tokens, d}, act, DTypeRule::kExact, dev});
    check_view(in.a, {function, "inputs.a", {tokens, hv}, act, DTypeRule::kExact, dev});
    check_view(in.b, {function, "inputs.b", {tokens, hv}, act, DTypeRule::kExact, dev});
    check_optional_view(out.conv_out,
                        {function, "outputs.conv_out", {tokens, d}, act, DTypeRule::kExact, dev});
    check_view(
        out.core_out,
        {function, "outputs.core_out", {tokens, hv, g.head_v_dim}, act, DTypeRule::kExact, dev});
  }

  // The open round's rows are still live (none released since begin_verify).
  void check_rows_live(const char* function) const {
    if (released_row < 0) return;
    fail(Status::kFailedPrecondition, function,
         "batch.rows[" + std::to_string(released_row) +
             "] = " + handle_string(batch.rows[released_row]) +
             " was released after begin_verify; begin a new round");
  }

  void close_round() noexcept {
    for (int32_t slot : plan.slots) {
      if (slot >= 0) round_row_of_slot[slot] = -1;
    }
    released_row = -1;
    round_open = false;
    batch = VerifyBatch{};
    plan = detail::RoundPlan{};
    verified.assign(static_cast<std::size_t>(config.num_layers), false);
  }
};

StatePool::StatePool(const ModelConfig& config, const PoolOptions& options) {
  const char* fn = "StatePool";
  config.validate();
  if (options.num_slots <= 0) {
    fail(Status::kInvalidArgument, fn,
         "options.num_slots = " + std::to_string(options.num_slots) + " must be positive");
  }
  if (options.max_rows <= 0) {
    fail(Status::kInvalidArgument, fn,
         "options.max_rows = " + std::to_string(options.max_rows) + " must be positive");
  }
  if (options.max_window <= 0) {
    fail(Status::kInvalidArgument, fn,
         "options.max_window = " + std::to_string(options.max_window) + " must be positive");
  }
  if (options.strategy != Strategy::kSnapshot) {
    fail(Status::kNotSupported, fn,
         "options.strategy = " + std::to_string(static_cast<int>(options.strategy)) +
             ": only the snapshot strategy is implemented");
  }
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
  impl->storage.config = config;
  impl->storage.num_slots = options.num_slots;
  impl->storage.max_rows = options.max_rows;
  impl->storage.max_window = options.max_window;
  impl->backend->allocate(impl->storage);
  impl->round_row_of_slot.assign(static_cast<std::size_t>(options.num_slots), -1);
  impl->close_round();
  detail::logger().debug("pool {}: {} slots, {} layers, {} committed bytes, {} scratch bytes on {}",
                         impl->pool_id, options.num_slots, config.num_layers,
                         impl->storage.conv_bytes() + impl->storage.ssm_bytes(),
                         impl->storage.snap_conv_bytes() + impl->storage.snap_ssm_bytes(),
                         backend_name(options.backend));
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

const ModelConfig& StatePool::config() const noexcept { return impl_->config; }
const PoolOptions& StatePool::options() const noexcept { return impl_->options; }

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
  impl_->slots.free(slot);
  if (impl_->round_open && impl_->released_row < 0 && impl_->round_row_of_slot[slot] >= 0) {
    impl_->released_row = impl_->round_row_of_slot[slot];
  }
  detail::logger().trace("pool {}: release slot {}", impl_->pool_id, slot);
}

bool StatePool::is_live(SlotHandle handle) const noexcept {
  return handle.pool_id == impl_->pool_id && impl_->slots.is_live(handle.slot, handle.generation);
}

int StatePool::free_slots() const noexcept { return impl_->slots.free_count(); }

int StatePool::slot_index(SlotHandle handle) const {
  return impl_->resolve("StatePool::slot_index", "handle", handle);
}

namespace {
char* byte_offset(void* base, int64_t elems, DType dtype) {
  return static_cast<char*>(base) + elems * static_cast<int64_t>(dtype_size(dtype));
}
}  // namespace

TensorView StatePool::conv_state(int layer) const {
  impl_->check_layer("StatePool::conv_state", layer);
  const auto& s = impl_->storage;
  const DType dt = impl_->config.conv_state_dtype();
  return TensorView::contiguous(
      byte_offset(s.conv, layer * s.conv_layer_elems(), dt), dt,
      {s.num_slots, impl_->config.conv_dim(), impl_->config.conv_width() - 1}, impl_->device());
}

TensorView StatePool::ssm_state(int layer) const {
  impl_->check_layer("StatePool::ssm_state", layer);
  const auto& s = impl_->storage;
  const GdnConfig& g = impl_->config.gdn;
  const DType dt = impl_->config.ssm_state_dtype();
  return TensorView::contiguous(byte_offset(s.ssm, layer * s.ssm_layer_elems(), dt), dt,
                                {s.num_slots, g.num_v_heads, g.head_v_dim, g.head_k_dim},
                                impl_->device());
}

TensorView StatePool::snapshot_conv(int layer) const {
  impl_->check_layer("StatePool::snapshot_conv", layer);
  const auto& s = impl_->storage;
  const DType dt = impl_->config.conv_state_dtype();
  return TensorView::contiguous(
      byte_offset(s.snap_conv, layer * s.snap_conv_layer_elems(), dt), dt,
      {s.max_rows, s.max_window, impl_->config.conv_dim(), impl_->config.conv_width() - 1},
      impl_->device());
}

TensorView StatePool::snapshot_ssm(int layer) const {
  impl_->check_layer("StatePool::snapshot_ssm", layer);
  const auto& s = impl_->storage;
  const GdnConfig& g = impl_->config.gdn;
  const DType dt = impl_->config.ssm_state_dtype();
  return TensorView::contiguous(
      byte_offset(s.snap_ssm, layer * s.snap_ssm_layer_elems(), dt), dt,
      {s.max_rows, s.max_window, g.num_v_heads, g.head_v_dim, g.head_k_dim}, impl_->device());
}

int64_t StatePool::committed_bytes() const noexcept {
  return static_cast<int64_t>(impl_->storage.conv_bytes() + impl_->storage.ssm_bytes());
}

int64_t StatePool::scratch_bytes() const noexcept {
  return static_cast<int64_t>(impl_->storage.snap_conv_bytes() + impl_->storage.snap_ssm_bytes());
}

void StatePool::prefill(int layer, SlotHandle handle, const GdnWeights& weights,
                        const GdnInputs& inputs, const GdnOutputs& outputs) {
  const char* fn = "StatePool::prefill";
  impl_->check_layer(fn, layer);
  const int slot = impl_->resolve(fn, "handle", handle);
  const int64_t tokens = inputs.mixed_qkv.ndim >= 1 ? inputs.mixed_qkv.shape[0] : 0;
  if (tokens <= 0) {
    fail(Status::kInvalidArgument, fn,
         "inputs.mixed_qkv holds " + std::to_string(tokens) + " tokens (" +
             inputs.mixed_qkv.describe() + "), expected at least 1");
  }
  impl_->check_gdn(fn, weights, inputs, outputs, tokens);
  detail::AdvanceWork work;
  work.layer = layer;
  work.tokens_per_row = static_cast<int>(tokens);
  work.slots = {slot};
  impl_->backend->advance_gdn(impl_->storage, work, weights, inputs, outputs);
}

void StatePool::decode(int layer, const std::vector<SlotHandle>& rows, const GdnWeights& weights,
                       const GdnInputs& inputs, const GdnOutputs& outputs) {
  const char* fn = "StatePool::decode";
  impl_->check_layer(fn, layer);
  if (rows.empty()) fail(Status::kInvalidArgument, fn, "rows is empty");
  detail::AdvanceWork work;
  work.layer = layer;
  work.tokens_per_row = 1;
  work.slots = impl_->resolve_rows(fn, rows);
  impl_->check_gdn(fn, weights, inputs, outputs, static_cast<int64_t>(rows.size()));
  impl_->backend->advance_gdn(impl_->storage, work, weights, inputs, outputs);
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
  plan.parents.resize(static_cast<std::size_t>(rows) * T);
  const std::size_t np = batch.parents.size();
  if (plan.is_tree && np != static_cast<std::size_t>(T) &&
      np != static_cast<std::size_t>(rows) * T) {
    fail(Status::kInvalidArgument, fn,
         "batch.parents has " + std::to_string(np) + " entries, expected 0 (chain), " +
             std::to_string(T) + " (one tree) or " + std::to_string(rows * T) +
             " (a tree per row)");
  }
  for (int r = 0; r < rows; ++r) {
    for (int t = 0; t < T; ++t) {
      int32_t parent = t - 1;
      if (plan.is_tree) {
        const std::size_t i = np == static_cast<std::size_t>(T) ? t : std::size_t(r) * T + t;
        parent = batch.parents[i];
        const bool ok = t == 0 ? parent == -1 : (parent >= 0 && parent < t);
        if (!ok) {
          fail(Status::kInvalidArgument, fn,
               "batch.parents[" + std::to_string(i) + "] = " + std::to_string(parent) +
                   (t == 0 ? ": the root (token 0) must have parent -1"
                           : ": the parent of token " + std::to_string(t) + " must be in [0, " +
                                 std::to_string(t) + ")"));
        }
      }
      plan.parents[static_cast<std::size_t>(r) * T + t] = parent;
    }
  }
  impl_->backend->begin_round(impl_->storage, plan);
  impl_->close_round();
  impl_->batch = batch;
  impl_->plan = std::move(plan);
  for (int r = 0; r < rows; ++r) {
    if (impl_->plan.slots[r] >= 0) impl_->round_row_of_slot[impl_->plan.slots[r]] = r;
  }
  impl_->round_open = true;
}

void StatePool::verify(int layer, const GdnWeights& weights, const GdnInputs& inputs,
                       const GdnOutputs& outputs) {
  const char* fn = "StatePool::verify";
  if (!impl_->round_open) {
    fail(Status::kFailedPrecondition, fn, "no open round: call begin_verify first");
  }
  impl_->check_layer(fn, layer);
  const auto& plan = impl_->plan;
  impl_->check_rows_live(fn);
  impl_->check_gdn(fn, weights, inputs, outputs, int64_t{plan.rows} * plan.window);
  impl_->backend->verify_gdn(impl_->storage, layer, plan, weights, inputs, outputs);
  impl_->verified[layer] = true;
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
  impl_->check_rows_live(fn);
  const auto& plan = impl_->plan;
  if (accepted.size() != static_cast<std::size_t>(plan.rows)) {
    fail(Status::kInvalidArgument, fn,
         "accepted has " + std::to_string(accepted.size()) + " entries, the round has " +
             std::to_string(plan.rows) + " rows");
  }
  detail::CommitWork work;
  work.plan = &plan;
  work.last_step.resize(accepted.size());
  const int T = plan.window;
  for (int r = 0; r < plan.rows; ++r) {
    const int32_t value = accepted[r];
    auto arg = [&] { return "accepted[" + std::to_string(r) + "] = " + std::to_string(value); };
    if (plan.is_tree) {
      if (value < -1 || value >= T) {
        fail(Status::kOutOfRange, fn,
             arg() + ": a tree commit takes the accepted node in [-1, " + std::to_string(T - 1) +
                 "] (-1 = keep)");
      }
      work.last_step[r] = value;
    } else {
      if (value < 0 || value > T) {
        fail(Status::kOutOfRange, fn,
             arg() + ": a chain commit takes the accepted length in [0, " + std::to_string(T) +
                 "] (0 = keep)");
      }
      work.last_step[r] = value - 1;
    }
    if (plan.slots[r] < 0 && work.last_step[r] >= 0) {
      fail(Status::kInvalidArgument, fn,
           arg() + ": row " + std::to_string(r) + " is a padding row and must keep (" +
               (plan.is_tree ? "-1" : "0") + ")");
    }
  }
  impl_->backend->commit(impl_->storage, work);
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
  impl_->check_rows_live(fn);
  detail::CommitWork work;
  work.plan = &impl_->plan;
  work.device_accepted = accepted;
  impl_->backend->commit(impl_->storage, work);
  impl_->close_round();
}

Status StatePool::last_commit_status() const { return impl_->backend->last_commit_status(); }

const VerifyBatch& StatePool::current_batch() const noexcept { return impl_->batch; }

}  // namespace specstate
