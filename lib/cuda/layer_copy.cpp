#include "layer_copy.h"

#include <algorithm>
#include <string>

#include "specstate/status.h"

namespace specstate::detail::cuda {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    // The error is reported here: consumed, so that it is not left on the thread for the
    // caller's next CUDA call (a torch op) to find as its own. (A sticky device fault stays.)
    cudaGetLastError();
    throw Error(Status::kBackendError, std::string("cuda backend: ") + what + ": " +
                                           cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                                           ")");
  }
}

LayerPtrs slot_ptrs(const PoolStorage& s, const std::vector<char*>& layers, int slot,
                    int64_t stride) {
  LayerPtrs out;
  out.ptrs.resize(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) out.ptrs[l] = layers[l] + slot * stride;
  out.one_allocation = !s.layout.caller_committed;
  return out;
}

LayerPtrs export_ptrs(const PoolStorage& s, char* buffer, int64_t offset) {
  LayerPtrs out;
  out.ptrs.resize(static_cast<std::size_t>(s.layout.layers));
  const int64_t pitch = s.layout.conv_bytes + s.layout.ssm_bytes;
  for (std::size_t l = 0; l < out.ptrs.size(); ++l) out.ptrs[l] = buffer + l * pitch + offset;
  return out;
}

int64_t LayerCopy::max_pitch() {
  if (max_pitch_ < 0) {
    int value = 0;
    max_pitch_ =
        cudaDeviceGetAttribute(&value, cudaDevAttrMaxPitch, device_) == cudaSuccess ? value : 0;
  }
  return max_pitch_;
}

void LayerCopy::copy(const LayerPtrs& dst, const LayerPtrs& src, int64_t width, cudaMemcpyKind kind,
                     const char* what) {
  const std::size_t n = dst.ptrs.size();
  if (n == 0 || width <= 0) return;
  const int64_t dp = PoolStorage::layer_pitch(dst.ptrs), sp = PoolStorage::layer_pitch(src.ptrs);
  if (n > 1 && dst.one_allocation && src.one_allocation && dp >= width && sp >= width &&
      std::max(dp, sp) <= max_pitch()) {
    check(cudaMemcpy2DAsync(dst.ptrs[0], static_cast<std::size_t>(dp), src.ptrs[0],
                            static_cast<std::size_t>(sp), static_cast<std::size_t>(width), n, kind,
                            stream_),
          what);
    return;
  }
  for (std::size_t l = 0; l < n; ++l) {
    check(cudaMemcpyAsync(dst.ptrs[l], src.ptrs[l], static_cast<std::size_t>(width), kind, stream_),
          what);
  }
}

void LayerCopy::zero(const LayerPtrs& dst, int64_t width, const char* what) {
  const std::size_t n = dst.ptrs.size();
  if (n == 0 || width <= 0) return;
  const int64_t dp = PoolStorage::layer_pitch(dst.ptrs);
  if (n > 1 && dst.one_allocation && dp >= width && dp <= max_pitch()) {
    check(cudaMemset2DAsync(dst.ptrs[0], static_cast<std::size_t>(dp), 0,
                            static_cast<std::size_t>(width), n, stream_),
          what);
    return;
  }
  for (char* p : dst.ptrs) {
    check(cudaMemsetAsync(p, 0, static_cast<std::size_t>(width), stream_), what);
  }
}

}  // namespace specstate::detail::cuda
