// Internal: the CPU backend's token step of the delta-rule kinds (Gated DeltaNet, KDA; DESIGN.md
// section 3), shared by prefill, decode, verify (chain and tree) and every strategy: the conv over
// [q | k | v], then per value head the recurrence, and the replay strategy's factor records
// (written by the step, applied with the same update helpers). The kind's part is its gate
// (`Gate`: GdnGate in gdn_step.h, KdaGate in kda_step.h): its per-token gate inputs, its head step
// and its record's application. Because every path runs this exact code in the same order on the
// same values, the CPU strategies are bit-exact against sequential decoding and each other.
//
// A Gate provides:
//   Config, Weights, Inputs, Outputs                  the kind's argument types
//   static Layout factor_layout(const Config&)        kernels::<kind>_factor_layout
//   static int64_t eg_per_head(const Config&)         e^g floats a record keeps per value head
//   explicit Gate(const Config&)
//   void load(const Inputs&, int64_t token)           the token's gate inputs (a / g, b)
//   void head_step(const Weights&, int hv, const float* q, const float* k, const float* v,
//                  float scale, float* state, float* out, DeltaScratch&, const DeltaFactors&)
//   void head_apply(int hv, const float* eg, const float* u, const float* k_raw, float kf,
//                   float* state, DeltaScratch&) const   eg: the record's whole e^g array
// The step allocates every buffer in its constructor; a token allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "../layout.h"
#include "cpu_math.h"

namespace specstate::detail::cpu {

template <typename Gate>
class DeltaStep {
 public:
  using Config = typename Gate::Config;
  using Weights = typename Gate::Weights;
  using Inputs = typename Gate::Inputs;
  using Outputs = typename Gate::Outputs;

  DeltaStep(const Config& config, const Weights& w, const Inputs& in, const Outputs& out)
      : c_(config), w_(w), in_(in), out_(out), gate_(config) {
    const int64_t d = c_.conv_dim();
    hist_ = c_.conv_width - 1;
    x_.resize(d);
    y_.resize(d);
    window_.resize(static_cast<std::size_t>(d) * hist_);
    next_window_.resize(window_.size());
    head_state_.resize(static_cast<std::size_t>(c_.head_v_dim) * c_.head_k_dim);
    head_out_.resize(c_.head_v_dim);
    k_raw_.resize(static_cast<std::size_t>(c_.num_k_heads) * c_.head_k_dim);
    scratch_.fit(c_.head_k_dim, c_.head_v_dim);
    scale_ = c_.effective_scale();
  }

  // The token's inputs from the call's views (token index).
  void load_inputs(int64_t token) {
    const int64_t d = c_.conv_dim();
    for (int64_t c = 0; c < d; ++c) {
      x_[c] = load(in_.mixed_qkv, token * in_.mixed_qkv.stride[0] + c * in_.mixed_qkv.stride[1]);
    }
    gate_.load(in_, token);
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

  // Applies one factor record (Gate::factor_layout) to the SSM state (storage dtype, in place; a
  // bf16 state is rounded after the token as the step rounds it).
  void apply_factor(void* ssm, const void* factor) {
    apply_delta_factor(ssm, factor, Gate::factor_layout(c_), c_.num_k_heads, c_.num_v_heads,
                       c_.head_k_dim, c_.head_v_dim, c_.act_dtype, c_.ssm_state_dtype, k_raw_,
                       head_state_,
                       [&](int hv, const float* eg, const float* u, const float* k, float kf,
                           float* state) { gate_.head_apply(hv, eg, u, k, kf, state, scratch_); });
  }

  // Advances the loaded token: conv window prev_conv -> next_conv, SSM prev_ssm -> next_ssm
  // (storage-dtype memory of one state; prev and next may be the same). Outputs go to token
  // `out_token` of the call's output views, or nowhere when it is negative (a replayed step).
  // `factor`: the token's factor record (Gate::factor_layout) is written there when non-null.
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
    const auto fl = Gate::factor_layout(c_);
    const int64_t eg_per_head = Gate::eg_per_head(c_);
    char* f = static_cast<char*>(factor);
    if (f) {
      // The key as the step reads it: the conv output (rounded to the activation dtype).
      store_array(y_.data() + int64_t{H} * K, int64_t{H} * K, act, f + fl.k);
    }
    for (int hv = 0; hv < HV; ++hv) {
      const int h = hv / (HV / H);
      const auto* src = static_cast<const char*>(prev_ssm) + hv * head_elems * sbytes;
      auto* dst = static_cast<char*>(next_ssm) + hv * head_elems * sbytes;
      load_array(src, sdt, head_elems, head_state_.data());
      DeltaFactors factors;
      if (f) {
        factors.u = reinterpret_cast<float*>(f + fl.u) + int64_t{hv} * V;
        factors.eg = reinterpret_cast<float*>(f + fl.eg) + hv * eg_per_head;
        // Every value head of key head h computes the same kf; the first one's is kept.
        if (hv % (HV / H) == 0) factors.kf = reinterpret_cast<float*>(f + fl.kf) + h;
      }
      gate_.head_step(w_, hv, y_.data() + int64_t{h} * K,
                      y_.data() + int64_t{H} * K + int64_t{h} * K,
                      y_.data() + 2 * int64_t{H} * K + int64_t{hv} * V, scale_, head_state_.data(),
                      head_out_.data(), scratch_, factors);
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
  const Config& c_;
  const Weights& w_;
  const Inputs& in_;
  const Outputs& out_;
  Gate gate_;
  int hist_ = 0;
  float scale_ = 1.0f;
  std::vector<float> x_, y_, window_, next_window_, head_state_, head_out_, k_raw_;
  DeltaScratch scratch_;  // a head's vectors: every buffer of a token is sized here
};

}  // namespace specstate::detail::cpu
