// Internal: the CPU backend's one Mamba2 token step (DESIGN.md section 3: causal conv over xBC,
// then the selective state update), shared by prefill, decode, verify (chain and tree) and every
// strategy, including the replay of recorded steps. The interface is GdnStep's (load_inputs,
// load_record, store_record, step), so run_rows in cpu_backend.cpp drives both kinds.
//
// Arithmetic is fp32; per head h (group g = h / (nheads / G)):
//   dt = softplus(dt_t[h] + dt_bias[h])  (threshold 20), clamped to [dt_min, dt_max] when set
//   dA = exp(A * dt), A = -exp(A_log[h])
//   S[p][n] = S[p][n] * dA + (B[g][n] * dt) * x[h][p]
//   y[p] = sum_n S[p][n] * C[g][n] (+ D[h] * x[h][p]) (* z[p] * sigmoid(z[p]))
// The order of the products is SGLang's selective_state_update (dB = B * dt, then dB * x). The
// conv output is rounded to the activation dtype before the split (the model stores it there);
// the state is stored in the SSM dtype after every step; y is stored in the activation dtype.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../layout.h"
#include "cpu_math.h"
#include "kernels/kernel_types.h"
#include "specstate/config.h"
#include "specstate/mamba2.h"

namespace specstate::detail::cpu {

class Mamba2Step {
 public:
  Mamba2Step(const Mamba2Config& config, const Mamba2Weights& w, const Mamba2Inputs& in,
             const Mamba2Outputs& out)
      : m_(config), w_(w), in_(in), out_(out) {
    const int64_t d = m_.conv_dim();
    hist_ = m_.conv_width - 1;
    x_.resize(d);
    y_.resize(d);
    dt_.resize(m_.num_heads);
    z_.resize(m_.gate ? static_cast<std::size_t>(m_.num_heads) * m_.head_dim : 0);
    window_.resize(static_cast<std::size_t>(d) * hist_);
    next_window_.resize(window_.size());
    head_state_.resize(static_cast<std::size_t>(m_.head_dim) * m_.d_state);
    dB_.resize(m_.d_state);
    head_out_.resize(m_.head_dim);
    // A record's x and B: sized here, so that a token allocates nothing (apply_factor).
    rec_x_.resize(static_cast<std::size_t>(m_.num_heads) * m_.head_dim);
    rec_B_.resize(static_cast<std::size_t>(m_.n_groups) * m_.d_state);
  }

  // The token's inputs from the call's views (token index).
  void load_inputs(int64_t token) {
    const int64_t d = m_.conv_dim();
    for (int64_t c = 0; c < d; ++c) {
      x_[c] = load(in_.xBC, token * in_.xBC.stride[0] + c * in_.xBC.stride[1]);
    }
    for (int h = 0; h < m_.num_heads; ++h) {
      dt_[h] = load(in_.dt, token * in_.dt.stride[0] + h * in_.dt.stride[1]);
    }
    for (std::size_t i = 0; i < z_.size(); ++i) {
      z_[i] = load(in_.z, token * in_.z.stride[0] + static_cast<int64_t>(i) * in_.z.stride[1]);
    }
  }
  // Conv records: the token's conv input (xBC) in the activation dtype, bit for bit.
  void load_record(const void* record) {
    load_array(record, m_.act_dtype, m_.conv_dim(), x_.data());
  }
  void store_record(void* record) const {
    store_array(x_.data(), m_.conv_dim(), m_.act_dtype, record);
  }
  void shift_conv(void* conv) {
    conv_shift(conv, m_.conv_state_dtype, x_.data(), m_.conv_dim(), hist_, window_);
  }

  // Applies one factor record (kernels::mamba2_factor_layout) to the SSM state (storage dtype,
  // in place).
  void apply_factor(void* ssm, const void* factor) {
    const int H = m_.num_heads, P = m_.head_dim, N = m_.d_state, G = m_.n_groups;
    const auto fl = kernels::mamba2_factor_layout(H, P, G, N, dtype_size(m_.act_dtype));
    const char* f = static_cast<const char*>(factor);
    const auto* dt = reinterpret_cast<const float*>(f + fl.dt);
    const auto* dA = reinterpret_cast<const float*>(f + fl.dA);
    load_array(f + fl.x, m_.act_dtype, int64_t{H} * P, rec_x_.data());
    load_array(f + fl.B, m_.act_dtype, int64_t{G} * N, rec_B_.data());
    const int64_t head_elems = int64_t{P} * N;
    const DType sdt = m_.ssm_state_dtype;
    const std::size_t sbytes = dtype_size(sdt);
    for (int h = 0; h < H; ++h) {
      const float* Bg = rec_B_.data() + int64_t{h / (H / G)} * N;
      for (int n = 0; n < N; ++n) dB_[n] = Bg[n] * dt[h];
      auto* st = static_cast<char*>(ssm) + h * head_elems * sbytes;
      load_array(st, sdt, head_elems, head_state_.data());
      for (int p = 0; p < P; ++p) {
        mamba2_update(head_state_.data() + int64_t{p} * N, N, dA[h], dB_.data(),
                      rec_x_[int64_t{h} * P + p]);
      }
      store_array(head_state_.data(), head_elems, sdt, st);
    }
  }

