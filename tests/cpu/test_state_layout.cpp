// State layouts (PoolOptions::conv_layout / ssm_layout, DESIGN.md section 4) on the CPU oracle:
// vLLM's element order (conv windows [W-1][conv_dim], the delta-rule kinds' state [HV][K][V]) is
// where each element lies and nothing else. Views keep their logical shape with the layout's
// strides; the same calls give the same logical state; a safetensors file moves a state between
// layouts; a raw export does not (its header names both layouts); bad layout options and caller
// views in another order are rejected naming the option, with nothing changed. The rounds under
// every strategy, chains and trees, are StrategyEquivalence's vllm_* cases and CallerOwned's
// *_vllm cases.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/caller_owned.h"
#include "common/expect.h"
#include "common/layer_kinds.h"
#include "common/pool_rounds.h"
#include "common/presets.h"

namespace specstate::test {
namespace {

// A host view's elements in logical index order, as bytes.
std::vector<uint8_t> logical(const TensorView& v) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  return logical_bytes(std::vector<uint8_t>(p, p + v.numel() * dtype_size(v.dtype)), v);
}

bool nonzero(const std::vector<uint8_t>& bytes) {
  for (uint8_t b : bytes) {
    if (b != 0) return true;
  }
  return false;
}

// Two pools of one model, the default order and vLLM's, through the same prefills and rounds.
template <typename Kind>
struct LayoutPair {
  PoolRounds<Kind> m;
  StatePool plain, vllm;
  std::vector<SlotHandle> hp, hv;
  LayoutPair(const typename Kind::Config& g, Strategy strategy, bool tree)
      : m(g, 2, 0x1A7E),
        plain(m.model(), m.options(strategy)),
        vllm(m.model(), vllm_layout_options(m.options(strategy), m.model().kind)) {
    for (int i = 0; i < 3; ++i) {
      hp.push_back(plain.acquire());
      hv.push_back(vllm.acquire());
      const auto in = m.inputs(2 + i);
      m.prefill(plain, hp.back(), in);
      m.prefill(vllm, hv.back(), in);
    }
    for (int round = 0; round < 3; ++round) {
      const auto in = m.inputs(3 * kRoundT);
      const std::vector<int> steps = {1 + round % kRoundT, 2, kRoundT};
      const auto a = m.round(plain, round_batch(tree, hp), in, round_accept(tree, steps));
      const auto b = m.round(vllm, round_batch(tree, hv), in, round_accept(tree, steps));
      const auto want = PoolRounds<Kind>::output_bytes(a, 0, 3 * kRoundT);
      EXPECT_EQ(want, PoolRounds<Kind>::output_bytes(b, 0, 3 * kRoundT))
          << "round " << round << ": the outputs depend on the layout";
      EXPECT_TRUE(nonzero(want)) << "round " << round << ": the outputs are all zeros";
    }
  }
  void expect_same_logical_state(const std::string& when) {
    for (int l = 0; l < 2; ++l) {
      const auto conv = logical(plain.conv_state(l));
      const auto ssm = logical(plain.ssm_state(l));
      EXPECT_EQ(conv, logical(vllm.conv_state(l))) << when << ": layer " << l << " conv state";
      EXPECT_EQ(ssm, logical(vllm.ssm_state(l))) << when << ": layer " << l << " SSM state";
      EXPECT_TRUE(nonzero(ssm)) << when << ": the state is all zeros";
      EXPECT_TRUE(nonzero(conv)) << when << ": the conv state is all zeros";
    }
  }
};

TEST(StateLayout, ViewsCarryTheLayoutsStrides) {
  const GdnConfig g = gdn_preset("small_f32");
  const ModelConfig model = ModelConfig::gated_delta_net(1, g);
  PoolOptions o;
  o.num_slots = 3;
  o.max_window = 2;
  o.conv_layout = ConvLayout::kChannelsLast;
  o.ssm_layout = SsmLayout::kKV;
  StatePool pool(model, o);
  const int64_t C = g.conv_dim(), H = g.conv_width - 1;
  const int64_t HV = g.num_v_heads, V = g.head_v_dim, K = g.head_k_dim;
  const TensorView conv = pool.conv_state(0);
  EXPECT_EQ(conv.shape[1], C);
  EXPECT_EQ(conv.shape[2], H);
  EXPECT_EQ(conv.stride[0], C * H);
  EXPECT_EQ(conv.stride[1], 1);
  EXPECT_EQ(conv.stride[2], C);
  const TensorView ssm = pool.ssm_state(0);
  EXPECT_EQ(ssm.shape[1], HV);
  EXPECT_EQ(ssm.shape[2], V);
  EXPECT_EQ(ssm.shape[3], K);
  EXPECT_EQ(ssm.stride[1], K * V);
  EXPECT_EQ(ssm.stride[2], 1);
  EXPECT_EQ(ssm.stride[3], V);
  const SlotHandle h = pool.acquire();
  const TensorView one = pool.ssm_state(0, h);
  EXPECT_EQ(one.stride[1], 1);
  EXPECT_EQ(one.stride[2], V);
  const TensorView snap = pool.workspace(Workspace::kSnapshotConv, 0);
  EXPECT_EQ(snap.stride[2], 1);
  EXPECT_EQ(snap.stride[3], C);
  EXPECT_STREQ(conv_layout_name(ConvLayout::kChannelsLast), "channels_last");
  EXPECT_STREQ(ssm_layout_name(SsmLayout::kKV), "kv");
}

struct LayoutCase {
  const char* name;
  const char* preset;
  Strategy strategy;
  bool tree;
};
void PrintTo(const LayoutCase& c, std::ostream* out) { *out << c.name; }

class StateLayoutRounds : public ::testing::TestWithParam<LayoutCase> {};

// The same calls on a pool of each order: the same outputs, the same logical state; a
// safetensors file of either pool imports into the other.
TEST_P(StateLayoutRounds, VllmOrderHoldsTheSameStateAndFilesMoveBetweenOrders) {
  const LayoutCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    LayoutPair<Kind> p(g, c.strategy, c.tree);
    p.expect_same_logical_state("after the rounds");
    const std::string path = ::testing::TempDir() + "specstate_layout_" + c.name + ".safetensors";
    // vLLM order -> default order and back, into another request each.
    p.vllm.export_slot(p.hv[0], path);
    p.plain.import_slot(p.hp[1], path);
    p.plain.export_slot(p.hp[0], path);
    p.vllm.import_slot(p.hv[1], path);
    std::remove(path.c_str());
    p.expect_same_logical_state("after the file hand-offs");
    EXPECT_EQ(exported(p.plain, p.hp[0]), exported(p.plain, p.hp[1]));
  });
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, StateLayoutRounds,
    ::testing::Values(LayoutCase{"gdn_replay_tree", "small_bf16", Strategy::kReplay, true},
                      LayoutCase{"gdn_snapshot_chain", "small_f32", Strategy::kSnapshot, false},
                      LayoutCase{"mamba2_replay_chain", "m2_small_bf16", Strategy::kReplay, false},
                      LayoutCase{"kda_snapshot_tree", "kda_small_bf16", Strategy::kSnapshot, true},
                      LayoutCase{"kda_replay_chain", "kda_lb_f32", Strategy::kReplay, false}),
    [](const ::testing::TestParamInfo<LayoutCase>& info) { return std::string(info.param.name); });

