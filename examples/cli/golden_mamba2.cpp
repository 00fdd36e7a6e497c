// The Mamba2 adapter of check-golden (golden_runner.h; the cases: the Mamba2 part of
// tests/data/golden/README.md). A case holds, per layer l, the inputs of one verify round (xBC.l,
// dt.l, z.l, conv_weight.l, conv_bias.l, A_log.l, dt_bias.l, D.l, conv_state_init.l,
// ssm_state_init.l), SGLang's results (conv_out.l, core_out.l, inter_conv_window.l,
// inter_ssm.l.r<i>, conv_state_committed.l, ssm_state_committed.l) and the float64 reference of
// the same (ref_*). This file reads the sizes and dtypes and makes one layer's verify call
// (Mamba2Outputs::y is compared as core_out); the runner does the rest.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/golden_runner.h"

namespace specstate::cli::golden {
namespace {

// The round (RoundSpec) and the Mamba2 sizes and dtypes.
struct Spec : RoundSpec {
  int Dc = 0, W = 0, H = 0, P = 0, N = 0, G = 0;
  bool conv_bias = false, d_skip = false, gate = false;
  // Each gate parameter has its own dtype, as engines hold them (vLLM / SGLang keep Nemotron-H's
  // A_log in f32, dt_bias and D in bf16): params_json's A_dtype (or A_log_dtype), dt_bias_dtype
  // and D_dtype; the last two fall back to the shared dt_bias_D_dtype, A_log to f32 (which passes
  // a bf16 value as the same number).
  DType conv_weight = DType::kF32, a_log = DType::kF32, dt_bias = DType::kF32, d = DType::kF32;
};

int dim(const Shape& shape, std::size_t i, const char* what, const std::string& tensor) {
  if (i >= shape.size() || shape[i] < 1 || shape[i] > std::numeric_limits<int>::max()) {
    bad_case(std::string(what) + " (dim " + std::to_string(i) + " of " + tensor + " " +
             shape_string(shape) + ") must be in [1, 2^31 - 1]");
  }
  return static_cast<int>(shape[i]);
}

DType dtype_param(const json& params, const char* key, DType fallback) {
  const auto it = params.find(key);
  if (it == params.end()) return fallback;
  const std::string text = it->is_string() ? it->get<std::string>() : it->dump();
  if (text == "f32" || text == "float32" || text == "torch.float32") return DType::kF32;
  if (text == "bf16" || text == "bfloat16" || text == "torch.bfloat16") return DType::kBF16;
  bad_case(std::string("params_json '") + key + "' = " + text + ": check-golden knows f32, bf16");
}

// GDN's check_param, worded as the Mamba2 report always has been.
void check_size(const json& params, const char* key, int64_t value) {
  const auto it = params.find(key);
  if (it == params.end()) return;
  if (!it->is_number_integer() || it->get<int64_t>() != value) {
    bad_case(std::string("params_json '") + key + "' = " + it->dump() +
             " but the tensor shapes give " + std::to_string(value));
  }
}

bool flag_param(const json& params, const char* key, bool from_tensors, const char* tensor) {
  const auto it = params.find(key);
  if (it != params.end() && it->is_boolean() && it->get<bool>() != from_tensors) {
    bad_case(std::string("params_json ") + key + " = " + it->dump() + " but " + tensor + " is " +
             (from_tensors ? "present" : "absent"));
  }
  return from_tensors;
}

Spec read_spec(const TensorStore& store, const json& params) {
  Spec s;
  while (store.contains(layer_name("xBC", s.L))) ++s.L;
  if (s.L == 0) bad_case("no tensor 'xBC.l0'");
  const Shape x = shape_of_rank(store, "xBC.l0", 3, "[R, T, Dc]");
  s.R = dim(x, 0, "R", "xBC.l0");
  s.T = dim(x, 1, "T", "xBC.l0");
  s.Dc = dim(x, 2, "conv_dim", "xBC.l0");
  const Shape cw = shape_in(store, "conv_weight.l0");
  if (cw.size() != 2 || cw[0] != s.Dc) {
    bad_case("conv_weight.l0 has shape " + shape_string(cw) + ", expected [Dc, W]");
  }
  s.W = dim(cw, 1, "W", "conv_weight.l0");
  if (s.W < 2) bad_case("conv width W = " + std::to_string(s.W) + " must be >= 2");
  const Shape ssm = shape_of_rank(store, "ssm_state_init.l0", 4, "[S, H, P, N]");
  s.S = dim(ssm, 0, "S", "ssm_state_init.l0");
  s.H = dim(ssm, 1, "H", "ssm_state_init.l0");
  s.P = dim(ssm, 2, "P", "ssm_state_init.l0");
  s.N = dim(ssm, 3, "N", "ssm_state_init.l0");
  const int64_t bc = int64_t{s.Dc} - int64_t{s.H} * s.P;
  if (bc <= 0 || bc % (2 * int64_t{s.N}) != 0) {
    bad_case("conv_dim " + std::to_string(s.Dc) + " is not H*P + 2*G*N for H=" +
             std::to_string(s.H) + ", P=" + std::to_string(s.P) + ", N=" + std::to_string(s.N));
  }
  s.G = static_cast<int>(bc / (2 * int64_t{s.N}));
  if (s.H % s.G != 0) {
    bad_case("H = " + std::to_string(s.H) + " is not a multiple of G = " + std::to_string(s.G));
  }
  check_size(params, "L", s.L);
  check_size(params, "rows", s.R);
  check_size(params, "T", s.T);
  check_size(params, "conv_dim", s.Dc);
  check_size(params, "width", s.W);
  check_size(params, "slots", s.S);
  check_size(params, "nheads", s.H);
  check_size(params, "head_dim", s.P);
  check_size(params, "d_state", s.N);
  check_size(params, "n_groups", s.G);
  s.conv_bias = flag_param(params, "has_conv_bias", store.contains("conv_bias.l0"), "conv_bias.l0");
  s.d_skip = flag_param(params, "has_D", store.contains("D.l0"), "D.l0");
  s.gate = flag_param(params, "has_z", store.contains("z.l0"), "z.l0");
  const auto softplus = params.find("dt_softplus");
  if (softplus != params.end() && softplus->is_boolean() && !softplus->get<bool>()) {
    bad_case("params_json dt_softplus = false: specstate always applies softplus to dt");
  }
  const auto threshold = params.find("softplus_threshold");
  if (threshold != params.end() && (!threshold->is_number() || threshold->get<double>() != 20.0)) {
    bad_case("params_json softplus_threshold = " + threshold->dump() + ": specstate uses 20");
  }
  const DType stored =
      store.info("xBC.l0").dtype == SafetensorsDType::kBF16 ? DType::kBF16 : DType::kF32;
  s.act = dtype_param(params, "act_dtype", stored);
  s.conv_state = dtype_param(params, "conv_state_dtype", s.act);
  s.ssm_state = dtype_param(params, "ssm_state_dtype", DType::kF32);
  s.conv_weight = dtype_param(params, "conv_weight_dtype", s.act);
  const DType dt_bias_D = dtype_param(params, "dt_bias_D_dtype", DType::kF32);
  s.a_log =
      dtype_param(params, params.contains("A_log_dtype") ? "A_log_dtype" : "A_dtype", DType::kF32);
  s.dt_bias = dtype_param(params, "dt_bias_dtype", dt_bias_D);
  s.d = dtype_param(params, "D_dtype", dt_bias_D);
  for (int l = 0; l < s.L; ++l) {
    expect_shape(store, layer_name("xBC", l), {s.R, s.T, s.Dc});
    expect_shape(store, layer_name("dt", l), {s.R, s.T, s.H});
    if (s.gate) expect_shape(store, layer_name("z", l), {s.R, s.T, s.H, s.P});
    expect_shape(store, layer_name("conv_weight", l), {s.Dc, s.W});
    if (s.conv_bias) expect_shape(store, layer_name("conv_bias", l), {s.Dc});
    expect_shape(store, layer_name("A_log", l), {s.H});
    expect_shape(store, layer_name("dt_bias", l), {s.H});
    if (s.d_skip) expect_shape(store, layer_name("D", l), {s.H});
    expect_shape(store, layer_name("conv_state_init", l), {s.S, s.Dc, s.W - 1});
    expect_shape(store, layer_name("ssm_state_init", l), {s.S, s.H, s.P, s.N});
  }
  if (store.contains("parents")) {
    const std::vector<int32_t> parents = store.to_int32("parents");
    for (int t = 0; t < static_cast<int>(parents.size()); ++t) {
      if (static_cast<int>(parents.size()) != s.T || parents[t] != t - 1) {
        bad_case("parents is not the chain [-1, 0, ..., T-2]: Mamba2 cases are chains");
      }
    }
  }
  s.cache_indices = store.to_int32("cache_indices");
  if (static_cast<int>(s.cache_indices.size()) != s.R) {
    bad_case("cache_indices has " + std::to_string(s.cache_indices.size()) +
             " entries, R = " + std::to_string(s.R));
  }
  s.accept_len = store.to_int32("accept_len");
  if (static_cast<int>(s.accept_len.size()) != s.R) {
    bad_case("accept_len has " + std::to_string(s.accept_len.size()) +
             " entries, R = " + std::to_string(s.R));
  }
  std::set<int32_t> used;
  s.real.assign(s.R, false);
  s.last_step.assign(s.R, -1);
  const std::vector<int32_t> last =
      store.contains("last_step") ? store.to_int32("last_step") : std::vector<int32_t>{};
  for (int r = 0; r < s.R; ++r) {
    const int32_t slot = s.cache_indices[r], a = s.accept_len[r];
    if (slot < -1 || slot >= s.S) {
      bad_case("cache_indices[" + std::to_string(r) + "] = " + std::to_string(slot) +
               " outside [-1, " + std::to_string(s.S) + ")");
    }
    if (slot >= 0 && !used.insert(slot).second) {
      bad_case("cache_indices names slot " + std::to_string(slot) + " twice");
    }
    if (a < 0 || a > s.T) {
      bad_case("accept_len[" + std::to_string(r) + "] = " + std::to_string(a) + " outside [0, " +
               std::to_string(s.T) + "]");
    }
    if (slot < 0 && a != 0) {
      bad_case("accept_len[" + std::to_string(r) + "] = " + std::to_string(a) +
               " for a padded row (must be 0)");
    }
    if (!last.empty() && (last.size() != s.accept_len.size() || (slot >= 0 && last[r] != a - 1))) {
      bad_case("last_step[" + std::to_string(r) + "] != accept_len - 1 in a chain case");
    }
    s.real[r] = slot >= 0;
    s.n_real += slot >= 0;
    s.last_step[r] = slot >= 0 ? a - 1 : -1;
  }
  set_state_shapes(s, s.Dc, s.W, s.H, s.P, s.N);
  return s;
}

std::string describe_case(const Spec& s, const GoldenOptions& options) {
  std::ostringstream out;
  out << "Mamba2 chain T=" << s.T << ", rows=" << s.R << " (" << s.n_real << " real), L=" << s.L
      << ", nheads=" << s.H << " P=" << s.P << " N=" << s.N << " G=" << s.G << " W=" << s.W
      << ", slots=" << s.S << ", act " << dtype_name(s.act) << ", conv state "
      << dtype_name(s.conv_state) << ", ssm state " << dtype_name(s.ssm_state) << ", "
      << (s.conv_bias ? "conv bias" : "no conv bias") << ", " << (s.d_skip ? "D" : "no D") << ", "
      << (s.gate ? "z gate" : "no gate") << ", A_log " << dtype_name(s.a_log) << ", dt_bias "
      << dtype_name(s.dt_bias) << (s.d_skip ? std::string(", D ") + dtype_name(s.d) : "")
      << ", backend " << backend_name(options.backend) << ", strategy "
      << strategy_name(options.strategy);
  return out.str();
}

// The report details of the Mamba2 runner before the runner was shared (golden_runner.h).
ReportStyle mamba2_style() {
  ReportStyle style;
  style.cuda_error_prefix = "";
  style.flat_where = true;
  style.sglang_where_unless_earlier_ref = true;
  style.intermediates_required = true;
  style.inter_ssm_rows_apart = true;
  style.core_out_checked_first = true;
  style.layer_names_in_purity = true;
  style.commit_error_lists_accepted = false;
  return style;
}

class Mamba2Adapter final : public AdapterBase<Spec> {
 public:
  Mamba2Adapter(const GoldenCase& golden, const json& params)
      : AdapterBase(golden.store, read_spec(golden.store, params)) {}

