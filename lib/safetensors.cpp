// The safetensors reader (include/specstate/safetensors.h). Every check runs when a file is
// opened, so the accessors only look up names and convert bytes.
#include "specstate/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "specstate/spec/json_depth.h"
#include "specstate/status.h"
#include "validate.h"

namespace specstate {
namespace {

using json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we (a corrupt length field
// would otherwise make us try to parse the whole file as JSON).
constexpr uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;
// A header is an object of objects of arrays (depth 3); anything nested deeper than this is
// hostile. nlohmann's parser is iterative, but dump() and comparisons recurse, so 100k levels
// would overflow the stack: the depth is checked on the raw bytes before parsing.
constexpr int kMaxJsonDepth = 64;
// Keys of a header (one per tensor, three in each tensor's entry, and __metadata__'s), and the
// values of one array (a shape's extents; data_offsets has two). A checkpoint shard holds a few
// thousand tensors of a few dimensions each.
constexpr std::size_t kMaxHeaderKeys = std::size_t{1} << 18;
constexpr std::size_t kMaxHeaderArrayItems = 64;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(Status::kInvalidArgument, "safetensors '" + path + "': " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& tensor,
                              const std::string& what) {
  fail(path, "tensor '" + tensor + "': " + what);
}

bool parse_dtype(const std::string& text, SafetensorsDType* out) {
  if (text == "F32")
    *out = SafetensorsDType::kF32;
  else if (text == "I32")
    *out = SafetensorsDType::kI32;
  else if (text == "BF16")
    *out = SafetensorsDType::kBF16;
  else if (text == "F16")
    *out = SafetensorsDType::kF16;
  else
    return false;
  return true;
}

// Little-endian loads, independent of the host's byte order.
uint16_t load_u16(const uint8_t* p) noexcept {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}
uint32_t load_u32(const uint8_t* p) noexcept {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t load_u64(const uint8_t* p) noexcept {
  return static_cast<uint64_t>(load_u32(p)) | (static_cast<uint64_t>(load_u32(p + 4)) << 32);
}
float float_from_bits(uint32_t bits) noexcept {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

std::string join_shape(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

// A non-negative JSON integer as int64, or false.
bool as_index(const json& value, int64_t* out) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (value.is_number_integer()) {
    const auto v = value.get<int64_t>();
    if (v < 0) return false;
    *out = v;
    return true;
  }
  return false;
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDType dtype) noexcept {
  switch (dtype) {
    case SafetensorsDType::kF32:
      return "F32";
    case SafetensorsDType::kI32:
      return "I32";
    case SafetensorsDType::kBF16:
      return "BF16";
    case SafetensorsDType::kF16:
      return "F16";
  }
  return "?";
}

int64_t safetensors_dtype_size(SafetensorsDType dtype) noexcept {
  return (dtype == SafetensorsDType::kBF16 || dtype == SafetensorsDType::kF16) ? 2 : 4;
}

float float_from_f16(uint16_t value) noexcept {
  const uint32_t sign = static_cast<uint32_t>(value & 0x8000u) << 16;
  const uint32_t exponent = (value >> 10) & 0x1fu;
  uint32_t mantissa = value & 0x3ffu;
  if (exponent == 0x1fu) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf/NaN
  if (exponent != 0) return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return float_from_bits(sign);  // +-0
  // Subnormal half: normalise into a float (every half subnormal is a float normal).
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  mantissa &= 0x3ffu;
  return float_from_bits(sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13));
}

std::string SafetensorsTensorInfo::describe() const {
  return std::string(safetensors_dtype_name(dtype)) + join_shape(shape);
}

// --- SafetensorsFile ------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path)
    : SafetensorsFile(path, std::numeric_limits<uint64_t>::max(), false) {}

SafetensorsFile::SafetensorsFile(const std::string& path, uint64_t max_bytes)
    : SafetensorsFile(path, max_bytes, false) {}

SafetensorsFile SafetensorsFile::read_header(const std::string& path, uint64_t max_header_bytes) {
  return SafetensorsFile(path, max_header_bytes, true);
}

SafetensorsFile::SafetensorsFile(const std::string& path, uint64_t max_bytes, bool header_only)
    : file_size_(0), header_only_(header_only) {
  detail::check_path("SafetensorsFile", "path", path);
  // Regular files only. A directory "opens" as a stream whose size reads as 2^63-1, and a FIFO
  // blocks open(2) until a writer appears: opened without blocking, then fstat decides.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open the file: ") + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    fail(path, std::string("cannot stat the file: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    fail(path, std::string("is not a regular file (") +
                   (S_ISDIR(st.st_mode)    ? "a directory"
                    : S_ISFIFO(st.st_mode) ? "a FIFO"
                                           : "a device or socket") +
                   ")");
  }
  // A regular file never blocks, so O_NONBLOCK is harmless for the reads below.
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  file_size_ = size;
  // Reads bytes_[from, to) of the file (the reads are sequential).
  const auto read_to = [&](std::size_t from, std::size_t to) {
    for (std::size_t done = from; done < to;) {
      const ssize_t got = ::read(fd, bytes_.data() + done, to - done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fail(path, "read error after " + std::to_string(done) + " of " + std::to_string(size) +
                       " bytes" +
                       (got < 0 ? std::string(": ") + std::strerror(errno)
                                : std::string(" (file shrank?)")));
      }
      done += static_cast<std::size_t>(got);
    }
  };
  if (!header_only && size > max_bytes) {
    fail(path, "is " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
                   " bytes a file of its use may be (not read)");
  }
  // The length field, then the header, parsed before anything else of the file is read: a file
  // whose length field or header is refused costs at most 8 + kMaxHeaderBytes bytes of reading,
  // whatever its size (a 3 GB file of junk was read whole, then refused by its length field).
  bytes_.resize(static_cast<std::size_t>(std::min<uint64_t>(size, 8)));
  read_to(0, bytes_.size());
  if (size >= 8) {
    const uint64_t length = load_u64(bytes_.data());
    if (length > size - 8) {
      fail(path, "header length " + std::to_string(length) + " exceeds the " +
                     std::to_string(size - 8) +
                     " bytes that follow the length field (truncated header?; not read)");
    }
    if (header_only && length > max_bytes) {
      fail(path, "header length " + std::to_string(length) + " exceeds the " +
                     std::to_string(max_bytes) + " bytes a header of its use may be (not read)");
    }
    if (length > kMaxHeaderBytes) {
      fail(path, "header length " + std::to_string(length) + " exceeds the limit of " +
                     std::to_string(kMaxHeaderBytes) + " bytes (not read)");
    }
    bytes_.resize(static_cast<std::size_t>(8 + length));
    read_to(8, bytes_.size());
  }
  parse(path);
  if (header_only) return;
  // The header holds and its tensors tile the rest of the file: the data, after the header.
  if (size > static_cast<uint64_t>(std::numeric_limits<std::ptrdiff_t>::max())) {
    fail(path, "size " + std::to_string(size) + " bytes does not fit in memory");
  }
  const std::size_t have = bytes_.size();
  try {
    bytes_.resize(static_cast<std::size_t>(size));
  } catch (const std::bad_alloc&) {
    fail(path, "cannot allocate " + std::to_string(size) + " bytes to read it");
  }
  read_to(have, bytes_.size());
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<uint8_t> bytes, const std::string& label) {
  SafetensorsFile file;
  file.bytes_ = std::move(bytes);
  file.file_size_ = file.bytes_.size();
  file.parse(label);
  return file;
}

void SafetensorsFile::parse(const std::string& label) {
  path_ = label;
  const uint64_t file_size = file_size_;
  if (file_size < 8) {
    fail(path_, "file is " + std::to_string(file_size) +
                    " bytes, too short for the 8-byte header length (truncated file?)");
  }
  const uint64_t header_len = load_u64(bytes_.data());
  if (header_len > file_size - 8) {
    fail(path_, "header length " + std::to_string(header_len) + " exceeds the " +
                    std::to_string(file_size - 8) +
                    " bytes that follow the length field (truncated header?)");
  }
  if (header_len > kMaxHeaderBytes) {
    fail(path_, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                    std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_len < 2) {
    fail(path_, "header length " + std::to_string(header_len) + " is too short for a JSON object");
  }
  data_start_ = static_cast<int64_t>(8 + header_len);
  const int64_t data_size = static_cast<int64_t>(file_size) - data_start_;

  const std::string_view header_text(reinterpret_cast<const char*>(bytes_.data()) + 8,
                                     static_cast<std::size_t>(data_start_ - 8));
  // JSON text holds no NUL byte: the parser would stop at one and ignore what follows.
  if (const std::size_t nul = header_text.find('\0'); nul != std::string_view::npos) {
    fail(path_, "header holds a NUL byte (at header byte " + std::to_string(nul) + ")");
  }
  const int64_t too_deep = spec::json_nesting(header_text, kMaxJsonDepth).first_past_limit;
  if (too_deep >= 0) {
    fail(path_, "header nests JSON deeper than the limit of " + std::to_string(kMaxJsonDepth) +
                    " levels (at header byte " + std::to_string(too_deep) + ")");
  }
  // Keys and array lengths bounded before the DOM is built (about 23 bytes of it per byte of a
  // header of many keys or one long shape: a 98 MB header took 2.3 GB), duplicate keys refused.
  const spec::JsonKeyProblem keys =
      spec::json_key_problem(header_text, kMaxHeaderKeys, kMaxHeaderKeys, kMaxHeaderArrayItems);
  if (!keys.duplicate.empty())
    fail(path_, "header names '" + keys.duplicate + "' twice in one object");
  if (keys.too_many_keys || keys.too_many_total_keys) {
    fail(path_, "header holds more than " + std::to_string(kMaxHeaderKeys) +
                    " keys (a tensor entry is 4 of them)");
  }
  if (keys.too_many_array_items) {
    fail(path_, "header holds an array of more than " + std::to_string(kMaxHeaderArrayItems) +
                    " values (a shape or data_offsets)");
  }
  json header;
  try {
    header = json::parse(bytes_.begin() + 8, bytes_.begin() + data_start_);
  } catch (const json::exception& e) {
    fail(path_, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) {
    fail(path_, std::string("header is a JSON ") + header.type_name() + ", expected an object");
  }

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path_, "__metadata__ is not a JSON object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) {
          fail(path_, "__metadata__ entry '" + m.key() + "' is a JSON " + m.value().type_name() +
                          ", expected a string");
        }
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) {
      fail_tensor(path_, name,
                  std::string("entry is a JSON ") + entry.type_name() +
                      ", expected an object with dtype, shape, data_offsets");
    }
    SafetensorsTensorInfo info;
    info.name = name;

    const auto dtype = entry.find("dtype");
    if (dtype == entry.end() || !dtype->is_string()) fail_tensor(path_, name, "missing dtype");
    if (!parse_dtype(dtype->get<std::string>(), &info.dtype)) {
      fail_tensor(path_, name,
                  "unsupported dtype '" + dtype->get<std::string>() +
                      "' (this reader knows F32, I32, BF16, F16)");
    }

    const auto shape = entry.find("shape");
    if (shape == entry.end() || !shape->is_array()) {
      fail_tensor(path_, name, "missing shape (expected an array of dimensions)");
    }
    for (const json& dim : *shape) {
      int64_t d = 0;
      if (!as_index(dim, &d)) {
        fail_tensor(
            path_, name,
            "shape " + shape->dump() + " has an entry that is not a " + "non-negative integer");
      }
      info.shape.push_back(d);
    }
    // numel, left to right in 64 unsigned bits as the reference reader multiplies, refusing to
    // overflow (serialize refuses the same): [2^62, 2^62, 0] overflows before its zero, a shape
    // no writer can write back. A count past int64 is refused too.
    uint64_t numel = 1;
    for (int64_t d : info.shape) {
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) {
        fail_tensor(path_, name, "shape " + join_shape(info.shape) + " overflows 64 bits");
      }
    }
    if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail_tensor(path_, name, "shape " + join_shape(info.shape) + " overflows int64");
    }
    info.numel = static_cast<int64_t>(numel);

