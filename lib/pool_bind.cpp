// Binding a caller's committed-state views (StatePool(config, options, CommittedStateViews),
// DESIGN.md section 4): each view checked against the layout, then its address and slot stride
// recorded in the pool's storage.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pool_impl.h"

namespace specstate {

using detail::check_view;
using detail::DTypeRule;
using detail::fail;

namespace {

// The bytes of one committed-state view: `count` slots, slot i's state the contiguous bytes
// [begin + i * stride, begin + i * stride + len). Views may interleave (vLLM's hybrid allocator
// pages: conv state and SSM state of a slot side by side in one page), so two views conflict
// only when a byte of one slot's state of one lies in a slot's state of the other, not when
// their spans merely overlap (detail::rows_overlap decides exactly).
struct StateSpan : detail::ByteRows {
  std::string name;
};

}  // namespace

// The caller's committed-state views (DESIGN.md section 4), checked against the layout and bound
// into `storage` (per-layer addresses and slot strides); throws naming the view.
void detail::bind_caller_committed(const char* fn, const CommittedStateViews& views,
                                   const detail::Layout& l, Device device,
                                   detail::PoolStorage& storage) {
  const int L = l.layers;
  const auto count = static_cast<std::size_t>(L);
  if (views.conv.size() != count || views.ssm.size() != count) {
    fail(Status::kInvalidArgument, fn,
         "committed has " + std::to_string(views.conv.size()) + " conv and " +
             std::to_string(views.ssm.size()) + " ssm views, expected " + std::to_string(L) +
             " of each (config.num_layers)");
  }
  const auto& st = l.shapes.ssm_shape;
  std::vector<StateSpan> spans;
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
    // Each slot's state compact, in the layout's element order (options.conv_layout /
    // ssm_layout: the inner strides a view of that order has).
    std::vector<int64_t> want;
    if (conv) {
      const auto cs = l.conv_inner_strides();
      want = {cs[0], cs[1]};
    } else {
      want = l.ssm_inner_strides();
    }
    int64_t inner = 1;
    for (int d = v.ndim - 1; d >= 1; --d) inner *= v.shape[d];
    for (int d = 1; d < v.ndim; ++d) {
      const int64_t expect = want[static_cast<std::size_t>(d - 1)];
      if (v.shape[d] > 1 && v.stride[d] != expect) {
        fail(Status::kInvalidArgument, fn,
             name + " (" + v.describe() + ") stride " + std::to_string(d) + " = " +
                 std::to_string(v.stride[d]) + ", expected " + std::to_string(expect) +
                 ": each slot's state must be contiguous, in the options." +
                 (conv ? std::string("conv_layout = ") + conv_layout_name(l.conv_layout)
                       : std::string("ssm_layout = ") + ssm_layout_name(l.ssm_layout)) +
                 " order");
      }
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
    StateSpan mine;
    mine.begin = static_cast<int64_t>(reinterpret_cast<uintptr_t>(v.data));
    mine.stride = stride * elem;
    mine.len = inner * elem;
    mine.count = l.slots;
    mine.name = name;
    const auto lo = static_cast<uintptr_t>(mine.begin);
    const auto hi = static_cast<uintptr_t>(mine.end());
    storage.caller_lo = spans.empty() ? lo : std::min(storage.caller_lo, lo);
    storage.caller_hi = spans.empty() ? hi : std::max(storage.caller_hi, hi);
    spans.push_back(std::move(mine));
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
  // No two views share a byte: one sweep over the views sorted by address (every pair was
  // compared: 64,000 layers took 28 s).
  std::vector<const detail::ByteRows*> rows;
  rows.reserve(spans.size());
  for (const StateSpan& span : spans) rows.push_back(&span);
  std::size_t a = 0, b = 0;
  int64_t i = 0, j = 0;
  if (detail::first_overlap(
          rows, [](std::size_t, std::size_t) { return true; }, detail::OverlapOrder::kLaterFirst,
          &a, &b, &j, &i)) {
    const StateSpan &mine = spans[b], &other = spans[a];  // mine: bound after other
    fail(Status::kInvalidArgument, fn,
         mine.name + " overlaps " + other.name + " (slot " + std::to_string(i) + "'s state of " +
             mine.name + " shares bytes with slot " + std::to_string(j) + "'s of " + other.name +
             ")");
  }
  storage.conv_slot_stride = conv_stride * static_cast<int64_t>(dtype_size(l.shapes.conv_dtype));
  storage.ssm_slot_stride = ssm_stride * static_cast<int64_t>(dtype_size(l.shapes.ssm_dtype));
}

namespace {

// A live pool's memory in the registry: one layer's committed conv or SSM state (its slots), or
// one workspace buffer (whole).
struct ClaimedRows : detail::ByteRows {
  const detail::CommittedClaim* owner = nullptr;
  uint64_t pool_id = 0;
  std::string what;  // "committed conv[3]", "workspace snap_ssm", ...
};

// Never destroyed (a pool destroyed during the process's exit, after the statics' destructors,
// still finds them).
std::mutex& claims_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<ClaimedRows>& claims() {
  static auto* all = new std::vector<ClaimedRows>;
  return *all;
}

// Every layer's committed conv and SSM state of `storage` (its slots), as registry entries.
std::vector<ClaimedRows> committed_rows(const detail::PoolStorage& storage,
                                        const detail::CommittedClaim* owner, uint64_t pool_id) {
  const detail::Layout& l = storage.layout;
  std::vector<ClaimedRows> rows;
  rows.reserve(2 * static_cast<std::size_t>(l.layers));
  for (int layer = 0; layer < l.layers; ++layer) {
    for (const bool conv : {true, false}) {
      const char* base =
          (conv ? storage.conv_layers : storage.ssm_layers)[static_cast<std::size_t>(layer)];
      ClaimedRows r;
      r.begin = static_cast<int64_t>(reinterpret_cast<uintptr_t>(base));
      r.stride = conv ? storage.conv_slot_stride : storage.ssm_slot_stride;
      r.len = conv ? l.conv_bytes : l.ssm_bytes;
      r.count = l.slots;
      r.owner = owner;
      r.pool_id = pool_id;
      r.what =
          std::string(conv ? "committed conv[" : "committed ssm[") + std::to_string(layer) + "]";
      if (base != nullptr && r.len > 0) rows.push_back(std::move(r));
    }
  }
  return rows;
}

}  // namespace

void detail::CommittedClaim::claim_caller(const char* fn, uint64_t pool_id,
                                          const PoolStorage& storage) {
  std::vector<ClaimedRows> mine = committed_rows(storage, this, pool_id);
  const std::lock_guard<std::mutex> lock(claims_mutex());
  std::vector<ClaimedRows>& all = claims();
  // Mine against every other pool's, in one sweep by address (every pair was compared).
  std::vector<const detail::ByteRows*> rows;
  std::vector<const ClaimedRows*> of;  // rows[k]'s entry: mine first, then the registry's
  rows.reserve(mine.size() + all.size());
  for (const ClaimedRows& m : mine) of.push_back(&m);
  for (const ClaimedRows& other : all) {
    if (other.owner != this) of.push_back(&other);
  }
  for (const ClaimedRows* r : of) rows.push_back(r);
  const std::size_t n_mine = mine.size();
  std::size_t a = 0, b = 0;
  int64_t i = 0, j = 0;
  if (detail::first_overlap(
          rows, [&](std::size_t x, std::size_t y) { return x < n_mine && y >= n_mine; },
          detail::OverlapOrder::kEarlierFirst, &a, &b, &i, &j)) {
    const ClaimedRows &m = *of[a], &other = *of[b];
    fail(Status::kInvalidArgument, fn,
         // m.what is "committed conv[l]": the view is named "committed.conv[l]".
         "committed." + m.what.substr(std::string("committed ").size()) +
             " shares bytes with the " + other.what + " of pool " + std::to_string(other.pool_id) +
             ", which is alive (slot " + std::to_string(i) +
             "'s state here): two pools would use the same memory; drop that pool, and the state "
             "views it returned (they keep it alive), before another takes its memory");
  }
  // The only allocation before the entries go in: a failure leaves the registry as it was (one
  // push_back at a time left the first entries behind, unowned, pointing at memory the failed
  // pool then freed).
  all.reserve(all.size() + mine.size());
  for (ClaimedRows& m : mine) all.push_back(std::move(m));
  held_ = true;
}

void detail::CommittedClaim::claim_own(uint64_t pool_id, const PoolStorage& storage) {
  const Layout& l = storage.layout;
  // Its own committed state per layer (as a caller's is), unless the caller's (claim_caller);
  // its workspace buffers whole.
  std::vector<ClaimedRows> mine;
  if (!l.caller_committed) mine = committed_rows(storage, this, pool_id);
  for (const Buf buf : {Buf::kSnapConv, Buf::kSnapSsm, Buf::kRecords, Buf::kPending, Buf::kPath,
                        Buf::kFactors, Buf::kCursor}) {
    ClaimedRows r;
    r.begin = static_cast<int64_t>(reinterpret_cast<uintptr_t>(storage.base(buf)));
    r.len = l.size(buf);
    r.stride = r.len;
    r.count = 1;
    r.owner = this;
    r.pool_id = pool_id;
    r.what = std::string("workspace ") + buf_name(buf);
    if (storage.base(buf) != nullptr && r.len > 0) mine.push_back(std::move(r));
  }
  const std::lock_guard<std::mutex> lock(claims_mutex());
  std::vector<ClaimedRows>& all = claims();
  // The only allocation before the entries go in: a failure leaves the registry as it was (one
  // push_back at a time left the first entries behind, unowned, pointing at memory the failed
  // pool then freed).
  all.reserve(all.size() + mine.size());
  for (ClaimedRows& m : mine) all.push_back(std::move(m));
  held_ = true;
}

void detail::CommittedClaim::release() noexcept {
  if (!held_) return;
  const std::lock_guard<std::mutex> lock(claims_mutex());
  std::vector<ClaimedRows>& all = claims();
  all.erase(std::remove_if(all.begin(), all.end(),
                           [this](const ClaimedRows& r) { return r.owner == this; }),
            all.end());
  held_ = false;
}

detail::CommittedClaim::~CommittedClaim() { release(); }

}  // namespace specstate
