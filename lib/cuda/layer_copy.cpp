#include "layer_copy.h"

#include <algorithm>
#include <string>

#include "specstate/status.h"

namespace specstate::detail::cuda {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw Error(Status::kBackendError, std::string("cuda backend: ") + what + ": " +
                                           cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                                           ")");
  }
}

std::vector<char*> slot_ptrs(const std::vector<char*>& layers, int slot, int64_t stride) {
  std::vector<char*> out(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) out[l] = layers[l] + slot * stride;
  return out;
}

std::vector<char*> export_ptrs(const PoolStorage& s, char* buffer, int64_t offset) {
  std::vector<char*> out(static_cast<std::size_t>(s.layout.layers));
  const int64_t pitch = s.layout.conv_bytes + s.layout.ssm_bytes;
  for (std::size_t l = 0; l < out.size(); ++l) out[l] = buffer + l * pitch + offset;
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

void LayerCopy::copy(const std::vector<char*>& dst, const std::vector<char*>& src, int64_t width,
                     cudaMemcpyKind kind, const char* what) {
  if (dst.empty() || width <= 0) return;
  const int64_t dp = PoolStorage::layer_pitch(dst), sp = PoolStorage::layer_pitch(src);
  if (dst.size() > 1 && dp >= width && sp >= width && std::max(dp, sp) <= max_pitch()) {
    check(cudaMemcpy2DAsync(dst[0], static_cast<std::size_t>(dp), src[0],
                            static_cast<std::size_t>(sp), static_cast<std::size_t>(width),
                            dst.size(), kind, stream_),
          what);
    return;
  }
  for (std::size_t l = 0; l < dst.size(); ++l) {
    check(cudaMemcpyAsync(dst[l], src[l], static_cast<std::size_t>(width), kind, stream_), what);
  }
}

void LayerCopy::zero(const std::vector<char*>& dst, int64_t width, const char* what) {
  if (dst.empty() || width <= 0) return;
  const int64_t dp = PoolStorage::layer_pitch(dst);
  if (dst.size() > 1 && dp >= width && dp <= max_pitch()) {
    check(cudaMemset2DAsync(dst[0], static_cast<std::size_t>(dp), 0,
                            static_cast<std::size_t>(width), dst.size(), stream_),
          what);
    return;
  }
  for (char* p : dst) {
    check(cudaMemsetAsync(p, 0, static_cast<std::size_t>(width), stream_), what);
  }
}

}  // namespace specstate::detail::cuda
