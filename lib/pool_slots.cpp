// Slot operations: acquire / adopt / release (lifetimes and generations), copy / fork / reset, and
// export / import of one slot's committed state (bytes or a safetensors file).
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "logging.h"
#include "pool_impl.h"
#include "specstate/safetensors.h"

namespace specstate {

using detail::check_optional_view;
using detail::check_view;
using detail::DTypeRule;
using detail::fail;
using detail::handle_string;

// A slot's committed memory was overwritten with an exact state: no pending steps remain.
void StatePool::Impl::mark_overwritten(int slot) {
  if (storage.layout.has(detail::Buf::kPending)) {
    backend->clear_pending(storage, 0, config.num_layers, {slot});
  }
  strategy->slot_overwritten(slot);
}

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
    // Nothing of the slot's previous life survives: no pending steps or history on the device
    // (clear_pending), no deferred or sticky flags on the host; the memory, untouched, is the
    // state.
    impl_->mark_overwritten(slot);
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
  // A caller-owned pool: the caller's memory is what the engine keeps of the request (a cached
  // prefix, a preempted request it may adopt() again), so it must hold the committed state, not
  // a checkpoint with steps still deferred (replay). First, so a failure changes nothing.
  if (impl_->storage.layout.caller_committed) impl_->materialize_slots({slot});
  const int row = impl_->round_open ? impl_->round_row_of_slot[slot] : -1;
  if (row >= 0) impl_->make_row_padding(row);
  impl_->slots.free(slot);
  // The slot's host-side deferred work is dropped here; its device-side pending counts (stale
  // for layers the open round verified) are cleared when the slot is handed out again
  // (acquire's zero_slot, adopt's mark_overwritten).
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
  const char* fn = "StatePool::fork";
  impl_->resolve(fn, "src", src);
  if (impl_->slots.free_count() == 0) {
    fail(Status::kResourceExhausted, fn,
         "no free slot for the fork of src = " + handle_string(src) + ": all " +
             std::to_string(impl_->options.num_slots) + " slots are in use (options.num_slots = " +
             std::to_string(impl_->options.num_slots) + ")");
  }
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

// The file's errors (missing, unreadable, not safetensors) as the calling function's, naming it.
SafetensorsFile open_slot_file(const char* fn, const std::string& path) {
  try {
    return SafetensorsFile(path);
  } catch (const Error& e) {
    // e.what() = "<status>: <message>"; the message keeps the file's name.
    std::string message = e.what();
    const std::string prefix = std::string(status_name(e.status())) + ": ";
    if (message.compare(0, prefix.size(), prefix) == 0) message.erase(0, prefix.size());
    fail(e.status(), fn, message);
  }
}

std::string layer_tensor_name(int layer, const char* what) {
  return "layers." + std::to_string(layer) + "." + what;
}

}  // namespace

void StatePool::export_slot(SlotHandle handle, const std::string& path) {
  const char* fn = "StatePool::export_slot";
  const int slot = impl_->resolve(fn, "handle", handle);
  if (path.empty()) fail(Status::kInvalidArgument, fn, "path is empty");
  // The destination is opened before anything else: a path that cannot be written is rejected
  // before the slot is materialized, so a rejected call changes no byte and no bookkeeping.
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    const int err = errno;
    fail(Status::kInvalidArgument, fn,
         "path = '" + path + "': cannot write the file (" + std::strerror(err) + ")");
  }
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
  out.write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
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
  const SafetensorsFile file = open_slot_file(fn, path);
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

}  // namespace specstate
