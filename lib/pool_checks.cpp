// Call validation of the pool: handles (foreign, out of range, stale, repeated), layers, outputs
// that would alias the pool's memory, rows of the open round, state buffers. Nothing here
// writes anything.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pool_impl.h"

namespace specstate {

using detail::fail;
using detail::handle_string;

std::string detail::handle_string(const SlotHandle& handle) {
  return "{slot " + std::to_string(handle.slot) + ", generation " +
         std::to_string(handle.generation) + ", pool " + std::to_string(handle.pool_id) + "}";
}

// Resolves a handle of a live request or throws, naming `what`.
int StatePool::Impl::resolve(const char* function, const std::string& what,
                             const SlotHandle& handle) const {
  // Padding first: SlotHandle::padding() carries pool id 0, so it would otherwise read as a
  // handle of another pool. It stands for no request; only a batch's rows may be padding.
  if (handle.is_padding()) {
    std::string call = function;
    const std::string prefix = "StatePool::";
    if (call.compare(0, prefix.size(), prefix) == 0) call.erase(0, prefix.size());
    fail(Status::kInvalidArgument, function,
         what + " is a padding handle: " + call + " needs a live request (got " +
             handle_string(handle) + ")");
  }
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
    // Why, from the slot's generation g (0: never handed out): a handle of a later generation
    // than g was never issued (forged or corrupted), one of g is of a released slot, an earlier
    // one is stale.
    const uint64_t g = slots.generation(handle.slot);
    std::string why;
    if (g == 0) {
      why = " was never issued: the slot was never acquired";
    } else if (handle.generation == 0 || handle.generation > g) {
      why = " was never issued: the slot is at generation " + std::to_string(g);
    } else if (slots.is_allocated(handle.slot)) {
      why = " is stale: the slot was released and acquired again (generation " + std::to_string(g) +
            ")";
    } else if (handle.generation == g) {
      why = " is not live: the slot was released";
    } else {
      why = " is stale: the slot was released, acquired again and released (generation " +
            std::to_string(g) + ")";
    }
    fail(Status::kFailedPrecondition, function, what + " = " + handle_string(handle) + why);
  }
  return handle.slot;
}

// Resolves the rows of a batch: padding -> -1; rejects foreign, stale and repeated slots, the
// first bad row in row order (a repeat is the row whose slot an earlier row has). O(rows log
// rows) in any order, one allocation of O(rows) whatever num_slots is (an engine's whole cache
// may be the pool's slots; called per layer by decode): the rows' (slot, row) pairs sorted once.
// Inserting into a sorted vector row by row was quadratic for rows in descending slot order
// (131,072 rows: 3.7 s a decode call against 38 ms ascending).
std::vector<int32_t> StatePool::Impl::resolve_rows(const char* function,
                                                   const std::vector<SlotHandle>& rows) {
  std::vector<int32_t> resolved(rows.size(), -1);
  std::vector<std::pair<int32_t, std::size_t>> seen;
  seen.reserve(rows.size());
  std::exception_ptr bad;  // the first row that does not resolve, rethrown unless a repeat
  std::size_t bad_row = rows.size();  // comes before it
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].is_padding()) continue;
    try {
      resolved[r] = resolve(function, "rows[" + std::to_string(r) + "]", rows[r]);
    } catch (...) {
      bad = std::current_exception();
      bad_row = r;
      break;
    }
    seen.emplace_back(resolved[r], r);
  }
  std::sort(seen.begin(), seen.end());
  std::size_t repeat = rows.size(), first = 0;  // the earliest repeat and the row it repeats
  for (std::size_t i = 1; i < seen.size(); ++i) {
    if (seen[i].first == seen[i - 1].first && seen[i].second < repeat) {
      std::size_t j = i - 1;  // the slot's first row: the start of its run
      while (j > 0 && seen[j - 1].first == seen[i].first) --j;
      repeat = seen[i].second;
      first = seen[j].second;
    }
  }
  if (repeat < bad_row) {
    fail(Status::kInvalidArgument, function,
         "rows[" + std::to_string(repeat) + "] = " + handle_string(rows[repeat]) +
             " repeats the slot of rows[" + std::to_string(first) +
             "]: a slot appears at most once per batch");
  }
  if (bad) std::rethrow_exception(bad);
  return resolved;
}

