// Causal conv1d update of a GDN layer's conv window (DESIGN.md section 3), verify and advance.
// Host-safe launcher declaration; the kernel lives in conv_update.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace specstate::kernels {

// Rows whose slots one advance launch carries by value (decode batches larger than this are
// split into several launches by the caller).
inline constexpr int kConvInlineRows = 256;

struct ConvUpdateParams {
  int rows = 0;          // rows of this launch
  int tokens = 0;        // tokens per row: T (verify), n (prefill), 1 (decode)
  int conv_dim = 0;      // channels
  int width = 0;         // W: taps; the state keeps W-1 columns
  int row_begin = 0;     // first row of this launch (token i of row r at r * tokens + i)
  bool advance = false;  // true: advance the committed window in place; false: verify
  bool has_bias = false;
  ElemType weight_dtype = ElemType::kF32;
  ElemType bias_dtype = ElemType::kF32;

  int64_t x_stride_token = 0;  // mixed_qkv
  int64_t x_stride_c = 1;
  int64_t out_stride_token = 0;  // conv_out
  int64_t out_stride_c = 1;
  int64_t weight_stride_c = 0;
  int64_t weight_stride_tap = 1;
  int64_t bias_stride = 1;
  int64_t state_stride_slot = 0;  // committed window: [slots][conv_dim][W-1], contiguous per slot
  int64_t snap_stride_row = 0;    // snapshot windows: [rows][T][conv_dim][W-1]
  int64_t snap_stride_t = 0;

  const void* __restrict__ x = nullptr;           // [rows * tokens, conv_dim] act dtype
  void* __restrict__ out = nullptr;               // [rows * tokens, conv_dim] act dtype
  const void* __restrict__ weight = nullptr;      // [conv_dim, W] weight_dtype
  const void* __restrict__ bias = nullptr;        // [conv_dim] bias_dtype, or null
  void* __restrict__ state = nullptr;             // [slots, conv_dim, W-1] state dtype
  void* __restrict__ snap = nullptr;              // [rows, T, conv_dim, W-1] state dtype (verify)
  const int32_t* __restrict__ slots = nullptr;    // [rows] device; null: slot_inline
  const int32_t* __restrict__ parents = nullptr;  // [rows, T] device (tree); null: chain
  int32_t slot_inline[kConvInlineRows] = {};      // [rows] advance: slots by value, -1 = skip
};

// Verify: per (row, token) the window is the token's ancestor path over the committed window;
// writes conv_out and the snapshot window of every token; never writes the committed window.
// Advance: token loop per row from the committed window; writes conv_out and the final window.
// Supports W in 2..4; returns cudaErrorInvalidValue otherwise.
cudaError_t launch_conv_update(const ConvUpdateParams& params, ElemType act, ElemType state,
                               cudaStream_t stream);

}  // namespace specstate::kernels
