#include "specstate/spec/verify_batch.h"

#include <algorithm>
#include <string>

#include "specstate/status.h"

namespace specstate::spec {
namespace {

std::string handle_string(const SlotHandle& h) {
  return "slot " + std::to_string(h.slot) + " (generation " + std::to_string(h.generation) + ")";
}

}  // namespace

VerifyBatchBuilder::VerifyBatchBuilder(std::vector<int> buckets, Packing packing)
    : buckets_(std::move(buckets)), packing_(packing) {
  if (packing != Packing::kPadded && packing != Packing::kVariable) {
    throw Error(Status::kInvalidArgument,
                "spec::VerifyBatchBuilder: packing = " + std::to_string(static_cast<int>(packing)) +
                    " is none (kPadded = 0, kVariable = 1)");
  }
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    if (buckets_[i] < 1 || buckets_[i] > kMaxBatchRows ||
        (i > 0 && buckets_[i] <= buckets_[i - 1])) {
      throw Error(Status::kInvalidArgument, "spec::VerifyBatchBuilder: buckets[" +
                                                std::to_string(i) +
                                                "] = " + std::to_string(buckets_[i]) +
                                                " (buckets must be strictly increasing, in [1, " +
                                                std::to_string(kMaxBatchRows) + "])");
    }
  }
}

std::vector<int> VerifyBatchBuilder::power_of_two_buckets(int max_rows) {
  if (max_rows < 1 || max_rows > kMaxBatchRows) {
    throw Error(Status::kInvalidArgument,
                "spec::VerifyBatchBuilder::power_of_two_buckets: " + std::string("max_rows = ") +
                    std::to_string(max_rows) + " must be in [1, " + std::to_string(kMaxBatchRows) +
                    "]");
  }
  std::vector<int> out;
  for (int b = 1; b < max_rows; b *= 2) out.push_back(b);
  out.push_back(max_rows);
  return out;
}

int VerifyBatchBuilder::add(SlotHandle handle, const Window& window) {
  if (handle.is_padding()) {
    throw Error(Status::kInvalidArgument,
                "spec::VerifyBatchBuilder::add: handle is a padding handle (slot " +
                    std::to_string(handle.slot) + "); padding rows are added by build()");
  }
  const auto found = rows_of_.find({handle.pool_id, handle.slot});
  if (found != rows_of_.end()) {
    throw Error(Status::kInvalidArgument,
                "spec::VerifyBatchBuilder::add: " + handle_string(handle) + " is already row " +
                    std::to_string(found->second) + " of this batch");
  }
  const int most = buckets_.empty() ? kMaxBatchRows : buckets_.back();
  if (size() >= most) {
    throw Error(Status::kOutOfRange,
                "spec::VerifyBatchBuilder::add: the batch already has " + std::to_string(size()) +
                    " rows, the most it takes (" +
                    (buckets_.empty() ? "kMaxBatchRows" : "the largest bucket") + ", " +
                    std::to_string(most) + ")");
  }
  // rows x the largest window for both packings: build() (and a pool's begin_verify, bounded
  // by max_rows x max_window) refuses a variable batch past it too, though its tokens are fewer.
  const int max_window = std::max(max_window_, window.size());
  const int64_t rows = int64_t{size()} + 1;
  const int64_t tokens = rows * max_window;
  if (tokens > kMaxBatchTokens) {
    throw Error(Status::kOutOfRange,
                "spec::VerifyBatchBuilder::add: window " + window.describe().substr(0, 64) +
                    " would make the batch " + std::to_string(tokens) + " tokens (" +
                    std::to_string(rows) +
                    " rows), past kMaxBatchTokens = " + std::to_string(kMaxBatchTokens));
  }
  // Every allocation before the first change (a copy of the window, room in each container):
  // an add() that throws (std::bad_alloc) leaves the builder as it was.
  Window copy = window;
  // Room for one more row, grown geometrically (reserve(size + 1) reallocated on every add).
  const auto room = [](auto& v) {
    if (v.size() == v.capacity()) v.reserve(v.empty() ? 8 : 2 * v.capacity());
  };
  room(handles_);
  room(windows_);
  const int row = size();
  rows_of_.emplace(std::make_pair(handle.pool_id, handle.slot), row);  // may throw: nothing else
  handles_.push_back(handle);                                          // changed yet; these
  windows_.push_back(std::move(copy));                                 // cannot throw
  max_window_ = max_window;
  return row;
}

