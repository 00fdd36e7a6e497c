// Bad input of Mamba2 layers: every rejected call throws specstate::Error whose message names the
// argument (weights.*, inputs.*, outputs.*, the config field) and the offending value, and changes
// nothing (committed state bit-identical, the round still open). A call with the other layer
// kind's argument types is rejected, naming the pool's kind; a = 0 and padding rows stay
// untouched under both strategies.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>
#include <string>

#include "common/bad_input.h"
#include "common/gdn_data.h"
#include "common/mamba2_data.h"

namespace specstate::test {
namespace {

class BadInputMamba2 : public BadInputPool<Mamba2Kind, ::testing::TestWithParam<Strategy>> {
 protected:
  void SetUp() override {
    seed_ = 4321;
    make_pool(small_mamba2_config(), GetParam());  // f32, conv bias, D skip, z gate
  }
};

// Each argument of a layer call, made wrong in turn, is named by the rejection (prefill, decode
// and verify validate the same way).
TEST_P(BadInputMamba2, EachArgumentIsNamed) {
  const int64_t tokens = 3 * kT;
  Buffer wrong_rows(DType::kF32, {tokens + 1, config_.conv_dim()});
  Buffer wrong_heads(DType::kF32, {tokens, config_.num_heads + 1});
  Buffer bf16_y(DType::kBF16, {tokens, config_.num_heads, config_.head_dim});
  Buffer short_weight(DType::kF32, {config_.conv_dim(), config_.conv_width - 1});
  Buffer short_head(DType::kF32, {config_.num_heads - 1});
  Buffer z_3d(DType::kF32, {tokens, config_.num_heads, config_.head_dim});
  struct Mutation {
    std::string needle;
    std::function<void(Mamba2Weights&, Mamba2Inputs&, Mamba2Outputs&)> apply;
  };
  const std::vector<Mutation> mutations = {
      {"weights.conv_weight", [&](auto& w, auto&, auto&) { w.conv_weight = short_weight.view(); }},
      {"weights.conv_bias", [&](auto& w, auto&, auto&) { w.conv_bias = TensorView{}; }},
      {"weights.A_log", [&](auto& w, auto&, auto&) { w.A_log = short_head.view(); }},
      {"weights.dt_bias", [&](auto& w, auto&, auto&) { w.dt_bias = TensorView{}; }},
      {"weights.D", [&](auto& w, auto&, auto&) { w.D = short_head.view(); }},
      {"inputs.xBC", [&](auto&, auto& in, auto&) { in.xBC = wrong_rows.view(); }},
      {"inputs.dt", [&](auto&, auto& in, auto&) { in.dt = wrong_heads.view(); }},
      {"inputs.z", [&](auto&, auto& in, auto&) { in.z = TensorView{}; }},
      {"inputs.z", [&](auto&, auto& in, auto&) { in.z = z_3d.view(); }},
      {"outputs.conv_out", [&](auto&, auto&, auto& out) { out.conv_out = wrong_rows.view(); }},
      {"outputs.y", [&](auto&, auto&, auto& out) { out.y = bf16_y.view(); }},
      {"outputs.y", [&](auto&, auto&, auto& out) { out.y = TensorView{}; }},
  };
  begin_round();
  for (const Mutation& mut : mutations) {
    SCOPED_TRACE(mut.needle);
    Mamba2Weights w = w_[0].view();
    Mamba2Inputs in = in_[0].view();
    Mamba2Outputs out = out_[0].view();
    mut.apply(w, in, out);
    expect_rejected([&] { pool_->verify(0, w, in, out); }, Status::kInvalidArgument,
                    {"StatePool::verify", mut.needle});
  }
  // The round is still open and a valid verify of every layer, then a commit, works.
  for (int l = 0; l < kLayers; ++l) pool_->verify(l, w_[l].view(), in_[l].view(), out_[l].view());
  const std::vector<uint8_t> before = committed_bytes(*pool_);
  pool_->commit(std::vector<int32_t>{2, 0, 3});
  EXPECT_NE(committed_bytes(*pool_), before);
  // Decode and prefill name the same arguments.
  std::mt19937_64 rng(seed_ + 1);
  Mamba2TokenInputs one = random_inputs(config_, 1, rng);
  Mamba2TokenOutputs one_out = make_outputs(config_, 1);
  Mamba2Weights no_d = w_[0].view();
  no_d.D = TensorView{};
  // A view the config asks for names the flag that asks for it (it said "(null data)").
  expect_rejected([&] { pool_->decode(0, {a_}, no_d, one.view(), one_out.view()); },
                  Status::kInvalidArgument,
                  {"StatePool::decode",
                   "weights.D is empty (not given), but the layer config "
                   "has d_skip = true"});
  Mamba2Weights no_bias = w_[0].view();
  no_bias.conv_bias = TensorView{};
  expect_rejected([&] { pool_->decode(0, {a_}, no_bias, one.view(), one_out.view()); },
                  Status::kInvalidArgument, {"weights.conv_bias", "has conv_bias = true"});
  Mamba2Inputs no_z = one.view();
  no_z.z = TensorView{};
  expect_rejected([&] { pool_->decode(0, {a_}, w_[0].view(), no_z, one_out.view()); },
                  Status::kInvalidArgument, {"inputs.z", "has gate = true"});
  Mamba2Inputs no_xbc = one.view();
  no_xbc.xBC = TensorView{};
  expect_rejected([&] { pool_->prefill(0, a_, w_[0].view(), no_xbc, one_out.view()); },
                  Status::kInvalidArgument, {"StatePool::prefill", "inputs.xBC"});
}

// Options the config turns off must not be given (a silent ignore would hide a config that does
// not match the model).
TEST_P(BadInputMamba2, ArgumentsTheConfigDoesNotHaveAreRejected) {
  Mamba2Config off = config_;
  off.conv_bias = false;
  off.d_skip = false;
  off.gate = false;
  PoolOptions options;
  options.strategy = GetParam();
  StatePool pool(ModelConfig::mamba2(1, off), options);
  const SlotHandle h = pool.acquire();
  std::mt19937_64 rng(seed_);
  Mamba2LayerWeights w = random_weights(off, rng);
  Mamba2TokenInputs in = random_inputs(off, 2, rng);
  Mamba2TokenOutputs out = make_outputs(off, 2);
  const Mamba2LayerWeights full = random_weights(config_, rng);
  const Mamba2TokenInputs full_in = random_inputs(config_, 2, rng);
  auto rejected = [&](const Mamba2Weights& wv, const Mamba2Inputs& iv, const char* needle,
                      const char* flag) {
    try {
      pool.prefill(0, h, wv, iv, out.view());
      ADD_FAILURE() << needle << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  Mamba2Weights wb = w.view();
  wb.conv_bias = full.conv_bias.view();
  rejected(wb, in.view(), "weights.conv_bias", "conv_bias = false");
  Mamba2Weights wd = w.view();
  wd.D = full.D.view();
  rejected(wd, in.view(), "weights.D", "d_skip = false");
  Mamba2Inputs iz = in.view();
  iz.z = full_in.z.view();
  rejected(w.view(), iz, "inputs.z", "gate = false");
  pool.prefill(0, h, w.view(), in.view(), out.view());  // the fast path: no bias, D or z
  EXPECT_GT(sum_squares(out.y.view()), 0.0);
}

// A call with GDN arguments on a Mamba2 pool (and the reverse) is rejected, naming both kinds.
TEST_P(BadInputMamba2, TheOtherKindsArgumentsAreRejected) {
  std::mt19937_64 rng(seed_);
  const GdnConfig g = small_config();
  const LayerWeights gw = random_weights(g, rng);
  const TokenInputs gin = random_inputs(g, 3 * kT, rng);
  const TokenOutputs gout = make_outputs(g, 3 * kT);
  expect_rejected([&] { pool_->prefill(0, a_, gw.view(), gin.rows(0, 2), gout.rows(0, 2)); },
                  Status::kInvalidArgument,
                  {"StatePool::prefill", "GdnWeights", "kind = mamba2", "gated_delta_net"});
  expect_rejected([&] { pool_->decode(0, {a_}, gw.view(), gin.rows(0, 1), gout.rows(0, 1)); },
                  Status::kInvalidArgument, {"StatePool::decode", "kind = mamba2"});
  begin_round();
  expect_rejected([&] { pool_->verify(0, gw.view(), gin.view(), gout.view()); },
                  Status::kInvalidArgument, {"StatePool::verify", "kind = mamba2"});

  PoolOptions options;
  options.strategy = GetParam();
  StatePool gdn(ModelConfig::gated_delta_net(1, g), options);
  const SlotHandle h = gdn.acquire();
  try {
    gdn.prefill(0, h, w_[0].view(), in_[0].rows(0, 2), out_[0].rows(0, 2));
    ADD_FAILURE() << "Mamba2 arguments accepted by a GDN pool";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("Mamba2Weights"), std::string::npos) << what;
    EXPECT_NE(what.find("kind = gated_delta_net"), std::string::npos) << what;
  }
}

// a = 0 rows and padding rows: committed state bit-identical after commit, padding outputs not
// written; outputs aliasing the pool are rejected.
TEST_P(BadInputMamba2, KeptRowsAndPaddingAreUntouched) {
  const std::vector<uint8_t> a_before = slot_bytes(*pool_, pool_->slot_index(a_));
  const std::vector<uint8_t> b_before = slot_bytes(*pool_, pool_->slot_index(b_));
  begin_round();
  for (int l = 0; l < kLayers; ++l) {
    host_fill(out_[l].y.view(), kPaddingMarker);
    pool_->verify(l, w_[l].view(), in_[l].view(), out_[l].view());
  }
  const int64_t per_row = int64_t{kT} * config_.num_heads * config_.head_dim;
  for (int64_t i = per_row; i < 2 * per_row; ++i) {
    ASSERT_EQ(out_[0].y.get(i), kPaddingMarker) << "padding row output written at " << i;
  }
  EXPECT_GT(sum_squares(out_[0].y.view()), 0.0);
  pool_->commit(std::vector<int32_t>{0, 0, 2});
  EXPECT_EQ(slot_bytes(*pool_, pool_->slot_index(a_)), a_before) << "a = 0 row changed";
  EXPECT_NE(slot_bytes(*pool_, pool_->slot_index(b_)), b_before) << "a = 2 row did not move";
  // Outputs must not alias the pool's memory.
  begin_round();
  const TensorView ssm = pool_->ssm_state(0);
  Mamba2Outputs alias = out_[0].view();
  alias.y =
      TensorView::contiguous(ssm.data, DType::kF32, {3 * kT, config_.num_heads, config_.head_dim});
  expect_rejected([&] { pool_->verify(0, w_[0].view(), in_[0].view(), alias); },
                  Status::kInvalidArgument, {"outputs.y", "overlaps the pool"});
}

INSTANTIATE_TEST_SUITE_P(Cpu, BadInputMamba2,
                         ::testing::Values(Strategy::kSnapshot, Strategy::kReplay),
                         [](const auto& info) { return std::string(strategy_name(info.param)); });

// Config validation names the field.
TEST(BadConfigMamba2, EachFieldIsNamed) {
  struct Bad {
    std::string needle;
    std::function<void(Mamba2Config&)> apply;
  };
  const std::vector<Bad> bad = {
      {"mamba.num_heads = 0", [](Mamba2Config& m) { m.num_heads = 0; }},
      {"mamba.head_dim = -1", [](Mamba2Config& m) { m.head_dim = -1; }},
      {"mamba.d_state = 0", [](Mamba2Config& m) { m.d_state = 0; }},
      {"mamba.n_groups = 0", [](Mamba2Config& m) { m.n_groups = 0; }},
      {"mamba.num_heads = 6: must be a multiple of n_groups = 4",
       [](Mamba2Config& m) {
         m.num_heads = 6;
         m.n_groups = 4;
       }},
      {"mamba.conv_width = 1", [](Mamba2Config& m) { m.conv_width = 1; }},
      {"mamba.dt_min", [](Mamba2Config& m) { m.dt_min = -1.0f; }},
      {"mamba.dt_max", [](Mamba2Config& m) { m.dt_max = 0.0f; }},
      {"must be <= dt_max",
       [](Mamba2Config& m) {
         m.dt_min = 0.5f;
         m.dt_max = 0.1f;
       }},
      {"mamba.act_dtype = i32", [](Mamba2Config& m) { m.act_dtype = DType::kI32; }},
      {"mamba.ssm_state_dtype", [](Mamba2Config& m) { m.ssm_state_dtype = DType::kI32; }},
      {"does not fit in 32 bits", [](Mamba2Config& m) { m.d_state = 1 << 30; }},
      // The larger term is blamed (d_state = 1 was named for a head_dim near 2^31).
      {"mamba.head_dim = 2147483645: conv_dim + dt (a token's columns) = num_heads * head_dim + 2 "
       "* "
       "n_groups * d_state + num_heads = 2147483648 does not fit",
       [](Mamba2Config& m) {
         m.num_heads = m.n_groups = 1;
         m.d_state = 1;
         m.head_dim = 2147483645;
       }},
  };
  for (const Bad& b : bad) {
    Mamba2Config m = small_mamba2_config();
    b.apply(m);
    try {
      StatePool pool(ModelConfig::mamba2(1, m), PoolOptions{});
      ADD_FAILURE() << b.needle << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(b.needle), std::string::npos) << e.what();
    }
  }
  // A kind that is none.
  ModelConfig bogus = ModelConfig::mamba2(1, small_mamba2_config());
  bogus.kind = static_cast<LayerKind>(7);
  EXPECT_THROW(bogus.validate(), Error);
}

// Every size derived from a valid config is exact in 64 bits: validate() refuses a slot of more
// than kMaxSlotBytes. conv_width had no upper bound, so conv_dim x (W - 1) x layers wrapped
// (gated_delta_net(2^31 - 1 layers) with conv_width 2^31 - 1 validated, and slot_bytes() was
// 4.4e15 instead of 7.6e22), and the SSM product of three 32-bit factors could too.
TEST(BadConfig, SizesPast2To48BytesAreRefused) {
  const auto refused = [](const ModelConfig& c, const char* needle) {
    try {
      c.validate();
      ADD_FAILURE() << needle << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("more than 2^48"), std::string::npos) << e.what();
    }
  };
  GdnConfig g;
  g.conv_width = 2147483647;
  refused(ModelConfig::gated_delta_net(2147483647, g), "conv_width = 2147483647");
  refused(ModelConfig::gated_delta_net(64, g), "conv_width = 2147483647");  // 2^50 bytes
  KdaConfig k;
  k.num_v_heads = k.num_k_heads = 1024;
  k.head_v_dim = 65536;
  refused(ModelConfig::kda(1 << 20, k), "SSM state elements a layer");
  Mamba2Config m;
  m.num_heads = 8;
  m.n_groups = 8;
  m.head_dim = 32768;
  m.d_state = 32768;
  refused(ModelConfig::mamba2(1 << 16, m), "SSM state elements a layer");
  // The bound itself is far above any model: Nemotron-H-56B at TP1 validates, and so does a
  // config just under the bound.
  EXPECT_NO_THROW(ModelConfig::mamba2(118, Mamba2Config{}).validate());
  GdnConfig wide;
  wide.conv_width = 1 << 16;
  const ModelConfig under = ModelConfig::gated_delta_net(1, wide);
  EXPECT_NO_THROW(under.validate());
  EXPECT_LE(under.slot_bytes(), ModelConfig::kMaxSlotBytes);
}

// Every head and dimension field at INT_MAX (prime, so the "multiple of" checks pass): validate()
// refuses the config naming the extent that does not fit, for every kind. Its own conv_dim
// sum overflowed 64 bits first (undefined behaviour; the sanitized build aborted here).
TEST(BadConfig, FieldsAtIntMaxAreRefusedWithoutOverflow) {
  const int big = std::numeric_limits<int>::max();
  GdnConfig g;
  g.num_k_heads = g.num_v_heads = g.head_k_dim = g.head_v_dim = big;
  KdaConfig k;
  k.num_k_heads = k.num_v_heads = k.head_k_dim = k.head_v_dim = big;
  Mamba2Config m;
  m.num_heads = m.n_groups = m.head_dim = m.d_state = big;
  for (const ModelConfig& c :
       {ModelConfig::gated_delta_net(1, g), ModelConfig::kda(1, k), ModelConfig::mamba2(1, m)}) {
    try {
      c.validate();
      ADD_FAILURE() << layer_kind_name(c.kind) << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find("does not fit in 32 bits"), std::string::npos) << what;
      // Printed exactly: the delta-rule kinds' value heads, (2^31 - 1)^2; Mamba2's token columns,
      // 3 (2^31 - 1)^2 + 2^31 - 1.
      EXPECT_NE(what.find(c.kind == LayerKind::kMamba2
                              ? "= 13835058044544745474 does not fit"
                              : "num_v_heads * head_v_dim = 4611686014132420609 does not fit"),
                std::string::npos)
          << what;
    }
  }
}

