// Speculative equivalence of Mamba2 layers (DESIGN.md section 7), on the CPU oracle, both
// strategies: after verify + commit rounds the committed state equals plain sequential decoding
// of the accepted tokens, and every verify output of an accepted token equals the decode output
// at that step, bit for bit. Also: verify is pure, a = 0 and padding rows are untouched (their
// outputs are not written), and a tree's snapshot of node t equals a fresh run over its path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "common/mamba2_data.h"
#include "common/presets.h"
#include "common/speculative_equivalence.h"

namespace specstate::test {
namespace {

struct Case {
  const char* name;
  const char* preset;  // mamba2_preset
  bool tree;
  bool shared_tree;  // one parents array [T] for all rows
  Strategy strategy = Strategy::kSnapshot;
};

class SpeculativeEquivalenceMamba2 : public ::testing::TestWithParam<Case> {};

TEST_P(SpeculativeEquivalenceMamba2, CommittedStateEqualsSequentialDecode) {
  const Case c = GetParam();
  const uint64_t seed = 0x3a3ba2u + std::hash<std::string>{}(c.name) % 1000;
  run_speculative_equivalence<Mamba2Kind>(mamba2_preset(c.preset),
                                          {c.tree, c.shared_tree, c.strategy}, seed);
}

std::vector<Case> cases() {
  const std::vector<Case> base = {
      {"f32_chain", "m2_small_f32", false, false},
      {"f32_tree_per_row", "m2_small_f32", true, false},
      {"f32_tree_shared", "m2_small_f32", true, true},
      {"bf16_act_f32_ssm_chain", "m2_small_bf16", false, false},
      {"bf16_act_f32_ssm_tree", "m2_small_bf16", true, false},
      {"all_bf16_chain", "m2_all_bf16", false, false},
      {"all_bf16_tree", "m2_all_bf16", true, false},
      {"f32_act_bf16_conv_dt_clamp_tree", "m2_bf16_conv", true, false},
      {"one_group_w3_chain", "m2_g1", false, false},
  };
  std::vector<Case> all;
  for (Strategy strategy : {Strategy::kSnapshot, Strategy::kReplay}) {
    for (Case c : base) {
      c.strategy = strategy;
      all.push_back(c);
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cpu, SpeculativeEquivalenceMamba2, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name) + "_" +
                                  strategy_name(info.param.strategy);
                         });

// A tree's snapshot of node t equals the final state of a fresh run over the path root..t.
TEST(TreeSnapshotsMamba2, EachNodeSnapshotEqualsAFreshRunOverItsPath) {
  const Mamba2Config m = mamba2_preset("m2_small_f32");
  run_tree_snapshot_check<Mamba2Kind>(m, 78, {m.num_heads, m.head_dim, m.d_state});
}

// Strided caller views (rows of wider buffers; z and dt interleaved) give bit-identical results
// to contiguous ones.
TEST(StridedViewsMamba2, RowStridedInputsAndOutputsMatchContiguous) {
  const uint64_t seed = 6;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Mamba2Config m = mamba2_preset("m2_small_f32");
  PoolOptions options;
  options.num_slots = 2;
  options.max_rows = 1;
  options.max_window = 3;
  const ModelConfig model = ModelConfig::mamba2(1, m);
  StatePool p1(model, options), p2(model, options);
  SlotHandle h1 = p1.acquire(), h2 = p2.acquire();
  Mamba2LayerWeights w = random_weights(m, rng);
  Mamba2TokenInputs in = random_inputs(m, 3, rng);
  Mamba2TokenOutputs out1 = make_outputs(m, 3);
  const int64_t d = m.conv_dim(), H = m.num_heads, P = m.head_dim;
  // One wide row per token as an engine's in_proj output: [z | xBC | dt | 5 spare].
  const int64_t row = H * P + d + H + 5;
  std::vector<float> wide(3 * row), wide_y(3 * (H * P + 3));
  for (int t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < H * P; ++i) wide[t * row + i] = in.z.get(t * H * P + i);
    for (int64_t c = 0; c < d; ++c) wide[t * row + H * P + c] = in.xBC.get(t * d + c);
    for (int64_t h = 0; h < H; ++h) wide[t * row + H * P + d + h] = in.dt.get(t * H + h);
  }
  Mamba2Inputs strided{TensorView::strided(wide.data() + H * P, DType::kF32, {3, d}, {row, 1}),
                       TensorView::strided(wide.data() + H * P + d, DType::kF32, {3, H}, {row, 1}),
                       TensorView::strided(wide.data(), DType::kF32, {3, H * P}, {row, 1})};
  Mamba2Outputs strided_out{
      {}, TensorView::strided(wide_y.data(), DType::kF32, {3, H, P}, {H * P + 3, P, 1})};
  p1.begin_verify(VerifyBatch{{h1}, 3, {}});
  p1.verify(0, w.view(), in.view(), out1.view());
  p1.commit(std::vector<int32_t>{2});
  p2.begin_verify(VerifyBatch{{h2}, 3, {}});
  p2.verify(0, w.view(), strided, strided_out);
  p2.commit(std::vector<int32_t>{2});
  EXPECT_EQ(committed_bytes(p1), committed_bytes(p2));
  for (int t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < H * P; ++i) {
      ASSERT_EQ(out1.y.get(t * H * P + i), wide_y[t * (H * P + 3) + i]);
    }
  }
  EXPECT_GT(sum_squares(out1.y.view()), 0.0);
}

}  // namespace
}  // namespace specstate::test
