// The KDA (Kimi Delta Attention) adapter of check-golden (golden_runner.h; the cases: the KDA part
// of tests/data/golden/README.md, written by tools/kda_golden.py). A case holds, per KDA layer l,
// the inputs of one verify round (mixed_qkv.l [R, T, 2HK + HV V], g.l [R, T, HV, K] raw gate,
// b.l [R, T, HV], conv_weight.l, conv_bias.l, A_log.l [HV], dt_bias.l [HV, K], conv_state_init.l,
// ssm_state_init.l [S, HV, V, K]), the float64 reference of the round (ref_*) and, once produced
// on a GPU, fla's outputs under the un-prefixed names. This file adds KDA's gate to what
// golden_delta.h shares with GDN (the sizes and dtypes, one layer's verify call); the runner does
// the rest. A case is KDA when params_json says model "kda" or g.l0 has rank 4 (a GDN case's g.l0
// is [R, T, HV]).
#include <cfloat>
#include <cmath>
#include <optional>
#include <sstream>

#include "cli/golden_delta.h"

namespace specstate::cli::golden {
namespace {

// The case (DeltaSpec) and KDA's gate: plain, or fla's lower-bound gate.
struct KdaSpec : DeltaSpec {
  std::optional<float> lower_bound;
};

KdaSpec read_spec(const GoldenCase& golden, const json& params) {
  KdaSpec spec;
  read_delta_spec(golden, params, "KDA", true, spec);
  // The gate: plain unless params_json gives a lower bound (KdaConfig::lower_bound, one per pool).
  const auto bound = params.find("lower_bound");
  if (bound != params.end() && !bound->is_null()) {
    // Checked as the float32 the pool takes: -1e300 read as -inf and -1e-50 as -0, and the
    // pool's own check then named a value the file does not hold.
    const double read = bound->is_number() ? bound->get<double>() : 0.0;
    const bool in_range = std::isfinite(read) && std::fabs(read) <= FLT_MAX;
    const float value = in_range ? static_cast<float>(read) : 0.0f;
    if (!in_range || !(value < 0.0f)) {
      bad_case("params_json 'lower_bound' = " + bound->dump() +
               " must be finite and negative as a float32");
    }
    spec.lower_bound = value;
  }
  const auto gate = params.find("gate");
  if (gate != params.end() && gate->is_string() &&
      (gate->get<std::string>() == "lower_bound") != spec.lower_bound.has_value()) {
    bad_case("params_json gate = " + gate->dump() + " but lower_bound is " +
             (spec.lower_bound ? "given" : "absent"));
  }
  return spec;
}

std::string describe_case(const KdaSpec& s, const GoldenOptions& options) {
  std::ostringstream gate;
  gate << ", gate ";
  if (s.lower_bound) {
    gate << "lower bound " << *s.lower_bound;
  } else {
    gate << "plain";
  }
  return describe_delta(s, "KDA", gate.str(), options);
}

class KdaAdapter final : public AdapterBase<KdaSpec> {
 public:
  KdaAdapter(const GoldenCase& golden, const json& params)
      : AdapterBase(golden.store, read_spec(golden, params)) {}

  // The case's un-prefixed tensors are fla's (tools/kda_golden.py --fla).
  const ReportStyle& style() const override {
    static const ReportStyle style = [] {
      ReportStyle s;
      s.third_party = "fla";
      return s;
    }();
    return style;
  }
  ModelConfig model() const override {
    KdaConfig layer;
    fill_delta_config(spec_, layer);
    layer.lower_bound = spec_.lower_bound;
    return ModelConfig::kda(spec_.L, with_storage_dtypes(layer));
  }

  LayerOutputs verify_layer(StatePool& pool, Memory& mem, int l) const override {
    return verify_delta_layer<KdaWeights, KdaOutputs>(pool, mem, store_, l, spec_, &KdaInputs::g);
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
