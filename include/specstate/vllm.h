// A pool over an engine's state tensors shaped as vLLM allocates its hybrid models' cache: the
// C++ counterpart of the Python module specstate.vllm (docs/lifecycle.md, "Element order").
//
// vLLM keeps, per recurrent layer, a conv state of shape (slots, W-1, conv_dim) (channels last)
// and a recurrent state of shape (slots, HV, V, K) for Gated DeltaNet and KDA (the order of
// vLLM's kernels since its PR #33291 of 2026-01, "[N, HV, K, V] to [N, HV, V, K]", which KDA
// shares: its prefill output kernel followed in #40956) and (slots, heads, head_dim, d_state) for
// Mamba2. vLLM before PR #33291 (and fla's kernels by default) kept the delta-rule states as
// (slots, HV, K, V): pass `order` = SsmLayout::kKV for such an engine. specstate adopts the
// tensors as they are: the pool's element order is set to match (layout_options) and the
// tensors are handed over as the transposed views specstate's logical shapes ask for
// (committed_views), so nothing is copied and the engine's tensors hold the committed state:
//
//   specstate::PoolOptions o = specstate::vllm::layout_options(options, model);
//   specstate::StatePool pool(model, o, specstate::vllm::committed_views(model, conv, rec));
//
// The dtypes are the config's: vLLM's conv states follow its mamba_cache_dtype ("auto": the
// model's), the GDN and Mamba2 states its mamba_ssm_cache_dtype ("auto": the conv state's), KDA's
// state is always f32; set conv_state_dtype / ssm_state_dtype to match (the pool refuses another).
//
// Pure C++: views only (TensorView), no framework types.
#pragma once

#include <cstdint>
#include <vector>

#include "specstate/config.h"
#include "specstate/pool.h"
#include "specstate/tensor_view.h"

namespace specstate::vllm {

// One layer's conv state in vLLM's cache: {slots, W-1, conv_dim}. Both shapes throw
// Error(kInvalidArgument) for slots < 0 and whatever model.validate() throws (an unvalidated
// config's sizes may not fit their types).
std::vector<int64_t> conv_shape(const ModelConfig& model, int64_t slots = 1);
// One layer's recurrent state in vLLM's cache: Gated DeltaNet and KDA {slots, HV, V, K} (`order`
// kVK, vLLM's since PR #33291) or {slots, HV, K, V} (kKV, vLLM's before it), Mamba2 {slots,
// heads, head_dim, d_state}. Throws Error(kInvalidArgument) for kKV with Mamba2 or an order that
// is none.
std::vector<int64_t> recurrent_shape(const ModelConfig& model, int64_t slots = 1,
                                     SsmLayout order = SsmLayout::kVK);

// `options` with vLLM's element order: conv_layout = kChannelsLast; ssm_layout = `order` for the
// delta-rule kinds (kVK for Mamba2). Every other field is the caller's. Throws as
// recurrent_shape.
PoolOptions layout_options(PoolOptions options, const ModelConfig& model,
                           SsmLayout order = SsmLayout::kVK);

// The committed-state views of a caller-owned pool (StatePool(model, layout_options(...),
// views)) over vLLM-shaped tensors, one of each per recurrent layer with any common slot count:
// the conv states as [slots, conv_dim, W-1] (their last two axes swapped), the recurrent states
// as they are, or with their last two axes swapped for `order` kKV ([slots, HV, V, K] is
// specstate's logical shape). Throws Error(kInvalidArgument) naming the tensor when a count or a
// shape is not vLLM's for the model and order (a conv state with vLLM's W-1+num_spec columns is
// refused: specstate owns the rollback, allocate W-1); strides, dtypes and devices are checked
// by the pool. `order` must be the one layout_options was given.
CommittedStateViews committed_views(const ModelConfig& model,
                                    const std::vector<TensorView>& conv_states,
                                    const std::vector<TensorView>& recurrent_states,
                                    SsmLayout order = SsmLayout::kVK);

}  // namespace specstate::vllm
