// Slot operations: acquire / adopt / release (lifetimes and generations), copy / fork / reset, and
// export / import of one slot's committed state (bytes or a safetensors file).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
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
#include "specstate/spec/file_path.h"

namespace specstate {

using detail::check_path;
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
  uint64_t generation = 0;
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
  uint64_t generation = 0;
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
  // The slot's memory is what the engine keeps of the request (a cached prefix in a caller's
  // memory, a preempted request it may adopt() again, either pool), so it must hold the committed
  // state, not a checkpoint with steps still deferred (replay: adopt() then resumed from an older
  // state than snapshot's). First, so a failure changes nothing.
  impl_->materialize_slots({slot});
  const int row = impl_->round_row(slot);
  if (row >= 0) impl_->make_row_padding(row);
  impl_->slots.free(slot);
  // The slot's host-side deferred work is dropped here; its device-side pending counts (stale
  // for layers the open round verified) are cleared when the slot is handed out again
  // (acquire's zero_slot, adopt's mark_overwritten).
  impl_->strategy->reset_slot(slot);
  // Nothing that allocates after the change (a message built here as a std::string threw
  // std::bad_alloc out of a release that had happened); spdlog formats only at an enabled level
  // and reports its own failures to its error handler.
  if (row >= 0) {
    detail::logger().trace("pool {}: release slot {} (row {} of the round is padding now)",
                           impl_->pool_id, slot, row);
  } else {
    detail::logger().trace("pool {}: release slot {}", impl_->pool_id, slot);
  }
}

bool StatePool::is_live(SlotHandle handle) const noexcept {
  const Impl* impl = impl_.get();  // (null: moved from)
  return impl != nullptr && handle.pool_id == impl->pool_id &&
         impl->slots.is_live(handle.slot, handle.generation);
}

int StatePool::free_slots() const noexcept { return impl_ ? impl_.get()->slots.free_count() : 0; }

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

