// The GDN adapter of check-golden (golden_runner.h; the cases: tests/data/golden/README.md). A case
// holds, per GDN layer l, the inputs of one verify round (mixed_qkv.l, a.l, b.l, conv_weight.l,
// conv_bias.l, A_log.l, dt_bias.l, conv_state_init.l, ssm_state_init.l), what SGLang's kernels
// produced (conv_out.l, core_out.l, inter_conv_window.l, inter_ssm.l.r<i>,
// conv_state_committed.l, ssm_state_committed.l) and the float64 reference of the same (ref_*).
// This file names GDN's config and gate in what golden_delta.h shares with KDA (the sizes and
// dtypes, one layer's verify call); the runner does the rest.
#include <string>

#include "cli/golden_delta.h"

namespace specstate::cli::golden {
namespace {

// The case: what every delta-rule case holds (GDN's gate is a.l [R, T, HV], dt_bias [HV]).
struct CaseSpec : DeltaSpec {};

CaseSpec read_spec(const GoldenCase& golden, const json& params) {
  CaseSpec spec;
  read_delta_spec(golden, params, "GDN", false, spec);
  return spec;
}

std::string describe_case(const CaseSpec& s, const GoldenOptions& options) {
  return describe_delta(s, "GDN", "", options);
}

class GdnAdapter final : public AdapterBase<CaseSpec> {
 public:
  GdnAdapter(const GoldenCase& golden, const json& params)
      : AdapterBase(golden.store, read_spec(golden, params)) {}

  ModelConfig model() const override {
    GdnConfig layer;
    fill_delta_config(spec_, layer);
    return ModelConfig::gated_delta_net(spec_.L, with_storage_dtypes(layer));
  }

  LayerOutputs verify_layer(StatePool& pool, Memory& mem, int l) const override {
    return verify_delta_layer<GdnWeights, GdnOutputs>(pool, mem, store_, l, spec_, &GdnInputs::a);
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
