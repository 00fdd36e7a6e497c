#include "common/gdn_data.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace specstate::test {

Buffer::Buffer(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  numel_ = 1;
  for (int64_t extent : shape_) numel_ *= extent;
  bytes_.assign(static_cast<std::size_t>(numel_) * dtype_size(dtype_), 0);
}

TensorView Buffer::view() const {
  TensorView v;
  v.data = bytes_.data();
  v.dtype = dtype_;
  v.ndim = static_cast<int>(shape_.size());
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape_[i];
    v.stride[i] = stride;
    stride *= shape_[i];
  }
  return v;
}

TensorView Buffer::rows(int64_t begin, int64_t count) const {
  TensorView v = view();
  v.data = bytes_.data() + begin * v.stride[0] * static_cast<int64_t>(dtype_size(dtype_));
  v.shape[0] = count;
  return v;
}

float Buffer::get(int64_t i) const {
  switch (dtype_) {
    case DType::kBF16: {
      uint16_t raw;
      std::memcpy(&raw, bytes_.data() + 2 * i, 2);
      return float_from_bf16(raw);
    }
    case DType::kI32: {
      int32_t raw;
      std::memcpy(&raw, bytes_.data() + 4 * i, 4);
      return static_cast<float>(raw);
    }
    default: {
      float raw;
      std::memcpy(&raw, bytes_.data() + 4 * i, 4);
      return raw;
    }
  }
}

void Buffer::set(int64_t i, float value) {
  switch (dtype_) {
    case DType::kBF16: {
      const uint16_t raw = bf16_from_float(value);
      std::memcpy(bytes_.data() + 2 * i, &raw, 2);
      break;
    }
    case DType::kI32: {
      const int32_t raw = static_cast<int32_t>(value);
      std::memcpy(bytes_.data() + 4 * i, &raw, 4);
      break;
    }
    default:
      std::memcpy(bytes_.data() + 4 * i, &value, 4);
  }
}

GdnWeights LayerWeights::view() const {
  return GdnWeights{conv_weight.view(), conv_bias.numel() ? conv_bias.view() : TensorView{},
                    A_log.view(), dt_bias.view()};
}

GdnInputs TokenInputs::view() const { return GdnInputs{mixed_qkv.view(), a.view(), b.view()}; }
GdnInputs TokenInputs::rows(int64_t begin, int64_t count) const {
  return GdnInputs{mixed_qkv.rows(begin, count), a.rows(begin, count), b.rows(begin, count)};
}

GdnOutputs TokenOutputs::view() const { return GdnOutputs{conv_out.view(), core_out.view()}; }
GdnOutputs TokenOutputs::rows(int64_t begin, int64_t count) const {
  return GdnOutputs{conv_out.rows(begin, count), core_out.rows(begin, count)};
}

GdnConfig small_config(DType act, DType conv_state, DType ssm_state, bool conv_bias) {
  GdnConfig c;
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

GdnConfig tiny_config() {
  GdnConfig g;
  g.num_k_heads = 1;
  g.num_v_heads = 1;
  g.head_k_dim = 4;
  g.head_v_dim = 4;
  g.conv_width = 2;
  g.act_dtype = g.conv_state_dtype = DType::kF32;
  return g;
}

namespace {
void fill_normal(Buffer& buffer, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < buffer.numel(); ++i) buffer.set(i, scale * normal(rng));
}
}  // namespace

LayerWeights random_weights(const GdnConfig& c, std::mt19937_64& rng) {
  LayerWeights w;
  const int64_t d = c.conv_dim();
  w.conv_weight = Buffer(c.act_dtype, {d, c.conv_width});
  fill_normal(w.conv_weight, rng, 0.5f);
  if (c.conv_bias) {
    w.conv_bias = Buffer(c.act_dtype, {d});
    fill_normal(w.conv_bias, rng, 0.1f);
  }
  // A = exp(A_log) uniform in [1, 16]; dt_bias = softplus^-1(dt), dt log-uniform [1e-3, 1e-1].
  w.A_log = Buffer(c.act_dtype, {c.num_v_heads});
  w.dt_bias = Buffer(c.act_dtype, {c.num_v_heads});
  std::uniform_real_distribution<float> a_dist(1.0f, 16.0f),
      log_dt(std::log(1e-3f), std::log(1e-1f));
  for (int h = 0; h < c.num_v_heads; ++h) {
    w.A_log.set(h, std::log(a_dist(rng)));
    const float dt = std::exp(log_dt(rng));
    w.dt_bias.set(h, std::log(std::expm1(dt)));
  }
  return w;
}

TokenInputs random_inputs(const GdnConfig& c, int64_t tokens, std::mt19937_64& rng) {
  TokenInputs in;
  in.mixed_qkv = Buffer(c.act_dtype, {tokens, c.conv_dim()});
  in.a = Buffer(c.act_dtype, {tokens, c.num_v_heads});
  in.b = Buffer(c.act_dtype, {tokens, c.num_v_heads});
  fill_normal(in.mixed_qkv, rng, 1.0f);
  fill_normal(in.a, rng, 1.0f);
  fill_normal(in.b, rng, 1.0f);
  return in;
}

TokenOutputs make_outputs(const GdnConfig& c, int64_t tokens) {
  TokenOutputs out;
  out.conv_out = Buffer(c.act_dtype, {tokens, c.conv_dim()});
  out.core_out = Buffer(c.act_dtype, {tokens, c.num_v_heads, c.head_v_dim});
  return out;
}

namespace {
void append(std::vector<uint8_t>& out, const TensorView& v, int64_t begin, int64_t count) {
  if (v.device != Device::kCpu) throw std::runtime_error("test helper: host views only");
  const int64_t bytes_per = static_cast<int64_t>(dtype_size(v.dtype)) * v.stride[0];
  const auto* p = static_cast<const uint8_t*>(v.data) + begin * bytes_per;
  out.insert(out.end(), p, p + count * bytes_per);
}
}  // namespace

std::vector<uint8_t> committed_bytes(const StatePool& pool) {
  std::vector<uint8_t> out;
  for (int l = 0; l < pool.config().num_layers; ++l) {
    const TensorView conv = pool.conv_state(l), ssm = pool.ssm_state(l);
    append(out, conv, 0, conv.shape[0]);
    append(out, ssm, 0, ssm.shape[0]);
  }
  return out;
}

std::vector<uint8_t> slot_bytes(const StatePool& pool, int slot) {
  std::vector<uint8_t> out;
  for (int l = 0; l < pool.config().num_layers; ++l) {
    append(out, pool.conv_state(l), slot, 1);
    append(out, pool.ssm_state(l), slot, 1);
  }
  return out;
}

double sum_squares(const TensorView& v) {
  // Walks every element through the strides.
  double total = 0;
  std::vector<int64_t> index(static_cast<std::size_t>(v.ndim), 0);
  const int64_t n = v.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (int d = 0; d < v.ndim; ++d) offset += index[d] * v.stride[d];
    float value;
    if (v.dtype == DType::kBF16) {
      value = float_from_bf16(static_cast<const uint16_t*>(v.data)[offset]);
    } else {
      value = static_cast<const float*>(v.data)[offset];
    }
    total += double(value) * value;
    for (int d = v.ndim - 1; d >= 0; --d) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
  }
  return total;
}

std::vector<int32_t> random_tree(int T, std::mt19937_64& rng) {
  std::vector<int32_t> parents(static_cast<std::size_t>(T), -1);
  for (int t = 1; t < T; ++t) parents[t] = std::uniform_int_distribution<int>(0, t - 1)(rng);
  return parents;
}

}  // namespace specstate::test
