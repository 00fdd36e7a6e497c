// The GDN adapter of check-golden (golden_runner.h; the cases: tests/data/golden/README.md). A case
// holds, per GDN layer l, the inputs of one verify round (mixed_qkv.l, a.l, b.l, conv_weight.l,
// conv_bias.l, A_log.l, dt_bias.l, conv_state_init.l, ssm_state_init.l), what SGLang's kernels
// produced (conv_out.l, core_out.l, inter_conv_window.l, inter_ssm.l.r<i>,
// conv_state_committed.l, ssm_state_committed.l) and the float64 reference of the same (ref_*).
// This file reads the sizes and dtypes and makes one layer's verify call; the runner does the rest.
#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <sstream>

#include "cli/golden_runner.h"

namespace specstate::cli::golden {
namespace {

// The round (RoundSpec) and the GDN sizes and dtypes.
struct CaseSpec : RoundSpec {
  json params = json::object();
  int D = 0, W = 0, H = 0, HV = 0, K = 0, V = 0;
  bool conv_bias = false;
  std::optional<float> scale;
  // Each gate parameter has its own dtype, as engines hold them (SGLang's Qwen3-Next: A_log f32,
  // dt_bias bf16): params_json's A_log_dtype (or A_dtype) and dt_bias_dtype, each falling back
  // to the shared gate_param_dtype.
  DType conv_weight = DType::kF32, a_log = DType::kF32, dt_bias = DType::kF32;
  std::vector<std::string> notes;
};

std::optional<DType> parse_dtype_string(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (text.rfind("torch.", 0) == 0) text = text.substr(6);
  if (text == "f32" || text == "float32" || text == "fp32" || text == "float") return DType::kF32;
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  return std::nullopt;
}

// A storage dtype that decides the arithmetic (activations, states): must be understood.
DType required_dtype(const json& params, const char* key, DType fallback) {
  const auto it = params.find(key);
  if (it == params.end()) return fallback;
  if (!it->is_string()) bad_case(std::string("params_json '") + key + "' is not a string");
  const auto dtype = parse_dtype_string(it->get<std::string>());
  if (!dtype) {
    bad_case(std::string("params_json '") + key + "' = '" + it->get<std::string>() +
             "': check-golden knows f32 and bf16");
  }
  return *dtype;
}

// A parameter dtype that only chooses how exact values are passed (a bf16-representable value is
// the same number as f32 or bf16): anything not understood is passed as f32, with a note.
DType parameter_dtype(const json& params, const char* key, DType fallback,
                      std::vector<std::string>& notes) {
  const auto it = params.find(key);
  if (it == params.end()) return fallback;
  const auto dtype = it->is_string() ? parse_dtype_string(it->get<std::string>()) : std::nullopt;
  if (dtype) return *dtype;
  notes.push_back(std::string(key) + " " + it->dump() + " passed as f32");
  return DType::kF32;
}

// A size read from a tensor's shape: every size of a case is at least 1 (a K, V or HV of 0 would
// divide by zero below) and fits in int.
int dim(const Shape& shape, std::size_t i, const char* what, const std::string& tensor) {
  const int64_t d = shape[i];
  if (d < 1 || d > std::numeric_limits<int>::max()) {
    bad_case(std::string(what) + " = " + std::to_string(d) + " (dim " + std::to_string(i) + " of " +
             tensor + " " + shape_string(shape) + ") must be in [1, " +
             std::to_string(std::numeric_limits<int>::max()) + "]");
  }
  return static_cast<int>(d);
}

CaseSpec read_spec(const GoldenCase& golden, const json& params) {
  const TensorStore& store = golden.store;
  CaseSpec spec;
  spec.params = params;

  while (store.contains(layer_name("mixed_qkv", spec.L))) ++spec.L;
  if (spec.L == 0) bad_case("no tensor 'mixed_qkv.l0': not a GDN golden case");
  const Shape x = shape_in(store, "mixed_qkv.l0");
  if (x.size() != 3) bad_case("mixed_qkv.l0 has shape " + shape_string(x) + ", expected [R, T, D]");
  spec.R = dim(x, 0, "R", "mixed_qkv.l0");
  spec.T = dim(x, 1, "T", "mixed_qkv.l0");
  spec.D = dim(x, 2, "conv_dim", "mixed_qkv.l0");
  const Shape cw = shape_in(store, "conv_weight.l0");
  if (cw.size() != 2 || cw[0] != spec.D || cw[1] < 2) {
    bad_case("conv_weight.l0 has shape " + shape_string(cw) + ", expected [" +
             std::to_string(spec.D) + ", W] with W >= 2");
  }
  spec.W = dim(cw, 1, "W", "conv_weight.l0");
  const Shape a = shape_in(store, "a.l0");
  if (a.size() != 3) bad_case("a.l0 has shape " + shape_string(a) + ", expected [R, T, HV]");
  spec.HV = dim(a, 2, "HV", "a.l0");
  const Shape ssm = shape_in(store, "ssm_state_init.l0");
  if (ssm.size() != 4 || ssm[1] != spec.HV) {
    bad_case("ssm_state_init.l0 has shape " + shape_string(ssm) + ", expected [S, " +
             std::to_string(spec.HV) + ", V, K]");
  }
  spec.S = dim(ssm, 0, "S", "ssm_state_init.l0");
  spec.V = dim(ssm, 2, "V", "ssm_state_init.l0");
  spec.K = dim(ssm, 3, "K", "ssm_state_init.l0");
  const int64_t qk = int64_t{spec.D} - int64_t{spec.HV} * spec.V;
  if (qk <= 0 || qk % (2 * spec.K) != 0) {
    bad_case("conv_dim " + std::to_string(spec.D) +
             " is not 2*H*K + HV*V for K=" + std::to_string(spec.K) +
             ", HV=" + std::to_string(spec.HV) + ", V=" + std::to_string(spec.V));
  }
  spec.H = static_cast<int>(qk / (2 * spec.K));

  const std::string from = "the tensor shapes";
  check_param(params, "L", spec.L, "the mixed_qkv.l<l> tensors");
  check_param(params, "rows", spec.R, from);
  check_param(params, "T", spec.T, from);
  check_param(params, "conv_dim", spec.D, from);
  check_param(params, "width", spec.W, from);
  check_param(params, "slots", spec.S, from);
  check_param(params, "H", spec.H, from);
  check_param(params, "HV", spec.HV, from);
  check_param(params, "K", spec.K, from);
  check_param(params, "V", spec.V, from);

  spec.conv_bias = store.contains("conv_bias.l0");
  const auto has_bias = params.find("has_conv_bias");
  if (has_bias != params.end() && has_bias->is_boolean() && *has_bias != spec.conv_bias) {
    bad_case(std::string("params_json has_conv_bias = ") + has_bias->dump() +
             " but conv_bias.l0 is " + (spec.conv_bias ? "present" : "absent"));
  }
  const auto scale = params.find("scale");
  if (scale != params.end() && scale->is_number()) spec.scale = scale->get<float>();

  // Storage dtypes. Without params_json a BF16-stored input means bf16 activations.
  const DType stored =
      store.info("mixed_qkv.l0").dtype == SafetensorsDType::kBF16 ? DType::kBF16 : DType::kF32;
  spec.act = required_dtype(params, "act_dtype", stored);
  spec.conv_state = required_dtype(params, "conv_state_dtype", spec.act);
  spec.ssm_state = required_dtype(params, "ssm_state_dtype", DType::kF32);
  spec.conv_weight = parameter_dtype(params, "conv_weight_dtype", spec.act, spec.notes);
  const DType gate = parameter_dtype(params, "gate_param_dtype", DType::kF32, spec.notes);
  spec.a_log = parameter_dtype(params, params.contains("A_log_dtype") ? "A_log_dtype" : "A_dtype",
                               gate, spec.notes);
  spec.dt_bias = parameter_dtype(params, "dt_bias_dtype", gate, spec.notes);

  // Every per-layer tensor must have the shape the sizes imply.
  for (int l = 0; l < spec.L; ++l) {
    expect_shape(store, layer_name("mixed_qkv", l), {spec.R, spec.T, spec.D});
    expect_shape(store, layer_name("a", l), {spec.R, spec.T, spec.HV});
    expect_shape(store, layer_name("b", l), {spec.R, spec.T, spec.HV});
    expect_shape(store, layer_name("conv_weight", l), {spec.D, spec.W});
    if (spec.conv_bias) expect_shape(store, layer_name("conv_bias", l), {spec.D});
    expect_shape(store, layer_name("A_log", l), {spec.HV});
    expect_shape(store, layer_name("dt_bias", l), {spec.HV});
    expect_shape(store, layer_name("conv_state_init", l), {spec.S, spec.D, spec.W - 1});
    expect_shape(store, layer_name("ssm_state_init", l), {spec.S, spec.HV, spec.V, spec.K});
  }

  read_round_indices(store, params, spec);
  spec.conv_out = {spec.R, spec.T, spec.D};
  spec.core_out = {spec.R, spec.T, spec.HV, spec.V};
  spec.conv_window = {spec.R, spec.T, spec.D, spec.W - 1};
  spec.ssm_step = {spec.T, spec.HV, spec.V, spec.K};
  spec.conv_pool = {spec.S, spec.D, spec.W - 1};
  spec.ssm_pool = {spec.S, spec.HV, spec.V, spec.K};
  return spec;
}

std::string describe_case(const CaseSpec& s, const GoldenOptions& options) {
  std::ostringstream out;
  out << "GDN " << (s.tree ? "tree" : "chain") << " T=" << s.T << ", rows=" << s.R << " ("
      << s.n_real << " real), L=" << s.L << ", H=" << s.H << " HV=" << s.HV << " K=" << s.K
      << " V=" << s.V << " W=" << s.W << ", slots=" << s.S << ", act " << dtype_name(s.act)
      << ", conv state " << dtype_name(s.conv_state) << ", ssm state " << dtype_name(s.ssm_state)
      << ", " << (s.conv_bias ? "conv bias" : "no conv bias") << ", A_log " << dtype_name(s.a_log)
      << ", dt_bias " << dtype_name(s.dt_bias) << ", backend " << backend_name(options.backend)
      << ", strategy " << strategy_name(options.strategy);
  for (const std::string& note : s.notes) out << "; " << note;
  return out.str();
}

class GdnAdapter final : public AdapterBase<CaseSpec> {
 public:
  GdnAdapter(const GoldenCase& golden, const json& params)
      : AdapterBase(golden.store, read_spec(golden, params)) {}

