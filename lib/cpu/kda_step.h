// Internal: the CPU backend's one KDA (Kimi Delta Attention) token step (DESIGN.md section 3, KDA
// step), shared by prefill, decode, verify (chain and tree) and every strategy; the replay
// strategy's factor records (kernels::kda_factor_layout) are written by it and applied with the
// same update helpers (kda_decay, gdn_rank1). Because every path runs this exact code in the same
// order on the same values, the CPU strategies are bit-exact against sequential decoding and
// against each other. The interface is GdnStep's, so run_rows in cpu_backend.cpp drives it.
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

// A KDA step's factors (the record of DESIGN.md section 4), written when non-null.
struct KdaFactors {
  float* u = nullptr;   // [V]
  float* eg = nullptr;  // [K]
  float* kf = nullptr;  // 1 / |k|
};

// One KDA step of one value head, in place on S [V, K] (K contiguous), fp32. eg [K] is the
// head's decay (kda_gate).
inline void kda_head_step(const float* q_in, const float* k_in, const float* v_in, float b,
                          const float* eg, float scale, int K, int V, float* state, float* out,
                          const KdaFactors& factors = {}) {
  Eigen::Map<const Eigen::VectorXf> q_raw(q_in, K), v(v_in, V);
  const Eigen::VectorXf k_raw = Eigen::Map<const Eigen::VectorXf>(k_in, K);
  const Eigen::VectorXf q = q_raw * (scale / std::sqrt(q_raw.squaredNorm() + 1e-6f));
  const float kf = key_scale(k_raw);
  const Eigen::VectorXf k = normalized_key(k_raw, kf);
  const float beta = sigmoid(b);
  Eigen::Map<RowMatrix> S(state, V, K);
  kda_decay(S, eg);
  const Eigen::VectorXf u = beta * (v - S * k);
  gdn_rank1(S, u, k);
  Eigen::Map<Eigen::VectorXf>(out, V).noalias() = S * q;
  if (factors.u) Eigen::Map<Eigen::VectorXf>(factors.u, V) = u;
  if (factors.eg) std::copy(eg, eg + K, factors.eg);
  if (factors.kf) *factors.kf = kf;
}

// Applies one KDA factor record of one value head to S [V, K]: S = diag-decay(eg) S + u k^T with
// k = k_raw * kf, through the step's own helpers.
inline void kda_head_apply(const float* eg, const float* u_rec, const float* k_raw_rec, float kf,
                           int K, int V, float* state) {
  const Eigen::VectorXf u = Eigen::Map<const Eigen::VectorXf>(u_rec, V);
  const Eigen::VectorXf k_raw = Eigen::Map<const Eigen::VectorXf>(k_raw_rec, K);
  const Eigen::VectorXf k = normalized_key(k_raw, kf);
  Eigen::Map<RowMatrix> S(state, V, K);
  kda_decay(S, eg);
  gdn_rank1(S, u, k);
}

class KdaStep {
 public:
  KdaStep(const KdaConfig& config, const KdaWeights& w, const KdaInputs& in, const KdaOutputs& out)
      : c_(config), w_(w), in_(in), out_(out) {
    const int64_t d = c_.conv_dim();
    hist_ = c_.conv_width - 1;
    x_.resize(d);
    y_.resize(d);
    g_.resize(static_cast<std::size_t>(c_.num_v_heads) * c_.head_k_dim);
    b_.resize(c_.num_v_heads);
    dt_bias_.resize(c_.head_k_dim);
    eg_.resize(c_.head_k_dim);
    window_.resize(static_cast<std::size_t>(d) * hist_);
    next_window_.resize(window_.size());
    head_state_.resize(static_cast<std::size_t>(c_.head_v_dim) * c_.head_k_dim);
    head_out_.resize(c_.head_v_dim);
    scale_ = c_.effective_scale();
  }

  // The token's inputs from the call's views (token index).
  void load_inputs(int64_t token) {
    const int64_t d = c_.conv_dim();
    const int K = c_.head_k_dim;
    for (int64_t c = 0; c < d; ++c) {
      x_[c] = load(in_.mixed_qkv, token * in_.mixed_qkv.stride[0] + c * in_.mixed_qkv.stride[1]);
    }
    for (int hv = 0; hv < c_.num_v_heads; ++hv) {
      for (int i = 0; i < K; ++i) {
        g_[static_cast<std::size_t>(hv) * K + i] =
            load(in_.g, token * in_.g.stride[0] + hv * in_.g.stride[1] + i * in_.g.stride[2]);
      }
      b_[hv] = load(in_.b, token * in_.b.stride[0] + hv * in_.b.stride[1]);
    }
  }
  // Conv records: the token's conv input (mixed_qkv) in the activation dtype, bit for bit.
  void load_record(const void* record) {
    load_array(record, c_.act_dtype, c_.conv_dim(), x_.data());
  }
  void store_record(void* record) const {
    store_array(x_.data(), c_.conv_dim(), c_.act_dtype, record);
  }
  // A pending conv step: the window shifted by the loaded record's input.
  void shift_conv(void* conv) {
    conv_shift(conv, c_.conv_state_dtype, x_.data(), c_.conv_dim(), hist_, window_);
  }