  // Advances the loaded token: conv window prev_conv -> next_conv, SSM prev_ssm -> next_ssm
  // (storage-dtype memory of one state; prev and next may be the same). Outputs go to token
  // `out_token` of the call's output views, or nowhere when it is negative (a replayed step).
  // `factor`: the token's factor record (kernels::mamba2_factor_layout) is written there when
  // non-null.
  void step(const void* prev_conv, void* next_conv, const void* prev_ssm, void* next_ssm,
            int64_t out_token, void* factor = nullptr) {
    const int64_t d = m_.conv_dim();
    const DType act = m_.act_dtype;
    conv_token(prev_conv, next_conv, m_.conv_state_dtype, act, x_.data(), w_.conv_weight,
               w_.conv_bias, d, m_.conv_width, out_.conv_out, out_token, window_.data(),
               next_window_.data(), y_.data());

    const int H = m_.num_heads, P = m_.head_dim, N = m_.d_state, G = m_.n_groups;
    const int heads_per_group = H / G;
    const float* x = y_.data();
    const float* B = y_.data() + int64_t{H} * P;
    const float* C = B + int64_t{G} * N;
    const int64_t head_elems = int64_t{P} * N;
    const DType sdt = m_.ssm_state_dtype;
    const std::size_t sbytes = dtype_size(sdt);
    const auto fl = kernels::mamba2_factor_layout(H, P, G, N, dtype_size(act));
    char* f = static_cast<char*>(factor);
    if (f) {
      // x and B as the step reads them: the conv output (rounded to the activation dtype).
      store_array(x, int64_t{H} * P, act, f + fl.x);
      store_array(B, int64_t{G} * N, act, f + fl.B);
    }
    for (int h = 0; h < H; ++h) {
      const int g = h / heads_per_group;
      const float* Bg = B + int64_t{g} * N;
      const float* Cg = C + int64_t{g} * N;
      float dt = softplus(dt_[h] + load(w_.dt_bias, h * w_.dt_bias.stride[0]));
      if (m_.dt_min) dt = std::max(dt, *m_.dt_min);
      if (m_.dt_max) dt = std::min(dt, *m_.dt_max);
      const float A = -std::exp(load(w_.A_log, h * w_.A_log.stride[0]));
      const float dA = std::exp(A * dt);
      if (f) {
        reinterpret_cast<float*>(f + fl.dt)[h] = dt;
        reinterpret_cast<float*>(f + fl.dA)[h] = dA;
      }
      for (int n = 0; n < N; ++n) dB_[n] = Bg[n] * dt;
      const auto* src = static_cast<const char*>(prev_ssm) + h * head_elems * sbytes;
      auto* dst = static_cast<char*>(next_ssm) + h * head_elems * sbytes;
      load_array(src, sdt, head_elems, head_state_.data());
      const float D = m_.d_skip ? load(w_.D, h * w_.D.stride[0]) : 0.0f;
      for (int p = 0; p < P; ++p) {
        const float xp = x[int64_t{h} * P + p];
        float* s = head_state_.data() + int64_t{p} * N;
        mamba2_update(s, N, dA, dB_.data(), xp);
        float acc = 0.0f;
        for (int n = 0; n < N; ++n) acc += s[n] * Cg[n];
        if (m_.d_skip) acc += xp * D;
        if (m_.gate) {
          const float zp = z_[int64_t{h} * P + p];
          acc *= zp * sigmoid(zp);
        }
        head_out_[p] = acc;
      }
      store_array(head_state_.data(), head_elems, sdt, dst);
      if (out_token < 0) continue;
      for (int p = 0; p < P; ++p) {
        store(out_.y, out_token * out_.y.stride[0] + h * out_.y.stride[1] + p * out_.y.stride[2],
              head_out_[p]);
      }
    }
  }

 private:
  const Mamba2Config& m_;
  const Mamba2Weights& w_;
  const Mamba2Inputs& in_;
  const Mamba2Outputs& out_;
  int hist_ = 0;
  std::vector<float> x_, y_, dt_, z_, window_, next_window_, head_state_, dB_, head_out_, rec_x_,
      rec_B_;
};

}  // namespace specstate::detail::cpu
