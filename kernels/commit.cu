// Kernels of commit.h: the commit copy (16-byte vectors when every size and address allows,
// 2-byte units otherwise) and the by-value int32 upload.
#include <algorithm>

#include "commit.h"
#include "common.cuh"

namespace specstate::kernels {
namespace {

constexpr int kCommitThreads = 256;
constexpr int kCommitUnroll = 4;  // independent 16-byte loads in flight per thread

// Grid: x = chunks (SSM chunks first, then conv chunks), y = row, z = layer.
template <typename U>
__global__ void __launch_bounds__(kCommitThreads)
    commit_kernel(const __grid_constant__ CommitParams p, int ssm_chunks) {
  const int row = blockIdx.y;
  const int layer = blockIdx.z;
  const int slot = p.slots[row];
  if (slot < 0) return;
  const int value = p.accepted[row * p.accepted_stride];
  int step = -1;
  int32_t error = 0;
  if (p.mode == CommitMode::kAcceptedLength) {
    if (value > p.window) {
      error = kCommitErrorLengthAboveWindow;
    } else if (value < 0) {
      error = kCommitErrorLengthNegative;
    } else {
      step = value - 1;
    }
  } else {
    if (value < -1 || value >= p.window) {
      error = kCommitErrorNodeOutOfRange;
    } else {
      step = value;
    }
  }
  if (error != 0) {
    // Reported once per row; the row is skipped in every layer.
    if (layer == 0 && blockIdx.x == 0 && threadIdx.x == 0) atomicOr(p.error_flag, error);
    return;
  }
  if (step < 0) return;  // a = 0 / node -1: keep

  const bool is_ssm = static_cast<int>(blockIdx.x) < ssm_chunks;
  const int chunk = is_ssm ? blockIdx.x : blockIdx.x - ssm_chunks;
  const int64_t bytes = is_ssm ? p.ssm_state_bytes : p.conv_state_bytes;
  const char* src;
  char* dst;
  if (is_ssm) {
    src = p.snap_ssm + layer * p.snap_ssm_layer_bytes + row * p.snap_ssm_row_bytes +
          step * p.ssm_state_bytes;
    dst = p.ssm + layer * p.ssm_layer_bytes + slot * p.ssm_state_bytes;
  } else {
    src = p.snap_conv + layer * p.snap_conv_layer_bytes + row * p.snap_conv_row_bytes +
          step * p.conv_state_bytes;
    dst = p.conv + layer * p.conv_layer_bytes + slot * p.conv_state_bytes;
  }
  const int64_t units = bytes / static_cast<int64_t>(sizeof(U));
  const U* s = reinterpret_cast<const U*>(src);
  U* d = reinterpret_cast<U*>(dst);
  const int64_t base = int64_t{chunk} * kCommitThreads * kCommitUnroll + threadIdx.x;
  U buf[kCommitUnroll];
#pragma unroll
  for (int i = 0; i < kCommitUnroll; ++i) {
    const int64_t j = base + i * kCommitThreads;
    if (j < units) buf[i] = s[j];
  }
#pragma unroll
  for (int i = 0; i < kCommitUnroll; ++i) {
    const int64_t j = base + i * kCommitThreads;
    if (j < units) d[j] = buf[i];
  }
}

struct UploadParams {
  int32_t* dst = nullptr;
  int n = 0;
  int32_t values[kUploadChunk] = {};
};

__global__ void upload_i32_kernel(const __grid_constant__ UploadParams p) {
  for (int i = threadIdx.x; i < p.n; i += blockDim.x) p.dst[i] = p.values[i];
}

template <typename U>
cudaError_t launch_commit_unit(const CommitParams& p, cudaStream_t stream) {
  const int64_t per_chunk = int64_t{kCommitThreads} * kCommitUnroll * sizeof(U);
  const int ssm_chunks = static_cast<int>((p.ssm_state_bytes + per_chunk - 1) / per_chunk);
  const int conv_chunks = static_cast<int>((p.conv_state_bytes + per_chunk - 1) / per_chunk);
  const dim3 grid(ssm_chunks + conv_chunks, p.rows, p.layers);
  commit_kernel<U><<<grid, kCommitThreads, 0, stream>>>(p, ssm_chunks);
  return cudaGetLastError();
}

bool aligned16_host(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

cudaError_t launch_commit(const CommitParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.layers <= 0) return cudaSuccess;
  if (p.rows > 65535 || p.layers > 65535) return cudaErrorInvalidValue;
  const bool vec = p.conv_state_bytes % 16 == 0 && p.ssm_state_bytes % 16 == 0 &&
                   p.conv_layer_bytes % 16 == 0 && p.ssm_layer_bytes % 16 == 0 &&
                   p.snap_conv_layer_bytes % 16 == 0 && p.snap_ssm_layer_bytes % 16 == 0 &&
                   p.snap_conv_row_bytes % 16 == 0 && p.snap_ssm_row_bytes % 16 == 0 &&
                   aligned16_host(p.conv) && aligned16_host(p.ssm) && aligned16_host(p.snap_conv) &&
                   aligned16_host(p.snap_ssm);
  return vec ? launch_commit_unit<uint4>(p, stream) : launch_commit_unit<uint16_t>(p, stream);
}

cudaError_t launch_upload_i32(int32_t* dst, const int32_t* values, int n, cudaStream_t stream) {
  for (int begin = 0; begin < n; begin += kUploadChunk) {
    UploadParams p;
    p.dst = dst + begin;
    p.n = std::min(kUploadChunk, n - begin);
    std::copy(values + begin, values + begin + p.n, p.values);
    upload_i32_kernel<<<1, 256, 0, stream>>>(p);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace specstate::kernels
