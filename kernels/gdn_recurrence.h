// Gated DeltaNet recurrence (DESIGN.md section 3), verify (snapshots) and advance (in place).
// Host-safe launcher declaration; the kernel lives in gdn_recurrence.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace specstate::kernels {

inline constexpr int kGdnInlineRows = 256;

struct GdnRecurrenceParams {
  int rows = 0;          // rows of this launch
  int tokens = 0;        // tokens per row: T (verify), n (prefill), 1 (decode)
  int num_k_heads = 0;   // H
  int num_v_heads = 0;   // HV
  int head_k_dim = 0;    // K (32, 64 or 128)
  int head_v_dim = 0;    // V
  int row_begin = 0;     // first row of this launch (token i of row r at r * tokens + i)
  float scale = 1.0f;    // query scale
  bool advance = false;  // true: advance the committed state in place; false: verify
  ElemType a_log_dtype = ElemType::kF32;
  ElemType dt_bias_dtype = ElemType::kF32;

  int64_t qkv_stride_token = 0;  // conv output [tokens, conv_dim] = [q | k | v]
  int64_t qkv_stride_c = 1;
  int64_t a_stride_token = 0;
  int64_t a_stride_h = 1;
  int64_t b_stride_token = 0;
  int64_t b_stride_h = 1;
  int64_t a_log_stride = 1;
  int64_t dt_bias_stride = 1;
  int64_t out_stride_token = 0;  // core_out [tokens, HV, V]
  int64_t out_stride_h = 0;
  int64_t out_stride_v = 1;
  int64_t state_stride_slot = 0;  // committed state [slots][HV][V][K], contiguous per slot
  int64_t snap_stride_row = 0;    // snapshots [rows][T][HV][V][K]
  int64_t snap_stride_t = 0;

  const void* __restrict__ qkv = nullptr;         // [rows * tokens, conv_dim] act dtype
  const void* __restrict__ a = nullptr;           // [rows * tokens, HV] act dtype
  const void* __restrict__ b = nullptr;           // [rows * tokens, HV] act dtype
  const void* __restrict__ A_log = nullptr;       // [HV] a_log_dtype
  const void* __restrict__ dt_bias = nullptr;     // [HV] dt_bias_dtype
  void* __restrict__ out = nullptr;               // [rows * tokens, HV, V] act dtype
  void* __restrict__ state = nullptr;             // [slots, HV, V, K] state dtype
  void* __restrict__ snap = nullptr;              // [rows, T, HV, V, K] state dtype (verify)
  const int32_t* __restrict__ slots = nullptr;    // [rows] device; null: slot_inline
  const int32_t* __restrict__ parents = nullptr;  // [rows, T] device (tree); null: chain
  int32_t slot_inline[kGdnInlineRows] = {};       // [rows] advance: slots by value, -1 = skip
};

// Verify: token t starts from the state after parent(t) (committed state for the root), writes
// core_out and the state after every token into the snapshots; the committed state is only read.
// Advance: token loop from the committed state, written back after the last token.
// K must be 32, 64 or 128 (cudaErrorInvalidValue otherwise).
cudaError_t launch_gdn_recurrence(const GdnRecurrenceParams& params, ElemType act, ElemType state,
                                  cudaStream_t stream);

}  // namespace specstate::kernels
