// Internal: the CPU backend's one recurrence step (DESIGN.md section 3), shared by prefill,
// decode and verify (chain and tree). Arithmetic is fp32; storage dtypes are handled by the
// callers' load/store. Because every path runs these exact functions in the same order, the CPU
// snapshot strategy is bit-exact against sequential decoding.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <vector>

#include "specstate/dtype.h"
#include "specstate/tensor_view.h"

namespace specstate::detail::cpu {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Element access of caller views (any strides; f32 or bf16).
inline float load(const TensorView& view, int64_t offset) {
  return view.dtype == DType::kBF16
             ? float_from_bf16(static_cast<const uint16_t*>(view.data)[offset])
             : static_cast<const float*>(view.data)[offset];
}
inline void store(const TensorView& view, int64_t offset, float value) {
  if (view.dtype == DType::kBF16) {
    static_cast<uint16_t*>(view.data)[offset] = bf16_from_float(value);
  } else {
    static_cast<float*>(view.data)[offset] = value;
  }
}
// Contiguous storage of the pool (state buffers).
inline void load_array(const void* src, DType dtype, int64_t n, float* dst) {
  if (dtype == DType::kBF16) {
    const auto* p = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = float_from_bf16(p[i]);
  } else {
    const auto* p = static_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = p[i];
  }
}
inline void store_array(const float* src, int64_t n, DType dtype, void* dst) {
  if (dtype == DType::kBF16) {
    auto* p = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) p[i] = bf16_from_float(src[i]);
  } else {
    auto* p = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) p[i] = src[i];
  }
}
inline float round_to(DType dtype, float value) {
  return dtype == DType::kBF16 ? round_to_bf16(value) : value;
}

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Causal conv1d update of one token over all channels (DESIGN.md section 3).
//   window:  [conv_dim, W-1] fp32, the W-1 previous inputs, oldest first (read)
//   x:       [conv_dim] this token's input
//   weight:  caller view [conv_dim, W]; bias: caller view [conv_dim] or empty
//   y:       [conv_dim] silu(bias + sum_j w[j] * win[j]) (unrounded)
//   next:    [conv_dim, W-1] fp32, win[1:] (may not alias window)
inline void conv_step(const float* window, const float* x, const TensorView& weight,
                      const TensorView& bias, int conv_dim, int width, float* y, float* next) {
  const int hist = width - 1;
  for (int c = 0; c < conv_dim; ++c) {
    const float* win = window + static_cast<int64_t>(c) * hist;
    float acc = bias.empty() ? 0.0f : load(bias, c * bias.stride[0]);
    const int64_t row = c * weight.stride[0];
    for (int j = 0; j < hist; ++j) acc += load(weight, row + j * weight.stride[1]) * win[j];
    acc += load(weight, row + hist * weight.stride[1]) * x[c];
    y[c] = silu(acc);
    float* out = next + static_cast<int64_t>(c) * hist;
    for (int j = 0; j + 1 < hist; ++j) out[j] = win[j + 1];
    out[hist - 1] = x[c];
  }
}

// The conv part of every kind's CPU token step: the window of one state (storage-dtype memory
// prev_conv) advanced by this token's input x into next_conv (prev and next may be the same
// memory); y is the conv output rounded to the activation dtype (what feeds the recurrence, as in
// the model), also stored as token out_token of the conv_out view when that view is given and
// out_token >= 0. window, next_window: [conv_dim, W-1] fp32 scratch.
inline void conv_token(const void* prev_conv, void* next_conv, DType conv_dtype, DType act,
                       const float* x, const TensorView& weight, const TensorView& bias,
                       int64_t conv_dim, int width, const TensorView& conv_out, int64_t out_token,
                       float* window, float* next_window, float* y) {
  const int64_t hist = width - 1;
  load_array(prev_conv, conv_dtype, conv_dim * hist, window);
  conv_step(window, x, weight, bias, static_cast<int>(conv_dim), width, y, next_window);
  store_array(next_window, conv_dim * hist, conv_dtype, next_conv);
  const bool out = out_token >= 0 && !conv_out.empty();
  for (int64_t c = 0; c < conv_dim; ++c) {
    y[c] = round_to(act, y[c]);
    if (out) store(conv_out, out_token * conv_out.stride[0] + c * conv_out.stride[1], y[c]);
  }
}

