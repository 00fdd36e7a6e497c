// Commit of a verify round (DESIGN.md section 5, step 5): one launch over all layers and rows
// copies each row's accepted snapshot (conv window and SSM state) into the row's slot. The
// accepted values are read from device memory and checked on the device (snapshot:
// launch_commit_check, before the copy's own launch; replay: launch_commit_pending itself), so a
// commit is capturable in a CUDA graph, and a round with one bad value commits nothing:
// all-or-nothing. Host-safe launcher declarations; kernels in commit.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace specstate::kernels {

// CommitMode, the error bits and the per-row checks (commit_step, row_window) are host-safe, in
// kernel_types.h: the kernels below run them, and CI tests them on the host.

// The checks of a round's accepted values, one CTA over every row: *error_flag = the OR of the
// rows' error bits (0: every value is valid). Written, not OR-ed: it needs no clearing before.
// Rows with slot -1 (padding) are not read. The commit launches that follow in the stream read
// the flag and, where it is raised, keep every row (as a = 0 / node -1 would).
struct CommitCheckParams {
  int rows = 0;
  int window = 0;  // T of the round
  CommitMode mode = CommitMode::kAcceptedLength;
  int64_t accepted_stride = 1;                     // elements
  RowTokensParams varlen;                          // as CommitParams::varlen
  const int32_t* __restrict__ slots = nullptr;     // [rows] device, -1 = padding
  const int32_t* __restrict__ accepted = nullptr;  // [rows] device, raw values
  int32_t* __restrict__ error_flag = nullptr;      // device int32
};
cudaError_t launch_commit_check(const CommitCheckParams& params, cudaStream_t stream);

struct CommitParams {
  int layers = 0;
  int rows = 0;
  int window = 0;  // T of the round
  CommitMode mode = CommitMode::kAcceptedLength;

  int64_t conv_state_bytes = 0;  // one committed conv window (one slot, one layer)
  int64_t ssm_state_bytes = 0;   // one committed SSM state
  int64_t conv_slot_bytes = 0;   // distance between slots of the committed conv (>= state bytes)
  int64_t ssm_slot_bytes = 0;
  // Whether every committed address (each layer's slot 0, the slot distances) is 16-byte
  // aligned: the host knows, the kernel then copies 16-byte vectors.
  bool committed_aligned16 = false;
  int64_t snap_conv_layer_bytes = 0;  // snapshot conv of one layer (all rows, all tokens)
  int64_t snap_ssm_layer_bytes = 0;
  int64_t snap_conv_row_bytes = 0;
  int64_t snap_ssm_row_bytes = 0;
  int64_t accepted_stride = 1;  // elements
  // Variable windows: row r's window is T_r = cu[r+1] - cu[r] tokens (kernel_types.h), and a
  // value is checked against T_r (chain a <= T_r, tree node < T_r). cu null: every row has T.
  RowTokensParams varlen;

  // [L] device tables: layer l's slot 0 of the committed conv / SSM (the pool's buffers or the
  // caller's views, DESIGN.md section 4); slot s at + s * conv_slot_bytes / ssm_slot_bytes.
  char* const* __restrict__ conv_layers = nullptr;
  char* const* __restrict__ ssm_layers = nullptr;
  const char* __restrict__ snap_conv = nullptr;    // [L, max_rows, max_window, conv_dim, W-1]
  const char* __restrict__ snap_ssm = nullptr;     // [L, max_rows, max_window, HV, V, K]
  const int32_t* __restrict__ slots = nullptr;     // [rows] device, -1 = padding
  const int32_t* __restrict__ accepted = nullptr;  // [rows] device, raw values
  // launch_commit_check's flag for these values, written before this launch in the stream:
  // raised, nothing is copied.
  const int32_t* __restrict__ round_error = nullptr;
};

// Copies the accepted snapshots of every (layer, row), or nothing where round_error is raised.
cudaError_t launch_commit(const CommitParams& params, cudaStream_t stream);

