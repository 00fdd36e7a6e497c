// Kernels of commit.h: the commit copy (16-byte vectors when every size and address allows,
// 2-byte units otherwise) and the by-value int32 upload.
#include <algorithm>

#include "commit.h"
#include "common.cuh"

namespace specstate::kernels {
namespace {

constexpr int kCommitThreads = 256;
constexpr int kCommitUnroll = 4;  // independent 16-byte loads in flight per thread

// The OR of every live row's error bits, by the whole CTA (every thread calls it and gets the
// result). P: CommitCheckParams or CommitPendingParams (the same fields).
template <typename P>
__device__ int32_t round_error_bits(const P& p) {
  __shared__ int32_t flag;
  if (threadIdx.x == 0) flag = 0;
  __syncthreads();
  int32_t mine = 0;
  for (int row = threadIdx.x; row < p.rows; row += blockDim.x) {
    if (p.slots[row] < 0) continue;
    int32_t error = 0;
    commit_step(p.mode, p.accepted[row * p.accepted_stride],
                row_window(p.varlen, row, p.window, &error), &error);
    mine |= error;
  }
  if (mine != 0) atomicOr(&flag, mine);
  __syncthreads();
  return flag;
}

// One CTA: the OR of every row's error bits (CommitCheckParams).
__global__ void __launch_bounds__(256)
    commit_check_kernel(const __grid_constant__ CommitCheckParams p) {
  const int32_t flag = round_error_bits(p);
  if (threadIdx.x == 0) *p.error_flag = flag;
}

// Grid: x = chunks (SSM chunks first, then conv chunks), y = row, z = layer.
template <typename U>
__global__ void __launch_bounds__(kCommitThreads)
    commit_kernel(const __grid_constant__ CommitParams p, int ssm_chunks) {
  const int row = blockIdx.y;
  const int layer = blockIdx.z;
  const int slot = p.slots[row];
  if (slot < 0 || *p.round_error != 0) return;  // padding, or a round with a bad value
  int32_t error = 0;
  const int step = commit_step(p.mode, p.accepted[row * p.accepted_stride],
                               row_window(p.varlen, row, p.window, &error), &error);
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

// One CTA per (row, layer): the conv pending steps, the settled cursor, a tree's accepted path
// compacted in the ring, h += n.
__global__ void __launch_bounds__(256)
    commit_pending_kernel(const __grid_constant__ CommitPendingParams p) {
  const int row = blockIdx.x;
  const int layer = blockIdx.y;
  // The round's check, in every CTA (no separate launch); one CTA stores it.
  const int32_t round_error = round_error_bits(p);
  if (row == 0 && layer == 0 && threadIdx.x == 0) *p.round_error = round_error;
  const int slot = p.slots[row];
  if (slot < 0) return;
  int32_t error = 0;
  // A round with a bad value keeps every row: n = 0, the cursor settled.
  const int last = round_error != 0
                       ? -1
                       : commit_step(p.mode, p.accepted[row * p.accepted_stride],
                                     row_window(p.varlen, row, p.window, &error), &error);
  const int32_t* parents = p.parents ? p.parents + int64_t{row} * p.window : nullptr;
  __shared__ int path[32];  // a tree's accepted path (replay trees hold at most 16 tokens)
  int n = 0;
  for (int t = last; t >= 0; t = parents ? parents[t] : t - 1) ++n;
  if (threadIdx.x == 0) {
    int i = n;
    for (int t = last; t >= 0; t = parents ? parents[t] : t - 1) {
      --i;
      if (layer == 0) p.path[slot * p.path_stride_slot + i] = t;
      if (i < 32) path[i] = t;
    }
    p.pending[int64_t{layer} * p.num_slots + slot] = n;
  }
  if (p.cursor == nullptr) return;
  int32_t* cur = p.cursor + (int64_t{layer} * p.num_slots + slot) * 2;
  int base = cur[0], h = cur[1];
  settle_cursor(base, h, p.ring, p.fold_limit);
  __syncthreads();  // every thread has read the cursor and sees the path
  if (parents != nullptr) {
    // The window's records sit at base + h + t; the accepted path's move to base + h + i
    // (p_i >= i, ascending: a record is read before its position is overwritten).
    char* ring = p.factors + (int64_t{layer} * p.num_slots + slot) * p.factor_stride_slot;
    const int64_t units = p.factor_bytes / 16;
    for (int i = 0; i < n && i < 32; ++i) {
      if (path[i] == i) continue;
      const uint4* src =
          reinterpret_cast<const uint4*>(ring + ((base + h + path[i]) % p.ring) * p.factor_bytes);
      uint4* dst = reinterpret_cast<uint4*>(ring + ((base + h + i) % p.ring) * p.factor_bytes);
      for (int64_t j = threadIdx.x; j < units; j += blockDim.x) dst[j] = src[j];
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) {
    cur[0] = base;
    cur[1] = h + n;
  }
}

struct ClearParams {
  int32_t* pending = nullptr;
  int32_t* cursor = nullptr;  // [layers][num_slots][2], or null
  int num_slots = 0;
  int layer_begin = 0;
  int layer_end = 0;
  int ring = 0;
  int fold_limit = 0;
  bool settle = false;  // kSettled: settle the cursor; otherwise consume the history
  int n = 0;
  int32_t slots[kUploadChunk] = {};
};

__global__ void clear_pending_kernel(const __grid_constant__ ClearParams p) {
  for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
    if (p.slots[i] < 0) continue;
    for (int l = p.layer_begin; l < p.layer_end; ++l) {
      const int64_t at = int64_t{l} * p.num_slots + p.slots[i];
      p.pending[at] = 0;
      if (p.cursor == nullptr) continue;
      int base = p.cursor[2 * at], h = p.cursor[2 * at + 1];
      if (p.settle) {
        settle_cursor(base, h, p.ring, p.fold_limit);
      } else {
        consume_cursor(base, h, p.ring);
      }
      p.cursor[2 * at] = base;
      p.cursor[2 * at + 1] = h;
    }
  }
}

static_assert(sizeof(UploadBatch) <= 4096, "an upload's parameters fit a launch");

// One batch of pack_upload (kernel_types.h): array s is values[begin[s], begin[s + 1]) -> dst[s].
__global__ void upload_i32_kernel(const __grid_constant__ UploadBatch p) {
  for (int s = 0; s < p.spans; ++s) {
    for (int i = p.begin[s] + threadIdx.x; i < p.begin[s + 1]; i += blockDim.x) {
      p.dst[s][i - p.begin[s]] = p.values[i];
    }
  }
}

template <typename U>
cudaError_t launch_commit_unit(const CommitParams& p, cudaStream_t stream) {
  const int64_t per_chunk = int64_t{kCommitThreads} * kCommitUnroll * sizeof(U);
  const int ssm_chunks = static_cast<int>((p.ssm_state_bytes + per_chunk - 1) / per_chunk);
  const int conv_chunks = static_cast<int>((p.conv_state_bytes + per_chunk - 1) / per_chunk);
  const dim3 grid(ssm_chunks + conv_chunks, p.rows, p.layers);
  // launch_kernel: this launch's error, not one an earlier call left on the thread.
  return launch_kernel(false, commit_kernel<U>, grid, dim3(kCommitThreads), stream, p, ssm_chunks);
}

bool aligned16_host(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

cudaError_t kernel_image_status() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, upload_i32_kernel);
}

cudaError_t launch_commit_check(const CommitCheckParams& p, cudaStream_t stream) {
  return launch_kernel(false, commit_check_kernel, dim3(1), dim3(256), stream, p);
}

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
  if (p.rows <= 0 || p.layers <= 0) return cudaSuccess;
  if (p.layers > 65535) return cudaErrorInvalidValue;
  if (p.parents != nullptr && p.window > 32) return cudaErrorInvalidValue;
  // A chain's CTA has a warp of work after the check: threads enough for the check's rows to
  // take one pass (up to 256); a tree's compacts records with 256.
  const int threads =
      p.parents != nullptr ? 256 : std::min(256, std::max(32, (p.rows + 31) / 32 * 32));
  return launch_kernel(false, commit_pending_kernel, dim3(p.rows, p.layers), dim3(threads), stream,
                       p);
}

cudaError_t launch_clear_pending(const ClearPendingArgs& a, const int32_t* slots, int n,
                                 cudaStream_t stream) {
  for (int begin = 0; begin < n; begin += kUploadChunk) {
    ClearParams p;
    p.pending = a.pending;
    p.cursor = a.cursor;
    p.ring = a.ring;
    p.fold_limit = a.fold_limit;
    p.settle = a.settle;
    const int num_slots = a.num_slots, layer_begin = a.layer_begin, layer_end = a.layer_end;
    p.num_slots = num_slots;
    p.layer_begin = layer_begin;
    p.layer_end = layer_end;
    p.n = std::min(kUploadChunk, n - begin);
    std::copy(slots + begin, slots + begin + p.n, p.slots);
    const cudaError_t err =
        launch_kernel(false, clear_pending_kernel, dim3(1), dim3(256), stream, p);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t launch_upload_i32(const UploadSpan* spans, int count, cudaStream_t stream) {
  return static_cast<cudaError_t>(pack_upload(spans, count, [&](const UploadBatch& b) {
    return launch_kernel(false, upload_i32_kernel, dim3(1), dim3(256), stream, b);
  }));
}

cudaError_t launch_upload_i32(int32_t* dst, const int32_t* values, int n, cudaStream_t stream) {
  const UploadSpan span{dst, values, n};
  return launch_upload_i32(&span, 1, stream);
}

}  // namespace specstate::kernels
