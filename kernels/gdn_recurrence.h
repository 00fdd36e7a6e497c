// Gated DeltaNet recurrence (DESIGN.md section 3): the one GDN token step of the CUDA backend,
// shared by decode, prefill, verify and every strategy. Host-safe launcher declaration; the
// kernel lives in gdn_recurrence.cuh. The KDA recurrence (Kimi Delta Attention: the GDN step with
// a decay per key channel, DESIGN.md section 3) is the same kernel with the gate as a K-vector:
// launch_kda_recurrence takes these params with the KDA fields below set.
//
// State I/O (chosen by the strategy, never a mode flag):
//   start state      the committed state of the row's slot
//   history          cursor != null (replay, DESIGN.md section 6): the committed state is a
//                    checkpoint; first apply the slot's h history factor records from ring
//                    position base (S = e^g S + u k^T each, no outputs)
//   fold             verify: store the post-history state iff h > fold_limit (settled: a cursor
//                    that folded is read as (base + h, 0) and nothing is applied)
//   store_replayed   (advance / materialize) write the committed state after the history
//   factor records   write_factors: each window token's record at ring position base + h + t
//   per-token stores snap != null: the state after every token into row-indexed snapshots; a
//                    tree token then starts from its parent's snapshot. Without snapshots a tree
//                    token's start state is recomputed from the row's start state along its path
//                    (tokens <= kGdnChunk).
//   final store      store_final: the state after the last token into the committed state
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace specstate::kernels {

inline constexpr int kGdnInlineRows = 256;

struct GdnRecurrenceParams {
  int rows = 0;         // rows of this launch
  int tokens = 0;       // tokens per row: T (verify), n (prefill), 1 (decode)
  int num_k_heads = 0;  // H
  int num_v_heads = 0;  // HV
  int head_k_dim = 0;   // K (32, 64 or 128)
  int head_v_dim = 0;   // V
  float scale = 1.0f;   // query scale
  bool store_replayed = false;
  bool store_final = false;
  bool fold = false;
  bool settled = false;
  bool write_factors = false;
  // Every state the launch reads or writes (committed, snapshots) is [HV][K][V] per slot
  // (PoolOptions::ssm_layout = kKV) instead of [HV][V][K] (in the bools' padding: no field
  // moves).
  bool state_kv = false;
  // Form the state after a row's last window token even where nothing reads it (no snapshots,
  // no store_final: a replay verify, whose records carry the window). Off, the step skips that
  // token's update (gdn_step's `update`); on only for timing the difference
  // (SPECSTATE_GDN_LAST_STATE=1, read by the launchers). The same bits either way.
  bool last_state = false;
  int ring = 0;        // R: factor records per slot (replay)
  int fold_limit = 0;  // R - 2 * T_max: a verify folds iff h > fold_limit
  // Set by the launcher from the head counts (callers leave them): value heads per key head and
  // its reciprocal (the kernel's key head of hv is then a multiply, not an integer division).
  int v_per_k = 1;
  float inv_v_per_k = 1.0f;
  // V blocks of one (row, value head) per CTA for a replay chain (the window's staging then
  // serves several blocks); set by the launcher from the batch and the GPU's size (callers leave
  // it). SPECSTATE_GDN_VBLOCKS=n (1, 2, 4 or 8) overrides the choice, for tuning and tests.
  int vblocks = 1;
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
  // KDA only: `a` is the raw gate [tokens, HV, K] (key channel stride a_stride_k), dt_bias is
  // [HV, K] (dt_bias_stride per value head, dt_bias_stride_k per channel), and the records' e^g
  // is [HV][K] (kernels::kda_factor_layout). lower_bound: fla's lower-bound gate where set.
  int64_t a_stride_k = 1;
  int64_t dt_bias_stride_k = 1;
  bool has_lower_bound = false;
  float lower_bound = 0.0f;
  int64_t out_stride_token = 0;  // core_out [tokens, HV, V]
  int64_t out_stride_h = 0;
  int64_t out_stride_v = 1;
  int64_t state_stride_slot = 0;  // committed state [slots][HV][V][K], contiguous per slot
  int64_t snap_stride_row = 0;    // snapshots [rows][T][HV][V][K]
  int64_t snap_stride_t = 0;
  int64_t factor_stride_slot = 0;                // bytes: factors [slots][R][record]
  int64_t factor_bytes = 0;                      // bytes of one record (kernels::gdn_factor_layout)
  int64_t f_u = 0, f_eg = 0, f_kf = 0, f_k = 0;  // byte offsets inside a record

  const void* __restrict__ qkv = nullptr;         // [rows * tokens, conv_dim] act dtype
  const void* __restrict__ a = nullptr;           // [rows * tokens, HV] act dtype (KDA: g, below)
  const void* __restrict__ b = nullptr;           // [rows * tokens, HV] act dtype
  const void* __restrict__ A_log = nullptr;       // [HV] a_log_dtype
  const void* __restrict__ dt_bias = nullptr;     // [HV] dt_bias_dtype (KDA: [HV, K], below)
  void* __restrict__ out = nullptr;               // [rows * tokens, HV, V] act dtype
  void* __restrict__ state = nullptr;             // [slots, HV, V, K] state dtype
  void* __restrict__ snap = nullptr;              // [rows, T, HV, V, K] state dtype, or null
  const int32_t* __restrict__ cursor = nullptr;   // [slots, 2] this layer's (base, h), or null
  char* __restrict__ factors = nullptr;           // [slots, R, record] this layer's ring
  const int32_t* __restrict__ slots = nullptr;    // [rows] device; null: slot_inline
  const int32_t* __restrict__ parents = nullptr;  // [rows, T] device (tree); null: chain
  // Per-row token ranges (variable windows, kernel_types.h); cu null: row r at r * tokens, and
  // `tokens` is then every row's count. With cu, `tokens` is the largest (parents: [rows, tokens]).
  RowTokensParams varlen;
  int32_t slot_inline[kGdnInlineRows] = {};  // [rows] advance: slots by value, -1 = skip
};

// Token t starts from the state after parent(t) (the start state for the root) and writes
// core_out; what is stored is what the params ask for. K must be 32, 64 or 128, and a tree
// without snapshots at most kGdnChunk tokens (cudaErrorInvalidValue otherwise).
cudaError_t launch_gdn_recurrence(const GdnRecurrenceParams& params, ElemType act, ElemType state,
                                  cudaStream_t stream);
// The KDA layer's recurrence: the same contract, the gate per key channel.
cudaError_t launch_kda_recurrence(const GdnRecurrenceParams& params, ElemType act, ElemType state,
                                  cudaStream_t stream);

}  // namespace specstate::kernels
