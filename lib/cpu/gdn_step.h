// Internal: the CPU backend's one Gated DeltaNet token step (DESIGN.md section 3), shared by
// prefill, decode, verify (chain and tree) and every strategy, including the replay of recorded
// steps. Because every path runs this exact code in the same order on the same values, the CPU
// strategies are bit-exact against sequential decoding and against each other.
#pragma once

#include <cstdint>
#include <vector>

#include "../layout.h"
#include "cpu_math.h"
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

  // The token's inputs: from the call's views (token index), or from a record
  // [mixed_qkv | a | b] in the activation dtype (the same values, bit for bit).
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
  void load_record(const void* record) {
    const int64_t d = g_.conv_dim(), hv = g_.num_v_heads;
    load_array(record, g_.act_dtype, d, x_.data());
    const std::size_t es = dtype_size(g_.act_dtype);
    load_array(static_cast<const char*>(record) + d * es, g_.act_dtype, hv, a_.data());
    load_array(static_cast<const char*>(record) + (d + hv) * es, g_.act_dtype, hv, b_.data());
  }
  void store_record(void* record) const {
    const int64_t d = g_.conv_dim(), hv = g_.num_v_heads;
    store_array(x_.data(), d, g_.act_dtype, record);
    const std::size_t es = dtype_size(g_.act_dtype);
    store_array(a_.data(), hv, g_.act_dtype, static_cast<char*>(record) + d * es);
    store_array(b_.data(), hv, g_.act_dtype, static_cast<char*>(record) + (d + hv) * es);
  }

  // Advances the loaded token: conv window prev_conv -> next_conv, SSM prev_ssm -> next_ssm
  // (storage-dtype memory of one state; prev and next may be the same). Outputs go to token
  // `out_token` of the call's output views, or nowhere when it is negative (a replayed step).
  void step(const void* prev_conv, void* next_conv, const void* prev_ssm, void* next_ssm,
            int64_t out_token) {
    const int64_t d = g_.conv_dim();
    const DType act = g_.act_dtype;
    load_array(prev_conv, g_.conv_state_dtype, d * hist_, window_.data());
    conv_step(window_.data(), x_.data(), w_.conv_weight, w_.conv_bias, static_cast<int>(d),
              g_.conv_width, y_.data(), next_window_.data());
    store_array(next_window_.data(), d * hist_, g_.conv_state_dtype, next_conv);
    // The conv output is stored in the activation dtype, and that rounded value feeds the
    // recurrence, as in the model.
    const bool conv_out = out_token >= 0 && !out_.conv_out.empty();
    for (int64_t c = 0; c < d; ++c) {
      y_[c] = round_to(act, y_[c]);
      if (conv_out) {
        store(out_.conv_out, out_token * out_.conv_out.stride[0] + c * out_.conv_out.stride[1],
              y_[c]);
      }
    }

    const int H = g_.num_k_heads, HV = g_.num_v_heads, K = g_.head_k_dim, V = g_.head_v_dim;
    const int64_t head_elems = int64_t{V} * K;
    const DType sdt = g_.ssm_state_dtype;
    const std::size_t sbytes = dtype_size(sdt);
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
      gdn_head_step(head, scale_, K, V, head_state_.data(), head_out_.data());
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
  std::vector<float> x_, y_, a_, b_, window_, next_window_, head_state_, head_out_;
};

}  // namespace specstate::detail::cpu
