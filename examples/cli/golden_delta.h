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
  std::vector<std::string> notes;
};

// Fills `spec` from the case (every size checked against the tensors and params_json; bad_case
// otherwise). `kind` ("GDN", "KDA") names the kind in errors; `per_key_gate`: KDA's gate tensors.
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

}  // namespace specstate::cli::golden
