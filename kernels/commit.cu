// Kernels of commit.h: the commit copy (16-byte vectors when every size and address allows,
// 2-byte units otherwise) and the by-value int32 upload.
#include <algorithm>

#include "commit.h"
#include "common.cuh"

namespace specstate::kernels {
namespace {

constexpr int kCommitThreads = 256;
constexpr int kCommitUnroll = 4;  // independent 16-byte loads in flight per thread

// The window of `row` (T, or T_r under variable windows); a malformed range flags the row.
__device__ int row_window(const RowTokensParams& v, int row, int window, int32_t* error) {
  if (v.cu == nullptr) return window;
  const int64_t b = v.cu[row], e = v.cu[row + 1];
  if (b < 0 || e < b || e - b > window || e > v.capacity) {
    *error = kCommitErrorBadLengths;
    return -1;
  }
  return static_cast<int>(e - b);
}

// The checks of both commits: the last accepted window index (-1 = keep), or flags the row
// (window < 0: already flagged by row_window).
__device__ int commit_step(CommitMode mode, int value, int window, int32_t* error) {
  if (window < 0) return -1;
  if (mode == CommitMode::kAcceptedLength) {
    if (value > window) {
      *error = kCommitErrorLengthAboveWindow;
    } else if (value < 0) {
      *error = kCommitErrorLengthNegative;
    } else {
      return value - 1;
    }
    return -1;
  }
  if (value < -1 || value >= window) {
    *error = kCommitErrorNodeOutOfRange;
    return -1;
  }
  return value;
}

// Grid: x = chunks (SSM chunks first, then conv chunks), y = row, z = layer.
template <typename U>
__global__ void __launch_bounds__(kCommitThreads)
    commit_kernel(const __grid_constant__ CommitParams p, int ssm_chunks) {
  const int row = blockIdx.y;
  const int layer = blockIdx.z;
  const int slot = p.slots[row];
  if (slot < 0) return;
  int32_t error = 0;
  const int step = commit_step(p.mode, p.accepted[row * p.accepted_stride],
                               row_window(p.varlen, row, p.window, &error), &error);
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
    dst = p.ssm_layers[layer] + slot * p.ssm_slot_bytes;
  } else {
    src = p.snap_conv + layer * p.snap_conv_layer_bytes + row * p.snap_conv_row_bytes +
          step * p.conv_state_bytes;
    dst = p.conv_layers[layer] + slot * p.conv_slot_bytes;
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

// One thread per row.
__global__ void commit_pending_kernel(const __grid_constant__ CommitPendingParams p) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= p.rows) return;
  const int slot = p.slots[row];
  if (slot < 0) return;
  int32_t error = 0;
  const int last = commit_step(p.mode, p.accepted[row * p.accepted_stride],
                               row_window(p.varlen, row, p.window, &error), &error);
  if (error != 0) atomicOr(p.error_flag, error);
  const int32_t* parents = p.parents ? p.parents + int64_t{row} * p.window : nullptr;
  int n = 0;
  for (int t = last; t >= 0; t = parents ? parents[t] : t - 1) ++n;
  int i = n;
  for (int t = last; t >= 0; t = parents ? parents[t] : t - 1) {
    p.path[slot * p.path_stride_slot + --i] = t;
  }
  for (int l = 0; l < p.layers; ++l) p.pending[int64_t{l} * p.num_slots + slot] = n;
}

struct ClearParams {
  int32_t* pending = nullptr;
  int num_slots = 0;
  int layer_begin = 0;
  int layer_end = 0;
  int n = 0;
  int32_t slots[kUploadChunk] = {};
};

__global__ void clear_pending_kernel(const __grid_constant__ ClearParams p) {
  for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
    if (p.slots[i] < 0) continue;
    for (int l = p.layer_begin; l < p.layer_end; ++l) {
      p.pending[int64_t{l} * p.num_slots + p.slots[i]] = 0;
    }
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
                   p.committed_aligned16 && p.snap_conv_layer_bytes % 16 == 0 &&
                   p.snap_ssm_layer_bytes % 16 == 0 && p.snap_conv_row_bytes % 16 == 0 &&
                   p.snap_ssm_row_bytes % 16 == 0 && aligned16_host(p.snap_conv) &&
                   aligned16_host(p.snap_ssm);
  return vec ? launch_commit_unit<uint4>(p, stream) : launch_commit_unit<uint16_t>(p, stream);
}

cudaError_t launch_commit_pending(const CommitPendingParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  commit_pending_kernel<<<(p.rows + 127) / 128, 128, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_clear_pending(int32_t* pending, int num_slots, int layer_begin, int layer_end,
                                 const int32_t* slots, int n, cudaStream_t stream) {
  for (int begin = 0; begin < n; begin += kUploadChunk) {
    ClearParams p;
    p.pending = pending;
    p.num_slots = num_slots;
    p.layer_begin = layer_begin;
    p.layer_end = layer_end;
    p.n = std::min(kUploadChunk, n - begin);
    std::copy(slots + begin, slots + begin + p.n, p.slots);
    clear_pending_kernel<<<1, 256, 0, stream>>>(p);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
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