namespace {

// --- the slot state header (pool.h, docs/lifecycle.md "The export format") --------------------
// 64 bytes, little-endian, in front of the state bytes of an export buffer:
//   [0, 8)    magic "specslot"
//   [8, 12)   u32 format version (1)
//   [12, 16)  u32 layer kind (LayerKind: 0 gated_delta_net, 1 mamba2, 2 kda)
//   [16, 20)  u32 num_layers
//   [20, 23)  u8 act_dtype, conv_state_dtype, ssm_state_dtype (DType: 0 f32, 1 bf16, 2 i32)
//   [23, 24)  0
//   [24, 44)  u32 x 5 shape fields: GDN and KDA num_k_heads, num_v_heads, head_k_dim,
//             head_v_dim, conv_width; Mamba2 num_heads, head_dim, d_state, n_groups, conv_width
//   [44, 48)  0
//   [48, 56)  u64 state bytes that follow (num_layers x (conv window + SSM state))
//   [56, 64)  u64 FNV-1a 64 of bytes [0, 56)
constexpr int64_t kHeaderBytes = StatePool::kSlotStateHeaderBytes;
constexpr char kMagic[8] = {'s', 'p', 'e', 'c', 's', 'l', 'o', 't'};
constexpr uint32_t kHeaderVersion = 1;
constexpr int kShapeFields = 5;
constexpr int64_t kChecksumAt = 56;
static_assert(kHeaderBytes == 64, "the header layout above is 64 bytes");

using Header = std::array<uint8_t, static_cast<std::size_t>(kHeaderBytes)>;

// What a header records of a pool: its config's kind, layer count, dtypes and shape fields.
struct Fingerprint {
  uint32_t kind = 0, layers = 0;
  uint8_t act = 0, conv = 0, ssm = 0;
  // The state's element order (PoolOptions::conv_layout in bit 0, ssm_layout in bit 1): 0, the
  // canonical order, is what every export of a specstate without layouts holds.
  uint8_t layout = 0;
  uint32_t shape[kShapeFields] = {};
  uint64_t state_bytes = 0;
};

const char* const kGdnFields[kShapeFields] = {"num_k_heads", "num_v_heads", "head_k_dim",
                                              "head_v_dim", "conv_width"};
const char* const kMamba2Fields[kShapeFields] = {"num_heads", "head_dim", "d_state", "n_groups",
                                                 "conv_width"};

// The shape fields of a layer kind's config, with the names the header's mismatch message and
// the file metadata give them: one overload per layer kind.
struct ShapeFields {
  const char* const* names;
  std::array<int, kShapeFields> values;
};
ShapeFields shape_fields(const GdnConfig& g) {
  return {kGdnFields, {g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim, g.conv_width}};
}
ShapeFields shape_fields(const Mamba2Config& m) {
  return {kMamba2Fields, {m.num_heads, m.head_dim, m.d_state, m.n_groups, m.conv_width}};
}
// KDA's shape fields are GDN's (the same heads and dims; the kind field tells them apart).
ShapeFields shape_fields(const KdaConfig& c) {
  return {kGdnFields, {c.num_k_heads, c.num_v_heads, c.head_k_dim, c.head_v_dim, c.conv_width}};
}
ShapeFields shape_fields(const ModelConfig& c) {
  return c.visit_layer([](const auto& layer) { return shape_fields(layer); });
}

uint8_t layout_bits(const detail::Layout& l) {
  return static_cast<uint8_t>((l.conv_layout == ConvLayout::kChannelsLast ? 1 : 0) |
                              (l.ssm_layout == SsmLayout::kKV ? 2 : 0));
}

std::string layout_text(uint8_t bits) {
  if (bits > 3) return "layout bits " + std::to_string(bits) + " (unknown)";
  return std::string("conv_layout = ") +
         conv_layout_name(bits & 1 ? ConvLayout::kChannelsLast : ConvLayout::kChannelsFirst) +
         ", ssm_layout = " + ssm_layout_name(bits & 2 ? SsmLayout::kKV : SsmLayout::kVK);
}

Fingerprint fingerprint(const ModelConfig& c, int64_t state_bytes, uint8_t layout = 0) {
  Fingerprint f;
  f.layout = layout;
  f.kind = static_cast<uint32_t>(c.kind);
  f.layers = static_cast<uint32_t>(c.num_layers);
  f.act = static_cast<uint8_t>(c.act_dtype());
  f.conv = static_cast<uint8_t>(c.conv_state_dtype());
  f.ssm = static_cast<uint8_t>(c.ssm_state_dtype());
  const ShapeFields fields = shape_fields(c);
  for (int i = 0; i < kShapeFields; ++i) f.shape[i] = static_cast<uint32_t>(fields.values[i]);
  f.state_bytes = static_cast<uint64_t>(state_bytes);
  return f;
}

uint64_t fnv1a(const uint8_t* p, int64_t n) {
  uint64_t h = 14695981039346656037ull;
  for (int64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void put_le(uint8_t* at, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t get_le(const uint8_t* at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{at[i]} << (8 * i);
  return value;
}

Header encode(const Fingerprint& f) {
  Header h{};
  std::memcpy(h.data(), kMagic, sizeof(kMagic));
  put_le(h.data() + 8, kHeaderVersion, 4);
  put_le(h.data() + 12, f.kind, 4);
  put_le(h.data() + 16, f.layers, 4);
  h[20] = f.act;
  h[21] = f.conv;
  h[22] = f.ssm;
  h[23] = f.layout;
  for (int i = 0; i < kShapeFields; ++i) put_le(h.data() + 24 + 4 * i, f.shape[i], 4);
  put_le(h.data() + 48, f.state_bytes, 8);
  put_le(h.data() + kChecksumAt, fnv1a(h.data(), kChecksumAt), 8);
  return h;
}

std::string kind_text(uint32_t kind) {
  const std::string name =
      kind <= 0x7fffffffu ? layer_kind_name(static_cast<LayerKind>(kind)) : "unknown";
  return name != "unknown" ? name : "kind " + std::to_string(kind) + " (unknown)";
}

std::string dtype_text(uint8_t dtype) {
  return dtype <= static_cast<uint8_t>(DType::kI32)
             ? dtype_name(static_cast<DType>(dtype))
             : "dtype " + std::to_string(dtype) + " (unknown)";
}

std::string hex_bytes(const uint8_t* p, int n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

// Checks an export buffer's header against the pool's fingerprint; "" when it fits, otherwise
// what is wrong (a buffer that is no export, a corrupt header, or the fields that differ).
// `names`: the pool's shape field names (shape_fields).
std::string header_mismatch(const Header& h, const Fingerprint& want, const char* const* names) {
  if (std::memcmp(h.data(), kMagic, sizeof(kMagic)) != 0) {
    return "holds no slot state header: its first 8 bytes are " + hex_bytes(h.data(), 8) +
           ", an export_slot buffer starts with \"specslot\" (" +
           hex_bytes(reinterpret_cast<const uint8_t*>(kMagic), 8) +
           "); it is not an export, or one of a specstate without the header";
  }
  const auto version = static_cast<uint32_t>(get_le(h.data() + 8, 4));
  if (version != kHeaderVersion) {
    return "has slot state header version " + std::to_string(version) +
           ", this library reads version " + std::to_string(kHeaderVersion);
  }
  const uint64_t stored = get_le(h.data() + kChecksumAt, 8);
  const uint64_t actual = fnv1a(h.data(), kChecksumAt);
  if (stored != actual) {
    return "has a truncated or corrupt slot state header (checksum of bytes 0..55 is " +
           std::to_string(actual) + ", the header stores " + std::to_string(stored) + ")";
  }
  if (h[23] > 3) {
    return "has a corrupt slot state header: byte 23 (the element orders) = " +
           std::to_string(h[23]) + " is none (0..3)";
  }
  if (get_le(h.data() + 44, 4) != 0) {
    return "has a corrupt slot state header: reserved bytes 44..47 = " +
           hex_bytes(h.data() + 44, 4) + ", expected 00 00 00 00";
  }
  Fingerprint got;
  got.kind = static_cast<uint32_t>(get_le(h.data() + 12, 4));
  got.layers = static_cast<uint32_t>(get_le(h.data() + 16, 4));
  got.act = h[20];
  got.conv = h[21];
  got.ssm = h[22];
  got.layout = h[23];
  for (int i = 0; i < kShapeFields; ++i) {
    got.shape[i] = static_cast<uint32_t>(get_le(h.data() + 24 + 4 * i, 4));
  }
  got.state_bytes = get_le(h.data() + 48, 8);
  std::vector<std::string> diffs;
  auto differ = [&](const std::string& field, const std::string& was, const std::string& is) {
    if (was != is) diffs.push_back(field + " = " + was + ", this pool has " + is);
  };
  differ("kind", kind_text(got.kind), kind_text(want.kind));
  differ("num_layers", std::to_string(got.layers), std::to_string(want.layers));
  differ("act_dtype", dtype_text(got.act), dtype_text(want.act));
  differ("conv_state_dtype", dtype_text(got.conv), dtype_text(want.conv));
  differ("ssm_state_dtype", dtype_text(got.ssm), dtype_text(want.ssm));
  if (got.kind == want.kind) {  // the shape fields mean the same only within one kind
    for (int i = 0; i < kShapeFields; ++i) {
      differ(names[i], std::to_string(got.shape[i]), std::to_string(want.shape[i]));
    }
  }
  if (got.layout != want.layout) {
    // The same state in another element order: the bytes would be read transposed.
    diffs.push_back(layout_text(got.layout) + ", this pool has " + layout_text(want.layout) +
                    " (the bytes are in the exporting pool's element order; a safetensors file " +
                    "holds the logical order and moves between layouts)");
  }
  if (diffs.empty() && got.state_bytes != want.state_bytes) {
    diffs.push_back("state bytes = " + std::to_string(got.state_bytes) + ", this pool has " +
                    std::to_string(want.state_bytes));
  }
  if (diffs.empty()) return std::string();
  std::string out = "was exported from ";
  for (std::size_t i = 0; i < diffs.size(); ++i) out += (i ? "; " : "") + diffs[i];
  return out + (got.layout != want.layout && diffs.size() == 1
                    ? ": it is a slot state of another state layout"
                    : ": it is a slot state of another model config");
}

// `n` bytes at `at` (host or device memory) as the one conv window of a one-layer, one-slot
// storage, so that the backend's export_slot / import_slot copy them to / from a host buffer in
// its own stream order (a device buffer is written by earlier work on the pool's stream). The
// backend has no plain byte-copy primitive, and these two already do exactly this copy; a host
// buffer never comes here (it is memcpy'd).
detail::PoolStorage bytes_as_storage(const detail::PoolStorage& pool, void* at, int64_t n) {
  detail::PoolStorage s;
  s.config = pool.config;
  s.layout.layers = 1;
  s.layout.slots = 1;
  s.layout.conv_bytes = n;
  s.layout.ssm_bytes = 0;
  s.conv_layers = {static_cast<char*>(at)};
  s.ssm_layers = {static_cast<char*>(at)};
  s.conv_slot_stride = n;
  s.ssm_slot_stride = 0;
  return s;
}

}  // namespace

int64_t StatePool::slot_state_bytes() const noexcept {
  return impl_ ? kHeaderBytes + impl_.get()->storage.layout.committed_bytes_per_slot() : 0;
}

void StatePool::export_slot(SlotHandle handle, const TensorView& dst) {
  const char* fn = "StatePool::export_slot";
  const int slot = impl_->resolve(fn, "handle", handle);
  impl_->check_state_buffer(fn, "dst", dst);
  const auto& l = impl_->storage.layout;
  const Header header =
      encode(fingerprint(impl_->config, l.committed_bytes_per_slot(), layout_bits(l)));
  impl_->materialize_slots({slot});
  char* out = static_cast<char*>(dst.data);
  if (dst.device == Device::kCpu) {
    std::memcpy(out, header.data(), header.size());
  } else {
    impl_->backend->import_slot(bytes_as_storage(impl_->storage, out, kHeaderBytes), 0,
                                header.data(), Device::kCpu);
  }
  impl_->backend->export_slot(impl_->storage, slot, out + kHeaderBytes, dst.device);
}

void StatePool::import_slot(SlotHandle handle, const TensorView& src) {
  const char* fn = "StatePool::import_slot";
  const int slot = impl_->resolve(fn, "handle", handle);
  impl_->check_not_in_round(fn, "handle", slot);
  impl_->check_state_buffer(fn, "src", src);
  const auto& l = impl_->storage.layout;
  char* in = static_cast<char*>(src.data);
  Header header{};
  if (src.device == Device::kCpu) {
    std::memcpy(header.data(), in, header.size());
  } else {
    impl_->backend->export_slot(bytes_as_storage(impl_->storage, in, kHeaderBytes), 0,
                                header.data(), Device::kCpu);
  }
  const std::string why = header_mismatch(
      header, fingerprint(impl_->config, l.committed_bytes_per_slot(), layout_bits(l)),
      shape_fields(impl_->config).names);
  if (!why.empty()) {
    fail(Status::kInvalidArgument, fn, "src (" + src.describe() + ") " + why);
  }
  impl_->backend->import_slot(impl_->storage, slot, in + kHeaderBytes, src.device);
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
// header_only: the header alone (SafetensorsFile::read_header), max_bytes bounding it.
SafetensorsFile open_slot_file(const char* fn, const std::string& path, uint64_t max_bytes,
                               bool header_only) {
  try {
    return header_only ? SafetensorsFile::read_header(path, max_bytes)
                       : SafetensorsFile(path, max_bytes);
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

// Metadata of a slot state file beyond its tensors: act_dtype and the shape fields of the
// buffer header (the same names), e.g. {"act_dtype", "bf16"}, {"num_k_heads", "16"}.
std::vector<std::pair<std::string, std::string>> config_metadata(const ModelConfig& c) {
  const Fingerprint f = fingerprint(c, 0);
  const char* const* names = shape_fields(c).names;
  std::vector<std::pair<std::string, std::string>> out = {{"act_dtype", dtype_text(f.act)}};
  for (int i = 0; i < kShapeFields; ++i) out.emplace_back(names[i], std::to_string(f.shape[i]));
  return out;
}

}  // namespace

void StatePool::export_slot(SlotHandle handle, const std::string& path) {
  const char* fn = "StatePool::export_slot";
  const int slot = impl_->resolve(fn, "handle", handle);
  check_path(fn, "path", path);
  // A directory is no file to export to; a FIFO that no process reads would block the open (with
  // the pool's lock held, every other call on the pool waited): opened without blocking first,
  // which fails (ENXIO) exactly then. A FIFO with a reader (a pipe to /dev/stdout), /dev/null and
  // other devices are written as before.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      fail(Status::kInvalidArgument, fn, "path = '" + path + "' is a directory");
    }
    if (S_ISFIFO(st.st_mode)) {
      const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        fail(
            Status::kInvalidArgument, fn,
            "path = '" + path + "' is a FIFO " +
                (err == ENXIO ? std::string("that no process reads")
                              : std::string("that cannot be opened (") + std::strerror(err) + ")"));
      }
      ::close(fd);
    }
  }
  // The destination is opened before anything else: a path that cannot be written is rejected
  // before the slot is materialized, so a rejected call changes no byte and no bookkeeping. A
  // regular file is written to a temporary file beside it and renamed over it once complete
  // (spec::ReplacingFile): a write that fails (a full disk) leaves the previous export as it was.
  spec::ReplacingFile out(path);
  if (!out.ok()) {
    fail(Status::kInvalidArgument, fn,
         "path = '" + path + "': cannot write the file (" + out.error() + ")");
  }
  const auto& l = impl_->storage.layout;
  std::vector<uint8_t> bytes(static_cast<std::size_t>(l.committed_bytes_per_slot()));
  impl_->materialize_slots({slot});
  impl_->backend->export_slot(impl_->storage, slot, bytes.data(), Device::kCpu);
  const std::vector<int64_t> conv_shape = {l.shapes.conv_dim, l.shapes.conv_width - 1};
  std::vector<SafetensorsFile::NewTensor> tensors;
  const uint8_t* at = bytes.data();
  for (int layer = 0; layer < l.layers; ++layer) {
    // The file holds the logical (canonical) element order whatever the pool's layout.
    SafetensorsFile::NewTensor conv{layer_tensor_name(layer, "conv_state"),
                                    safetensors_dtype(l.shapes.conv_dtype), conv_shape,
                                    std::vector<uint8_t>(static_cast<std::size_t>(l.conv_bytes))};
    l.permute_conv(at, conv.bytes.data(), false);
    at += l.conv_bytes;
    SafetensorsFile::NewTensor ssm{layer_tensor_name(layer, "ssm_state"),
                                   safetensors_dtype(l.shapes.ssm_dtype), l.shapes.ssm_shape,
                                   std::vector<uint8_t>(static_cast<std::size_t>(l.ssm_bytes))};
    l.permute_ssm(at, ssm.bytes.data(), false);
    at += l.ssm_bytes;
    tensors.push_back(std::move(conv));
    tensors.push_back(std::move(ssm));
  }
  std::map<std::string, std::string> metadata = {
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
  // The rest of the fingerprint the buffer header carries: the activation dtype and the
  // config's shape fields (the tensors' shapes and dtypes carry everything else).
  for (const auto& kv : config_metadata(impl_->config)) metadata.insert(kv);
  const std::vector<uint8_t> file = SafetensorsFile::serialize(tensors, metadata);
  const bool written = spec::write_all(out.fd(), file.data(), file.size());
  const std::string failed = out.commit(written, written ? 0 : errno);
  if (!failed.empty()) {
    fail(Status::kInvalidArgument, fn,
         "path = '" + path + "': cannot write the file (" + failed + "; " +
             (out.in_place() ? "written in place: the file is incomplete)"
                             : "the file is as it was)"));
  }
}

void StatePool::import_slot(SlotHandle handle, const std::string& path) {
  const char* fn = "StatePool::import_slot";
  const int slot = impl_->resolve(fn, "handle", handle);
  impl_->check_not_in_round(fn, "handle", slot);
  check_path(fn, "path", path);
  const auto& l = impl_->storage.layout;
  // The largest slot state file of this pool: the length field, a header of 2L tensor entries
  // and metadata (foreign keys allowed: 1 MiB of them), and the state's bytes. The header is read
  // and checked first (a file of another config is named by what differs, whatever its size),
  // then a file larger than that is refused before its data is read (a 2 GiB file was read
  // whole, then refused: 2 GB of memory and seconds for a 2 KB slot).
  const uint64_t max_header = (uint64_t{1} << 20) + uint64_t{1024} * 2 * l.layers;
  const uint64_t max_bytes = 8 + max_header + static_cast<uint64_t>(l.committed_bytes_per_slot());
  auto mismatch = [&](const std::string& what) {
    fail(Status::kInvalidArgument, fn, "'" + path + "': " + what);
  };
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
  // The pool's checks of a file's header (metadata, tensors), run on the header alone, then on
  // the file read (it may have changed in between).
  const auto check = [&](const SafetensorsFile& file) {
    // A key the file has is compared, empty or not (an absent one: a file that predates it);
    // "version" too, as the buffer path checks its header's.
    auto expect_meta = [&](const char* key, const std::string& want) {
      const auto it = file.metadata().find(key);
      if (it != file.metadata().end() && it->second != want) {
        mismatch(std::string("metadata ") + key + " = '" + it->second + "', the pool has '" + want +
                 "'");
      }
    };
    expect_meta("format", kSlotStateFormat);
    expect_meta("version", kSlotStateVersion);
    expect_meta("kind", layer_kind_name(impl_->config.kind));
    expect_meta("num_layers", std::to_string(l.layers));
    for (const Expected& e : expected) {
      if (!file.contains(e.name)) {
        mismatch("no tensor named '" + e.name + "' (the pool has " + std::to_string(l.layers) +
                 " " + layer_kind_name(impl_->config.kind) + " layers)");
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
    // Files of a specstate without these keys have none: checked where present, like the rest.
    for (const auto& kv : config_metadata(impl_->config)) expect_meta(kv.first.c_str(), kv.second);
  };
  check(open_slot_file(fn, path, max_header, true));
  const SafetensorsFile file = open_slot_file(fn, path, max_bytes, false);
  check(file);
  std::vector<uint8_t> bytes;
  bytes.reserve(static_cast<std::size_t>(l.committed_bytes_per_slot()));
  for (const Expected& e : expected) {
    const SafetensorsTensorInfo& info = file.info(e.name);
    const uint8_t* data = file.raw_data(e.name);
    const auto n = static_cast<std::size_t>(info.data_end - info.data_begin);
    // The file's logical order into the pool's element order (options.conv_layout / ssm_layout).
    bytes.resize(bytes.size() + n);
    uint8_t* to = bytes.data() + bytes.size() - n;
    if (e.shape == &conv_shape) {
      l.permute_conv(data, to, true);
    } else {
      l.permute_ssm(data, to, true);
    }
  }
  impl_->backend->import_slot(impl_->storage, slot, bytes.data(), Device::kCpu);
  impl_->mark_overwritten(slot);
}

}  // namespace specstate