void VerifyBatchBuilder::clear() noexcept {
  handles_.clear();
  windows_.clear();
  rows_of_.clear();
  max_window_ = 0;
}

BatchPlan VerifyBatchBuilder::build() const {
  if (handles_.empty()) {
    throw Error(Status::kFailedPrecondition, "spec::VerifyBatchBuilder::build: no row was added");
  }
  const int live = size();
  int rows = live;
  if (!buckets_.empty()) rows = *std::lower_bound(buckets_.begin(), buckets_.end(), live);

  int window = 1;
  bool all_chains = true, all_same = true;
  for (const Window& w : windows_) {
    window = std::max(window, w.size());
    all_chains = all_chains && w.is_chain();
    all_same = all_same && w == windows_.front();
  }

  if (int64_t{rows} * window > kMaxBatchTokens) {
    throw Error(Status::kOutOfRange,
                "spec::VerifyBatchBuilder::build: " + std::to_string(rows) +
                    " rows x a window of " + std::to_string(window) +
                    " tokens = " + std::to_string(int64_t{rows} * window) +
                    ", more than kMaxBatchTokens = " + std::to_string(kMaxBatchTokens));
  }
  BatchPlan plan;
  plan.live_rows = live;
  plan.batch.window = window;
  plan.batch.rows = handles_;
  plan.batch.rows.resize(static_cast<std::size_t>(rows), SlotHandle::padding());
  plan.windows = windows_;
  plan.windows.resize(static_cast<std::size_t>(rows), Window::chain(1));
  plan.token_offsets.resize(static_cast<std::size_t>(rows) + 1);
  if (packing_ == Packing::kVariable) {
    // Each live row's own tokens, no filler; padding rows have none. Trees (if any row has one)
    // are packed at the same offsets.
    plan.batch.lengths.resize(static_cast<std::size_t>(rows), 0);
    plan.token_offsets[0] = 0;
    for (int r = 0; r < rows; ++r) {
      const int n = r < live ? windows_[static_cast<std::size_t>(r)].size() : 0;
      plan.batch.lengths[static_cast<std::size_t>(r)] = n;
      plan.token_offsets[static_cast<std::size_t>(r) + 1] =
          plan.token_offsets[static_cast<std::size_t>(r)] + n;
    }
    if (all_chains) return plan;
    for (int r = 0; r < live; ++r) {
      const auto& parents = windows_[static_cast<std::size_t>(r)].parents();
      plan.batch.parents.insert(plan.batch.parents.end(), parents.begin(), parents.end());
    }
    return plan;
  }
  for (int r = 0; r <= rows; ++r) plan.token_offsets[static_cast<std::size_t>(r)] = r * window;

  if (all_chains) return plan;  // parents stay empty: a chain of T for every row
  if (all_same) {               // padding rows are never read, so they may share it too
    plan.batch.parents = windows_.front().parents();  // one tree shared by every row
    return plan;
  }
  // Per-row trees. Filler nodes of a short row hang off the node before them: they depend only
  // on their own ancestors, so they cannot change the real nodes, and acceptance never sees them.
  plan.batch.parents.resize(static_cast<std::size_t>(rows) * window);
  for (int r = 0; r < rows; ++r) {
    const auto& parents = plan.windows[static_cast<std::size_t>(r)].parents();
    for (int t = 0; t < window; ++t) {
      plan.batch.parents[static_cast<std::size_t>(r) * window + t] =
          t < static_cast<int>(parents.size()) ? parents[static_cast<std::size_t>(t)] : t - 1;
    }
  }
  return plan;
}

