// The sizes, dtypes and round of a delta-rule (GDN or KDA) golden case (golden_delta.h).
#include "cli/golden_delta.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <sstream>

namespace specstate::cli::golden {
namespace {

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

}  // namespace

void read_delta_spec(const GoldenCase& golden, const json& params, const char* kind,
                     bool per_key_gate, DeltaSpec& spec) {
  const TensorStore& store = golden.store;
  spec.per_key_gate = per_key_gate;

  while (store.contains(layer_name("mixed_qkv", spec.L))) ++spec.L;
  if (spec.L == 0) {
    bad_case(std::string("no tensor 'mixed_qkv.l0': not a ") + kind + " golden case");
  }
  const Shape x = shape_of_rank(store, "mixed_qkv.l0", 3, "[R, T, D]");
  spec.R = dim(x, 0, "R", "mixed_qkv.l0");
  spec.T = dim(x, 1, "T", "mixed_qkv.l0");
  spec.D = dim(x, 2, "conv_dim", "mixed_qkv.l0");
  const Shape cw = shape_in(store, "conv_weight.l0");
  if (cw.size() != 2 || cw[0] != spec.D || cw[1] < 2) {
    bad_case("conv_weight.l0 has shape " + shape_string(cw) + ", expected [" +
             std::to_string(spec.D) + ", W] with W >= 2");
  }
  spec.W = dim(cw, 1, "W", "conv_weight.l0");
  // The gate: GDN's a.l0 [R, T, HV] (K from the state), KDA's g.l0 [R, T, HV, K].
  const std::string gate_tensor = layer_name(per_key_gate ? "g" : "a", 0);
  const Shape a = shape_of_rank(store, gate_tensor, per_key_gate ? 4 : 3,
                                per_key_gate ? "[R, T, HV, K]" : "[R, T, HV]");
  spec.HV = dim(a, 2, "HV", gate_tensor);
  if (per_key_gate) spec.K = dim(a, 3, "K", gate_tensor);
  const Shape ssm = shape_in(store, "ssm_state_init.l0");
  if (ssm.size() != 4 || ssm[1] != spec.HV || (per_key_gate && ssm[3] != spec.K)) {
    bad_case("ssm_state_init.l0 has shape " + shape_string(ssm) + ", expected [S, " +
             std::to_string(spec.HV) + ", V, " + (per_key_gate ? std::to_string(spec.K) : "K") +
             "]");
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
    if (per_key_gate) {
      expect_shape(store, layer_name("g", l), {spec.R, spec.T, spec.HV, spec.K});
    } else {
      expect_shape(store, layer_name("a", l), {spec.R, spec.T, spec.HV});
    }
    expect_shape(store, layer_name("b", l), {spec.R, spec.T, spec.HV});
    expect_shape(store, layer_name("conv_weight", l), {spec.D, spec.W});
    if (spec.conv_bias) expect_shape(store, layer_name("conv_bias", l), {spec.D});
    expect_shape(store, layer_name("A_log", l), {spec.HV});
    expect_shape(store, layer_name("dt_bias", l),
                 per_key_gate ? Shape{spec.HV, spec.K} : Shape{spec.HV});
    expect_shape(store, layer_name("conv_state_init", l), {spec.S, spec.D, spec.W - 1});
    expect_shape(store, layer_name("ssm_state_init", l), {spec.S, spec.HV, spec.V, spec.K});
  }

  read_round_indices(store, params, spec);
  set_state_shapes(spec, spec.D, spec.W, spec.HV, spec.V, spec.K);
}

std::string describe_delta(const DeltaSpec& s, const char* kind, const std::string& extra,
                           const GoldenOptions& options) {
  std::ostringstream out;
  out << kind << " " << (s.tree ? "tree" : "chain") << " T=" << s.T << ", rows=" << s.R << " ("
      << s.n_real << " real), L=" << s.L << ", H=" << s.H << " HV=" << s.HV << " K=" << s.K
      << " V=" << s.V << " W=" << s.W << ", slots=" << s.S << extra << ", act " << dtype_name(s.act)
      << ", conv state " << dtype_name(s.conv_state) << ", ssm state " << dtype_name(s.ssm_state)
      << ", " << (s.conv_bias ? "conv bias" : "no conv bias") << ", A_log " << dtype_name(s.a_log)
      << ", dt_bias " << dtype_name(s.dt_bias) << ", backend " << backend_name(options.backend)
      << ", strategy " << strategy_name(options.strategy);
  for (const std::string& note : s.notes) out << "; " << note;
  return out.str();
}

}  // namespace specstate::cli::golden
