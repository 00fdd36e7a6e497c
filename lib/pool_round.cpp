// The verify round (DESIGN.md section 5, steps 3-6): begin_verify validates and plans the round,
// verify runs one layer of it, commit validates the accepted values as a whole and hands them to
// the strategy (what happens on commit: StatePool::commit below), abort_round drops it.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernel_types.h"
#include "logging.h"
#include "pool_impl.h"

namespace specstate {

using detail::check_view;
using detail::DTypeRule;
using detail::fail;
using detail::handle_string;

template <typename Weights>
void StatePool::Impl::verify(int layer, const Weights& weights,
                             const typename detail::KindArgs<Weights>::Inputs& inputs,
                             const typename detail::KindArgs<Weights>::Outputs& outputs) {
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
  const bool first = !verified[layer];
  const bool captured = backend->capturing();
  if (captured) strategy->captured();
  run.io = strategy->verify_io(layer, plan, first);
  detail::KindArgs<Weights>::run(*backend, storage, run, weights, inputs, outputs);
  // (Not reached when the launch threw. A captured verify ran nothing yet: the strategy does
  // not count it as run, so an abandoned capture's abort_round settles nothing.)
  strategy->after_verify(layer, plan, first && !captured);
  verified[layer] = true;
}

// The layers the open round has verified, for messages: "0, 1", "0-5, 7", runs of three or more
// as a range and at most kRuns runs written, then "and N more" (a round of 2^20 layers made an
// 8 MB refusal).
std::string StatePool::Impl::verified_layers() const {
  constexpr int kRuns = 16;
  std::string out;
  int runs = 0;
  int64_t more = 0;
  for (std::size_t l = 0; l < verified.size();) {
    if (!verified[l]) {
      ++l;
      continue;
    }
    std::size_t e = l;
    while (e + 1 < verified.size() && verified[e + 1]) ++e;
    if (runs < kRuns) {
      const std::string run = e - l >= 2 ? std::to_string(l) + "-" + std::to_string(e)
                              : e == l   ? std::to_string(l)
                                         : std::to_string(l) + ", " + std::to_string(e);
      out += (out.empty() ? "" : ", ") + run;
    } else {
      more += static_cast<int64_t>(e - l + 1);
    }
    ++runs;
    l = e + 1;
  }
  if (more > 0) out += " and " + std::to_string(more) + " more";
  return out;
}

// The open round's row `row` becomes padding: its slot was released. The backend gets the
// round's slot list again (a device backend re-uploads it, so a device-valued commit skips the
// row); on failure nothing changed.
void StatePool::Impl::make_row_padding(int row) {
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
}

// Variable windows of a batch (DESIGN.md section 2): host lengths become the plan's offsets;
// a device cu_seqlens view is checked (never read) and handed to the kernels.
void StatePool::Impl::plan_token_ranges(const char* fn, const VerifyBatch& batch,
                                        detail::RoundPlan& plan) const {
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

void StatePool::Impl::close_round() noexcept {
  released_rows.clear();
  round_open = false;
  batch = VerifyBatch{};
  plan = detail::RoundPlan{};
  std::fill(verified.begin(), verified.end(), false);  // sized by the constructor: no allocation
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
  // Replay: the round's fold limit, one value for its verifies, commit, discard and materialize.
  const detail::Layout& lay = impl_->storage.layout;
  plan.fold_limit = detail::round_fold_limit(lay, rows);
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
  impl_->released_rows.assign(static_cast<std::size_t>(rows), SlotHandle::padding());
  impl_->round_open = true;
}

void StatePool::abort_round() {
  if (!impl_->round_open) {
    fail(Status::kFailedPrecondition, "StatePool::abort_round", "no open round to abort");
  }
  // Layers the round verified already consumed their deferred work (replay); the strategy
  // keeps the rest pending. Nothing was committed.
  // The message's list is built first, where a failure to allocate it changes nothing.
  const std::string verified =
      detail::logger().should_log(spdlog::level::trace) ? impl_->verified_layers() : std::string();
  impl_->strategy->discard_round(*impl_->backend, impl_->storage, impl_->plan, impl_->verified);
  detail::logger().trace("pool {}: round of {} rows aborted (verified layers: {})", impl_->pool_id,
                         impl_->plan.rows, verified);
  impl_->close_round();
}

bool StatePool::round_open() const noexcept { return impl_ && impl_.get()->round_open; }

void StatePool::verify(int layer, const GdnWeights& weights, const GdnInputs& inputs,
                       const GdnOutputs& outputs) {
  impl_->verify(layer, weights, inputs, outputs);
}

void StatePool::verify(int layer, const Mamba2Weights& weights, const Mamba2Inputs& inputs,
                       const Mamba2Outputs& outputs) {
  impl_->verify(layer, weights, inputs, outputs);
}

void StatePool::verify(int layer, const KdaWeights& weights, const KdaInputs& inputs,
                       const KdaOutputs& outputs) {
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
  if (impl_->backend->capturing()) impl_->strategy->captured();
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
  if (impl_->backend->capturing()) impl_->strategy->captured();
  impl_->strategy->commit(*impl_->backend, impl_->storage, work);
  impl_->close_round();
}

// --- slot operations ------------------------------------------------------------------------

Status StatePool::last_commit_status() const { return impl_->backend->last_commit_status(); }

const VerifyBatch& StatePool::current_batch() const noexcept {
  static const VerifyBatch kMovedFrom{};
  return impl_ ? impl_.get()->batch : kMovedFrom;
}

}  // namespace specstate
