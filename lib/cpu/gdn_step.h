// Internal: the CPU backend's one Gated DeltaNet token step (DESIGN.md section 3), shared by
// prefill, decode, verify (chain and tree) and every strategy; the replay strategy's factor
// records are written by it and applied with the same update helpers (cpu_math.h). Because every
// path runs this exact code in the same order on the same values, the CPU strategies are bit-exact
// against sequential decoding and against each other.
#pragma once

#include <cstdint>
#include <vector>

#include "../layout.h"
#include "cpu_math.h"
#include "kernels/kernel_types.h"
#include "specstate/config.h"
#include "specstate/gdn.h"

namespace specstate::detail::cpu {

class GdnStep {
 public:
  GdnStep(const GdnConfig& config, const GdnWeights& w, const GdnInputs& in, const GdnOutputs& out)
      : g_(config), w_(w), in_(in), out_(out) {
    const int64_t d = g_.conv_dim();
    hist_ = g_.conv_width - 1;
    x_.resize(d);
    y_.resize(d);
    a_.resize(g_.num_v_heads);
    b_.resize(g_.num_v_heads);
    window_.resize(static_cast<std::size_t>(d) * hist_);
    next_window_.resize(window_.size());
    head_state_.resize(static_cast<std::size_t>(g_.head_v_dim) * g_.head_k_dim);
    head_out_.resize(g_.head_v_dim);
    scale_ = g_.effective_scale();
  }

  // The token's inputs from the call's views (token index).
  void load_inputs(int64_t token) {
    const int64_t d = g_.conv_dim();
    for (int64_t c = 0; c < d; ++c) {
      x_[c] = load(in_.mixed_qkv, token * in_.mixed_qkv.stride[0] + c * in_.mixed_qkv.stride[1]);
    }
    for (int hv = 0; hv < g_.num_v_heads; ++hv) {
      a_[hv] = load(in_.a, token * in_.a.stride[0] + hv * in_.a.stride[1]);
      b_[hv] = load(in_.b, token * in_.b.stride[0] + hv * in_.b.stride[1]);
    }
  }
  // Conv records: the token's conv input (mixed_qkv) in the activation dtype, bit for bit.
  void load_record(const void* record) {
    load_array(record, g_.act_dtype, g_.conv_dim(), x_.data());
  }
  void store_record(void* record) const {
    store_array(x_.data(), g_.conv_dim(), g_.act_dtype, record);
  }
  // A pending conv step: the window shifted by the loaded record's input.
  void shift_conv(void* conv) {
    conv_shift(conv, g_.conv_state_dtype, x_.data(), g_.conv_dim(), hist_, window_);
  }

  // Applies one factor record (kernels::gdn_factor_layout) to the SSM state (storage dtype, in
  // place; a bf16 state is rounded after the token as the step rounds it).
  void apply_factor(void* ssm, const void* factor) {
    const int H = g_.num_k_heads, HV = g_.num_v_heads, K = g_.head_k_dim, V = g_.head_v_dim;
    apply_delta_factor(ssm, factor,
                       kernels::gdn_factor_layout(H, HV, K, V, dtype_size(g_.act_dtype)), H, HV, K,
                       V, g_.act_dtype, g_.ssm_state_dtype, k_raw_, head_state_,
                       [&](int hv, const float* eg, const float* u, const float* k, float kf,
                           float* state) { gdn_head_apply(eg[hv], u, k, kf, K, V, state); });
  }

  // Advances the loaded token: conv window prev_conv -> next_conv, SSM prev_ssm -> next_ssm
  // (storage-dtype memory of one state; prev and next may be the same). Outputs go to token
  // `out_token` of the call's output views, or nowhere when it is negative (a replayed step).
  // `factor`: the token's factor record (kernels::gdn_factor_layout) is written there when
  // non-null.
  void step(const void* prev_conv, void* next_conv, const void* prev_ssm, void* next_ssm,
            int64_t out_token, void* factor = nullptr) {
    const int64_t d = g_.conv_dim();
    const DType act = g_.act_dtype;
    conv_token(prev_conv, next_conv, g_.conv_state_dtype, act, x_.data(), w_.conv_weight,
               w_.conv_bias, d, g_.conv_width, out_.conv_out, out_token, window_.data(),
               next_window_.data(), y_.data());

    const int H = g_.num_k_heads, HV = g_.num_v_heads, K = g_.head_k_dim, V = g_.head_v_dim;
    const int64_t head_elems = int64_t{V} * K;
    const DType sdt = g_.ssm_state_dtype;
    const std::size_t sbytes = dtype_size(sdt);
    const auto fl = kernels::gdn_factor_layout(H, HV, K, V, dtype_size(act));
    char* f = static_cast<char*>(factor);
    if (f) {
      // The key as the step reads it: the conv output (rounded to the activation dtype).
      store_array(y_.data() + int64_t{H} * K, int64_t{H} * K, act, f + fl.k);
    }
    for (int hv = 0; hv < HV; ++hv) {
      const int h = hv / (HV / H);
      HeadInputs head;
      head.q = y_.data() + int64_t{h} * K;
      head.k = y_.data() + int64_t{H} * K + int64_t{h} * K;
      head.v = y_.data() + 2 * int64_t{H} * K + int64_t{hv} * V;
      head.a = a_[hv];
      head.b = b_[hv];
      head.A_log = load(w_.A_log, hv * w_.A_log.stride[0]);
      head.dt_bias = load(w_.dt_bias, hv * w_.dt_bias.stride[0]);
      const auto* src = static_cast<const char*>(prev_ssm) + hv * head_elems * sbytes;
      auto* dst = static_cast<char*>(next_ssm) + hv * head_elems * sbytes;
      load_array(src, sdt, head_elems, head_state_.data());
      GdnFactors factors;
      if (f) {
        factors.u = reinterpret_cast<float*>(f + fl.u) + int64_t{hv} * V;
        factors.eg = reinterpret_cast<float*>(f + fl.eg) + hv;
        // Every value head of key head h computes the same kf; the first one's is kept.
        if (hv % (HV / H) == 0) factors.kf = reinterpret_cast<float*>(f + fl.kf) + h;
      }
      gdn_head_step(head, scale_, K, V, head_state_.data(), head_out_.data(), factors);
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
  const GdnConfig& g_;
  const GdnWeights& w_;
  const GdnInputs& in_;
  const GdnOutputs& out_;
  int hist_ = 0;
  float scale_ = 1.0f;
  std::vector<float> x_, y_, a_, b_, window_, next_window_, head_state_, head_out_, k_raw_;
};

}  // namespace specstate::detail::cpu