    const auto offsets = entry.find("data_offsets");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !as_index((*offsets)[0], &info.data_begin) || !as_index((*offsets)[1], &info.data_end)) {
      fail_tensor(path_, name,
                  "data_offsets must be [begin, end] with non-negative integers, got " +
                      (offsets == entry.end() ? std::string("nothing") : offsets->dump()));
    }
    if (info.data_end < info.data_begin) {
      fail_tensor(path_, name,
                  "data_offsets [" + std::to_string(info.data_begin) + ", " +
                      std::to_string(info.data_end) + "] end before they begin");
    }
    if (info.data_end > data_size) {
      fail_tensor(path_, name,
                  "data_offsets [" + std::to_string(info.data_begin) + ", " +
                      std::to_string(info.data_end) + "] out of range: the data section has " +
                      std::to_string(data_size) + " bytes");
    }
    const int64_t elem = safetensors_dtype_size(info.dtype);
    const int64_t bytes = info.data_end - info.data_begin;
    // Compared as element counts so that a huge shape cannot overflow numel * elem.
    if (bytes % elem != 0 || info.numel != bytes / elem) {
      fail_tensor(path_, name,
                  info.describe() + " has " + std::to_string(info.numel) +
                      " elements but data_offsets [" + std::to_string(info.data_begin) + ", " +
                      std::to_string(info.data_end) + "] span " + std::to_string(bytes) +
                      " bytes (shape/size mismatch)");
    }
    tensors_.emplace(name, std::move(info));
  }

  // The tensors must tile the data section: no overlap, no gap, nothing left over.
  std::vector<const SafetensorsTensorInfo*> order;
  order.reserve(tensors_.size());
  for (const auto& kv : tensors_) order.push_back(&kv.second);
  std::sort(order.begin(), order.end(), [](const auto* x, const auto* y) {
    return std::make_pair(x->data_begin, x->data_end) < std::make_pair(y->data_begin, y->data_end);
  });
  int64_t expected = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const auto* info : order) {
    if (info->data_begin < expected) {
      fail_tensor(path_, info->name,
                  "data_offsets [" + std::to_string(info->data_begin) + ", " +
                      std::to_string(info->data_end) + "] overlap tensor '" + previous->name +
                      "' (ends at " + std::to_string(expected) + ")");
    }
    if (info->data_begin > expected) {
      fail_tensor(path_, info->name,
                  "data_offsets begin at " + std::to_string(info->data_begin) + " leaving bytes [" +
                      std::to_string(expected) + ", " + std::to_string(info->data_begin) +
                      ") of the data section unused");
    }
    expected = info->data_end;
    previous = info;
  }
  if (expected != data_size) {
    fail(path_, "the data section has " + std::to_string(data_size) +
                    " bytes but the tensors cover only " + std::to_string(expected) +
                    " (trailing bytes, or a tensor missing from the header)");
  }
}