TEST(StateLayoutBadInput, LayoutOptionsAreCheckedNamingTheOption) {
  const GdnConfig g = gdn_preset("small_f32");
  PoolOptions o;
  o.conv_layout = static_cast<ConvLayout>(7);
  expect_rejected([&] { StatePool pool(ModelConfig::gated_delta_net(1, g), o); },
                  Status::kInvalidArgument, {"options.conv_layout = 7", "channels_last"});
  o = PoolOptions{};
  o.ssm_layout = static_cast<SsmLayout>(-1);
  expect_rejected([&] { StatePool pool(ModelConfig::gated_delta_net(1, g), o); },
                  Status::kInvalidArgument, {"options.ssm_layout = -1", "kv"});
  o = PoolOptions{};
  o.ssm_layout = SsmLayout::kKV;
  expect_rejected([&] { StatePool pool(ModelConfig::mamba2(1, mamba2_preset("m2_small_f32")), o); },
                  Status::kInvalidArgument, {"options.ssm_layout = kv", "mamba2"});
  // The delta-rule kinds take it.
  StatePool kda(ModelConfig::kda(1, kda_preset("kda_small_f32")), o);
  EXPECT_EQ(kda.options().ssm_layout, SsmLayout::kKV);
}

TEST(StateLayoutBadInput, CallerViewsInAnotherOrderAreRejectedNamingTheLayout) {
  auto mem = host_memory();
  const GdnConfig g = gdn_preset("small_f32");
  const ModelConfig model = ModelConfig::gated_delta_net(2, g);
  PoolOptions o;
  o.num_slots = 3;
  o.max_rows = 2;
  o.max_window = 2;
  // Views of the default order handed to a pool that expects vLLM's.
  const CallerMemory plain = make_caller_memory(model, o, CallerLayout::kOneTensor, *mem, 4);
  const PoolOptions v = vllm_layout_options(o, model.kind);
  expect_rejected([&] { StatePool pool(model, v, plain.views); }, Status::kInvalidArgument,
                  {"committed.conv[0]", "stride 1", "conv_layout = channels_last"});
  // And the other way round: vLLM-order views for a default pool.
  const CallerMemory vllm = make_caller_memory(model, v, CallerLayout::kVllm, *mem, 5);
  CommittedStateViews views = plain.views;
  views.ssm = vllm.views.ssm;
  expect_rejected([&] { StatePool pool(model, o, views); }, Status::kInvalidArgument,
                  {"committed.ssm[0]", "ssm_layout = vk"});
  // vLLM's views adopted by a vLLM-order pool.
  StatePool pool(model, v, vllm.views);
  EXPECT_EQ(pool.ssm_state(1).stride[3], g.head_v_dim);
}

TEST(StateLayoutBadInput, RawExportsDoNotCrossLayoutsAndChangeNothing) {
  LayoutPair<GdnKind> p(gdn_preset("small_bf16"), Strategy::kReplay, false);
  const std::vector<uint8_t> image = export_image(p.vllm, p.hv[0]);
  const std::vector<uint8_t> before = exported(p.plain, p.hp[1]);
  std::vector<int32_t> words((image.size() + 3) / 4);
  std::memcpy(words.data(), image.data(), image.size());
  const TensorView src =
      TensorView::contiguous(words.data(), DType::kI32, {static_cast<int64_t>(words.size())});
  expect_rejected(
      [&] { p.plain.import_slot(p.hp[1], src); }, Status::kInvalidArgument,
      {"conv_layout = channels_last, ssm_layout = kv",
       "this pool has conv_layout = channels_first, ssm_layout = vk", "another state layout"});
  EXPECT_EQ(exported(p.plain, p.hp[1]), before) << "a rejected import wrote the slot";
  // The same image imports into a pool of its own order.
  p.vllm.import_slot(p.hv[2], src);
  EXPECT_EQ(exported(p.vllm, p.hv[2]), exported(p.vllm, p.hv[0]));
}

}  // namespace
}  // namespace specstate::test
