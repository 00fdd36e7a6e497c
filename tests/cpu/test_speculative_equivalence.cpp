// Speculative equivalence (DESIGN.md section 7) of GDN layers, through the kind-generic driver
// (common/speculative_equivalence.h): after verify + commit rounds the committed state equals
// plain sequential decoding of the accepted tokens, and every verify output of an accepted token
// equals the decode output at that step. On the CPU both are bit-exact. Also: verify is
// pure, a = 0 and padding rows are untouched, and a tree's snapshot of node t equals a fresh run
// over the path to t (the ggml rollback idea, applied to trees).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "common/gdn_data.h"
#include "common/speculative_equivalence.h"

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
  std::vector<Case> all;
  for (Strategy strategy : {Strategy::kSnapshot, Strategy::kReplay}) {
    for (Case c : base) {
      c.strategy = strategy;
      all.push_back(c);
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cpu, SpeculativeEquivalence, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name) + "_" +
                                  strategy_name(info.param.strategy);
                         });

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
  pool.begin_verify(VerifyBatch{{h[1], SlotHandle::padding(), h[0]}, 4, {}});
  for (int l = 0; l < 2; ++l) pool.verify(l, w[l].view(), in.view(), first.view());
  EXPECT_EQ(committed_bytes(pool), before);
  for (int l = 0; l < 2; ++l) pool.verify(l, w[l].view(), in.view(), second.view());
  EXPECT_EQ(committed_bytes(pool), before);
  EXPECT_EQ(first.core_out.bytes(), second.core_out.bytes());
  EXPECT_GT(sum_squares(first.core_out.view()), 0.0);
  // Padding row 1's outputs were not written.
  for (int64_t i = 4 * g.num_v_heads * g.head_v_dim; i < 8 * g.num_v_heads * g.head_v_dim; ++i) {
    ASSERT_EQ(first.core_out.get(i), 0.0f) << "padding row output written at " << i;
  }
  // Keep everything: a = 0 for both live rows.
  pool.commit(std::vector<int32_t>{0, 0, 0});
  EXPECT_EQ(committed_bytes(pool), before);
}

// Strided caller views (rows of a wider buffer) give bit-identical results to contiguous ones.
TEST(StridedViews, RowStridedInputsAndOutputsMatchContiguous) {
  const uint64_t seed = 5;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const GdnConfig g = small_config();
  PoolOptions options;
  options.num_slots = 2;
  options.max_rows = 1;
  options.max_window = 3;
  const ModelConfig model = ModelConfig::gated_delta_net(1, g);
  StatePool p1(model, options), p2(model, options);
  SlotHandle h1 = p1.acquire(), h2 = p2.acquire();
  LayerWeights w = random_weights(g, rng);
  TokenInputs in = random_inputs(g, 3, rng);
  TokenOutputs out1 = make_outputs(g, 3);
  const int64_t d = g.conv_dim(), hv = g.num_v_heads, v = g.head_v_dim;
  // Wide buffers: each token row padded by 7 extra elements; a/b interleaved as [tokens, 2, HV].
  std::vector<float> wide_x(3 * (d + 7)), ab(3 * 2 * hv), wide_core(3 * (hv * v + 3));
  for (int t = 0; t < 3; ++t) {
    for (int64_t c = 0; c < d; ++c) wide_x[t * (d + 7) + c] = in.mixed_qkv.get(t * d + c);
    for (int64_t i = 0; i < hv; ++i) {
      ab[t * 2 * hv + i] = in.a.get(t * hv + i);
      ab[t * 2 * hv + hv + i] = in.b.get(t * hv + i);
    }
  }
  GdnInputs strided{TensorView::strided(wide_x.data(), DType::kF32, {3, d}, {d + 7, 1}),
                    TensorView::strided(ab.data(), DType::kF32, {3, hv}, {2 * hv, 1}),
                    TensorView::strided(ab.data() + hv, DType::kF32, {3, hv}, {2 * hv, 1})};
  GdnOutputs strided_out{
      {}, TensorView::strided(wide_core.data(), DType::kF32, {3, hv, v}, {hv * v + 3, v, 1})};
  p1.begin_verify(VerifyBatch{{h1}, 3, {}});
  p1.verify(0, w.view(), in.view(), out1.view());
  p1.commit(std::vector<int32_t>{2});
  p2.begin_verify(VerifyBatch{{h2}, 3, {}});
  p2.verify(0, w.view(), strided, strided_out);
  p2.commit(std::vector<int32_t>{2});
  EXPECT_EQ(committed_bytes(p1), committed_bytes(p2));
  for (int t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < hv * v; ++i) {
      ASSERT_EQ(out1.core_out.get(t * hv * v + i), wide_core[t * (hv * v + 3) + i]);
    }
  }
  EXPECT_GT(sum_squares(out1.core_out.view()), 0.0);
}

}  // namespace
}  // namespace specstate::test