  const ReportStyle& style() const override {
    static const ReportStyle style = mamba2_style();
    return style;
  }

  ModelConfig model() const override {
    const Spec& s = spec_;
    Mamba2Config layer;
    layer.num_heads = s.H;
    layer.head_dim = s.P;
    layer.d_state = s.N;
    layer.n_groups = s.G;
    layer.conv_width = s.W;
    layer.conv_bias = s.conv_bias;
    layer.d_skip = s.d_skip;
    layer.gate = s.gate;
    return ModelConfig::mamba2(s.L, with_storage_dtypes(layer));
  }

  LayerOutputs verify_layer(StatePool& pool, Memory& mem, int l) const override {
    const Spec& s = spec_;
    const int64_t tokens = int64_t{s.R} * s.T, HP = int64_t{s.H} * s.P;
    Mamba2Weights w;
    w.conv_weight = layer_tensor(mem, "conv_weight", l, s.conv_weight, {s.Dc, s.W});
    if (s.conv_bias) w.conv_bias = layer_tensor(mem, "conv_bias", l, s.conv_weight, {s.Dc});
    w.A_log = layer_tensor(mem, "A_log", l, s.a_log, {s.H});
    w.dt_bias = layer_tensor(mem, "dt_bias", l, s.dt_bias, {s.H});
    if (s.d_skip) w.D = layer_tensor(mem, "D", l, s.d, {s.H});
    Mamba2Inputs in;
    in.xBC = layer_tensor(mem, "xBC", l, s.act, {tokens, s.Dc});
    in.dt = layer_tensor(mem, "dt", l, s.act, {tokens, s.H});
    // z is [R, T, H, P], passed as [tokens, H*P].
    if (s.gate) in.z = layer_tensor(mem, "z", l, s.act, {tokens, HP});
    Mamba2Outputs out;
    out.conv_out = upload_nan(mem, s.act, {tokens, s.Dc}, "");
    out.y = upload_nan(mem, s.act, {tokens, s.H, s.P}, "");
    pool.verify(l, w, in, out);
    return {out.conv_out, out.y};
  }

