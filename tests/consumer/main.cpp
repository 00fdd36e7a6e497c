// Builds against the installed specstate, runs one verify + commit round on the CPU and checks
// that the committed state moved.
#include <specstate/specstate.h>

#include <cstdio>
#include <vector>

int main() {
  using namespace specstate;
  GdnConfig layer;
  layer.num_k_heads = 1;
  layer.num_v_heads = 2;
  layer.head_k_dim = 4;
  layer.head_v_dim = 4;
  layer.act_dtype = DType::kF32;
  layer.conv_state_dtype = DType::kF32;
  PoolOptions options;
  options.num_slots = 2;
  options.max_rows = 1;
  options.max_window = 2;
  StatePool pool(ModelConfig::gated_delta_net(1, layer), options);
  SlotHandle slot = pool.acquire();

  const int d = layer.conv_dim(), w = layer.conv_width, hv = layer.num_v_heads;
  std::vector<float> conv_w(d * w, 0.25f), a_log(hv, 0.5f), dt_bias(hv, 0.1f);
  std::vector<float> x(2 * d), a(2 * hv, 0.3f), b(2 * hv, 0.7f), core(2 * hv * layer.head_v_dim);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;

  GdnWeights weights{TensorView::contiguous(conv_w.data(), DType::kF32, {d, w}),
                     {},
                     TensorView::contiguous(a_log.data(), DType::kF32, {hv}),
                     TensorView::contiguous(dt_bias.data(), DType::kF32, {hv})};
  GdnInputs inputs{TensorView::contiguous(x.data(), DType::kF32, {2, d}),
                   TensorView::contiguous(a.data(), DType::kF32, {2, hv}),
                   TensorView::contiguous(b.data(), DType::kF32, {2, hv})};
  GdnOutputs outputs{{},
                     TensorView::contiguous(core.data(), DType::kF32, {2, hv, layer.head_v_dim})};
  pool.begin_verify(VerifyBatch{{slot}, 2, {}});
  pool.verify(0, weights, inputs, outputs);
  pool.commit(std::vector<int32_t>{2});

  const TensorView ssm = pool.ssm_state(0);
  const float* s = static_cast<const float*>(ssm.data) + pool.slot_index(slot) * hv * 16;
  double norm = 0;
  for (int i = 0; i < hv * 16; ++i) norm += double(s[i]) * s[i];
  std::printf("specstate %s consumer: committed state norm %.6g\n", version(), norm);
  return norm > 0 ? 0 : 1;
}
