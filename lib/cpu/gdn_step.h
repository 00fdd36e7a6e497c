// Internal: the CPU backend's Gated DeltaNet token step (DESIGN.md section 3): the delta-rule
// step (delta_step.h) with GDN's gate, one decay e^g per value head.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu_math.h"
#include "delta_step.h"
#include "kernels/kernel_types.h"
#include "specstate/config.h"
#include "specstate/gdn.h"

namespace specstate::detail::cpu {

struct GdnGate {
  using Config = GdnConfig;
  using Weights = GdnWeights;
  using Inputs = GdnInputs;
  using Outputs = GdnOutputs;

  static auto factor_layout(const Config& c) {
    return kernels::gdn_factor_layout(c.num_k_heads, c.num_v_heads, c.head_k_dim, c.head_v_dim,
                                      dtype_size(c.act_dtype));
  }
  static int64_t eg_per_head(const Config&) { return 1; }

  explicit GdnGate(const Config& config)
      : c(config), a(config.num_v_heads), b(config.num_v_heads) {}

  void load(const Inputs& in, int64_t token) {
    for (int hv = 0; hv < c.num_v_heads; ++hv) {
      a[hv] = specstate::detail::cpu::load(in.a, token * in.a.stride[0] + hv * in.a.stride[1]);
      b[hv] = specstate::detail::cpu::load(in.b, token * in.b.stride[0] + hv * in.b.stride[1]);
    }
  }
  void head_step(const Weights& w, int hv, const float* q, const float* k, const float* v,
                 float scale, float* state, float* out, DeltaScratch& scratch,
                 const DeltaFactors& factors) const {
    HeadInputs head;
    head.q = q;
    head.k = k;
    head.v = v;
    head.a = a[hv];
    head.b = b[hv];
    head.A_log = specstate::detail::cpu::load(w.A_log, hv * w.A_log.stride[0]);
    head.dt_bias = specstate::detail::cpu::load(w.dt_bias, hv * w.dt_bias.stride[0]);
    gdn_head_step(head, scale, c.head_k_dim, c.head_v_dim, state, out, scratch, factors);
  }
  void head_apply(int hv, const float* eg, const float* u, const float* k_raw, float kf,
                  float* state, DeltaScratch& scratch) const {
    gdn_head_apply(eg[hv], u, k_raw, kf, c.head_k_dim, c.head_v_dim, state, scratch);
  }

  const Config& c;
  std::vector<float> a, b;  // the token's gate inputs [HV]
};

using GdnStep = DeltaStep<GdnGate>;

}  // namespace specstate::detail::cpu