// The model's accessors follow the kind (what the CLI's memory arithmetic uses).
TEST(ConfigMamba2, AccessorsFollowTheKind) {
  const Mamba2Config m;  // Nemotron-H-8B at TP1
  const ModelConfig model = ModelConfig::mamba2(24, m);
  EXPECT_EQ(model.conv_dim(), 128 * 64 + 2 * 8 * 128);
  EXPECT_EQ(model.conv_width(), 4);
  EXPECT_EQ(model.ssm_state_elems(), 128 * 64 * 128);
  EXPECT_EQ(model.conv_state_dtype(), DType::kBF16);
  EXPECT_EQ(model.ssm_state_dtype(), DType::kF32);
  EXPECT_EQ(model.act_dtype(), DType::kBF16);
  // 24 x (10240 x 3 x 2 + 1048576 x 4) bytes.
  EXPECT_EQ(model.slot_bytes(), 24 * (10240 * 3 * 2 + int64_t{1048576} * 4));
  PoolOptions options;
  options.strategy = Strategy::kReplay;
  options.max_window = 4;
  options.num_slots = 2;
  StatePool pool(ModelConfig::mamba2(2, small_mamba2_config()), options);
  EXPECT_EQ(pool.committed_bytes(), 2 * pool.config().slot_bytes());
  const TensorView records = pool.workspace(Workspace::kRecords, 0);
  EXPECT_EQ(records.shape[2], small_mamba2_config().conv_dim());  // xBC
  EXPECT_STREQ(layer_kind_name(LayerKind::kMamba2), "mamba2");
  EXPECT_STREQ(layer_kind_name(LayerKind::kGatedDeltaNet), "gated_delta_net");
}

