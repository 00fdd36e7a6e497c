#include "specstate/vllm.h"

#include <string>
#include <utility>

#include "layout.h"
#include "specstate/status.h"

namespace specstate::vllm {
namespace {

std::string shape_text(const int64_t* dims, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

[[noreturn]] void refuse(const std::string& message) {
  throw Error(Status::kInvalidArgument, "vllm::committed_views: " + message);
}

// Checks `tensors` against vLLM's shape `want` (any slot count, the same for every tensor).
void check(const char* name, const std::vector<TensorView>& tensors, int layers,
           const std::vector<int64_t>& want) {
  if (static_cast<int>(tensors.size()) != layers) {
    refuse(std::string(name) + " has " + std::to_string(tensors.size()) +
           " tensors, the model has " + std::to_string(layers) + " recurrent layers");
  }
  const int n = static_cast<int>(want.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& t = tensors[i];
    const std::string who = std::string(name) + "[" + std::to_string(i) + "]";
    // Before any shape[] entry is read: a hand-filled view may claim any ndim.
    if (t.ndim < 1 || t.ndim > TensorView::kMaxDims) {
      refuse(who + " has ndim = " + std::to_string(t.ndim) + ", outside [1, " +
             std::to_string(TensorView::kMaxDims) + "]");
    }
    bool same = t.ndim == n;
    for (int d = 1; same && d < n; ++d) same = t.shape[static_cast<std::size_t>(d)] == want[d];
    if (!same) {
      refuse(who + " has shape " + shape_text(t.shape.data(), t.ndim) +
             "; vLLM's layout for this config is (slots, " +
             shape_text(want.data() + 1, n - 1).substr(1));
    }
    // Slots below zero named here, as the caller passed them: the pool's own refusal names the
    // swapped view (committed.conv[0] dim 0 = -1, shape [2, 64, 3]).
    if (t.shape[0] < 0) {
      refuse(who + " has shape " + shape_text(t.shape.data(), t.ndim) +
             ": slots = " + std::to_string(t.shape[0]) + " must be >= 0");
    }
    if (t.shape[0] != tensors[0].shape[0]) {
      refuse(who + " has " + std::to_string(t.shape[0]) + " slots, " + name + "[0] has " +
             std::to_string(tensors[0].shape[0]));
    }
  }
}

// `t` with its last two axes swapped (a view: no data moves).
TensorView swap_last(TensorView t) {
  const auto a = static_cast<std::size_t>(t.ndim - 2), b = static_cast<std::size_t>(t.ndim - 1);
  std::swap(t.shape[a], t.shape[b]);
  std::swap(t.stride[a], t.stride[b]);
  return t;
}

// `order` for `model`: kVK, or kKV for the delta-rule kinds; anything else is refused by name.
void check_order(const char* function, const ModelConfig& model, SsmLayout order) {
  if (order != SsmLayout::kVK && order != SsmLayout::kKV) {
    throw Error(Status::kInvalidArgument,
                std::string(function) + ": order = " + std::to_string(static_cast<int>(order)) +
                    " is not an SsmLayout (0 = vk, 1 = kv)");
  }
  if (order == SsmLayout::kKV && !detail::layer_shapes(model).kv_layout) {
    throw Error(Status::kInvalidArgument,
                std::string(function) +
                    ": order = kv is for the delta-rule kinds (gated_delta_net, kda); vLLM's "
                    "mamba2 state is (slots, heads, head_dim, d_state)");
  }
}

// A shape's arguments: a config that validates (its sizes are then in range) and a slot count
// of at least 0.
void check_shape_args(const char* function, const ModelConfig& model, int64_t slots) {
  if (slots < 0) {
    throw Error(Status::kInvalidArgument,
                std::string(function) + ": slots = " + std::to_string(slots) + " must be >= 0");
  }
  model.validate();  // names ModelConfig and the field
}

}  // namespace

std::vector<int64_t> conv_shape(const ModelConfig& model, int64_t slots) {
  check_shape_args("vllm::conv_shape", model, slots);
  return {slots, model.conv_width() - 1, model.conv_dim()};
}

std::vector<int64_t> recurrent_shape(const ModelConfig& model, int64_t slots, SsmLayout order) {
  check_shape_args("vllm::recurrent_shape", model, slots);
  check_order("vllm::recurrent_shape", model, order);
  // The kind's state [heads][v][k] (Mamba2: [heads][head_dim][d_state]).
  const std::vector<int64_t> st = detail::layer_shapes(model).ssm_shape;
  const int64_t heads = st.at(0), v = st.at(1), k = st.at(2);
  if (order == SsmLayout::kKV) return {slots, heads, k, v};
  return {slots, heads, v, k};
}

PoolOptions layout_options(PoolOptions options, const ModelConfig& model, SsmLayout order) {
  model.validate();  // as recurrent_shape (the layer shapes of an unvalidated config overflow)
  check_order("vllm::layout_options", model, order);
  options.conv_layout = ConvLayout::kChannelsLast;
  options.ssm_layout = order;
  return options;
}

CommittedStateViews committed_views(const ModelConfig& model,
                                    const std::vector<TensorView>& conv_states,
                                    const std::vector<TensorView>& recurrent_states,
                                    SsmLayout order) {
  model.validate();  // names the field (a kind that is none, no layers, ...)
  check_order("vllm::committed_views", model, order);
  check("conv_states", conv_states, model.num_layers, conv_shape(model));
  check("recurrent_states", recurrent_states, model.num_layers, recurrent_shape(model, 1, order));
  CommittedStateViews views;
  for (const TensorView& t : conv_states) views.conv.push_back(swap_last(t));
  const bool kv = order == SsmLayout::kKV;
  for (const TensorView& t : recurrent_states) views.ssm.push_back(kv ? swap_last(t) : t);
  return views;
}

}  // namespace specstate::vllm
