// Speculative equivalence (DESIGN.md section 7) of GDN layers, through the kind-generic driver
// (common/speculative_equivalence.h): after verify + commit rounds the committed state equals
// plain sequential decoding of the accepted tokens, and every verify output of an accepted token
// equals the decode output at that step. On the CPU both are bit-exact. Also: verify is
// pure, a = 0 and padding rows are untouched, and a tree's snapshot of node t equals a fresh run
// over the path to t (the ggml rollback idea, applied to trees). The other layer kinds run the same
// driver from one table of presets (SpeculativeEquivalenceKinds).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "common/gdn_data.h"
#include "common/pool_rounds.h"
#include "common/presets.h"
#include "common/speculative_equivalence.h"
#include "common/strided_views.h"

namespace specstate::test {
namespace {

struct Case {
  const char* name;
  DType act, conv_state, ssm_state;
  bool conv_bias;
  bool tree;
  bool shared_tree;  // one parents array [T] for all rows
  Strategy strategy = Strategy::kSnapshot;
};

std::ostream& operator<<(std::ostream& out, const Case& c) {
  return out << c.name << "_" << strategy_name(c.strategy);
}

class SpeculativeEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(SpeculativeEquivalence, CommittedStateEqualsSequentialDecode) {
  const Case c = GetParam();
  const uint64_t seed = 0x5eed0000u + static_cast<uint64_t>(c.act) * 7 + c.tree * 3 + c.conv_bias;
  run_speculative_equivalence<GdnKind>(small_config(c.act, c.conv_state, c.ssm_state, c.conv_bias),
                                       {c.tree, c.shared_tree, c.strategy}, seed);
}

std::vector<Case> cases() {
  const std::vector<Case> base = {
      Case{"f32_chain", DType::kF32, DType::kF32, DType::kF32, true, false, false},
      Case{"f32_tree_per_row", DType::kF32, DType::kF32, DType::kF32, true, true, false},
      Case{"f32_tree_shared", DType::kF32, DType::kF32, DType::kF32, false, true, true},
      Case{"bf16_act_f32_ssm_chain", DType::kBF16, DType::kBF16, DType::kF32, false, false, false},
      Case{"bf16_act_f32_ssm_tree", DType::kBF16, DType::kBF16, DType::kF32, false, true, false},
      Case{"all_bf16_chain", DType::kBF16, DType::kBF16, DType::kBF16, true, false, false},
      Case{"f32_act_bf16_conv_tree", DType::kF32, DType::kBF16, DType::kF32, true, true, false}};
  return for_both_strategies(base);
}

INSTANTIATE_TEST_SUITE_P(Cpu, SpeculativeEquivalence, ::testing::ValuesIn(cases()),
                         name_and_strategy<Case>);

// The other layer kinds, one table: each case names a preset (its kind follows) and runs the
// same driver. Padding rows' outputs are not written (Mamba2 and KDA check that too).
struct KindCase {
  const char* name;
  const char* preset;  // mamba2_preset or kda_preset
  bool tree;
  bool shared_tree;  // one parents array [T] for all rows
  Strategy strategy = Strategy::kSnapshot;
};

std::vector<KindCase> kind_cases() {
  const std::vector<KindCase> base = {
      {"f32_chain", "m2_small_f32", false, false},
      {"f32_tree_per_row", "m2_small_f32", true, false},
      {"f32_tree_shared", "m2_small_f32", true, true},
      {"bf16_act_f32_ssm_chain", "m2_small_bf16", false, false},
      {"bf16_act_f32_ssm_tree", "m2_small_bf16", true, false},
      {"all_bf16_chain", "m2_all_bf16", false, false},
      {"all_bf16_tree", "m2_all_bf16", true, false},
      {"f32_act_bf16_conv_dt_clamp_tree", "m2_bf16_conv", true, false},
      {"one_group_w3_chain", "m2_g1", false, false},
      {"f32_chain", "kda_small_f32", false, false},
      {"f32_tree_per_row", "kda_small_f32", true, false},
      {"f32_tree_shared", "kda_small_f32", true, true},
      {"bf16_act_f32_ssm_chain", "kda_small_bf16", false, false},
      {"bf16_act_f32_ssm_tree", "kda_small_bf16", true, false},
      {"lower_bound_all_bf16_chain", "kda_lb_all_bf16", false, false},
      {"lower_bound_all_bf16_tree", "kda_lb_all_bf16", true, false},
      {"lower_bound_f32_tree", "kda_lb_f32", true, true},
  };
  return for_both_strategies(base);
}

// "<kind>_<name>_<strategy>", the kind as its presets spell it (m2, kda).
std::string kind_case_name(const ::testing::TestParamInfo<KindCase>& info) {
  const LayerKind kind = preset_kind(info.param.preset);
  return std::string(kind == LayerKind::kMamba2 ? "m2_"
                     : kind == LayerKind::kKda  ? "kda_"
                                                : "gdn_") +
         name_and_strategy(info);
}

class SpeculativeEquivalenceKinds : public ::testing::TestWithParam<KindCase> {};

TEST_P(SpeculativeEquivalenceKinds, CommittedStateEqualsSequentialDecode) {
  const KindCase c = GetParam();
  const uint64_t seed =
      (is_mamba2_preset(c.preset) ? 0x3a3ba2u : 0x4bda5u) + std::hash<std::string>{}(c.name) % 1000;
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    run_speculative_equivalence<decltype(kind)>(layer, {c.tree, c.shared_tree, c.strategy}, seed);
  });
}

