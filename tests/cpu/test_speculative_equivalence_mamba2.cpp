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
#include "common/strided_views.h"

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
  return for_both_strategies(base);
}

INSTANTIATE_TEST_SUITE_P(Cpu, SpeculativeEquivalenceMamba2, ::testing::ValuesIn(cases()),
                         name_and_strategy<Case>);

// A tree's snapshot of node t equals the final state of a fresh run over the path root..t.
TEST(TreeSnapshotsMamba2, EachNodeSnapshotEqualsAFreshRunOverItsPath) {
  const Mamba2Config m = mamba2_preset("m2_small_f32");
  run_tree_snapshot_check<Mamba2Kind>(m, 78, {m.num_heads, m.head_dim, m.d_state});
}

// Strided caller views (rows of wider buffers; z and dt interleaved) give bit-identical results
// to contiguous ones.
TEST(StridedViewsMamba2, RowStridedInputsAndOutputsMatchContiguous) {
  const Mamba2Config m = mamba2_preset("m2_small_f32");
  run_strided_views_check<Mamba2Kind>(
      m, 6, [&](const Mamba2TokenInputs& in, StridedLayout<Mamba2Kind>& s) {
        const int64_t d = m.conv_dim(), H = m.num_heads, P = m.head_dim;
        // One wide row per token as an engine's in_proj output: [z | xBC | dt | 5 spare].
        const int64_t row = H * P + d + H + 5;
        s.buffers = {std::vector<float>(3 * row), std::vector<float>(3 * (H * P + 3))};
        std::vector<float>&wide = s.buffers[0], &wide_y = s.buffers[1];
        for (int t = 0; t < 3; ++t) {
          for (int64_t i = 0; i < H * P; ++i) wide[t * row + i] = in.z.get(t * H * P + i);
          for (int64_t c = 0; c < d; ++c) wide[t * row + H * P + c] = in.xBC.get(t * d + c);
          for (int64_t h = 0; h < H; ++h) wide[t * row + H * P + d + h] = in.dt.get(t * H + h);
        }
        s.in = {TensorView::strided(wide.data() + H * P, DType::kF32, {3, d}, {row, 1}),
                TensorView::strided(wide.data() + H * P + d, DType::kF32, {3, H}, {row, 1}),
                TensorView::strided(wide.data(), DType::kF32, {3, H * P}, {row, 1})};
        s.out = {{}, TensorView::strided(wide_y.data(), DType::kF32, {3, H, P}, {H * P + 3, P, 1})};
      });
}

}  // namespace
}  // namespace specstate::test
