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

// One address per layer, and whether they all lie in one allocation (the pool's own layer-major
// buffer, an export buffer): only then may a 2-D copy span them. A caller's per-layer tensors
// are separate allocations even where they happen to be equidistant (a caching allocator's
// blocks), and a 2-D copy or memset across allocations fails (cudaErrorInvalidValue).
struct LayerPtrs {
  std::vector<char*> ptrs;
  bool one_allocation = true;
};

// Slot `slot` of every layer (layer l's slot 0 at layers[l], slots `stride` bytes apart) of the
// committed state: one allocation unless the caller owns it (Layout::caller_committed).
LayerPtrs slot_ptrs(const PoolStorage& s, const std::vector<char*>& layers, int slot,
                    int64_t stride);
// Layer l's conv (offset 0) or SSM (offset conv_bytes) part of an export buffer.
LayerPtrs export_ptrs(const PoolStorage& s, char* buffer, int64_t offset);

// `width` bytes per layer on `stream`: one 2-D copy (memset) when each side's layers lie in one
// allocation, are equidistant and their pitch fits the device's maximum, else one per layer.
class LayerCopy {
 public:
  LayerCopy(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  void copy(const LayerPtrs& dst, const LayerPtrs& src, int64_t width, cudaMemcpyKind kind,
            const char* what);
  void zero(const LayerPtrs& dst, int64_t width, const char* what);

 private:
  int64_t max_pitch();  // cudaDevAttrMaxPitch, queried on first use

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  int64_t max_pitch_ = -1;
};

}  // namespace specstate::detail::cuda