INSTANTIATE_TEST_SUITE_P(Cpu, SpeculativeEquivalenceKinds, ::testing::ValuesIn(kind_cases()),
                         kind_case_name);

// A tree's snapshot of node t equals the final state of a fresh run over the path root..t.
TEST(TreeSnapshots, EachNodeSnapshotEqualsAFreshRunOverItsPath) {
  const GdnConfig g = small_config();
  run_tree_snapshot_check<GdnKind>(g, 77, {g.num_v_heads, g.head_v_dim, g.head_k_dim});
}

// Verify is pure whatever the inputs: huge, tiny, NaN-free extreme values leave the committed
// state bit-identical, and re-verifying the same window gives bit-identical outputs.
TEST(VerifyPurity, CommittedStateUnchangedAndVerifyRepeatable) {
  const uint64_t seed = 99;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const GdnConfig g = small_config(DType::kBF16, DType::kBF16, DType::kF32, false);
  PoolOptions options;
  options.num_slots = 3;
  options.max_rows = 3;
  options.max_window = 4;
  StatePool pool(ModelConfig::gated_delta_net(2, g), options);
  std::vector<SlotHandle> h = {pool.acquire(), pool.acquire()};
  std::vector<LayerWeights> w = {random_weights(g, rng), random_weights(g, rng)};
  for (int l = 0; l < 2; ++l) {
    for (SlotHandle s : h) {
      TokenInputs in = random_inputs(g, 4, rng);
      TokenOutputs out = make_outputs(g, 4);
      pool.prefill(l, s, w[l].view(), in.view(), out.view());
    }
  }
  const std::vector<uint8_t> before = committed_bytes(pool);
  TokenInputs in = random_inputs(g, 12, rng);
  for (int64_t i = 0; i < in.mixed_qkv.numel(); i += 5) in.mixed_qkv.set(i, 1e4f);
  for (int64_t i = 0; i < in.a.numel(); i += 3) in.a.set(i, 40.0f);  // softplus linear branch
  TokenOutputs first = make_outputs(g, 12), second = make_outputs(g, 12);
  host_fill(first.core_out.view(), kPaddingMarker);
  host_fill(second.core_out.view(), kPaddingMarker);
  pool.begin_verify(VerifyBatch{{h[1], SlotHandle::padding(), h[0]}, 4, {}});
  for (int l = 0; l < 2; ++l) pool.verify(l, w[l].view(), in.view(), first.view());
  EXPECT_EQ(committed_bytes(pool), before);
  for (int l = 0; l < 2; ++l) pool.verify(l, w[l].view(), in.view(), second.view());
  EXPECT_EQ(committed_bytes(pool), before);
  EXPECT_EQ(first.core_out.bytes(), second.core_out.bytes());
  EXPECT_GT(sum_squares(first.core_out.view()), 0.0);
  // Padding row 1's outputs were not written.
  for (int64_t i = 4 * g.num_v_heads * g.head_v_dim; i < 8 * g.num_v_heads * g.head_v_dim; ++i) {
    ASSERT_EQ(first.core_out.get(i), kPaddingMarker) << "padding row output written at " << i;
  }
  // Keep everything: a = 0 for both live rows.
  pool.commit(std::vector<int32_t>{0, 0, 0});
  EXPECT_EQ(committed_bytes(pool), before);
}

// Strided caller views (rows of a wider buffer) give bit-identical results to contiguous ones.
TEST(StridedViews, RowStridedInputsAndOutputsMatchContiguous) {
  const GdnConfig g = small_config();
  run_strided_views_check<GdnKind>(g, 5, [&](const TokenInputs& in, StridedLayout<GdnKind>& s) {
    const int64_t d = g.conv_dim(), hv = g.num_v_heads, v = g.head_v_dim;
    // Wide buffers: each token row padded by 7 extra elements; a/b interleaved as [tokens, 2, HV].
    s.buffers = {std::vector<float>(3 * (d + 7)), std::vector<float>(3 * 2 * hv),
                 std::vector<float>(3 * (hv * v + 3))};
    std::vector<float>&wide_x = s.buffers[0], &ab = s.buffers[1], &wide_core = s.buffers[2];
    for (int t = 0; t < 3; ++t) {
      for (int64_t c = 0; c < d; ++c) wide_x[t * (d + 7) + c] = in.mixed_qkv.get(t * d + c);
      for (int64_t i = 0; i < hv; ++i) {
        ab[t * 2 * hv + i] = in.a.get(t * hv + i);
        ab[t * 2 * hv + hv + i] = in.b.get(t * hv + i);
      }
    }
    s.in = {TensorView::strided(wide_x.data(), DType::kF32, {3, d}, {d + 7, 1}),
            TensorView::strided(ab.data(), DType::kF32, {3, hv}, {2 * hv, 1}),
            TensorView::strided(ab.data() + hv, DType::kF32, {3, hv}, {2 * hv, 1})};
    s.out = {{},
             TensorView::strided(wide_core.data(), DType::kF32, {3, hv, v}, {hv * v + 3, v, 1})};
  });
}

}  // namespace
}  // namespace specstate::test