// Replay commit (DESIGN.md section 6): per row and layer, the accepted steps root..last become
// the slot's pending conv steps (path[slot][0..n) = their window indices, pending[l][slot] = n),
// its cursor is settled by the fold predicate, a tree's accepted path of factor records is
// compacted to ring positions base + h + 0..n-1, and h += n. No state moves. The round's values
// are checked by this launch itself (each CTA ORs every live row's error bits, as
// launch_commit_check does, so that a replay commit is one node; CTA (0, 0) stores the OR in
// *round_error): where any row is bad, every row commits n = 0: it keeps its state, and its
// cursor is still settled (the verify's fold, if any, stands). Trees: window <= 32.
struct CommitPendingParams {
  int layers = 0;
  int rows = 0;
  int window = 0;     // T of the round
  int num_slots = 0;  // pending is [layers][num_slots]
  CommitMode mode = CommitMode::kAcceptedLength;
  int64_t accepted_stride = 1;
  int64_t path_stride_slot = 0;
  RowTokensParams varlen;                          // as CommitParams::varlen
  const int32_t* __restrict__ slots = nullptr;     // [rows] device, -1 = padding
  const int32_t* __restrict__ accepted = nullptr;  // [rows] device, raw values
  const int32_t* __restrict__ parents = nullptr;   // [rows, window] device (tree); null: chain
  int32_t* __restrict__ pending = nullptr;         // [layers, num_slots]
  int32_t* __restrict__ path = nullptr;            // [num_slots, path_stride_slot]
  int32_t* __restrict__ round_error = nullptr;     // out: the OR of the rows' error bits
  int ring = 0;                                    // R
  int fold_limit = 0;                              // R - 2 * T_max
  int64_t factor_bytes = 0;                        // one record (a multiple of 16)
  int64_t factor_stride_slot = 0;                  // R * factor_bytes
  int32_t* __restrict__ cursor = nullptr;          // [layers, num_slots, 2] (base, h), or null
  char* __restrict__ factors = nullptr;            // [layers, num_slots, R, record]
};
cudaError_t launch_commit_pending(const CommitPendingParams& params, cudaStream_t stream);

// pending[l][slot] = 0 for l in [layer_begin, layer_end) and every slot of `slots` (host values,
// carried in the launch parameters); with cursors, each cursor is settled by the fold predicate
// (settle) or its history consumed (base += h, h = 0).
struct ClearPendingArgs {
  int32_t* pending = nullptr;  // [layers, num_slots]
  int32_t* cursor = nullptr;   // [layers, num_slots, 2], or null
  int num_slots = 0;
  int layer_begin = 0;
  int layer_end = 0;
  int ring = 0;
  int fold_limit = 0;
  bool settle = false;
};
cudaError_t launch_clear_pending(const ClearPendingArgs& args, const int32_t* slots, int n,
                                 cudaStream_t stream);

// Writes `n` int32 values to device memory `dst` with kernels that carry the values in their
// parameters: no host memory is read at execution time, so the upload is capturable and needs
// no pinned staging buffer.
cudaError_t launch_upload_i32(int32_t* dst, const int32_t* values, int n, cudaStream_t stream);
// Several arrays in as few launches as their values allow (pack_upload, kernel_types.h: one for
// a round's slots, parents and offsets up to kUploadChunk values together): each launch is a node
// of a captured round.
cudaError_t launch_upload_i32(const UploadSpan* spans, int count, cudaStream_t stream);

// Whether this build holds a kernel image the current device can run: cudaSuccess, or the error
// cudaFuncGetAttributes gives for one of the library's kernels (cudaErrorNoKernelImageForDevice,
// cudaErrorInvalidDeviceFunction) where no code was compiled for the device's compute capability
// (CMAKE_CUDA_ARCHITECTURES). Loads the module where loading is lazy; launches nothing.
cudaError_t kernel_image_status();

}  // namespace specstate::kernels
