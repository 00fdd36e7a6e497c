// Internal: the kernel params of one GDN layer call on CUDA, built from the pool's layout and the
// strategy's StateIO. Shared by the CUDA backend and the benchmarks (which time the kernels of
// exactly the calls the backend makes).
#pragma once

#include <cstdint>

#include "../backend.h"
#include "kernels/conv_update.h"
#include "kernels/gdn_recurrence.h"

namespace specstate::detail::cuda {

// Row-indexed scratch the backend owns for one layer call (device memory).
struct GdnScratch {
  void* conv_out = nullptr;      // [scratch_tokens, conv_dim] act: conv output when not given
  void* replay_qkv = nullptr;    // [replay_rows, max_window, conv_dim] act
  void* replay_gates = nullptr;  // [replay_rows, max_window, 2 * HV] act
};

struct GdnLaunchArgs {
  const PoolStorage* storage = nullptr;
  int layer = 0;
  int rows = 0;        // rows of this launch
  int tokens = 0;      // tokens per row
  int64_t token0 = 0;  // first input token of this launch
  StateIO io;
  const int32_t* device_slots = nullptr;    // [rows] (verify), or null: inline_slots
  const int32_t* inline_slots = nullptr;    // [rows] host values (advance)
  const int32_t* device_parents = nullptr;  // [rows, tokens] tree, or null
  GdnScratch scratch;
  const GdnWeights* weights = nullptr;
  const GdnInputs* inputs = nullptr;  // may hold empty views when tokens == 0
  const GdnOutputs* outputs = nullptr;
};

struct GdnLaunch {
  kernels::ConvUpdateParams conv;
  kernels::GdnRecurrenceParams rec;
  kernels::ElemType act = kernels::ElemType::kF32;
  kernels::ElemType conv_state = kernels::ElemType::kF32;
  kernels::ElemType ssm_state = kernels::ElemType::kF32;
};

GdnLaunch build_gdn_launch(const GdnLaunchArgs& args);

inline kernels::ElemType elem(DType dtype) {
  return dtype == DType::kBF16 ? kernels::ElemType::kBF16 : kernels::ElemType::kF32;
}

}  // namespace specstate::detail::cuda