void BatchPlan::check_consistent(const char* function) const {
  const auto fail = [&](const std::string& what) {
    throw Error(Status::kFailedPrecondition, std::string(function) + ": the plan's " + what +
                                                 " (its fields were changed after build())");
  };
  const int n = rows();
  if (live_rows < 0 || live_rows > n) {
    fail("live_rows = " + std::to_string(live_rows) + " is not in [0, rows = " + std::to_string(n) +
         "]");
  }
  if (windows.size() != static_cast<std::size_t>(n)) {
    fail("windows has " + std::to_string(windows.size()) + " entries, rows = " + std::to_string(n));
  }
  if (token_offsets.size() != static_cast<std::size_t>(n) + 1 || token_offsets[0] != 0) {
    fail("token_offsets has " + std::to_string(token_offsets.size()) +
         " entries or does not start at 0; rows + 1 = " + std::to_string(n + 1) +
         " from 0 expected");
  }
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const int size = windows[i].size();
    // A padding row's window (a chain of one) has no tokens under variable packing.
    const bool fits = r >= live_rows || int64_t{token_offsets[i]} + size <= token_offsets[i + 1];
    if (token_offsets[i + 1] < token_offsets[i] || !fits || size > batch.window) {
      fail("row " + std::to_string(r) + ": a window of " + std::to_string(size) +
           " tokens does not fit tokens [" + std::to_string(token_offsets[i]) + ", " +
           std::to_string(token_offsets[i + 1]) + ") and T = " + std::to_string(batch.window));
    }
  }
}

std::vector<int32_t> BatchPlan::commit_values(const std::vector<Acceptance>& accepted) const {
  check_consistent("spec::BatchPlan::commit_values");
  if (static_cast<int>(accepted.size()) != live_rows) {
    throw Error(Status::kInvalidArgument,
                "spec::BatchPlan::commit_values: accepted has " + std::to_string(accepted.size()) +
                    " entries, the batch has " + std::to_string(live_rows) + " live rows");
  }
  const bool tree = is_tree();
  std::vector<int32_t> out(static_cast<std::size_t>(rows()), tree ? -1 : 0);
  for (int r = 0; r < live_rows; ++r) {
    const Acceptance& a = accepted[static_cast<std::size_t>(r)];
    const std::string what = "spec::BatchPlan::commit_values: row " + std::to_string(r);
    check_path(windows[static_cast<std::size_t>(r)], a.path, what.c_str());
    out[static_cast<std::size_t>(r)] = a.commit_value(tree);
  }
  return out;
}

std::vector<int32_t> BatchPlan::commit_lengths(const std::vector<int32_t>& accepted_lengths) const {
  check_consistent("spec::BatchPlan::commit_lengths");
  if (is_tree()) {
    throw Error(Status::kInvalidArgument,
                "spec::BatchPlan::commit_lengths: the batch holds trees; use commit_values");
  }
  if (static_cast<int>(accepted_lengths.size()) != live_rows) {
    throw Error(Status::kInvalidArgument, "spec::BatchPlan::commit_lengths: accepted_lengths has " +
                                              std::to_string(accepted_lengths.size()) +
                                              " entries, the batch has " +
                                              std::to_string(live_rows) + " live rows");
  }
  std::vector<int32_t> out(static_cast<std::size_t>(rows()), 0);
  for (int r = 0; r < live_rows; ++r) {
    const int32_t a = accepted_lengths[static_cast<std::size_t>(r)];
    const int size = windows[static_cast<std::size_t>(r)].size();
    if (a < 0 || a > size) {
      throw Error(Status::kInvalidArgument, "spec::BatchPlan::commit_lengths: accepted_lengths[" +
                                                std::to_string(r) + "] = " + std::to_string(a) +
                                                " is out of range [0, " + std::to_string(size) +
                                                "]");
    }
    out[static_cast<std::size_t>(r)] = a;
  }
  return out;
}

std::vector<Acceptance> BatchPlan::accept_greedy(const std::vector<int32_t>& tokens,
                                                 const std::vector<int32_t>& target) const {
  check_consistent("spec::BatchPlan::accept_greedy");
  if (static_cast<int64_t>(tokens.size()) != num_tokens() ||
      static_cast<int64_t>(target.size()) != num_tokens()) {
    throw Error(Status::kInvalidArgument,
                "spec::BatchPlan::accept_greedy: tokens has " + std::to_string(tokens.size()) +
                    " entries and target " + std::to_string(target.size()) +
                    ", both must equal the batch's tokens (" + std::to_string(num_tokens()) + ")");
  }
  std::vector<Acceptance> out;
  out.reserve(static_cast<std::size_t>(live_rows));
  for (int r = 0; r < live_rows; ++r) {
    const auto offset = static_cast<std::size_t>(token_offsets[static_cast<std::size_t>(r)]);
    out.push_back(spec::accept_greedy(windows[static_cast<std::size_t>(r)], tokens.data() + offset,
                                      target.data() + offset));
  }
  return out;
}

}  // namespace specstate::spec
