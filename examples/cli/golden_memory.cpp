// Memory for check-golden (golden_runner.h): host buffers, or device buffers through the CUDA
// runtime for a kCuda pool, and values in storage dtypes (f32, bf16) going up and coming down.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "cli/golden_runner.h"

#if defined(SPECSTATE_CLI_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace specstate::cli::golden {
namespace {

class HostMemory final : public Memory {
 public:
  Device device() const noexcept override { return Device::kCpu; }
  void* allocate(std::size_t bytes) override {
    blocks_.push_back(std::make_unique<unsigned char[]>(bytes == 0 ? 1 : bytes));
    return blocks_.back().get();
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }

 private:
  std::vector<std::unique_ptr<unsigned char[]>> blocks_;
};

#if defined(SPECSTATE_CLI_CUDA)
// Views of a kCuda pool are device pointers: inputs go up and results come down through the CUDA
// runtime, the way an engine that owns device tensors would hand them to specstate.
class CudaMemory final : public Memory {
 public:
  CudaMemory(int device, std::string error_prefix) : error_prefix_(std::move(error_prefix)) {
    check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~CudaMemory() override {
    for (void* p : blocks_) cudaFree(p);
  }
  Device device() const noexcept override { return Device::kCuda; }
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    blocks_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host to device");
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    // The pool's work may run on its own stream: wait for everything before reading.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device to host");
  }

 private:
  void check(cudaError_t status, const char* what) const {
    if (status != cudaSuccess) {
      throw Error(Status::kBackendError, error_prefix_ + what + ": " + cudaGetErrorString(status));
    }
  }
  std::string error_prefix_;
  std::vector<void*> blocks_;
};
#endif

}  // namespace

std::unique_ptr<Memory> make_memory(Backend backend, int device,
                                    const std::string& cuda_error_prefix) {
  if (backend == Backend::kCpu) return std::make_unique<HostMemory>();
#if defined(SPECSTATE_CLI_CUDA)
  return std::make_unique<CudaMemory>(device, cuda_error_prefix);
#else
  (void)device;
  (void)cuda_error_prefix;
  throw Error(Status::kNotSupported,
              "check-golden was built without the CUDA runtime, so it cannot copy to or from "
              "the pool's device memory (--backend cuda)");
#endif
}

namespace {

// --- values in storage dtypes --------------------------------------------------------------

// `values` encoded in `dtype`. With `exact`, a value that bf16 cannot hold exactly is an error:
// a bf16 case stores exact float32 copies of bf16 values, so anything else means a wrong dtype.
std::vector<unsigned char> encode(const std::vector<float>& values, DType dtype,
                                  const std::string& what, bool exact) {
  const std::size_t n = values.size();
  std::vector<unsigned char> out(n * dtype_size(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), values.data(), n * sizeof(float));
  } else if (dtype == DType::kBF16) {
    for (std::size_t i = 0; i < n; ++i) {
      const uint16_t bits = bf16_from_float(values[i]);
      if (exact && float_from_bf16(bits) != values[i] && !std::isnan(values[i])) {
        bad_case(what + "[" + std::to_string(i) + "] = " + std::to_string(values[i]) +
                 " is not a bf16 value, yet the case declares it bf16");
      }
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  } else {
    bad_case(what + ": cannot encode floats as " + std::string(dtype_name(dtype)));
  }
  return out;
}

}  // namespace

std::vector<float> decode(const std::vector<unsigned char>& bytes, DType dtype) {
  const std::size_t n = bytes.size() / dtype_size(dtype);
  std::vector<float> out(n);
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), bytes.data(), n * sizeof(float));
  } else if (dtype == DType::kBF16) {
    for (std::size_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = float_from_bf16(bits);
    }
  } else {
    bad_case(std::string("cannot decode ") + dtype_name(dtype) + " as floats");
  }
  return out;
}