std::string SafetensorsFile::metadata_value(const std::string& key,
                                            const std::string& fallback) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? fallback : it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

bool SafetensorsFile::contains(const std::string& name) const noexcept {
  return tensors_.count(name) != 0;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "no tensor named '" + name + "'");
  return it->second;
}

const uint8_t* SafetensorsFile::raw_data(const std::string& name) const {
  const SafetensorsTensorInfo& meta = info(name);
  if (header_only_) fail(path_, "tensor '" + name + "': read_header() reads no data");
  return bytes_.data() + data_start_ + meta.data_begin;
}

std::vector<float> SafetensorsFile::to_float(const std::string& name) const {
  const SafetensorsTensorInfo& meta = info(name);
  const uint8_t* p = raw_data(name);
  std::vector<float> out(static_cast<std::size_t>(meta.numel));
  switch (meta.dtype) {
    case SafetensorsDType::kF32:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = float_from_bits(load_u32(p + 4 * i));
      break;
    case SafetensorsDType::kBF16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = float_from_bits(static_cast<uint32_t>(load_u16(p + 2 * i)) << 16);
      }
      break;
    case SafetensorsDType::kF16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = float_from_f16(load_u16(p + 2 * i));
      break;
    case SafetensorsDType::kI32:
      fail_tensor(path_, name, "is " + meta.describe() + ", not a floating-point tensor");
  }
  return out;
}

