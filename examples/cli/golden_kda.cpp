// The KDA (Kimi Delta Attention) adapter of check-golden (golden_runner.h; the cases: the KDA part
// of tests/data/golden/README.md, written by tools/kda_golden.py). A case holds, per KDA layer l,
// the inputs of one verify round (mixed_qkv.l [R, T, 2HK + HV V], g.l [R, T, HV, K] raw gate,
// b.l [R, T, HV], conv_weight.l, conv_bias.l, A_log.l [HV], dt_bias.l [HV, K], conv_state_init.l,
// ssm_state_init.l [S, HV, V, K]), the float64 reference of the round (ref_*) and, once produced
// on a GPU, fla's outputs under the un-prefixed names. This file reads the sizes and dtypes and
// makes one layer's verify call; the runner does the rest. A case is KDA when params_json says
// model "kda" or g.l0 has rank 4 (a GDN case's g.l0 is [R, T, HV]).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include "cli/golden_runner.h"

namespace specstate::cli::golden {
namespace {

// The round (RoundSpec) and the KDA sizes, dtypes and gate.
struct KdaSpec : RoundSpec {
  int D = 0, W = 0, H = 0, HV = 0, K = 0, V = 0;
  bool conv_bias = false;
  std::optional<float> scale, lower_bound;
  DType conv_weight = DType::kF32, a_log = DType::kF32, dt_bias = DType::kF32;
};

DType dtype_param(const json& params, const char* key, DType fallback) {
  const auto it = params.find(key);
  if (it == params.end()) return fallback;
  std::string text = it->is_string() ? it->get<std::string>() : it->dump();
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (text.rfind("torch.", 0) == 0) text = text.substr(6);
  if (text == "f32" || text == "float32" || text == "fp32") return DType::kF32;
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  bad_case(std::string("params_json '") + key + "' = " + it->dump() +
           ": check-golden knows f32 and bf16");
}

int dim(const Shape& shape, std::size_t i, const char* what, const std::string& tensor) {
  if (i >= shape.size() || shape[i] < 1 || shape[i] > std::numeric_limits<int>::max()) {
    bad_case(std::string(what) + " (dim " + std::to_string(i) + " of " + tensor + " " +
             shape_string(shape) + ") must be in [1, 2^31 - 1]");
  }
  return static_cast<int>(shape[i]);
}

KdaSpec read_spec(const GoldenCase& golden, const json& params) {
  const TensorStore& store = golden.store;
  KdaSpec spec;
  while (store.contains(layer_name("mixed_qkv", spec.L))) ++spec.L;
  if (spec.L == 0) bad_case("no tensor 'mixed_qkv.l0': not a KDA golden case");
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
  const Shape g = shape_in(store, "g.l0");
  if (g.size() != 4) bad_case("g.l0 has shape " + shape_string(g) + ", expected [R, T, HV, K]");
  spec.HV = dim(g, 2, "HV", "g.l0");
  spec.K = dim(g, 3, "K", "g.l0");
  const Shape ssm = shape_in(store, "ssm_state_init.l0");
  if (ssm.size() != 4 || ssm[1] != spec.HV || ssm[3] != spec.K) {
    bad_case("ssm_state_init.l0 has shape " + shape_string(ssm) + ", expected [S, " +
             std::to_string(spec.HV) + ", V, " + std::to_string(spec.K) + "]");
  }
  spec.S = dim(ssm, 0, "S", "ssm_state_init.l0");
  spec.V = dim(ssm, 2, "V", "ssm_state_init.l0");
  const int64_t qk = int64_t{spec.D} - int64_t{spec.HV} * spec.V;
  if (qk <= 0 || qk % (2 * spec.K) != 0) {
    bad_case("conv_dim " + std::to_string(spec.D) +
             " is not 2*H*K + HV*V for K=" + std::to_string(spec.K) +
             ", HV=" + std::to_string(spec.HV) + ", V=" + std::to_string(spec.V));
  }
  spec.H = static_cast<int>(qk / (2 * spec.K));
  if (spec.HV % spec.H != 0) {
    bad_case("HV = " + std::to_string(spec.HV) +
             " is not a multiple of H = " + std::to_string(spec.H));
  }

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
  // The gate: plain unless params_json gives a lower bound (KdaConfig::lower_bound, one per pool).
  const auto bound = params.find("lower_bound");
  if (bound != params.end() && !bound->is_null()) {
    if (!bound->is_number() || !std::isfinite(bound->get<double>()) || bound->get<double>() >= 0) {
      bad_case("params_json 'lower_bound' = " + bound->dump() + " must be finite and negative");
    }
    spec.lower_bound = bound->get<float>();
  }
  const auto gate = params.find("gate");
  if (gate != params.end() && gate->is_string() &&
      (gate->get<std::string>() == "lower_bound") != spec.lower_bound.has_value()) {
    bad_case("params_json gate = " + gate->dump() + " but lower_bound is " +
             (spec.lower_bound ? "given" : "absent"));
  }

  const DType stored =
      store.info("mixed_qkv.l0").dtype == SafetensorsDType::kBF16 ? DType::kBF16 : DType::kF32;
  spec.act = dtype_param(params, "act_dtype", stored);
  spec.conv_state = dtype_param(params, "conv_state_dtype", spec.act);
  spec.ssm_state = dtype_param(params, "ssm_state_dtype", DType::kF32);
  spec.conv_weight = dtype_param(params, "conv_weight_dtype", spec.act);
  const DType gate_dtype = dtype_param(params, "gate_param_dtype", DType::kF32);
  spec.a_log =
      dtype_param(params, params.contains("A_log_dtype") ? "A_log_dtype" : "A_dtype", gate_dtype);
  spec.dt_bias = dtype_param(params, "dt_bias_dtype", gate_dtype);

  for (int l = 0; l < spec.L; ++l) {
    expect_shape(store, layer_name("mixed_qkv", l), {spec.R, spec.T, spec.D});
    expect_shape(store, layer_name("g", l), {spec.R, spec.T, spec.HV, spec.K});
    expect_shape(store, layer_name("b", l), {spec.R, spec.T, spec.HV});
    expect_shape(store, layer_name("conv_weight", l), {spec.D, spec.W});
    if (spec.conv_bias) expect_shape(store, layer_name("conv_bias", l), {spec.D});
    expect_shape(store, layer_name("A_log", l), {spec.HV});
    expect_shape(store, layer_name("dt_bias", l), {spec.HV, spec.K});
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

std::string describe_case(const KdaSpec& s, const GoldenOptions& options) {
  std::ostringstream out;
  out << "KDA " << (s.tree ? "tree" : "chain") << " T=" << s.T << ", rows=" << s.R << " ("
      << s.n_real << " real), L=" << s.L << ", H=" << s.H << " HV=" << s.HV << " K=" << s.K
      << " V=" << s.V << " W=" << s.W << ", slots=" << s.S << ", gate ";
  if (s.lower_bound) {
    out << "lower bound " << *s.lower_bound;
  } else {
    out << "plain";
  }
  out << ", act " << dtype_name(s.act) << ", conv state " << dtype_name(s.conv_state)
      << ", ssm state " << dtype_name(s.ssm_state) << ", "
      << (s.conv_bias ? "conv bias" : "no conv bias") << ", A_log " << dtype_name(s.a_log)
      << ", dt_bias " << dtype_name(s.dt_bias) << ", backend " << backend_name(options.backend)
      << ", strategy " << strategy_name(options.strategy);
  return out.str();
}

class KdaAdapter final : public AdapterBase<KdaSpec> {
 public:
  KdaAdapter(const GoldenCase& golden, const json& params)
      : AdapterBase(golden.store, read_spec(golden, params)) {}

  ModelConfig model() const override {
    const KdaSpec& s = spec_;
    KdaConfig layer;
    layer.num_k_heads = s.H;
    layer.num_v_heads = s.HV;
    layer.head_k_dim = s.K;
    layer.head_v_dim = s.V;
    layer.conv_width = s.W;
    layer.scale = s.scale;
    layer.conv_bias = s.conv_bias;
    layer.lower_bound = s.lower_bound;
    return ModelConfig::kda(s.L, with_storage_dtypes(layer));
  }

  LayerOutputs verify_layer(StatePool& pool, Memory& mem, int l) const override {
    const KdaSpec& s = spec_;
    const int64_t tokens = int64_t{s.R} * s.T;
    KdaWeights weights;
    weights.conv_weight = layer_tensor(mem, "conv_weight", l, s.conv_weight, {s.D, s.W});
    if (s.conv_bias) weights.conv_bias = layer_tensor(mem, "conv_bias", l, s.conv_weight, {s.D});
    weights.A_log = layer_tensor(mem, "A_log", l, s.a_log, {s.HV});
    weights.dt_bias = layer_tensor(mem, "dt_bias", l, s.dt_bias, {s.HV, s.K});
    KdaInputs inputs;
    inputs.mixed_qkv = layer_tensor(mem, "mixed_qkv", l, s.act, {tokens, s.D});
    inputs.g = layer_tensor(mem, "g", l, s.act, {tokens, s.HV, s.K});
    inputs.b = layer_tensor(mem, "b", l, s.act, {tokens, s.HV});
    KdaOutputs outputs;
    outputs.conv_out = upload_nan(mem, s.act, {tokens, s.D}, "conv_out");
    outputs.core_out = upload_nan(mem, s.act, {tokens, s.HV, s.V}, "core_out");
    pool.verify(l, weights, inputs, outputs);
    return {outputs.conv_out, outputs.core_out};
  }
};

bool is_kda(const GoldenCase& golden, const json& params) {
  const auto model = params.find("model");
  if (model != params.end() && model->is_string()) return model->get<std::string>() == "kda";
  return golden.store.contains("g.l0") && golden.store.info("g.l0").shape.size() == 4;
}

}  // namespace

const GoldenKind& kda_golden_kind() {
  static const GoldenKind kind{"KDA", "KDA case: ", &is_kda, &make_adapter<KdaAdapter>};
  return kind;
}

}  // namespace specstate::cli::golden
