// Mamba2 selective state update (DESIGN.md section 3): the one Mamba2 token step of the CUDA
// backend, shared by decode, prefill, verify and every strategy. The conv kernel (conv_update.h)
// and the commit (commit.h) are shared with GDN. Host-safe launcher declaration; the kernel lives
// in mamba2_recurrence.cuh.
//
// Per token and head h (group g = h / (nheads / G)), channel p, state n:
//   dt = softplus(dt_t[h] + dt_bias[h]) (threshold 20), clamped to [dt_min, dt_max] if given;
//   dA = exp(A[h] dt) with A = -exp(A_log[h]);
//   s[p][n] = s[p][n] dA + (B[g][n] dt) x[h][p];   y[p] = sum_n s[p][n] C[g][n] (+ D[h] x[h][p])
//   (y *= silu(z[h][p]) when the gate is on).
//
// State I/O as for the GDN recurrence (gdn_recurrence.h): start state the committed state of the
// row's slot; cursor != null (replay): the slot's history factor records first (the checkpoint
// plus h records, kernels::mamba2_factor_layout), fold / settled / store_replayed and the window's
// factor records as for GDN; snap != null: per-token snapshots (a tree token starts
// from its parent's snapshot), otherwise a tree token's start state is recomputed along its
// path (tokens <= kMamba2Chunk); store_final.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace specstate::kernels {

inline constexpr int kMamba2InlineRows = 256;

struct Mamba2RecurrenceParams {
  int rows = 0;       // rows of this launch
  int tokens = 0;     // tokens per row: T (verify), n (prefill), 1 (decode), 0 (materialize)
  int num_heads = 0;  // nheads
  int head_dim = 0;   // P
  int d_state = 0;    // N (16, 32, 64, 128 or 256)
  int n_groups = 0;   // G
  bool d_skip = false;
  bool gate = false;
  bool has_dt_min = false;
  bool has_dt_max = false;
  float dt_min = 0.0f;
  float dt_max = 0.0f;
  bool store_replayed = false;
  bool store_final = false;
  bool fold = false;
  bool settled = false;
  bool write_factors = false;
  int ring = 0;        // R: factor records per slot (replay)
  int fold_limit = 0;  // R - 2 * T_max: a verify folds iff h > fold_limit
  // Channel blocks of one (row, head) per CTA for a replay chain (the window's staging then serves
  // several blocks); set by the launcher (callers leave it). SPECSTATE_MAMBA2_VBLOCKS=n (1, 2, 4
  // or 8) overrides the choice, for tuning and tests.
  int vblocks = 1;
  // Set by the launcher from the head counts (callers leave them): heads per group and its
  // reciprocal (the kernel's group of head h is then a multiply, not an integer division).
  int heads_per_group = 1;
  float inv_heads_per_group = 1.0f;
  ElemType a_log_dtype = ElemType::kF32;
  ElemType dt_bias_dtype = ElemType::kF32;
  ElemType d_dtype = ElemType::kF32;

  int64_t xbc_stride_token = 0;  // conv output [tokens, conv_dim] = [x | B | C]
  int64_t xbc_stride_c = 1;
  int64_t dt_stride_token = 0;  // dt [tokens, nheads]
  int64_t dt_stride_h = 1;
  int64_t z_stride_token = 0;  // z [tokens, nheads * P]
  int64_t z_stride_c = 1;
  int64_t a_log_stride = 1;
  int64_t dt_bias_stride = 1;
  int64_t d_stride = 1;
  int64_t out_stride_token = 0;  // y [tokens, nheads, P]
  int64_t out_stride_h = 0;
  int64_t out_stride_p = 1;
  int64_t state_stride_slot = 0;  // committed state [slots][nheads][P][N], contiguous per slot
  int64_t snap_stride_row = 0;    // snapshots [rows][T][nheads][P][N]
  int64_t snap_stride_t = 0;
  int64_t factor_stride_slot = 0;  // bytes: factors [slots][R][record]
  int64_t factor_bytes = 0;        // bytes of one record (kernels::mamba2_factor_layout)
  int64_t f_dt = 0, f_dA = 0, f_x = 0, f_B = 0;  // byte offsets inside a record

  const void* __restrict__ xbc = nullptr;         // [rows * tokens, conv_dim] act dtype
  const void* __restrict__ dt = nullptr;          // [rows * tokens, nheads] act dtype
  const void* __restrict__ z = nullptr;           // [rows * tokens, nheads * P] act, or null
  const void* __restrict__ A_log = nullptr;       // [nheads]
  const void* __restrict__ dt_bias = nullptr;     // [nheads]
  const void* __restrict__ D = nullptr;           // [nheads], or null
  void* __restrict__ out = nullptr;               // [rows * tokens, nheads, P] act dtype
  void* __restrict__ state = nullptr;             // [slots, nheads, P, N] state dtype
  void* __restrict__ snap = nullptr;              // [rows, T, nheads, P, N] state dtype, or null
  const int32_t* __restrict__ cursor = nullptr;   // [slots, 2] this layer's (base, h), or null
  char* __restrict__ factors = nullptr;           // [slots, R, record] this layer's ring
  const int32_t* __restrict__ slots = nullptr;    // [rows] device; null: slot_inline
  const int32_t* __restrict__ parents = nullptr;  // [rows, T] device (tree); null: chain
  // Per-row token ranges (variable windows, kernel_types.h); cu null: row r at r * tokens, and
  // `tokens` is then every row's count. With cu, `tokens` is the largest (parents: [rows, tokens]).
  RowTokensParams varlen;
  int32_t slot_inline[kMamba2InlineRows] = {};  // [rows] advance: slots by value, -1 = skip
};

// N must be 16, 32, 64, 128 or 256 and a tree without snapshots at most kMamba2Chunk tokens
// (cudaErrorInvalidValue otherwise).
cudaError_t launch_mamba2_recurrence(const Mamba2RecurrenceParams& params, ElemType act,
                                     ElemType state, cudaStream_t stream);

}  // namespace specstate::kernels