  // Applies one factor record (kernels::kda_factor_layout) to the SSM state (storage dtype, in
  // place; a bf16 state is rounded after the token as the step rounds it).
  void apply_factor(void* ssm, const void* factor) {
    const int H = c_.num_k_heads, HV = c_.num_v_heads, K = c_.head_k_dim, V = c_.head_v_dim;
    apply_delta_factor(
        ssm, factor, kernels::kda_factor_layout(H, HV, K, V, dtype_size(c_.act_dtype)), H, HV, K, V,
        c_.act_dtype, c_.ssm_state_dtype, k_raw_, head_state_,
        [&](int hv, const float* eg, const float* u, const float* k, float kf, float* state) {
          kda_head_apply(eg + int64_t{hv} * K, u, k, kf, K, V, state);
        });
  }

  // Advances the loaded token: conv window prev_conv -> next_conv, SSM prev_ssm -> next_ssm
  // (storage-dtype memory of one state; prev and next may be the same). Outputs go to token
  // `out_token` of the call's output views, or nowhere when it is negative. `factor`: the token's
  // factor record (kernels::kda_factor_layout) is written there when non-null.
  void step(const void* prev_conv, void* next_conv, const void* prev_ssm, void* next_ssm,
            int64_t out_token, void* factor = nullptr) {
    const int64_t d = c_.conv_dim();
    const DType act = c_.act_dtype;
    conv_token(prev_conv, next_conv, c_.conv_state_dtype, act, x_.data(), w_.conv_weight,
               w_.conv_bias, d, c_.conv_width, out_.conv_out, out_token, window_.data(),
               next_window_.data(), y_.data());

    const int H = c_.num_k_heads, HV = c_.num_v_heads, K = c_.head_k_dim, V = c_.head_v_dim;
    const int64_t head_elems = int64_t{V} * K;
    const DType sdt = c_.ssm_state_dtype;
    const std::size_t sbytes = dtype_size(sdt);
    const auto fl = kernels::kda_factor_layout(H, HV, K, V, dtype_size(act));
    char* f = static_cast<char*>(factor);
    if (f) store_array(y_.data() + int64_t{H} * K, int64_t{H} * K, act, f + fl.k);
    for (int hv = 0; hv < HV; ++hv) {
      const int h = hv / (HV / H);
      const float A_log = load(w_.A_log, hv * w_.A_log.stride[0]);
      for (int i = 0; i < K; ++i) {
        dt_bias_[i] = load(w_.dt_bias, hv * w_.dt_bias.stride[0] + i * w_.dt_bias.stride[1]);
      }
      kda_gate(g_.data() + int64_t{hv} * K, dt_bias_.data(), A_log, c_.lower_bound, K, eg_.data());
      const auto* src = static_cast<const char*>(prev_ssm) + hv * head_elems * sbytes;
      auto* dst = static_cast<char*>(next_ssm) + hv * head_elems * sbytes;
      load_array(src, sdt, head_elems, head_state_.data());
      KdaFactors factors;
      if (f) {
        factors.u = reinterpret_cast<float*>(f + fl.u) + int64_t{hv} * V;
        factors.eg = reinterpret_cast<float*>(f + fl.eg) + int64_t{hv} * K;
        // Every value head of key head h computes the same kf; the first one's is kept.
        if (hv % (HV / H) == 0) factors.kf = reinterpret_cast<float*>(f + fl.kf) + h;
      }
      kda_head_step(y_.data() + int64_t{h} * K, y_.data() + int64_t{H} * K + int64_t{h} * K,
                    y_.data() + 2 * int64_t{H} * K + int64_t{hv} * V, b_[hv], eg_.data(), scale_, K,
                    V, head_state_.data(), head_out_.data(), factors);
      store_array(head_state_.data(), head_elems, sdt, dst);
      if (out_token < 0) continue;
      for (int p = 0; p < V; ++p) {
        store(out_.core_out,
              out_token * out_.core_out.stride[0] + hv * out_.core_out.stride[1] +
                  p * out_.core_out.stride[2],
              head_out_[p]);
      }
    }
  }

 private:
  const KdaConfig& c_;
  const KdaWeights& w_;
  const KdaInputs& in_;
  const KdaOutputs& out_;
  int hist_ = 0;
  float scale_ = 1.0f;
  std::vector<float> x_, y_, g_, b_, dt_bias_, eg_, window_, next_window_, head_state_, head_out_,
      k_raw_;
};

}  // namespace specstate::detail::cpu