std::vector<int32_t> SafetensorsFile::to_int32(const std::string& name) const {
  const SafetensorsTensorInfo& meta = info(name);
  if (meta.dtype != SafetensorsDType::kI32) {
    fail_tensor(path_, name, "is " + meta.describe() + ", expected I32");
  }
  const uint8_t* p = raw_data(name);
  std::vector<int32_t> out(static_cast<std::size_t>(meta.numel));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const uint32_t bits = load_u32(p + 4 * i);
    std::memcpy(&out[i], &bits, sizeof(bits));
  }
  return out;
}

std::vector<uint8_t> SafetensorsFile::serialize(
    const std::vector<NewTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  const char* fn = "SafetensorsFile::serialize: ";
  for (const NewTensor& t : tensors) {
    // What the parser would refuse is not written: a dtype that is none, the reserved name, a
    // negative extent, a size past 64 bits.
    const int dt = static_cast<int>(t.dtype);
    if (dt < 0 || dt > static_cast<int>(SafetensorsDType::kF16)) {
      throw Error(Status::kInvalidArgument,
                  fn + ("tensor '" + t.name + "': dtype = ") + std::to_string(dt) + " is none");
    }
    if (t.name == "__metadata__") {
      throw Error(Status::kInvalidArgument,
                  std::string(fn) + "'__metadata__' is the header's metadata, not a tensor name");
    }
    int64_t numel = 1, need = 0;
    bool bad_shape = false;
    for (int64_t d : t.shape)
      bad_shape = bad_shape || d < 0 || __builtin_mul_overflow(numel, d, &numel);
    if (bad_shape || __builtin_mul_overflow(numel, safetensors_dtype_size(t.dtype), &need)) {
      throw Error(Status::kInvalidArgument, fn + ("tensor '" + t.name + "': shape ") +
                                                join_shape(t.shape) +
                                                " has a negative extent or passes 64-bit sizes");
    }
    const int64_t bytes = static_cast<int64_t>(t.bytes.size());
    if (need != bytes) {
      throw Error(Status::kInvalidArgument,
                  "SafetensorsFile::serialize: tensor '" + t.name + "' " +
                      safetensors_dtype_name(t.dtype) + join_shape(t.shape) + " needs " +
                      std::to_string(need) + " bytes, got " + std::to_string(bytes));
    }
    if (header.contains(t.name)) {
      throw Error(Status::kInvalidArgument,
                  "SafetensorsFile::serialize: duplicate tensor '" + t.name + "'");
    }
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception&) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + "a tensor name or metadata entry is not valid UTF-8");
  }
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  if (text.size() > kMaxHeaderBytes) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + "the header would be " + std::to_string(text.size()) +
                    " bytes, more than the reader's limit of " + std::to_string(kMaxHeaderBytes) +
                    " (tensor names and metadata)");
  }
  // Sized once and filled with memcpy (GCC 12 warns falsely about vector::insert here).
  std::vector<uint8_t> out(8 + text.size() + static_cast<std::size_t>(offset));
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(len >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::size_t at = 8 + text.size();
  for (const NewTensor& t : tensors) {
    if (!t.bytes.empty()) std::memcpy(out.data() + at, t.bytes.data(), t.bytes.size());
    at += t.bytes.size();
  }
  return out;
}

