// Internal: the CUDA backend's copies of a slot's layers (copy_slot, export / import to device or
// host buffers, zero_slot), asynchronous on the pool's stream, and its CUDA error check.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "../backend.h"

namespace specstate::detail::cuda {

// Throws Error(kBackendError) naming `what` and the CUDA error when err is not cudaSuccess.
void check(cudaError_t err, const char* what);

// Slot `slot` of every layer (layer l's slot 0 at layers[l], slots `stride` bytes apart).
std::vector<char*> slot_ptrs(const std::vector<char*>& layers, int slot, int64_t stride);
// Layer l's conv (offset 0) or SSM (offset conv_bytes) part of an export buffer.
std::vector<char*> export_ptrs(const PoolStorage& s, char* buffer, int64_t offset);

// `width` bytes per layer on `stream`: one 2-D copy (memset) when the layers are equidistant and
// their pitch fits the device's maximum, else one per layer (a caller's per-layer allocations).
class LayerCopy {
 public:
  LayerCopy(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  void copy(const std::vector<char*>& dst, const std::vector<char*>& src, int64_t width,
            cudaMemcpyKind kind, const char* what);
  void zero(const std::vector<char*>& dst, int64_t width, const char* what);

 private:
  int64_t max_pitch();  // cudaDevAttrMaxPitch, queried on first use

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  int64_t max_pitch_ = -1;
};

}  // namespace specstate::detail::cuda
