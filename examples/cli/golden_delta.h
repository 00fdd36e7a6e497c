// What the golden cases of the delta-rule layer kinds share (GDN: golden_gdn.cpp, KDA:
// golden_kda.cpp): the sizes, dtypes and round of the case, read from its tensors and params_json,
// the case line of the report and the config fields both layer configs have. The kinds differ in
// the gate: GDN's a.l [R, T, HV] with dt_bias [HV], KDA's g.l [R, T, HV, K] with dt_bias [HV, K].
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/golden_runner.h"

namespace specstate::cli::golden {

struct DeltaSpec : RoundSpec {
  int D = 0, W = 0, H = 0, HV = 0, K = 0, V = 0;
  bool conv_bias = false;
  std::optional<float> scale;
  // Each gate parameter has its own dtype, as engines hold them (SGLang's Qwen3-Next: A_log f32,
  // dt_bias bf16): params_json's A_log_dtype (or A_dtype) and dt_bias_dtype, each falling back
  // to the shared gate_param_dtype.
  DType conv_weight = DType::kF32, a_log = DType::kF32, dt_bias = DType::kF32;
  // The gate's layout: GDN's a.l [R, T, HV] with dt_bias [HV] (false), KDA's g.l [R, T, HV, K]
  // with dt_bias [HV, K] (true).
  bool per_key_gate = false;
  std::vector<std::string> notes;
};

// Fills `spec` from the case (every size checked against the tensors and params_json; bad_case
// otherwise). `kind` ("GDN", "KDA") names the kind in errors; `per_key_gate`: KDA's gate tensors
// (kept in spec.per_key_gate).
void read_delta_spec(const GoldenCase& golden, const json& params, const char* kind,
                     bool per_key_gate, DeltaSpec& spec);

// "<kind> chain T=4, rows=4 (3 real), L=2, H=2 HV=4 K=32 V=32 W=4, slots=5<extra>, act f32, ...,
// strategy snapshot", then the notes.
std::string describe_delta(const DeltaSpec& s, const char* kind, const std::string& extra,
                           const GoldenOptions& options);

// The fields GdnConfig and KdaConfig share, from the case.
template <typename Layer>
void fill_delta_config(const DeltaSpec& s, Layer& layer) {
  layer.num_k_heads = s.H;
  layer.num_v_heads = s.HV;
  layer.head_k_dim = s.K;
  layer.head_v_dim = s.V;
  layer.conv_width = s.W;
  layer.scale = s.scale;
  layer.conv_bias = s.conv_bias;
}

// One layer's verify call, the body of both adapters' verify_layer: layer l's weights and inputs
// from the case's tensors in `store` (packed as [R*T, ...]) and NaN-filled outputs, uploaded into
// `mem`. The gate input (GDN's a, KDA's g: `gate_input`) has dt_bias's shape per token.
template <typename Weights, typename Outputs, typename Inputs>
LayerOutputs verify_delta_layer(StatePool& pool, Memory& mem, const TensorStore& store, int l,
                                const DeltaSpec& s, TensorView Inputs::*gate_input) {
  const auto tensor = [&](const char* base, DType dtype, const Shape& shape) {
    return upload_tensor(mem, store, layer_name(base, l), dtype, shape);
  };
  const int64_t tokens = int64_t{s.R} * s.T;
  const Shape gate = s.per_key_gate ? Shape{s.HV, s.K} : Shape{s.HV};
  Shape gate_per_token{tokens};
  gate_per_token.insert(gate_per_token.end(), gate.begin(), gate.end());
  Weights weights;
  weights.conv_weight = tensor("conv_weight", s.conv_weight, {s.D, s.W});
  if (s.conv_bias) weights.conv_bias = tensor("conv_bias", s.conv_weight, {s.D});
  weights.A_log = tensor("A_log", s.a_log, {s.HV});
  weights.dt_bias = tensor("dt_bias", s.dt_bias, gate);
  Inputs inputs;
  inputs.mixed_qkv = tensor("mixed_qkv", s.act, {tokens, s.D});
  inputs.*gate_input = tensor(s.per_key_gate ? "g" : "a", s.act, gate_per_token);
  inputs.b = tensor("b", s.act, {tokens, s.HV});
  Outputs outputs;
  outputs.conv_out = upload_nan(mem, s.act, {tokens, s.D}, "conv_out");
  outputs.core_out = upload_nan(mem, s.act, {tokens, s.HV, s.V}, "core_out");
  pool.verify(l, weights, inputs, outputs);
  return {outputs.conv_out, outputs.core_out};
}

}  // namespace specstate::cli::golden
