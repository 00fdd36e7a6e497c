// A pool over an engine's state tensors shaped as vLLM allocates its hybrid models' cache: the
// C++ counterpart of the Python module specstate.vllm (docs/lifecycle.md, "Element order").
//
// vLLM keeps, per recurrent layer, a conv state of shape (slots, W-1, conv_dim) (channels last)
// and a recurrent state of shape (slots, HV, K, V) for KDA (fla's order), (slots, HV, V, K) for
// Gated DeltaNet and (slots, heads, head_dim, d_state) for Mamba2. specstate adopts such tensors
// as they are: the pool's element order is set to match (layout_options) and the tensors are
// handed over as the transposed views specstate's logical shapes ask for (committed_views), so
// nothing is copied and the engine's tensors hold the committed state:
//
//   specstate::PoolOptions o = specstate::vllm::layout_options(options, model);
//   specstate::StatePool pool(model, o, specstate::vllm::committed_views(model, conv, rec));
//
// Pure C++: views only (TensorView), no framework types.
#pragma once

#include <cstdint>
#include <vector>

#include "specstate/config.h"
#include "specstate/pool.h"
#include "specstate/tensor_view.h"

namespace specstate::vllm {

// One layer's conv state in vLLM's cache: {slots, W-1, conv_dim}.
std::vector<int64_t> conv_shape(const ModelConfig& model, int64_t slots = 1);
// One layer's recurrent state in vLLM's cache: KDA {slots, HV, K, V}, Gated DeltaNet
// {slots, HV, V, K}, Mamba2 {slots, heads, head_dim, d_state}.
std::vector<int64_t> recurrent_shape(const ModelConfig& model, int64_t slots = 1);

// `options` with vLLM's element order for the model's kind: conv_layout = kChannelsLast;
// ssm_layout = kKV for KDA, kVK otherwise. Every other field is the caller's.
PoolOptions layout_options(PoolOptions options, const ModelConfig& model);

// The committed-state views of a caller-owned pool (StatePool(model, layout_options(...),
// views)) over vLLM-shaped tensors, one of each per recurrent layer with any common slot count:
// the conv states as [slots, conv_dim, W-1] (their last two axes swapped), KDA's recurrent
// states as [slots, HV, V, K] likewise, the others as they are. Throws Error(kInvalidArgument)
// naming the tensor when a count or a shape is not vLLM's for the model (a conv state with
// vLLM's W-1+num_spec columns is refused: specstate owns the rollback, allocate W-1); strides,
// dtypes and devices are checked by the pool.
CommittedStateViews committed_views(const ModelConfig& model,
                                    const std::vector<TensorView>& conv_states,
                                    const std::vector<TensorView>& recurrent_states);

}  // namespace specstate::vllm