// Per-token, per-value-head gate values and normalised q/k (shared by every strategy).
struct HeadInputs {
  const float* q;  // [K] raw (conv output)
  const float* k;  // [K] raw
  const float* v;  // [V]
  float a;         // gate input a_t[hv]
  float b;         // gate input b_t[hv]
  float A_log;
  float dt_bias;
};

// k^ = k * kf, kf = 1 / sqrt(sum k^2 + 1e-6): the step and a factor record's application compute
// the normalised key with this one function, so they see the same floats.
inline float key_scale(const Eigen::VectorXf& k_raw) {
  return 1.0f / std::sqrt(k_raw.squaredNorm() + 1e-6f);
}
inline void normalized_key(const Eigen::VectorXf& k_raw, float kf, Eigen::VectorXf& k) {
  k.noalias() = k_raw * kf;
}
// q~ = q * scale / sqrt(sum q^2 + 1e-6), the query of both delta-rule kinds.
template <typename Q>
void normalized_query(const Q& q_raw, float scale, Eigen::VectorXf& q) {
  q.noalias() = q_raw * (scale / std::sqrt(q_raw.squaredNorm() + 1e-6f));
}

// The vectors of one value head's step or record application, sized once per layer call (the
// step's constructor) so that a token allocates nothing: a layer call that runs out of memory
// does so before it writes any state (it allocated K- and V-vectors per head and token, and a
// failure mid-row left a replay slot's conv window stored twice). The arithmetic is the one it
// replaced: S k is formed into sk as Eigen formed it into a temporary.
struct DeltaScratch {
  Eigen::VectorXf k_raw, q, k, u, sk;
  void fit(int K, int V) {
    k_raw.resize(K);
    q.resize(K);
    k.resize(K);
    u.resize(V);
    sk.resize(V);
  }
};

// The rank-1 part of the GDN update, S = e^g S + u k^T, split as the step computes it (S is
// scaled before u is formed). Shared by the step and the factor records' application (DESIGN.md
// section 6: bit-exact by construction).
inline void gdn_decay(Eigen::Map<RowMatrix>& S, float eg) { S *= eg; }
inline void gdn_rank1(Eigen::Map<RowMatrix>& S, const Eigen::VectorXf& u,
                      const Eigen::VectorXf& k) {
  S.noalias() += u * k.transpose();
}

// A delta-rule step's factors of one value head (the record of DESIGN.md section 4), written when
// non-null.
struct DeltaFactors {
  float* u = nullptr;   // [V]
  float* eg = nullptr;  // e^g: GDN one float, KDA [K]
  float* kf = nullptr;  // 1 / |k|
};

// One Gated DeltaNet step of one value head, in place on S [V, K] (K contiguous), fp32.
//   q~ = q / sqrt(sum q^2 + 1e-6) * scale;  k^ = k / sqrt(sum k^2 + 1e-6)
//   g = -exp(A_log) * softplus(a + dt_bias);  beta = sigmoid(b)
//   S = exp(g) S;  u = beta (v - S k^);  S += u k^T;  o = S q~
// `w`: fitted to (K, V).
inline void gdn_head_step(const HeadInputs& in, float scale, int K, int V, float* state, float* out,
                          DeltaScratch& w, const DeltaFactors& factors = {}) {
  Eigen::Map<const Eigen::VectorXf> q_raw(in.q, K), v(in.v, V);
  w.k_raw = Eigen::Map<const Eigen::VectorXf>(in.k, K);
  normalized_query(q_raw, scale, w.q);
  const float kf = key_scale(w.k_raw);
  normalized_key(w.k_raw, kf, w.k);
  const float g = -std::exp(in.A_log) * softplus(in.a + in.dt_bias);
  const float beta = sigmoid(in.b);
  const float eg = std::exp(g);
  Eigen::Map<RowMatrix> S(state, V, K);
  gdn_decay(S, eg);
  w.sk.noalias() = S * w.k;
  w.u.noalias() = beta * (v - w.sk);
  gdn_rank1(S, w.u, w.k);
  Eigen::Map<Eigen::VectorXf>(out, V).noalias() = S * w.q;
  if (factors.u) Eigen::Map<Eigen::VectorXf>(factors.u, V) = w.u;
  if (factors.eg) *factors.eg = eg;
  if (factors.kf) *factors.kf = kf;
}

