// The replay strategy's own contract (DESIGN.md sections 4-6) beyond bit-equivalence with
// snapshot (test_strategy_equivalence.cpp): record sizes and contents, the workspace views each
// strategy has, and calls that would corrupt a deferred state.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>

#include "common/gdn_data.h"
#include "common/presets.h"

namespace specstate::test {
namespace {

PoolOptions replay_options(int slots, int rows, int window) {
  PoolOptions o;
  o.num_slots = slots;
  o.max_rows = rows;
  o.max_window = window;
  o.strategy = Strategy::kReplay;
  return o;
}

TEST(Replay, RecordsAndCursorsAreUnderTwentyPercentOfTheCommittedStateAtQwen3NextT4) {
  const ModelConfig m = ModelConfig::gated_delta_net(36, gdn_preset("qwen3next_tp1"));
  StatePool pool(m, replay_options(1, 1, 4));
  // One slot: committed 77,266,944 B; conv records 36 x 4 x 8192 x 2 B; a factor ring of the
  // default R = 2 T = 8 per layer, a factor record being u (32 x 128 f32) + e^g (32 f32) + kf
  // (16 f32) + k (16 x 128 bf16) = 20,672 B; pending counts, cursors and paths.
  EXPECT_EQ(pool.committed_bytes(), 77266944);
  EXPECT_EQ(pool.workspace_bytes(),
            36 * 4 * 16384 + 36 * 4 + 4 * 4 + int64_t{36} * 8 * 20672 + 36 * 8);
  EXPECT_LE(static_cast<double>(pool.workspace_bytes()), 0.20 * pool.committed_bytes());
  // R = 16 (folds at most every few rounds) still fits the 20%.
  PoolOptions wide = replay_options(1, 1, 4);
  wide.replay_ring = 16;
  StatePool ring16(m, wide);
  EXPECT_EQ(ring16.workspace_bytes(),
            36 * 4 * 16384 + 36 * 4 + 4 * 4 + int64_t{36} * 16 * 20672 + 36 * 8);
  EXPECT_LE(static_cast<double>(ring16.workspace_bytes()), 0.20 * ring16.committed_bytes());
  PoolOptions snap = replay_options(1, 1, 4);
  snap.strategy = Strategy::kSnapshot;
  StatePool reference(m, snap);
  EXPECT_EQ(reference.workspace_bytes(), 4 * pool.committed_bytes());  // T states per row
}

TEST(Replay, DefaultRingIsTwoWindowsAndAtLeastSix) {
  EXPECT_EQ(default_replay_ring(1), 6);
  EXPECT_EQ(default_replay_ring(2), 6);
  EXPECT_EQ(default_replay_ring(3), 6);
  EXPECT_EQ(default_replay_ring(4), 8);
  EXPECT_EQ(default_replay_ring(8), 16);
  // A pool with replay_ring = 0 has exactly the records of an explicit default ring, at T = 2
  // (R = 6, not 2T = 4) and T = 4 (R = 8).
  const ModelConfig m = ModelConfig::gated_delta_net(2, gdn_preset("small_f32"));
  for (int T : {2, 4}) {
    PoolOptions def = replay_options(2, 2, T), explicit_ring = def, two_t = def;
    explicit_ring.replay_ring = static_cast<int>(default_replay_ring(T));
    two_t.replay_ring = 2 * T;
    const int64_t w = StatePool(m, def).workspace_bytes();
    EXPECT_EQ(w, StatePool(m, explicit_ring).workspace_bytes()) << "T = " << T;
    if (T == 2) EXPECT_GT(w, StatePool(m, two_t).workspace_bytes());
    if (T == 4) EXPECT_EQ(w, StatePool(m, two_t).workspace_bytes());
  }
}

TEST(Replay, RingModelFoldsEveryRoundAtTwoWindowsAndLessBeyond) {
  for (int T : {1, 2, 4, 8}) {
    const ReplayRingModel m = replay_ring_model(T, 2 * T);
    EXPECT_DOUBLE_EQ(m.fold_rate, 1.0) << T;
    EXPECT_DOUBLE_EQ(m.mean_history, (T + 1) / 2.0) << T;
  }
  // T = 1, R = 6: one accepted token a round, a fold when h > 4: every 5th round, histories
  // 1, 2, 3, 4, 5 (mean 3).
  EXPECT_DOUBLE_EQ(replay_ring_model(1, 6).fold_rate, 0.2);
  EXPECT_DOUBLE_EQ(replay_ring_model(1, 6).mean_history, 3.0);
  // T = 2, R = 6 (the default): folds when h > 2. From h = a: a = 2 -> h 2, then 3 or 4 (2
  // verifies); a = 1 -> h 1, then 2 (-> 3 or 4) or 3 (fold): 9/4 verifies a cycle on average.
  EXPECT_NEAR(replay_ring_model(2, 6).fold_rate, 4.0 / 9.0, 1e-12);
  // A longer ring folds less often and applies longer histories.
  const ReplayRingModel r8 = replay_ring_model(4, 8), r16 = replay_ring_model(4, 16);
  EXPECT_LT(r16.fold_rate, r8.fold_rate);
  EXPECT_GT(r16.mean_history, r8.mean_history);
  EXPECT_NEAR(r16.fold_rate, 0.2495, 1e-3);  // the benchmark's simulated cursor: 0.25
  for (const auto& [T, R, name] : {std::tuple{0, 6, "max_window = 0"}, std::tuple{4, 7, "ring = 7"},
                                   std::tuple{1, (1 << 20) + 1, "ring = 1048577"}}) {
    try {
      replay_ring_model(T, R);
      FAIL() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(Replay, RingShorterThanTwoWindowsIsRejectedNamingIt) {
  const ModelConfig m = ModelConfig::gated_delta_net(1, gdn_preset("small_f32"));
  for (int ring : {-1, 1, 7}) {
    PoolOptions o = replay_options(2, 2, 4);
    o.replay_ring = ring;
    try {
      StatePool pool(m, o);
      FAIL() << "replay_ring = " << ring << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("options.replay_ring = " + std::to_string(ring)),
                std::string::npos)
          << e.what();
    }
  }
  PoolOptions o = replay_options(2, 2, 4);
  o.replay_ring = 8;
  EXPECT_NO_THROW(StatePool(m, o));
  o.strategy = Strategy::kSnapshot;
  o.replay_ring = 3;  // ignored by snapshot pools
  EXPECT_NO_THROW(StatePool(m, o));
}

TEST(Replay, EachStrategyHasOnlyItsOwnWorkspace) {
  const ModelConfig m = ModelConfig::gated_delta_net(2, gdn_preset("small_f32"));
  StatePool replay(m, replay_options(3, 2, 4));
  const TensorView rec = replay.workspace(Workspace::kRecords, 1);
  EXPECT_EQ(rec.ndim, 3);
  EXPECT_EQ(rec.shape[0], 3);
  EXPECT_EQ(rec.shape[1], 4);
  EXPECT_EQ(rec.shape[2], m.gdn.conv_dim());
  try {
    replay.snapshot_ssm(0);
    FAIL() << "a replay pool has no snapshot scratch";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("kSnapshotSsm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("replay"), std::string::npos) << e.what();
  }
  PoolOptions o = replay_options(3, 2, 4);
  o.strategy = Strategy::kSnapshot;
  StatePool snap(m, o);
  EXPECT_THROW(snap.workspace(Workspace::kRecords, 0), Error);
  EXPECT_NO_THROW(snap.workspace(Workspace::kSnapshotConv, 0));
}

TEST(Replay, ConvRecordsHoldEachWindowTokensConvInput) {
  std::mt19937_64 rng(11);
  const GdnConfig g = gdn_preset("small_bf16");
  const ModelConfig m = ModelConfig::gated_delta_net(1, g);
  StatePool pool(m, replay_options(3, 2, 3));
  SlotHandle a = pool.acquire(), b = pool.acquire();
  LayerWeights w = random_weights(g, rng);
  TokenInputs in = random_inputs(g, 6, rng);
  TokenOutputs out = make_outputs(g, 6);
  pool.begin_verify(VerifyBatch{{b, a}, 3, {}});
  pool.verify(0, w.view(), in.view(), out.view());
  const TensorView rec = pool.workspace(Workspace::kRecords, 0);
  const int64_t d = g.conv_dim(), width = d;
  const auto* data = static_cast<const uint16_t*>(rec.data);
  for (int r = 0; r < 2; ++r) {
    const int slot = pool.slot_index(r == 0 ? b : a);
    for (int t = 0; t < 3; ++t) {
      const uint16_t* row = data + (int64_t{slot} * 3 + t) * width;
      const int64_t token = r * 3 + t;
      for (int64_t c = 0; c < d; ++c) {
        ASSERT_EQ(float_from_bf16(row[c]), in.mixed_qkv.get(token * d + c)) << "x " << c;
      }
    }
  }
  EXPECT_GT(sum_squares(in.mixed_qkv.view()), 0.0);
}

// A slot of the open round cannot be advanced: its commit would overwrite the advance (and under
// replay the round's records would no longer match the state they start from).
TEST(Replay, PrefillAndDecodeOfARowOfTheOpenRoundAreRejected) {
  for (Strategy strategy : {Strategy::kSnapshot, Strategy::kReplay}) {
    SCOPED_TRACE(strategy_name(strategy));
    std::mt19937_64 rng(5);
    const GdnConfig g = gdn_preset("small_f32");
    PoolOptions o = replay_options(3, 2, 2);
    o.strategy = strategy;
    StatePool pool(ModelConfig::gated_delta_net(1, g), o);
    SlotHandle a = pool.acquire(), b = pool.acquire(), c = pool.acquire();
    LayerWeights w = random_weights(g, rng);
    TokenInputs in = random_inputs(g, 4, rng);
    TokenOutputs out = make_outputs(g, 4);
    pool.begin_verify(VerifyBatch{{a, b}, 2, {}});
    pool.verify(0, w.view(), in.view(), out.view());
    const std::vector<uint8_t> before = committed_bytes(pool);
    try {
      pool.decode(0, {c, b}, w.view(), in.rows(0, 2), out.rows(0, 2));
      FAIL() << "decode of a round row was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kFailedPrecondition);
      EXPECT_NE(std::string(e.what()).find("rows[1] = slot 1 is row 1 of the open verify round"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(pool.prefill(0, a, w.view(), in.rows(0, 2), out.rows(0, 2)), Error);
    EXPECT_EQ(committed_bytes(pool), before);
    // A slot outside the round still decodes.
    EXPECT_NO_THROW(pool.decode(0, {c}, w.view(), in.rows(0, 1), out.rows(0, 1)));
    pool.commit(std::vector<int32_t>{2, 1});
    EXPECT_NO_THROW(pool.decode(0, {a, b}, w.view(), in.rows(0, 2), out.rows(0, 2)));
  }
}

// A replay pool and a snapshot pool of two small GDN layers, one request each, after the same
// verify of 3 tokens and a commit of `accepted`: the replay slot has history to materialize.
struct CommittedPair {
  std::mt19937_64 rng;
  GdnConfig g = gdn_preset("small_f32");
  ModelConfig m = ModelConfig::gated_delta_net(2, g);
  StatePool replay{m, replay_options(2, 1, 3)}, snap{m, snapshot_of(replay_options(2, 1, 3))};
  SlotHandle r = replay.acquire(), s = snap.acquire();
  std::vector<LayerWeights> w;
  CommittedPair(uint64_t seed, int32_t accepted) : rng(seed) {
    w = {random_weights(g, rng), random_weights(g, rng)};
    TokenInputs in = random_inputs(g, 3, rng);
    TokenOutputs out = make_outputs(g, 3);
    for (StatePool* p : {&replay, &snap}) {
      p->begin_verify(VerifyBatch{{p == &replay ? r : s}, 3, {}});
      for (int l = 0; l < 2; ++l) p->verify(l, w[l].view(), in.view(), out.view());
      p->commit(std::vector<int32_t>{accepted});
    }
  }
  static PoolOptions snapshot_of(PoolOptions o) {
    o.strategy = Strategy::kSnapshot;
    return o;
  }
};

// Materialize is idempotent and changes nothing a view can see (views materialize themselves).
TEST(Replay, MaterializeMakesTheMemoryExactOnceAndIsIdempotent) {
  CommittedPair c(21, 2);
  c.replay.materialize({c.r});
  c.replay.materialize({c.r});
  c.replay.materialize();
  EXPECT_EQ(committed_bytes(c.replay), committed_bytes(c.snap));
  EXPECT_GT(sum_squares(c.replay.ssm_state(1)), 0.0);
}

// Materialize reads only the records: the weights of the last verify may be gone (here: freed
// after being poisoned with NaN, which a re-run with them would spread into the state).
TEST(Replay, MaterializeNeedsNoWeights) {
  CommittedPair c(22, 3);
  for (LayerWeights& lw : c.w) {
    for (Buffer* b : {&lw.A_log, &lw.dt_bias, &lw.conv_weight}) {
      for (int64_t i = 0; i < b->numel(); ++i) b->set(i, std::numeric_limits<float>::quiet_NaN());
    }
  }
  c.w.clear();
  c.replay.materialize();
  EXPECT_EQ(committed_bytes(c.replay), committed_bytes(c.snap));
  EXPECT_GT(sum_squares(c.replay.ssm_state(0)), 0.0);
}

}  // namespace
}  // namespace specstate::test