std::vector<int32_t> StatePool::Impl::resolve_handles(const char* function,
                                                      const std::vector<SlotHandle>& handles) {
  std::vector<int32_t> resolved;
  resolved.reserve(handles.size());
  std::unordered_map<int32_t, std::size_t> first_at;  // O(handles), whatever num_slots is
  for (std::size_t i = 0; i < handles.size(); ++i) {
    const std::string what = "handles[" + std::to_string(i) + "]";
    const int slot = resolve(function, what, handles[i]);
    const auto seen = first_at.emplace(slot, i);
    if (!seen.second) {
      fail(Status::kInvalidArgument, function,
           what + " = " + handle_string(handles[i]) + " repeats handles[" +
               std::to_string(seen.first->second) + "]: a slot appears at most once");
    }
    resolved.push_back(slot);
  }
  return resolved;
}

void StatePool::Impl::check_layer(const char* function, int layer) const {
  if (layer < 0 || layer >= config.num_layers) {
    fail(Status::kOutOfRange, function,
         "layer = " + std::to_string(layer) + " outside [0, " + std::to_string(config.num_layers) +
             ")");
  }
}

// A call's buffer (an output, or the slot state import_slot reads) must not overlap the pool's
// own memory (committed state or workspace): the call would overwrite what it reads, and the
// strategy's state with it.
void StatePool::Impl::check_no_alias(const char* function, const char* name,
                                     const TensorView& view) const {
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
               ": a call's buffers (inputs, weights, outputs, an imported slot state) must be "
               "the caller's own memory");
    }
  }
  if (!storage.layout.caller_committed) return;
  // A caller-owned committed state: the bytes of its slots' states, compared exactly (the views
  // may interleave with memory that is no slot's state, vLLM's hybrid pages: a buffer there is
  // the caller's own), each layer's conv and SSM view in turn (none where the view lies outside
  // all of them).
  if (end <= storage.caller_lo || begin >= storage.caller_hi) return;
  const auto& l = storage.layout;
  const detail::ByteRows call = detail::byte_rows(view);
  for (int layer = 0; layer < l.layers; ++layer) {
    for (int kind = 0; kind < 2; ++kind) {
      detail::ByteRows slots;
      slots.begin = static_cast<int64_t>(
          reinterpret_cast<uintptr_t>(kind == 0 ? storage.conv(layer, 0) : storage.ssm(layer, 0)));
      slots.stride = kind == 0 ? storage.conv_slot_stride : storage.ssm_slot_stride;
      slots.len = kind == 0 ? l.conv_bytes : l.ssm_bytes;
      slots.count = l.slots;
      int64_t i = 0, slot = 0;
      if (detail::rows_overlap(call, slots, &i, &slot)) {
        fail(Status::kInvalidArgument, function,
             std::string(name) + " (" + view.describe() + ") overlaps committed." +
                 (kind == 0 ? "conv" : "ssm") + "[" + std::to_string(layer) + "], slot " +
                 std::to_string(slot) +
                 " (the caller-owned committed state the pool adopted): a call's buffers must "
                 "be other memory");
      }
    }
  }
}

void StatePool::Impl::check_no_overlap(const char* function, const char* out_name,
                                       const TensorView& out, const char* other_name,
                                       const TensorView& other) {
  if (out.data == nullptr || other.data == nullptr) return;
  if (detail::span_bytes(out) == 0 || detail::span_bytes(other) == 0) return;
  int64_t i = 0, j = 0;
  if (!detail::rows_overlap(detail::byte_rows(out), detail::byte_rows(other), &i, &j)) return;
  fail(Status::kInvalidArgument, function,
       std::string(out_name) + " (" + out.describe() + ") overlaps " + other_name + " (" +
           other.describe() + "): index " + std::to_string(i) + " of " + out_name +
           " shares bytes with index " + std::to_string(j) + " of " + other_name +
           "; a layer call's outputs must not share memory with its inputs, weights or other "
           "outputs");
}

// A slot that is a row of the open round cannot be advanced (its commit would overwrite it).
void StatePool::Impl::check_not_in_round(const char* function, const std::string& what,
                                         int slot) const {
  const int row = round_row(slot);
  if (row < 0) return;
  fail(Status::kFailedPrecondition, function,
       what + " = slot " + std::to_string(slot) + " is row " + std::to_string(row) +
           " of the open verify round: commit or abort_round() first");
}

// A contiguous 1-D byte-carrying view of exactly ceil(slot_state_bytes / dtype size) elements
// on a device the backend can copy to / from, not overlapping the pool.
void StatePool::Impl::check_state_buffer(const char* function, const char* name,
                                         const TensorView& v) const {
  const int64_t bytes =
      StatePool::kSlotStateHeaderBytes + storage.layout.committed_bytes_per_slot();
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

}  // namespace specstate