  ModelConfig model() const override {
    const CaseSpec& s = spec_;
    GdnConfig layer;
    layer.num_k_heads = s.H;
    layer.num_v_heads = s.HV;
    layer.head_k_dim = s.K;
    layer.head_v_dim = s.V;
    layer.conv_width = s.W;
    layer.scale = s.scale;
    layer.conv_bias = s.conv_bias;
    return ModelConfig::gated_delta_net(s.L, with_storage_dtypes(layer));
  }

  LayerOutputs verify_layer(StatePool& pool, Memory& mem, int l) const override {
    const CaseSpec& s = spec_;
    const int64_t tokens = int64_t{s.R} * s.T;
    GdnWeights weights;
    weights.conv_weight = layer_tensor(mem, "conv_weight", l, s.conv_weight, {s.D, s.W});
    if (s.conv_bias) weights.conv_bias = layer_tensor(mem, "conv_bias", l, s.conv_weight, {s.D});
    weights.A_log = layer_tensor(mem, "A_log", l, s.a_log, {s.HV});
    weights.dt_bias = layer_tensor(mem, "dt_bias", l, s.dt_bias, {s.HV});
    GdnInputs inputs;
    inputs.mixed_qkv = layer_tensor(mem, "mixed_qkv", l, s.act, {tokens, s.D});
    inputs.a = layer_tensor(mem, "a", l, s.act, {tokens, s.HV});
    inputs.b = layer_tensor(mem, "b", l, s.act, {tokens, s.HV});
    GdnOutputs outputs;
    outputs.conv_out = upload_nan(mem, s.act, {tokens, s.D}, "conv_out");
    outputs.core_out = upload_nan(mem, s.act, {tokens, s.HV, s.V}, "core_out");
    pool.verify(l, weights, inputs, outputs);
    return {outputs.conv_out, outputs.core_out};
  }
};

// Not Mamba2 (the kind table tries Mamba2 first): a case without mixed_qkv.l0 is reported as
// "not a GDN golden case".
bool is_gdn(const GoldenCase&, const json&) { return true; }

}  // namespace

const GoldenKind& gdn_golden_kind() {
  static const GoldenKind kind{"GDN", "", &is_gdn, &make_adapter<GdnAdapter>};
  return kind;
}

}  // namespace specstate::cli::golden