// --- TensorStore ----------------------------------------------------------------------------

TensorStore TensorStore::load(const std::vector<std::string>& paths) {
  TensorStore store;
  for (const std::string& path : paths) store.add(SafetensorsFile(path));
  return store;
}

void TensorStore::add(SafetensorsFile file) {
  for (const std::string& name : file.names()) {
    const auto it = index_.find(name);
    if (it != index_.end()) {
      throw Error(Status::kInvalidArgument, "TensorStore: tensor '" + name + "' is in both '" +
                                                files_[it->second]->path() + "' and '" +
                                                file.path() + "'");
    }
  }
  const std::size_t slot = files_.size();
  for (const std::string& name : file.names()) index_.emplace(name, slot);
  files_.push_back(std::make_shared<const SafetensorsFile>(std::move(file)));
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& kv : index_) out.push_back(kv.first);
  return out;
}

bool TensorStore::contains(const std::string& name) const noexcept {
  return index_.count(name) != 0;
}

const SafetensorsFile& TensorStore::file_of(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    std::string where;
    for (const auto& f : files_) where += (where.empty() ? "'" : ", '") + f->path() + "'";
    throw Error(Status::kInvalidArgument,
                "TensorStore: no tensor named '" + name + "' in " +
                    (where.empty() ? std::string("an empty store") : where));
  }
  return *files_[it->second];
}

const SafetensorsTensorInfo& TensorStore::info(const std::string& name) const {
  return file_of(name).info(name);
}

std::vector<float> TensorStore::to_float(const std::string& name) const {
  return file_of(name).to_float(name);
}

std::vector<int32_t> TensorStore::to_int32(const std::string& name) const {
  return file_of(name).to_int32(name);
}

}  // namespace specstate