// A row-major view of `shape` at `data`.
TensorView make_view(void* data, DType dtype, const Shape& shape, Device device) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int i = view.ndim - 1; i >= 0; --i) {
    view.shape[i] = shape[i];
    view.stride[i] = stride;
    stride *= shape[i];
  }
  return view;
}

namespace {

// Elements from the view's first element to its last, whatever its strides.
int64_t view_extent(const TensorView& view) {
  int64_t last = 0;
  for (int i = 0; i < view.ndim; ++i) {
    if (view.shape[i] == 0) return 0;
    last += (view.shape[i] - 1) * view.stride[i];
  }
  return last + 1;
}

// Calls fn(row-major index, element offset) over every element of `view`.
template <typename Fn>
void for_each_element(const TensorView& view, Fn&& fn) {
  const int64_t n = view.numel();
  std::array<int64_t, TensorView::kMaxDims> index{};
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (int d = 0; d < view.ndim; ++d) offset += index[d] * view.stride[d];
    fn(i, offset);
    for (int d = view.ndim - 1; d >= 0; --d) {
      if (++index[d] < view.shape[d]) break;
      index[d] = 0;
    }
  }
}

void check_device(const Memory& memory, const TensorView& view, const std::string& what) {
  if (view.device != memory.device()) {
    bad_case(what + " lives on " + (view.device == Device::kCuda ? "cuda" : "cpu") +
             " but the check copies through " +
             (memory.device() == Device::kCuda ? "cuda" : "cpu"));
  }
}

}  // namespace

std::vector<unsigned char> read_bytes(Memory& memory, const TensorView& view,
                                      const std::string& what) {
  check_device(memory, view, what);
  const std::size_t esize = dtype_size(view.dtype);
  std::vector<unsigned char> span(static_cast<std::size_t>(view_extent(view)) * esize);
  if (!span.empty()) memory.download(span.data(), view.data, span.size());
  if (view.is_contiguous()) return span;
  std::vector<unsigned char> out(static_cast<std::size_t>(view.numel()) * esize);
  for_each_element(view, [&](int64_t i, int64_t offset) {
    std::memcpy(out.data() + i * esize, span.data() + offset * esize, esize);
  });
  return out;
}

void write_floats(Memory& memory, const TensorView& view, const std::vector<float>& values,
                  const std::string& what) {
  check_device(memory, view, what);
  if (static_cast<int64_t>(values.size()) != view.numel()) {
    bad_case(what + ": " + std::to_string(values.size()) + " values for a view of " +
             std::to_string(view.numel()));
  }
  const std::vector<unsigned char> bytes = encode(values, view.dtype, what, true);
  if (view.is_contiguous()) {
    if (!bytes.empty()) memory.upload(view.data, bytes.data(), bytes.size());
    return;
  }
  const std::size_t esize = dtype_size(view.dtype);
  std::vector<unsigned char> span(static_cast<std::size_t>(view_extent(view)) * esize);
  memory.download(span.data(), view.data, span.size());
  for_each_element(view, [&](int64_t i, int64_t offset) {
    std::memcpy(span.data() + offset * esize, bytes.data() + i * esize, esize);
  });
  memory.upload(view.data, span.data(), span.size());
}

TensorView upload(Memory& memory, const std::vector<float>& values, DType dtype, const Shape& shape,
                  const std::string& what, bool exact) {
  const std::vector<unsigned char> bytes = encode(values, dtype, what, exact);
  void* data = memory.allocate(bytes.size());
  if (!bytes.empty()) memory.upload(data, bytes.data(), bytes.size());
  return make_view(data, dtype, shape, memory.device());
}

TensorView upload_tensor(Memory& memory, const TensorStore& store, const std::string& name,
                         DType dtype, const Shape& shape) {
  return upload(memory, store.to_float(name), dtype, shape, name);
}

TensorView upload_nan(Memory& memory, DType dtype, const Shape& shape, const std::string& what) {
  return upload(memory,
                std::vector<float>(numel_of(shape), std::numeric_limits<float>::quiet_NaN()), dtype,
                shape, what, false);
}

}  // namespace specstate::cli::golden
