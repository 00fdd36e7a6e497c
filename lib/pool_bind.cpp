// Binding a caller's committed-state views (StatePool(config, options, CommittedStateViews),
// DESIGN.md section 4): each view checked against the layout, then its address and slot stride
// recorded in the pool's storage.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pool_impl.h"

namespace specstate {

using detail::check_view;
using detail::DTypeRule;
using detail::fail;

namespace {

// floor(a / b) for b > 0.
int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0 ? 1 : 0); }

// The bytes of one committed-state view: `count` slots, slot i's state the contiguous bytes
// [begin + i * stride, begin + i * stride + len). Views may interleave (vLLM's hybrid allocator
// pages: conv state and SSM state of a slot side by side in one page), so two views conflict
// only when a byte of one slot's state of one lies in a slot's state of the other, not when
// their spans merely overlap.
struct StateSpan {
  int64_t begin = 0, stride = 0, len = 0, count = 0;  // bytes (addresses as integers)
  std::string name;
  int64_t end() const noexcept { return begin + (count - 1) * stride + len; }
};

// Whether some slot i of `a` and slot j of `b` share a byte; `*ia`, `*jb` name such a pair. Exact:
// interval [x, x + la) meets [y, y + lb) iff -lb < y - x < la. Spans are below 2^48 bytes
// (check_view), so no product here overflows.
bool states_overlap(const StateSpan& a, const StateSpan& b, int64_t* ia, int64_t* jb) {
  if (a.end() <= b.begin || b.end() <= a.begin) return false;
  // The slots j of b that meet the byte interval [x, x + len) (x relative to b.begin).
  auto meeting = [&](int64_t x, int64_t len, int64_t* jlo, int64_t* jhi) {
    *jlo = std::max<int64_t>(0, floor_div(x - b.len, b.stride) + 1);
    *jhi = std::min<int64_t>(b.count - 1, -floor_div(-(x + len), b.stride) - 1);
    return *jlo <= *jhi;
  };
  if (a.stride == b.stride) {
    // Slot i of a against slot i + k of b: the distance d + k * S, the same for every i, so one
    // range of k decides (per residue of the common stride).
    const int64_t S = a.stride, d = b.begin - a.begin;
    const int64_t klo = std::max<int64_t>(-(a.count - 1), floor_div(-b.len - d, S) + 1);
    const int64_t khi = std::min<int64_t>(b.count - 1, -floor_div(-(a.len - d), S) - 1);
    if (klo > khi) return false;
    *ia = std::max<int64_t>(0, -klo);
    *jb = *ia + klo;
    return true;
  }
  // Other strides: interval by interval over the slots of `a` inside b's span (each an O(1)
  // range test against b's slots).
  const int64_t i0 = std::max<int64_t>(0, floor_div(b.begin - a.begin - a.len, a.stride) + 1);
  const int64_t i1 = std::min<int64_t>(a.count - 1, floor_div(b.end() - 1 - a.begin, a.stride));
  for (int64_t i = i0; i <= i1; ++i) {
    int64_t jlo = 0, jhi = 0;
    if (meeting(a.begin + i * a.stride - b.begin, a.len, &jlo, &jhi)) {
      *ia = i;
      *jb = jlo;
      return true;
    }
  }
  return false;
}

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
    StateSpan mine;
    mine.begin = static_cast<int64_t>(reinterpret_cast<uintptr_t>(v.data));
    mine.stride = stride * elem;
    mine.len = inner * elem;
    mine.count = l.slots;
    mine.name = name;
    for (const StateSpan& other : spans) {
      int64_t i = 0, j = 0;
      if (states_overlap(mine, other, &i, &j)) {
        fail(Status::kInvalidArgument, fn,
             name + " overlaps " + other.name + " (slot " + std::to_string(i) + "'s state of " +
                 name + " shares bytes with slot " + std::to_string(j) + "'s of " + other.name +
                 ")");
      }
    }
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
  storage.conv_slot_stride = conv_stride * static_cast<int64_t>(dtype_size(l.shapes.conv_dtype));
  storage.ssm_slot_stride = ssm_stride * static_cast<int64_t>(dtype_size(l.shapes.ssm_dtype));
}

}  // namespace specstate
