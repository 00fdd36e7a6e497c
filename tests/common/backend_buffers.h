// f32 values going to a pool's backend and coming back: host memory for a kCpu pool, device
// memory through the CUDA runtime for a kCuda pool (check-golden's Memory, golden_runner.h). The
// tests that run one case on both backends (the float64 references) build their views with it.
#pragma once

#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "cli/golden_runner.h"
#include "specstate/specstate.h"

namespace specstate::test {

class BackendBuffers {
 public:
  explicit BackendBuffers(Backend backend)
      : memory_(cli::golden::make_memory(backend, 0, "BackendBuffers")) {}

  Device device() const noexcept { return memory_->device(); }

  // A new buffer holding `values` (f32), viewed with `shape` and `stride` (elements; empty:
  // row-major).
  TensorView up(const std::vector<float>& values, std::initializer_list<int64_t> shape,
                std::initializer_list<int64_t> stride = {}) {
    const std::size_t bytes = values.size() * sizeof(float);
    void* data = memory_->allocate(bytes);
    memory_->upload(data, values.data(), bytes);
    return stride.size() == 0 ? TensorView::contiguous(data, DType::kF32, shape, device())
                              : TensorView::strided(data, DType::kF32, shape, stride, device());
  }
  // A buffer of `n` f32 zeros viewed row-major as `shape`.
  TensorView zeros(std::size_t n, std::initializer_list<int64_t> shape) {
    return up(std::vector<float>(n, 0.0f), shape);
  }
  // A copy of a contiguous host view (any dtype) on this backend, the same shape and dtype.
  TensorView up(const TensorView& host) {
    const std::size_t bytes = static_cast<std::size_t>(host.numel()) * dtype_size(host.dtype);
    void* data = memory_->allocate(bytes);
    memory_->upload(data, host.data, bytes);
    TensorView v = host;
    v.data = data;
    v.device = device();
    return v;
  }
  // A contiguous view of this backend (any dtype) copied into `host` (a view of the same shape
  // and dtype in host memory).
  void down(const TensorView& view, const TensorView& host) {
    memory_->download(host.data, view.data,
                      static_cast<std::size_t>(view.numel()) * dtype_size(view.dtype));
  }
  // `n` f32 elements from `data` (host or device memory of this backend) to the host.
  std::vector<float> down(const void* data, std::size_t n) {
    std::vector<float> out(n);
    memory_->download(out.data(), data, n * sizeof(float));
    return out;
  }
  // The first `n` elements of slot `slot` of a pool state view (conv_state(l) or ssm_state(l),
  // f32, slot-major).
  std::vector<float> slot(const TensorView& state, int64_t slot, std::size_t n) {
    return down(static_cast<const float*>(state.data) + slot * state.stride[0], n);
  }

 private:
  std::unique_ptr<cli::golden::Memory> memory_;
};

}  // namespace specstate::test
