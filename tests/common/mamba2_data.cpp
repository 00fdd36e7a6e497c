#include "common/mamba2_data.h"

#include <cmath>

namespace specstate::test {

namespace {
TensorView optional_view(const Buffer& b) { return b.numel() ? b.view() : TensorView{}; }
TensorView optional_rows(const Buffer& b, int64_t begin, int64_t count) {
  return b.numel() ? b.rows(begin, count) : TensorView{};
}
void fill_normal(Buffer& buffer, std::mt19937_64& rng, float scale, float mean = 0.0f) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < buffer.numel(); ++i) buffer.set(i, mean + scale * normal(rng));
}
}  // namespace

Mamba2Weights Mamba2LayerWeights::view() const {
  return Mamba2Weights{conv_weight.view(), optional_view(conv_bias), A_log.view(), dt_bias.view(),
                       optional_view(D)};
}

Mamba2Inputs Mamba2TokenInputs::view() const {
  return Mamba2Inputs{xBC.view(), dt.view(), optional_view(z)};
}
Mamba2Inputs Mamba2TokenInputs::rows(int64_t begin, int64_t count) const {
  return Mamba2Inputs{xBC.rows(begin, count), dt.rows(begin, count),
                      optional_rows(z, begin, count)};
}

Mamba2Outputs Mamba2TokenOutputs::view() const { return Mamba2Outputs{conv_out.view(), y.view()}; }
Mamba2Outputs Mamba2TokenOutputs::rows(int64_t begin, int64_t count) const {
  return Mamba2Outputs{conv_out.rows(begin, count), y.rows(begin, count)};
}

Mamba2Config small_mamba2_config(DType act, DType conv_state, DType ssm_state, bool conv_bias,
                                 bool d_skip, bool gate) {
  Mamba2Config c;
  c.num_heads = 4;
  c.head_dim = 8;
  c.d_state = 8;
  c.n_groups = 2;
  c.conv_width = 4;
  c.conv_bias = conv_bias;
  c.d_skip = d_skip;
  c.gate = gate;
  c.act_dtype = act;
  c.conv_state_dtype = conv_state;
  c.ssm_state_dtype = ssm_state;
  return c;
}

Mamba2LayerWeights random_weights(const Mamba2Config& c, std::mt19937_64& rng) {
  Mamba2LayerWeights w;
  const int64_t d = c.conv_dim();
  w.conv_weight = Buffer(c.act_dtype, {d, c.conv_width});
  fill_normal(w.conv_weight, rng, 0.5f);
  if (c.conv_bias) {
    w.conv_bias = Buffer(c.act_dtype, {d});
    fill_normal(w.conv_bias, rng, 0.1f);
  }
  w.A_log = Buffer(c.act_dtype, {c.num_heads});
  w.dt_bias = Buffer(c.act_dtype, {c.num_heads});
  std::uniform_real_distribution<float> a_dist(1.0f, 16.0f),
      log_dt(std::log(1e-3f), std::log(1e-1f));
  for (int h = 0; h < c.num_heads; ++h) {
    w.A_log.set(h, std::log(a_dist(rng)));
    const float dt = std::exp(log_dt(rng));
    w.dt_bias.set(h, std::log(std::expm1(dt)));
  }
  if (c.d_skip) {
    w.D = Buffer(c.act_dtype, {c.num_heads});
    fill_normal(w.D, rng, 0.1f, 1.0f);
  }
  return w;
}

Mamba2TokenInputs random_inputs(const Mamba2Config& c, int64_t tokens, std::mt19937_64& rng) {
  Mamba2TokenInputs in;
  in.xBC = Buffer(c.act_dtype, {tokens, c.conv_dim()});
  in.dt = Buffer(c.act_dtype, {tokens, c.num_heads});
  fill_normal(in.xBC, rng, 1.0f);
  fill_normal(in.dt, rng, 1.0f);
  if (c.gate) {
    in.z = Buffer(c.act_dtype, {tokens, int64_t{c.num_heads} * c.head_dim});
    fill_normal(in.z, rng, 1.0f);
  }
  return in;
}

Mamba2TokenOutputs make_outputs(const Mamba2Config& c, int64_t tokens) {
  Mamba2TokenOutputs out;
  out.conv_out = Buffer(c.act_dtype, {tokens, c.conv_dim()});
  out.y = Buffer(c.act_dtype, {tokens, c.num_heads, c.head_dim});
  return out;
}

}  // namespace specstate::test
