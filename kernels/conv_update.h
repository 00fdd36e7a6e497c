// Causal conv1d update of a layer's conv window (DESIGN.md section 3), shared by every layer kind
// and every strategy. Host-safe launcher declaration; the kernel lives in conv_update.cuh.
//
// State I/O (chosen by the strategy, never a mode flag):
//   start state      the committed window of the row's slot
//   replay           pending != null: first re-run the slot's pending steps from its records
//                    (each shifts its recorded input into the window; no output is computed)
//   store_replayed   write the committed window after the replayed steps
//   per-token stores snap != null: the window after every token into row-indexed snapshots
//   final store      store_final: the window after the last token into the committed window
//   records          records != null && write_records: each token's input x into the slot's
//                    record at the token's window index
//   weight == null   (materialize) no token runs; nothing but the records and window is read
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace specstate::kernels {

// Rows whose slots one advance launch carries by value (decode batches larger than this are
// split into several launches by the caller).
inline constexpr int kConvInlineRows = 256;

struct ConvUpdateParams {
  int rows = 0;      // rows of this launch
  int tokens = 0;    // tokens per row: T (verify), n (prefill), 1 (decode), 0 (materialize)
  int conv_dim = 0;  // channels
  int width = 0;     // W: taps; the state keeps W-1 columns
  bool has_bias = false;
  bool store_replayed = false;
  bool store_final = false;
  bool write_records = false;
  // Where a replay verify runs the small-batch conv (conv_replay_small_kernel; the rule is
  // kernels::conv_small_vt): T in 4..7 over rows in [small_rows_lo, small_rows_hi], T >= 8 up to
  // max(8, small_rows_hi) rows, T in 2..3 over [small_rows_lo, small_rows_short_hi] (0: never).
  // Measured (docs/cuda.md): 1..8 and 1..4 at T < 4 by default (Mamba2; T < 4 on the H100), KDA
  // 1..6 and 1..4, GDN 2..8 at every T (build_gdn_launch, build_kda_launch; kernel_types.h). The
  // lean kernel takes chains from lean_rows rows on (below) before this rule, so these ranges serve
  // the rows below lean_rows (GDN and Mamba2 up to 7, KDA up to 3) and chains it cannot serve.
  int small_rows_lo = kConvSmallRowsLo;
  int small_rows_hi = kConvSmallRowsHi;
  ElemType weight_dtype = ElemType::kF32;
  ElemType bias_dtype = ElemType::kF32;

  int64_t x_stride_token = 0;  // x (mixed_qkv / xBC)
  int64_t x_stride_c = 1;
  int64_t out_stride_token = 0;  // conv_out
  int64_t out_stride_c = 1;
  int64_t weight_stride_c = 0;
  int64_t weight_stride_tap = 1;
  int64_t bias_stride = 1;
  int64_t state_stride_slot = 0;  // committed window: [slots][conv_dim][W-1] (channels_last:
                                  // [slots][W-1][conv_dim]), contiguous per slot
  int64_t snap_stride_row = 0;    // snapshot windows: [rows][T][conv_dim][W-1]
  int64_t snap_stride_t = 0;
  int64_t record_stride_slot = 0;  // records [slots][T_max][conv_dim]
  int64_t record_stride_t = 0;
  int64_t path_stride_slot = 0;  // path [slots][T_max]

  const void* __restrict__ x = nullptr;           // [rows * tokens, conv_dim] act dtype
  void* __restrict__ out = nullptr;               // [rows * tokens, conv_dim] act dtype
  const void* __restrict__ weight = nullptr;      // [conv_dim, W] weight_dtype
  const void* __restrict__ bias = nullptr;        // [conv_dim] bias_dtype, or null
  void* __restrict__ state = nullptr;             // [slots, conv_dim, W-1] state dtype
  void* __restrict__ snap = nullptr;              // [rows, T, conv_dim, W-1] state dtype, or null
  void* __restrict__ records = nullptr;           // [slots, T_max, record] act dtype (replay)
  const int32_t* __restrict__ pending = nullptr;  // [slots] this layer's pending steps, or null
  const int32_t* __restrict__ path = nullptr;     // [slots, T_max] window index of each step
  const int32_t* __restrict__ slots = nullptr;    // [rows] device; null: slot_inline
  const int32_t* __restrict__ parents = nullptr;  // [rows, T] device (tree); null: chain
  // Per-row token ranges (variable windows, kernel_types.h); cu null: row r at r * tokens, and
  // `tokens` is then every row's count. With cu, `tokens` is the largest (parents: [rows, tokens]).
  RowTokensParams varlen;
  int32_t slot_inline[kConvInlineRows] = {};  // [rows] advance: slots by value, -1 = skip
  // The element order of every conv window the launch reads or writes (committed and snapshot,
  // PoolOptions::conv_layout): false, [conv_dim][W-1] per slot; true, [W-1][conv_dim]. (Last, so
  // that no other field moves: the kernels' parameter offsets stay those of the default order.)
  bool channels_last = false;
  int small_rows_short_hi = kConvSmallRowsShortHi;  // see small_rows_lo
  // Launch as a programmatic dependent of the kernel before it in the stream (common.cuh): the
  // kernel reads the slots, its layer's weights, committed windows, pending steps and records
  // before it waits for that kernel, and x, conv_out and every write after. The caller sets it
  // only where that kernel writes none of the former (the CUDA backend: another layer's kernel).
  bool programmatic = false;
  // Where a replay verify of chains runs conv_lean_kernel (kernels::conv_lean_choice): from this
  // many rows, where the layout allows (conv_lean_applies). kConvLeanRows (GDN, Mamba2), KDA
  // kKdaConvLeanRows (build_kda_launch). (After every other field: their offsets stay.)
  int lean_rows = kConvLeanRows;
};

// Per (row, token) the window is the token's ancestor path over the start window (the committed
// window after any replayed steps); writes conv_out, and stores what the params ask for. Replay
// and final stores need one thread to walk all tokens of its channels (the launcher picks it).
// Supports W in 2..4; returns cudaErrorInvalidValue otherwise.
cudaError_t launch_conv_update(const ConvUpdateParams& params, ElemType act, ElemType state,
                               cudaStream_t stream);

// Launches of the lean replay conv (conv_lean_kernel, kernels::conv_lean_choice) this process has
// queued: a test's evidence that a forced lean verify ran rather than fell back.
int64_t conv_lean_launches();
void count_conv_lean_launch();  // (the launcher's side)

}  // namespace specstate::kernels
