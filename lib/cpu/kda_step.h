// Internal: the CPU backend's one KDA (Kimi Delta Attention) token step (DESIGN.md section 3, KDA
// step), shared by prefill, decode, verify (chain and tree) and every strategy; the replay
// strategy's factor records (kernels::kda_factor_layout) are written by it and applied with the
// same update helpers (kda_decay, gdn_rank1). Because every path runs this exact code in the same
// order on the same values, the CPU strategies are bit-exact against sequential decoding and
// against each other. The step is the delta-rule step (delta_step.h) with KDA's gate (KdaGate).
//
// Arithmetic is fp32; per value head hv (key head h = hv / (HV / H)) and key channel i:
//   q~ = q / sqrt(sum q^2 + 1e-6) * scale;  k^ = k / sqrt(sum k^2 + 1e-6);  beta = sigmoid(b)
//   x = g_raw[hv][i] + dt_bias[hv][i]
//   g[i] = -exp(A_log[hv]) * softplus(x)                 (no lower bound)
//   g[i] = lower_bound * sigmoid(exp(A_log[hv]) * x)     (lower bound)
//   S[v][i] *= exp(g[i]);  u = beta (v - S k^);  S += u k^T;  o = S q~
// The conv (over [q | k | v], the GDN conv) output is rounded to the activation dtype before the
// split, the state is stored in the SSM dtype after every token, outputs in the activation dtype.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "../layout.h"
#include "cpu_math.h"
#include "delta_step.h"
#include "kernels/kernel_types.h"
#include "specstate/config.h"
#include "specstate/kda.h"

namespace specstate::detail::cpu {

// The decay of the KDA update: S[v][i] *= eg[i] (every row of S, K contiguous). Shared by the
// step and the factor records' application (DESIGN.md section 6: bit-exact by construction).
inline void kda_decay(Eigen::Map<RowMatrix>& S, const float* eg) {
  const int64_t V = S.rows(), K = S.cols();
  for (int64_t v = 0; v < V; ++v) {
    float* row = S.data() + v * K;
    for (int64_t i = 0; i < K; ++i) row[i] *= eg[i];
  }
}

// e^g of one value head's key channels (DESIGN.md section 3): g_raw and dt_bias [K] fp32.
inline void kda_gate(const float* g_raw, const float* dt_bias, float A_log,
                     const std::optional<float>& lower_bound, int K, float* eg) {
  const float A = std::exp(A_log);
  for (int i = 0; i < K; ++i) {
    const float x = g_raw[i] + dt_bias[i];
    const float g = lower_bound ? *lower_bound * sigmoid(A * x) : -A * softplus(x);
    eg[i] = std::exp(g);
  }
}

// One KDA step of one value head, in place on S [V, K] (K contiguous), fp32. eg [K] is the
// head's decay (kda_gate).
inline void kda_head_step(const float* q_in, const float* k_in, const float* v_in, float b,
                          const float* eg, float scale, int K, int V, float* state, float* out,
                          DeltaScratch& w, const DeltaFactors& factors = {}) {
  Eigen::Map<const Eigen::VectorXf> q_raw(q_in, K), v(v_in, V);
  w.k_raw = Eigen::Map<const Eigen::VectorXf>(k_in, K);
  normalized_query(q_raw, scale, w.q);
  const float kf = key_scale(w.k_raw);
  normalized_key(w.k_raw, kf, w.k);
  const float beta = sigmoid(b);
  Eigen::Map<RowMatrix> S(state, V, K);
  kda_decay(S, eg);
  w.sk.noalias() = S * w.k;
  w.u.noalias() = beta * (v - w.sk);
  gdn_rank1(S, w.u, w.k);
  Eigen::Map<Eigen::VectorXf>(out, V).noalias() = S * w.q;
  if (factors.u) Eigen::Map<Eigen::VectorXf>(factors.u, V) = w.u;
  if (factors.eg) std::copy(eg, eg + K, factors.eg);
  if (factors.kf) *factors.kf = kf;
}

// Applies one KDA factor record of one value head to S [V, K]: S = diag-decay(eg) S + u k^T with
// k = k_raw * kf, through the step's own helpers.
inline void kda_head_apply(const float* eg, const float* u_rec, const float* k_raw_rec, float kf,
                           int K, int V, float* state, DeltaScratch& w) {
  w.u = Eigen::Map<const Eigen::VectorXf>(u_rec, V);
  w.k_raw = Eigen::Map<const Eigen::VectorXf>(k_raw_rec, K);
  normalized_key(w.k_raw, kf, w.k);
  Eigen::Map<RowMatrix> S(state, V, K);
  kda_decay(S, eg);
  gdn_rank1(S, w.u, w.k);
}

struct KdaGate {
  using Config = KdaConfig;
  using Weights = KdaWeights;
  using Inputs = KdaInputs;
  using Outputs = KdaOutputs;

  static auto factor_layout(const Config& c) {
    return kernels::kda_factor_layout(c.num_k_heads, c.num_v_heads, c.head_k_dim, c.head_v_dim,
                                      dtype_size(c.act_dtype));
  }
  static int64_t eg_per_head(const Config& c) { return c.head_k_dim; }

  explicit KdaGate(const Config& config)
      : c(config),
        g(static_cast<std::size_t>(config.num_v_heads) * config.head_k_dim),
        b(config.num_v_heads),
        dt_bias(config.head_k_dim),
        eg(config.head_k_dim) {}

  void load(const Inputs& in, int64_t token) {
    const int K = c.head_k_dim;
    for (int hv = 0; hv < c.num_v_heads; ++hv) {
      for (int i = 0; i < K; ++i) {
        g[static_cast<std::size_t>(hv) * K + i] = specstate::detail::cpu::load(
            in.g, token * in.g.stride[0] + hv * in.g.stride[1] + i * in.g.stride[2]);
      }
      b[hv] = specstate::detail::cpu::load(in.b, token * in.b.stride[0] + hv * in.b.stride[1]);
    }
  }
  void head_step(const Weights& w, int hv, const float* q, const float* k, const float* v,
                 float scale, float* state, float* out, DeltaScratch& scratch,
                 const DeltaFactors& factors) {
    const int K = c.head_k_dim;
    const float A_log = specstate::detail::cpu::load(w.A_log, hv * w.A_log.stride[0]);
    for (int i = 0; i < K; ++i) {
      dt_bias[i] = specstate::detail::cpu::load(w.dt_bias,
                                                hv * w.dt_bias.stride[0] + i * w.dt_bias.stride[1]);
    }
    kda_gate(g.data() + int64_t{hv} * K, dt_bias.data(), A_log, c.lower_bound, K, eg.data());
    kda_head_step(q, k, v, b[hv], eg.data(), scale, K, c.head_v_dim, state, out, scratch, factors);
  }
  void head_apply(int hv, const float* eg_rec, const float* u, const float* k_raw, float kf,
                  float* state, DeltaScratch& scratch) const {
    kda_head_apply(eg_rec + int64_t{hv} * c.head_k_dim, u, k_raw, kf, c.head_k_dim, c.head_v_dim,
                   state, scratch);
  }

  const Config& c;
  std::vector<float> g, b;         // the token's gate inputs [HV][K], [HV]
  std::vector<float> dt_bias, eg;  // one head's [K]
};

using KdaStep = DeltaStep<KdaGate>;

}  // namespace specstate::detail::cpu
