#include "common/kda_data.h"

#include <cmath>

namespace specstate::test {

namespace {
void fill_normal(Buffer& buffer, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < buffer.numel(); ++i) buffer.set(i, scale * normal(rng));
}
}  // namespace

KdaWeights KdaLayerWeights::view() const {
  return KdaWeights{conv_weight.view(), conv_bias.numel() ? conv_bias.view() : TensorView{},
                    A_log.view(), dt_bias.view()};
}

KdaInputs KdaTokenInputs::view() const { return KdaInputs{mixed_qkv.view(), g.view(), b.view()}; }
KdaInputs KdaTokenInputs::rows(int64_t begin, int64_t count) const {
  return KdaInputs{mixed_qkv.rows(begin, count), g.rows(begin, count), b.rows(begin, count)};
}

KdaOutputs KdaTokenOutputs::view() const { return KdaOutputs{conv_out.view(), core_out.view()}; }
KdaOutputs KdaTokenOutputs::rows(int64_t begin, int64_t count) const {
  return KdaOutputs{conv_out.rows(begin, count), core_out.rows(begin, count)};
}

KdaConfig small_kda_config(DType act, DType conv_state, DType ssm_state, bool conv_bias) {
  KdaConfig c;
  c.num_k_heads = 2;
  c.num_v_heads = 4;
  c.head_k_dim = 8;
  c.head_v_dim = 8;
  c.conv_width = 4;
  c.conv_bias = conv_bias;
  c.act_dtype = act;
  c.conv_state_dtype = conv_state;
  c.ssm_state_dtype = ssm_state;
  return c;
}

KdaLayerWeights random_weights(const KdaConfig& c, std::mt19937_64& rng) {
  KdaLayerWeights w;
  const int64_t d = c.conv_dim();
  w.conv_weight = Buffer(c.act_dtype, {d, c.conv_width});
  fill_normal(w.conv_weight, rng, 0.5f);
  if (c.conv_bias) {
    w.conv_bias = Buffer(c.act_dtype, {d});
    fill_normal(w.conv_bias, rng, 0.1f);
  }
  w.A_log = Buffer(c.act_dtype, {c.num_v_heads});
  w.dt_bias = Buffer(c.act_dtype, {c.num_v_heads, c.head_k_dim});
  std::uniform_real_distribution<float> a_dist(1.0f, 16.0f),
      log_dt(std::log(1e-3f), std::log(1e-1f));
  for (int h = 0; h < c.num_v_heads; ++h) {
    w.A_log.set(h, std::log(a_dist(rng)));
    for (int i = 0; i < c.head_k_dim; ++i) {
      const float dt = std::exp(log_dt(rng));
      w.dt_bias.set(int64_t{h} * c.head_k_dim + i, std::log(std::expm1(dt)));
    }
  }
  return w;
}

KdaTokenInputs random_inputs(const KdaConfig& c, int64_t tokens, std::mt19937_64& rng) {
  KdaTokenInputs in;
  in.mixed_qkv = Buffer(c.act_dtype, {tokens, c.conv_dim()});
  in.g = Buffer(c.act_dtype, {tokens, c.num_v_heads, c.head_k_dim});
  in.b = Buffer(c.act_dtype, {tokens, c.num_v_heads});
  fill_normal(in.mixed_qkv, rng, 1.0f);
  fill_normal(in.g, rng, 1.0f);
  fill_normal(in.b, rng, 1.0f);
  return in;
}

KdaTokenOutputs make_outputs(const KdaConfig& c, int64_t tokens) {
  KdaTokenOutputs out;
  out.conv_out = Buffer(c.act_dtype, {tokens, c.conv_dim()});
  out.core_out = Buffer(c.act_dtype, {tokens, c.num_v_heads, c.head_v_dim});
  return out;
}

}  // namespace specstate::test
