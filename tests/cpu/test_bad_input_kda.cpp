// Bad input of KDA layers: every rejected call throws specstate::Error whose message names the
// argument (weights.*, inputs.*, outputs.*, the config field) and the offending value, and changes
// nothing (committed state bit-identical, the round still open). A call with another kind's
// argument types is rejected naming the pool's kind; a = 0 and padding rows stay untouched under
// both strategies; a KDA pool on the CUDA backend is refused at creation, naming the kind.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>

#include "common/bad_input.h"
#include "common/gdn_data.h"
#include "common/kda_data.h"
#include "common/presets.h"

namespace specstate::test {
namespace {

class BadInputKda : public BadInputPool<KdaKind, ::testing::TestWithParam<Strategy>> {
 protected:
  void SetUp() override {
    seed_ = 8642;
    make_pool(kda_preset("kda_small_f32"), GetParam());  // f32, conv bias, H=2 HV=4 K=V=8
  }
};

// Each argument of a layer call, made wrong in turn (shape, dtype, device, missing), is named
// with its value by the rejection; prefill and decode validate the same way.
TEST_P(BadInputKda, EachArgumentIsNamed) {
  const int64_t tokens = 3 * kT;  // 9; conv_dim = 2 * 2 * 8 + 4 * 8 = 64
  const int64_t d = config_.conv_dim(), HV = config_.num_v_heads, K = config_.head_k_dim,
                V = config_.head_v_dim;
  Buffer wrong_rows(DType::kF32, {tokens + 1, d});
  Buffer g_2d(DType::kF32, {tokens, HV});  // GDN's gate shape: KDA's is [tokens, HV, K]
  Buffer g_short_k(DType::kF32, {tokens, HV, K - 1});
  Buffer g_bf16(DType::kBF16, {tokens, HV, K});
  Buffer b_wide(DType::kF32, {tokens, HV + 1});
  Buffer short_weight(DType::kF32, {d, config_.conv_width - 1});
  Buffer short_head(DType::kF32, {HV - 1});
  Buffer dt_bias_1d(DType::kF32, {HV});  // GDN's dt_bias: KDA's is [HV, K]
  Buffer dt_bias_kv(DType::kF32, {HV, K + 1});
  Buffer bf16_core(DType::kBF16, {tokens, HV, V});
  Buffer core_v(DType::kF32, {tokens, HV, V + 1});
  const KdaTokenInputs good = in_[0];
  struct Mutation {
    std::vector<std::string> needles;
    std::function<void(KdaWeights&, KdaInputs&, KdaOutputs&)> apply;
  };
  const std::vector<Mutation> mutations = {
      {{"weights.conv_weight", "f32[64, 3]"},
       [&](auto& w, auto&, auto&) { w.conv_weight = short_weight.view(); }},
      {{"weights.conv_bias"}, [&](auto& w, auto&, auto&) { w.conv_bias = TensorView{}; }},
      {{"weights.A_log", "[3]"}, [&](auto& w, auto&, auto&) { w.A_log = short_head.view(); }},
      {{"weights.dt_bias", "[4, 8]"},
       [&](auto& w, auto&, auto&) { w.dt_bias = dt_bias_1d.view(); }},
      {{"weights.dt_bias", "[4, 9]"},
       [&](auto& w, auto&, auto&) { w.dt_bias = dt_bias_kv.view(); }},
      {{"inputs.mixed_qkv", "f32[10, 64]"},
       [&](auto&, auto& in, auto&) { in.mixed_qkv = wrong_rows.view(); }},
      {{"inputs.g", "[9, 4, 8]"}, [&](auto&, auto& in, auto&) { in.g = g_2d.view(); }},
      {{"inputs.g", "[9, 4, 7]"}, [&](auto&, auto& in, auto&) { in.g = g_short_k.view(); }},
      {{"inputs.g", "bf16"}, [&](auto&, auto& in, auto&) { in.g = g_bf16.view(); }},
      {{"inputs.g", "cuda"},
       [&](auto&, auto& in, auto&) {
         in.g = good.g.view();
         in.g.device = Device::kCuda;
       }},
      {{"inputs.g"}, [&](auto&, auto& in, auto&) { in.g = TensorView{}; }},
      {{"inputs.b", "[9, 5]"}, [&](auto&, auto& in, auto&) { in.b = b_wide.view(); }},
      {{"outputs.conv_out", "f32[10, 64]"},
       [&](auto&, auto&, auto& out) { out.conv_out = wrong_rows.view(); }},
      {{"outputs.core_out", "bf16"},
       [&](auto&, auto&, auto& out) { out.core_out = bf16_core.view(); }},
      {{"outputs.core_out", "[9, 4, 9]"},
       [&](auto&, auto&, auto& out) { out.core_out = core_v.view(); }},
      {{"outputs.core_out"}, [&](auto&, auto&, auto& out) { out.core_out = TensorView{}; }},
  };
  begin_round();
  for (const Mutation& mut : mutations) {
    SCOPED_TRACE(mut.needles[0]);
    KdaWeights w = w_[0].view();
    KdaInputs in = in_[0].view();
    KdaOutputs out = out_[0].view();
    mut.apply(w, in, out);
    std::vector<std::string> needles = {"StatePool::verify"};
    needles.insert(needles.end(), mut.needles.begin(), mut.needles.end());
    SCOPED_TRACE("seed " + std::to_string(seed_));
    const std::vector<uint8_t> before = committed_bytes(*pool_);
    test::expect_rejected([&] { pool_->verify(0, w, in, out); }, Status::kInvalidArgument, needles);
    EXPECT_EQ(committed_bytes(*pool_), before) << "a rejected call changed the committed state";
  }
  // The round is still open: a valid verify of every layer, then a commit, works.
  for (int l = 0; l < kLayers; ++l) pool_->verify(l, w_[l].view(), in_[l].view(), out_[l].view());
  EXPECT_GT(sum_squares(out_[0].core_out.view()), 0.0);
  const std::vector<uint8_t> before = committed_bytes(*pool_);
  pool_->commit(std::vector<int32_t>{2, 0, 3});
  EXPECT_NE(committed_bytes(*pool_), before);
  // Decode and prefill name the same arguments.
  std::mt19937_64 rng(seed_ + 1);
  KdaTokenInputs one = random_inputs(config_, 1, rng);
  KdaTokenOutputs one_out = make_outputs(config_, 1);
  KdaWeights no_dt = w_[0].view();
  no_dt.dt_bias = TensorView{};
  expect_rejected([&] { pool_->decode(0, {a_}, no_dt, one.view(), one_out.view()); },
                  Status::kInvalidArgument, {"StatePool::decode", "weights.dt_bias"});
  KdaInputs no_g = one.view();
  no_g.g = TensorView{};
  expect_rejected([&] { pool_->prefill(0, a_, w_[0].view(), no_g, one_out.view()); },
                  Status::kInvalidArgument, {"StatePool::prefill", "inputs.g"});
}

// A conv bias the config does not have is rejected; without one the layer runs.
TEST_P(BadInputKda, AConvBiasTheConfigDoesNotHaveIsRejected) {
  KdaConfig off = config_;
  off.conv_bias = false;
  PoolOptions options;
  options.strategy = GetParam();
  StatePool pool(ModelConfig::kda(1, off), options);
  const SlotHandle h = pool.acquire();
  std::mt19937_64 rng(seed_);
  const KdaLayerWeights w = random_weights(off, rng);
  const KdaTokenInputs in = random_inputs(off, 2, rng);
  KdaTokenOutputs out = make_outputs(off, 2);
  KdaWeights wb = w.view();
  wb.conv_bias = w_[0].conv_bias.view();
  expect_rejected([&] { pool.prefill(0, h, wb, in.view(), out.view()); }, Status::kInvalidArgument,
                  {"weights.conv_bias", "conv_bias = false"});
  pool.prefill(0, h, w.view(), in.view(), out.view());
  EXPECT_GT(sum_squares(out.core_out.view()), 0.0);
}

// GDN arguments on a KDA pool (the same shapes but `a` for `g`), and KDA arguments on a GDN pool,
// are rejected naming both kinds.
TEST_P(BadInputKda, TheOtherKindsArgumentsAreRejected) {
  std::mt19937_64 rng(seed_);
  const GdnConfig g = gdn_preset("small_f32");
  const LayerWeights gw = random_weights(g, rng);
  const TokenInputs gin = random_inputs(g, 3 * kT, rng);
  const TokenOutputs gout = make_outputs(g, 3 * kT);
  expect_rejected([&] { pool_->prefill(0, a_, gw.view(), gin.rows(0, 2), gout.rows(0, 2)); },
                  Status::kInvalidArgument,
                  {"StatePool::prefill", "GdnWeights", "kind = kda", "gated_delta_net"});
  expect_rejected([&] { pool_->decode(0, {a_}, gw.view(), gin.rows(0, 1), gout.rows(0, 1)); },
                  Status::kInvalidArgument, {"StatePool::decode", "kind = kda"});
  begin_round();
  expect_rejected([&] { pool_->verify(0, gw.view(), gin.view(), gout.view()); },
                  Status::kInvalidArgument, {"StatePool::verify", "kind = kda"});

  PoolOptions options;
  options.strategy = GetParam();
  StatePool gdn(ModelConfig::gated_delta_net(1, g), options);
  const SlotHandle h = gdn.acquire();
  test::expect_rejected(
      [&] { gdn.prefill(0, h, w_[0].view(), in_[0].rows(0, 2), out_[0].rows(0, 2)); },
      Status::kInvalidArgument, {"KdaWeights", "kind = gated_delta_net"});
}

// a = 0 rows and padding rows: committed state bit-identical after commit, padding outputs not
// written; outputs aliasing the pool are rejected.
TEST_P(BadInputKda, KeptRowsAndPaddingAreUntouched) {
  const std::vector<uint8_t> a_before = slot_bytes(*pool_, pool_->slot_index(a_));
  const std::vector<uint8_t> b_before = slot_bytes(*pool_, pool_->slot_index(b_));
  begin_round();
  for (int l = 0; l < kLayers; ++l) {
    host_fill(out_[l].core_out.view(), kPaddingMarker);
    pool_->verify(l, w_[l].view(), in_[l].view(), out_[l].view());
  }
  const int64_t per_row = int64_t{kT} * config_.num_v_heads * config_.head_v_dim;
  for (int64_t i = per_row; i < 2 * per_row; ++i) {
    ASSERT_EQ(out_[0].core_out.get(i), kPaddingMarker) << "padding row output written at " << i;
  }
  EXPECT_GT(sum_squares(out_[0].core_out.view()), 0.0);
  pool_->commit(std::vector<int32_t>{0, 0, 2});
  EXPECT_EQ(slot_bytes(*pool_, pool_->slot_index(a_)), a_before) << "a = 0 row changed";
  EXPECT_NE(slot_bytes(*pool_, pool_->slot_index(b_)), b_before) << "a = 2 row did not move";
  begin_round();
  const TensorView ssm = pool_->ssm_state(0);
  KdaOutputs alias = out_[0].view();
  alias.core_out = TensorView::contiguous(ssm.data, DType::kF32,
                                          {3 * kT, config_.num_v_heads, config_.head_v_dim});
  expect_rejected([&] { pool_->verify(0, w_[0].view(), in_[0].view(), alias); },
                  Status::kInvalidArgument, {"outputs.core_out", "overlaps the pool"});
}

INSTANTIATE_TEST_SUITE_P(Cpu, BadInputKda,
                         ::testing::Values(Strategy::kSnapshot, Strategy::kReplay),
                         [](const auto& info) { return std::string(strategy_name(info.param)); });

// Config validation names the field and its value.
TEST(BadConfigKda, EachFieldIsNamed) {
  struct Bad {
    std::string needle;
    std::function<void(KdaConfig&)> apply;
  };
  const std::vector<Bad> bad = {
      {"kda.num_k_heads = 0", [](KdaConfig& c) { c.num_k_heads = 0; }},
      {"kda.num_v_heads = -2", [](KdaConfig& c) { c.num_v_heads = -2; }},
      {"kda.head_k_dim = 0", [](KdaConfig& c) { c.head_k_dim = 0; }},
      {"kda.head_v_dim = 0", [](KdaConfig& c) { c.head_v_dim = 0; }},
      {"kda.num_v_heads = 5: must be a multiple of num_k_heads = 2",
       [](KdaConfig& c) { c.num_v_heads = 5; }},
      {"kda.conv_width = 1", [](KdaConfig& c) { c.conv_width = 1; }},
      {"kda.scale", [](KdaConfig& c) { c.scale = -1.0f; }},
      // %.9g, not std::to_string's "-0.000000"
      {"kda.scale = -1.00000001e-10:", [](KdaConfig& c) { c.scale = -1e-10f; }},
      {"kda.lower_bound = 0:", [](KdaConfig& c) { c.lower_bound = 0.0f; }},
      {"kda.lower_bound = 2:", [](KdaConfig& c) { c.lower_bound = 2.0f; }},
      {"kda.lower_bound = -inf", [](KdaConfig& c) { c.lower_bound = -INFINITY; }},
      {"kda.act_dtype = i32", [](KdaConfig& c) { c.act_dtype = DType::kI32; }},
      {"kda.conv_state_dtype = i32", [](KdaConfig& c) { c.conv_state_dtype = DType::kI32; }},
      {"kda.ssm_state_dtype = i32", [](KdaConfig& c) { c.ssm_state_dtype = DType::kI32; }},
      {"does not fit in 32 bits", [](KdaConfig& c) { c.head_k_dim = 1 << 30; }},
      // g's columns, named by their larger factor, with the product.
      {"kda.num_v_heads = 65536: num_v_heads * head_k_dim (g's columns) = 2147483648 does not",
       [](KdaConfig& c) {
         c.num_k_heads = 1;
         c.num_v_heads = 65536;
         c.head_k_dim = 32768;
         c.head_v_dim = 1;
       }},
      {"kda.head_k_dim = 65536: num_v_heads * head_k_dim (g's columns) = 2147483648 does not",
       [](KdaConfig& c) {
         c.num_k_heads = 1;
         c.num_v_heads = 32768;
         c.head_k_dim = 65536;
         c.head_v_dim = 1;
       }},
      // The field that drives the size, and the sum compared (head_k_dim = 1 was named for a
      // head_v_dim near 2^31, and 2147483646 was said not to fit in 32 bits).
      {"kda.head_v_dim = 2147483645: conv_dim + b (a token's columns) = 2 * "
       "num_k_heads * head_k_dim + num_v_heads * head_v_dim + 1 = 2147483648 does not fit",
       [](KdaConfig& c) {
         c.num_k_heads = c.num_v_heads = 1;
         c.head_k_dim = 1;
         c.head_v_dim = 2147483645;
       }},
      {"kda.head_v_dim = 1073741824: num_v_heads * head_v_dim = 2147483648 does not fit",
       [](KdaConfig& c) {
         c.num_k_heads = 1;
         c.num_v_heads = 2;
         c.head_k_dim = 1;
         c.head_v_dim = 1 << 30;
       }},
      // The larger factor of the largest term (num_k_heads = 2^30 of 2 * H * K, head_k_dim 1).
      {"kda.num_k_heads = 1073741824: conv_dim + b (a token's columns)",
       [](KdaConfig& c) {
         c.num_k_heads = c.num_v_heads = 1 << 30;
         c.head_k_dim = c.head_v_dim = 1;
       }},
      {"kda.num_v_heads = 2147483647: conv_dim + b (a token's columns)",
       [](KdaConfig& c) {
         c.num_k_heads = 1;
         c.num_v_heads = 2147483647;
         c.head_k_dim = c.head_v_dim = 1;
       }},
      {"kda.head_v_dim = 1073741823: conv_dim + b (a token's columns)",
       [](KdaConfig& c) {
         c.num_k_heads = 1;
         c.num_v_heads = 2;
         c.head_k_dim = 1;
         c.head_v_dim = 1073741823;
       }},
  };
  for (const Bad& b : bad) {
    KdaConfig c = kda_preset("kda_small_f32");
    b.apply(c);
    test::expect_rejected([&] { StatePool pool(ModelConfig::kda(1, c), PoolOptions{}); },
                          Status::kInvalidArgument, {b.needle});
  }
  EXPECT_STREQ(layer_kind_name(LayerKind::kKda), "kda");
}

// The model's accessors follow the kind: Kimi-Linear-48B-A3B's KDA layer at TP1 (the defaults).
TEST(ConfigKda, AccessorsFollowTheKind) {
  const ModelConfig model = ModelConfig::kda(20, KdaConfig{});
  EXPECT_EQ(model.kind, LayerKind::kKda);
  EXPECT_EQ(model.conv_dim(), 2 * 32 * 128 + 32 * 128);  // 12288
  EXPECT_EQ(model.conv_width(), 4);
  EXPECT_EQ(model.ssm_state_elems(), 32 * 128 * 128);  // 524288
  EXPECT_EQ(model.act_dtype(), DType::kBF16);
  // 20 x (12288 x 3 x 2 + 524288 x 4) bytes = 20 x (73728 + 2097152) = 43417600.
  EXPECT_EQ(model.slot_bytes(), 43417600);
  PoolOptions options;
  options.num_slots = 2;
  options.strategy = Strategy::kReplay;
  options.max_window = 2;
  const KdaConfig small = kda_preset("kda_small_f32");
  StatePool pool(ModelConfig::kda(2, small), options);
  EXPECT_EQ(pool.committed_bytes(), 2 * pool.config().slot_bytes());
  EXPECT_EQ(pool.ssm_state(0).shape[1], 4);  // [slots, HV, V, K]
  EXPECT_EQ(pool.ssm_state(0).shape[3], 8);
  EXPECT_EQ(pool.workspace(Workspace::kRecords, 0).shape[2], small.conv_dim());
}

// The factor record (kernels::kda_factor_layout; DESIGN.md section 4): u f32 [HV][V], e^g f32
// [HV][K], kf f32 [H], k act [H][K], each part 16-byte aligned. By hand for H=2 HV=4 K=V=8 f32:
// u 0..128, eg 128..256, kf 256..264 -> k at 272, k 272..336 -> 336 bytes; in bf16 k ends at 304.
// Kimi-Linear TP1 bf16 (H=HV=32, K=V=128): u 16384, eg 16384, kf 128, k 8192 = 41088 bytes.
TEST(ConfigKda, FactorRecordLayoutByHand) {
  // One slot, one layer: a ring one record longer costs exactly one factor record.
  auto factor_bytes = [](const KdaConfig& c) {
    PoolOptions options;
    options.strategy = Strategy::kReplay;
    options.max_window = 2;
    options.replay_ring = 4;
    const StatePool r4(ModelConfig::kda(1, c), options);
    options.replay_ring = 5;
    const StatePool r5(ModelConfig::kda(1, c), options);
    return r5.workspace_bytes() - r4.workspace_bytes();
  };
  KdaConfig c = kda_preset("kda_small_f32");
  EXPECT_EQ(factor_bytes(c), 336);
  c.act_dtype = DType::kBF16;
  EXPECT_EQ(factor_bytes(c), 304);
  EXPECT_EQ(factor_bytes(KdaConfig{}), 41088);
}

// A KDA pool on the CUDA backend is treated as a GDN one (the same kernel, the gate per key
// channel): with no usable device both are refused the same way; with one, the Kimi-Linear
// config is accepted and a head_k_dim the kernel has no instantiation for is refused, naming it.
TEST(ConfigKda, CudaPoolIsTreatedAsGdn) {
  PoolOptions options;
  options.backend = Backend::kCuda;
  std::string gdn_error;
  try {
    StatePool pool(ModelConfig::gated_delta_net(1, GdnConfig{}), options);
  } catch (const Error& e) {
    gdn_error = e.what();
  }
  if (!gdn_error.empty()) {
    // No usable device (or a build without the CUDA backend): KDA gets GDN's error, word for word.
    SCOPED_TRACE(gdn_error);
    test::expect_rejected(
        [&] { StatePool pool(ModelConfig::kda(1, kda_preset("kimi_linear_tp1")), options); },
        Status::kNotSupported, {gdn_error.c_str()});
    if (!HasFailure()) {
      GTEST_SKIP() << "no usable CUDA device: the device half (the Kimi-Linear config accepted, "
                      "head_k_dim = 8 refused) did not run";
    }
    return;
  }
  StatePool pool(ModelConfig::kda(1, kda_preset("kimi_linear_tp1")), options);
  EXPECT_EQ(pool.config().kind, LayerKind::kKda);
  test::expect_rejected(
      [&] { StatePool bad(ModelConfig::kda(1, kda_preset("kda_small_f32")), options); },
      Status::kNotSupported, {"StatePool", "head_k_dim = 8", "32, 64, 128"});
}

}  // namespace
}  // namespace specstate::test
