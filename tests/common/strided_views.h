// Strided caller views, one driver for every layer kind (common/layer_kinds.h): a window verified
// through views into rows of wider caller buffers commits the same state and writes the same main
// output as the same window through contiguous views.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/layer_kinds.h"
#include "common/speculative_equivalence.h"

namespace specstate::test {

// The wide caller buffers a test lays its tokens out in, and the strided views into them.
template <typename Kind>
struct StridedLayout {
  std::vector<std::vector<float>> buffers;
  typename Kind::Inputs in;
  typename Kind::Outputs out;  // the main output (Kind::tensors' first) strided, the rest empty
};

// Verifies 3 tokens of one layer of `g` in two pools, contiguous and through the views `lay_out`
// builds from the inputs, commits 2 in both, and checks the committed states and main outputs
// are bit-identical (and not all zero).
template <typename Kind>
void run_strided_views_check(
    const typename Kind::Config& g, uint64_t seed,
    const std::function<void(const typename Kind::HostInputs&, StridedLayout<Kind>&)>& lay_out) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  PoolOptions options;
  options.num_slots = 2;
  options.max_rows = 1;
  options.max_window = 3;
  const ModelConfig model = Kind::model(1, g);
  StatePool p1(model, options), p2(model, options);
  SlotHandle h1 = p1.acquire(), h2 = p2.acquire();
  const typename Kind::HostWeights w = random_weights(g, rng);
  const typename Kind::HostInputs in = random_inputs(g, 3, rng);
  typename Kind::HostOutputs out1 = make_outputs(g, 3);
  StridedLayout<Kind> strided;
  lay_out(in, strided);
  p1.begin_verify(VerifyBatch{{h1}, 3, {}});
  p1.verify(0, w.view(), in.view(), out1.view());
  p1.commit(std::vector<int32_t>{2});
  p2.begin_verify(VerifyBatch{{h2}, 3, {}});
  p2.verify(0, w.view(), strided.in, strided.out);
  p2.commit(std::vector<int32_t>{2});
  EXPECT_EQ(committed_bytes(p1), committed_bytes(p2));
  const TensorView want = Kind::tensors(out1.view())[0].second;
  const TensorView got = Kind::tensors(strided.out)[0].second;
  const int64_t width = want.numel() / 3;
  for (int t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < width; ++i) {
      ASSERT_EQ(host_element(want, t * width + i),
                static_cast<const float*>(got.data)[t * got.stride[0] + i]);
    }
  }
  EXPECT_GT(sum_squares(want), 0.0);
}

}  // namespace specstate::test