// Applies one GDN factor record to S [V, K]: S = e^g S + u k^T with k = k_raw * kf.
inline void gdn_head_apply(float eg, const float* u_rec, const float* k_raw_rec, float kf, int K,
                           int V, float* state, DeltaScratch& w) {
  w.u = Eigen::Map<const Eigen::VectorXf>(u_rec, V);
  w.k_raw = Eigen::Map<const Eigen::VectorXf>(k_raw_rec, K);
  normalized_key(w.k_raw, kf, w.k);
  Eigen::Map<RowMatrix> S(state, V, K);
  gdn_decay(S, eg);
  gdn_rank1(S, w.u, w.k);
}

// Applies one delta-rule factor record (GDN's or KDA's layout: u f32 [HV][V], e^g, kf f32 [H],
// k act [H][K]) to the SSM state `ssm` [HV][V][K] (storage dtype, in place; a bf16 state is
// rounded after the token, as the step rounds it). `apply_head(hv, eg, u, k_raw, kf, state)` is
// the kind's update of value head hv's fp32 state [V][K] (gdn_head_apply, kda_head_apply); `eg`
// is the record's whole e^g array (GDN: one per value head, KDA: K per value head).
template <typename Layout, typename ApplyHead>
void apply_delta_factor(void* ssm, const void* factor, const Layout& fl, int H, int HV, int K,
                        int V, DType act, DType sdt, std::vector<float>& k_raw,
                        std::vector<float>& head_state, ApplyHead&& apply_head) {
  const char* f = static_cast<const char*>(factor);
  const auto* u = reinterpret_cast<const float*>(f + fl.u);
  const auto* eg = reinterpret_cast<const float*>(f + fl.eg);
  const auto* kf = reinterpret_cast<const float*>(f + fl.kf);
  k_raw.resize(static_cast<std::size_t>(H) * K);  // sized by the step: no allocation here
  load_array(f + fl.k, act, int64_t{H} * K, k_raw.data());
  const int64_t head_elems = int64_t{V} * K;
  const std::size_t sbytes = dtype_size(sdt);
  for (int hv = 0; hv < HV; ++hv) {
    const int h = hv / (HV / H);
    auto* st = static_cast<char*>(ssm) + hv * head_elems * sbytes;
    load_array(st, sdt, head_elems, head_state.data());
    apply_head(hv, eg, u + int64_t{hv} * V, k_raw.data() + int64_t{h} * K, kf[h],
               head_state.data());
    store_array(head_state.data(), head_elems, sdt, st);
  }
}

// The Mamba2 update of one channel's states, s = s dA + dB x (dB = B * dt): shared by the step
// and the factor records' application.
inline void mamba2_update(float* s, int N, float dA, const float* dB, float xp) {
  for (int n = 0; n < N; ++n) s[n] = s[n] * dA + dB[n] * xp;
}

// A conv window shift by one input (a conv record): the state after a step whose conv output is
// not needed. window [conv_dim, W-1] in conv dtype, in place; x [conv_dim] fp32.
inline void conv_shift(void* window, DType conv_dtype, const float* x, int64_t conv_dim, int hist,
                       std::vector<float>& scratch) {
  scratch.resize(static_cast<std::size_t>(conv_dim) * hist);
  load_array(window, conv_dtype, conv_dim * hist, scratch.data());
  for (int64_t c = 0; c < conv_dim; ++c) {
    float* w = scratch.data() + c * hist;
    for (int j = 0; j + 1 < hist; ++j) w[j] = w[j + 1];
    w[hist - 1] = x[c];
  }
  store_array(scratch.data(), conv_dim * hist, conv_dtype, window);
}

}  // namespace specstate::detail::cpu
