// Non-owning views of caller buffers: pointer, dtype, shape and int64 element strides.
// The library never allocates or frees what a view points to.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "specstate/dtype.h"

namespace specstate {

enum class Device : int32_t { kCpu = 0, kCuda = 1 };

struct TensorView {
  static constexpr int kMaxDims = 6;

  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // in elements, not bytes

  // A row-major contiguous view of `shape`. Throws Error(kInvalidArgument) for more than
  // kMaxDims dims, a negative extent, or a shape of more than 2^63 elements.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::kCpu);
  // A view of const memory is for a call's inputs (weights, inputs, an imported slot state): a
  // TensorView carries no constness, so the library writes through any view given as an output,
  // whatever memory it came from.
  static TensorView contiguous(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::kCpu) {
    return contiguous(const_cast<void*>(data), dtype, shape, device);
  }
  // A view with explicit strides (element units). Throws as contiguous() for the shape, and when
  // shape and stride differ in length. (The views a call takes are checked by that call.)
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> stride, Device device = Device::kCpu);

  bool empty() const noexcept { return data == nullptr; }
  // The extents' product (INT64_MAX when it would pass it).
  int64_t numel() const noexcept;
  bool is_contiguous() const noexcept;
  // e.g. "f32[4, 8192] strides [8192, 1] cpu"
  std::string describe() const;
};

}  // namespace specstate
