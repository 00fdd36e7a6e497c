// Internal: the kernel params of one layer call on CUDA (the shared conv kernel and the kind's
// recurrence), built from the pool's layout and the strategy's StateIO. Shared by the CUDA
// backend and the benchmarks (which time the kernels of exactly the calls the backend makes).
// The builders: delta_launch.cpp (GDN, KDA), mamba2_launch.cpp; their shared part:
// launch_common.h.
#pragma once

#include <cstdint>

#include "../backend.h"
#include "kernels/conv_update.h"
#include "kernels/gdn_recurrence.h"
#include "kernels/mamba2_recurrence.h"
#include "specstate/kda.h"
#include "specstate/mamba2.h"

namespace specstate::detail::cuda {

// Row-indexed scratch the backend owns for one layer call (device memory).
struct GdnScratch {
  void* conv_out = nullptr;  // [scratch_tokens, conv_dim] act: conv output when not given
};

// One launch of a layer call: `rows` rows of `tokens` tokens from input token `token0`.
template <typename Weights, typename Inputs, typename Outputs>
struct LaunchArgs {
  const PoolStorage* storage = nullptr;
  int layer = 0;
  int rows = 0;
  int tokens = 0;
  int64_t token0 = 0;
  StateIO io;
  const int32_t* device_slots = nullptr;    // [rows] (verify), or null: inline_slots
  const int32_t* inline_slots = nullptr;    // [rows] host values (advance)
  const int32_t* device_parents = nullptr;  // [rows, tokens] tree, or null
  kernels::RowTokensParams varlen;          // variable windows (cu relative to token0), or none
  GdnScratch scratch;
  const Weights* weights = nullptr;
  const Inputs* inputs = nullptr;  // may hold empty views when tokens == 0
  const Outputs* outputs = nullptr;
};
using GdnLaunchArgs = LaunchArgs<GdnWeights, GdnInputs, GdnOutputs>;
using Mamba2LaunchArgs = LaunchArgs<Mamba2Weights, Mamba2Inputs, Mamba2Outputs>;
using KdaLaunchArgs = LaunchArgs<KdaWeights, KdaInputs, KdaOutputs>;

// GDN's and KDA's launches (KDA runs the GDN kernel with the gate per key channel).
struct GdnLaunch {
  kernels::ConvUpdateParams conv;
  kernels::GdnRecurrenceParams rec;
  bool user_conv_out = false;  // conv.out is the caller's conv_out (else the backend's scratch)
  kernels::ElemType act = kernels::ElemType::kF32;
  kernels::ElemType conv_state = kernels::ElemType::kF32;
  kernels::ElemType ssm_state = kernels::ElemType::kF32;
};
struct Mamba2Launch {
  kernels::ConvUpdateParams conv;
  kernels::Mamba2RecurrenceParams rec;
  kernels::ElemType act = kernels::ElemType::kF32;
  kernels::ElemType conv_state = kernels::ElemType::kF32;
  kernels::ElemType ssm_state = kernels::ElemType::kF32;
};

GdnLaunch build_gdn_launch(const GdnLaunchArgs& args);
GdnLaunch build_kda_launch(const KdaLaunchArgs& args);
Mamba2Launch build_mamba2_launch(const Mamba2LaunchArgs& args);

inline kernels::ElemType elem(DType dtype) {
  return dtype == DType::kBF16 ? kernels::ElemType::kBF16 : kernels::ElemType::kF32;
}

}  // namespace specstate::detail::cuda
