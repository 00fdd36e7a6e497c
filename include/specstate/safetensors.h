// A reader for safetensors files (https://github.com/huggingface/safetensors), the format of the
// golden conformance cases (tests/data/golden, docs/golden.md) and of most published weights.
//
// File layout: an 8-byte little-endian header length N, N bytes of JSON header
//   {"__metadata__": {"key": "value", ...},
//    "<name>": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
// then the data section; a tensor's bytes are data[begin, end), row-major, little-endian.
//
// The whole file is read and validated when it is opened (the length field and the header first,
// the data only once they hold): header length within the file and at most 100 MB, JSON
// well-formed with at most 262,144 keys and arrays of at most 64 values, every dtype known, every
// shape non-negative, end - begin = numel * dtype size, offsets inside the data section, tensors
// neither overlapping nor leaving bytes uncovered (the rules of the reference implementation).
// Every failure throws specstate::Error naming the file and, where there is one, the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace specstate {

// The element types the reader understands (safetensors spells them "F32", "I32", "BF16", "F16").
enum class SafetensorsDType : int32_t { kF32 = 0, kI32 = 1, kBF16 = 2, kF16 = 3 };

// "F32", "I32", "BF16", "F16".
const char* safetensors_dtype_name(SafetensorsDType dtype) noexcept;
// Bytes of one element.
int64_t safetensors_dtype_size(SafetensorsDType dtype) noexcept;

// IEEE half (binary16) -> float, exact (subnormals, infinities and NaN included).
float float_from_f16(uint16_t value) noexcept;

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;  // empty for a scalar
  int64_t numel = 1;           // product of shape (1 for a scalar, 0 if a dimension is 0)
  int64_t data_begin = 0;      // byte offsets into the data section, [begin, end)
  int64_t data_end = 0;

  // e.g. "F32[4, 4, 256]"
  std::string describe() const;
};

// One safetensors file, read into memory and validated.
class SafetensorsFile {
 public:
  // Reads and validates `path`; throws Error(kInvalidArgument) naming the file (and tensor).
  explicit SafetensorsFile(const std::string& path);
  // The same, refusing a file of more than `max_bytes` bytes before reading any of it (a caller
  // that knows the largest file it accepts: StatePool::import_slot).
  SafetensorsFile(const std::string& path, uint64_t max_bytes);
  // The header of `path` only (metadata, and each tensor's dtype, shape and offsets, checked
  // against the file's size as a full read checks them), read without the data: for checks
  // before a large read. raw_data() and to_float() of it throw. A header longer than
  // `max_header_bytes` is refused before it is read.
  static SafetensorsFile read_header(const std::string& path,
                                     uint64_t max_header_bytes = UINT64_MAX);
  // Parses an in-memory image of a file; `label` stands for the path in error messages.
  static SafetensorsFile from_bytes(std::vector<uint8_t> bytes, const std::string& label);

  const std::string& path() const noexcept { return path_; }
  // `__metadata__` (string -> string); empty when the header has none.
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  // The value of metadata `key`, or `fallback` when absent.
  std::string metadata_value(const std::string& key, const std::string& fallback = "") const;

  // Tensor names in lexicographic order.
  std::vector<std::string> names() const;
  std::size_t size() const noexcept { return tensors_.size(); }
  bool contains(const std::string& name) const noexcept;
  // Throws Error(kInvalidArgument) "<path>: no tensor named '<name>'".
  const SafetensorsTensorInfo& info(const std::string& name) const;

  // The tensor's raw little-endian bytes (numel * dtype size of them).
  const uint8_t* raw_data(const std::string& name) const;
  // Row-major values converted to float: F32 as is, BF16 and F16 widened exactly. Throws for I32.
  std::vector<float> to_float(const std::string& name) const;
  // Row-major values of an I32 tensor. Throws for any other dtype.
  std::vector<int32_t> to_int32(const std::string& name) const;

  // The serialised form of `tensors` (name -> info + raw bytes) with `metadata`, as written by the
  // reference implementation (header padded with spaces to a multiple of 8 bytes). Used by the
  // tests to build well-formed files and by tools that write cases.
  struct NewTensor {
    std::string name;
    SafetensorsDType dtype = SafetensorsDType::kF32;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;  // numel * dtype size little-endian bytes
  };
  static std::vector<uint8_t> serialize(const std::vector<NewTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata);

 private:
  SafetensorsFile() = default;
  // header_only: max_bytes bounds the header, not the file.
  SafetensorsFile(const std::string& path, uint64_t max_bytes, bool header_only);
  void parse(const std::string& label);

  std::string path_;
  std::vector<uint8_t> bytes_;  // the whole file (read_header: its first 8 + header bytes)
  uint64_t file_size_ = 0;      // the file's size
  bool header_only_ = false;
  int64_t data_start_ = 0;  // offset of the data section in bytes_
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsTensorInfo> tensors_;
};

// The union of the tensors of several files (the parts of one golden case). Names must be
// unique across the files; a duplicate throws Error(kInvalidArgument) naming both files.
class TensorStore {
 public:
  TensorStore() = default;
  // Opens every path and adds it.
  static TensorStore load(const std::vector<std::string>& paths);

  void add(SafetensorsFile file);

  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const noexcept {
    return files_;
  }
  std::vector<std::string> names() const;
  std::size_t size() const noexcept { return index_.size(); }
  bool contains(const std::string& name) const noexcept;
  // The file holding `name`; throws Error(kInvalidArgument) naming the store's files.
  const SafetensorsFile& file_of(const std::string& name) const;
  const SafetensorsTensorInfo& info(const std::string& name) const;
  std::vector<float> to_float(const std::string& name) const;
  std::vector<int32_t> to_int32(const std::string& name) const;

 private:
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, std::size_t> index_;  // name -> index into files_
};

}  // namespace specstate