  std::vector<std::string> notes() const override {
    std::vector<std::string> notes{"core_out is the SSU output y (Mamba2Outputs::y)"};
    // The case gives A = -exp(A_log) as the kernel received it; specstate takes A_log. The first
    // layer where they differ is noted.
    for (int l = 0; l < spec_.L; ++l) {
      if (!store_.contains(layer_name("A", l))) continue;
      const std::vector<float> A = store_.to_float(layer_name("A", l)),
                               A_log = store_.to_float(layer_name("A_log", l));
      double worst = 0;
      for (std::size_t h = 0; h < A.size() && h < A_log.size(); ++h) {
        const float ours = -std::exp(A_log[h]);
        worst = std::max(worst, std::abs(double(ours) - A[h]) / std::abs(double(A[h])));
      }
      if (worst > 0) {
        std::ostringstream note;
        note << "A = -exp(A_log) in f32 differs from the case's A by up to " << worst << " (rel)";
        notes.push_back(note.str());
        break;
      }
    }
    return notes;
  }
};

// Told apart by params_json `model` or an xBC.l0 tensor.
bool is_mamba2(const GoldenCase& golden, const json& params) {
  const auto model = params.find("model");
  if (model != params.end() && model->is_string() && model->get<std::string>() == "mamba2") {
    return true;
  }
  return golden.store.contains("xBC.l0");
}

}  // namespace

const GoldenKind& mamba2_golden_kind() {
  static const GoldenKind kind{"Mamba2", "Mamba2 case: ", &is_mamba2, &make_adapter<Mamba2Adapter>};
  return kind;
}

}  // namespace specstate::cli::golden