// A Mamba2 pool on the CUDA backend: refused when the pool is created (no CUDA backend in this
// build, no device, or no Mamba2 kernel yet: "kind = mamba2"), never a pool that cannot run.
// When the CUDA Mamba2 kernel lands, this test moves to tests/gpu as a positive test.
// A Mamba2 CUDA pool whose d_state the kernel cannot run is refused at construction, naming the
// value (kNotSupported); without a device any CUDA pool is refused the same way.
TEST(ConfigMamba2, CudaPoolOfAnUnsupportedStateSizeIsRefusedCleanly) {
  PoolOptions options;
  options.backend = Backend::kCuda;
  Mamba2Config m = small_mamba2_config();  // d_state = 8
  try {
    StatePool pool(ModelConfig::mamba2(1, m), options);
    ADD_FAILURE() << "a Mamba2 CUDA pool with d_state = 8 was created";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported) << e.what();
    const std::string what = e.what();
    const bool device = what.find("d_state = 8") != std::string::npos;
    EXPECT_TRUE(device || what.find("no CUDA device") != std::string::npos ||
                what.find("no CUDA backend") != std::string::npos)
        << what;
    // Without a device the pool is refused before the state size is looked at: the check this
    // test is for did not run, and the test says so (it passed silently before).
    if (!device && !HasFailure()) {
      GTEST_SKIP() << "no usable CUDA device: the d_state refusal was not reached (" << what << ")";
    }
  }
}

}  // namespace
}  // namespace specstate::test
