// Layer-kind traits of the tests: for each kind, the host buffers of a layer call (weights,
// inputs, outputs), how to put them into a backend's memory as views, and the output tensors to
// compare. Drivers written against these (common/strategy_equivalence.cpp) run every kind with
// the same code.
#pragma once

#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "common/gdn_data.h"
#include "common/kda_data.h"
#include "common/mamba2_data.h"
#include "specstate/specstate.h"

namespace specstate::test {

// A host buffer -> a view of a copy in the backend's memory.
using PutBuffer = std::function<TensorView(const Buffer&)>;
using NamedViews = std::vector<std::pair<const char*, TensorView>>;

struct GdnKind {
  using Config = GdnConfig;
  using HostWeights = LayerWeights;
  using HostInputs = TokenInputs;
  using HostOutputs = TokenOutputs;
  using Weights = GdnWeights;
  using Inputs = GdnInputs;
  using Outputs = GdnOutputs;
  static constexpr LayerKind kKind = LayerKind::kGatedDeltaNet;

  static ModelConfig model(int layers, const Config& c) {
    return ModelConfig::gated_delta_net(layers, c);
  }
  static Weights put(const HostWeights& w, const PutBuffer& put) {
    Weights v;
    v.conv_weight = put(w.conv_weight);
    if (w.conv_bias.numel()) v.conv_bias = put(w.conv_bias);
    v.A_log = put(w.A_log);
    v.dt_bias = put(w.dt_bias);
    return v;
  }
  static Inputs put(const HostInputs& in, const PutBuffer& put) {
    Inputs v;
    v.mixed_qkv = put(in.mixed_qkv);
    v.a = put(in.a);
    v.b = put(in.b);
    return v;
  }
  static Outputs put(const HostOutputs& out, const PutBuffer& put) {
    Outputs v;
    v.conv_out = put(out.conv_out);
    v.core_out = put(out.core_out);
    return v;
  }
  // The main output first.
  static NamedViews tensors(const Outputs& out) {
    return {{"core_out", out.core_out}, {"conv_out", out.conv_out}};
  }
};

struct Mamba2Kind {
  using Config = Mamba2Config;
  using HostWeights = Mamba2LayerWeights;
  using HostInputs = Mamba2TokenInputs;
  using HostOutputs = Mamba2TokenOutputs;
  using Weights = Mamba2Weights;
  using Inputs = Mamba2Inputs;
  using Outputs = Mamba2Outputs;
  static constexpr LayerKind kKind = LayerKind::kMamba2;

  static ModelConfig model(int layers, const Config& c) { return ModelConfig::mamba2(layers, c); }
  static Weights put(const HostWeights& w, const PutBuffer& put) {
    Weights v;
    v.conv_weight = put(w.conv_weight);
    if (w.conv_bias.numel()) v.conv_bias = put(w.conv_bias);
    v.A_log = put(w.A_log);
    v.dt_bias = put(w.dt_bias);
    if (w.D.numel()) v.D = put(w.D);
    return v;
  }
  static Inputs put(const HostInputs& in, const PutBuffer& put) {
    Inputs v;
    v.xBC = put(in.xBC);
    v.dt = put(in.dt);
    if (in.z.numel()) v.z = put(in.z);
    return v;
  }
  static Outputs put(const HostOutputs& out, const PutBuffer& put) {
    Outputs v;
    v.conv_out = put(out.conv_out);
    v.y = put(out.y);
    return v;
  }
  static NamedViews tensors(const Outputs& out) {
    return {{"y", out.y}, {"conv_out", out.conv_out}};
  }
};

struct KdaKind {
  using Config = KdaConfig;
  using HostWeights = KdaLayerWeights;
  using HostInputs = KdaTokenInputs;
  using HostOutputs = KdaTokenOutputs;
  using Weights = KdaWeights;
  using Inputs = KdaInputs;
  using Outputs = KdaOutputs;
  static constexpr LayerKind kKind = LayerKind::kKda;

  static ModelConfig model(int layers, const Config& c) { return ModelConfig::kda(layers, c); }
  static Weights put(const HostWeights& w, const PutBuffer& put) {
    Weights v;
    v.conv_weight = put(w.conv_weight);
    if (w.conv_bias.numel()) v.conv_bias = put(w.conv_bias);
    v.A_log = put(w.A_log);
    v.dt_bias = put(w.dt_bias);
    return v;
  }
  static Inputs put(const HostInputs& in, const PutBuffer& put) {
    Inputs v;
    v.mixed_qkv = put(in.mixed_qkv);
    v.g = put(in.g);
    v.b = put(in.b);
    return v;
  }
  static Outputs put(const HostOutputs& out, const PutBuffer& put) {
    Outputs v;
    v.conv_out = put(out.conv_out);
    v.core_out = put(out.core_out);
    return v;
  }
  static NamedViews tensors(const Outputs& out) {
    return {{"core_out", out.core_out}, {"conv_out", out.conv_out}};
  }
};

}  // namespace specstate::test
