// The replay strategy's own contract (DESIGN.md sections 4-6) beyond bit-equivalence with
// snapshot (test_strategy_equivalence.cpp): record sizes and contents, the workspace views each
// strategy has, and calls that would corrupt a deferred state.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>

#include "common/caller_owned.h"
#include "common/expect.h"
#include "common/gdn_data.h"
#include "common/mamba2_data.h"
#include "common/presets.h"
#include "common/strategy_equivalence.h"
#include "lib/pool_access.h"

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
  // default R = 3 T = 12 per layer, a factor record being u (32 x 128 f32) + e^g (32 f32) + kf
  // (16 f32) + k (16 x 128 bf16) = 20,672 B; pending counts, cursors and paths.
  EXPECT_EQ(pool.committed_bytes(), 77266944);
  EXPECT_EQ(pool.workspace_bytes(),
            36 * 4 * 16384 + 36 * 4 + 4 * 4 + int64_t{36} * 12 * 20672 + 36 * 8);
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

TEST(Replay, DefaultRingIsThreeWindowsUpToFiveExceptKdaAndTwoWindowsAndAtLeastSixElsewhere) {
  EXPECT_EQ(default_replay_ring(1), 6);
  EXPECT_EQ(default_replay_ring(2), 6);
  EXPECT_EQ(default_replay_ring(3), 6);
  EXPECT_EQ(default_replay_ring(4), 8);
  EXPECT_EQ(default_replay_ring(8), 16);
  // Gated DeltaNet and Mamba2: 3T while the longest replay (3T) fits the verify's chunk of 16
  // tokens, at least 8 from T = 2 (measured at T = 2 and 4: docs/cuda.md); KDA max(2T, 8) there
  // (its records' memory); the generic rule elsewhere (T = 1, T >= 6).
  const LayerKind gdn = LayerKind::kGatedDeltaNet;
  for (LayerKind kind : {gdn, LayerKind::kMamba2}) {
    EXPECT_EQ(default_replay_ring(kind, 1), 6);
    EXPECT_EQ(default_replay_ring(kind, 2), 8);
    EXPECT_EQ(default_replay_ring(kind, 3), 9);
    EXPECT_EQ(default_replay_ring(kind, 4), 12);
    EXPECT_EQ(default_replay_ring(kind, 5), 15);
    EXPECT_EQ(default_replay_ring(kind, 6), 12);
    EXPECT_EQ(default_replay_ring(kind, 8), 16);
  }
  const LayerKind kda = LayerKind::kKda;
  EXPECT_EQ(default_replay_ring(kda, 1), 6);
  EXPECT_EQ(default_replay_ring(kda, 2), 8);
  EXPECT_EQ(default_replay_ring(kda, 3), 8);
  EXPECT_EQ(default_replay_ring(kda, 4), 8);
  EXPECT_EQ(default_replay_ring(kda, 5), 10);
  EXPECT_EQ(default_replay_ring(kda, 8), 16);
  for (LayerKind kind : {gdn, LayerKind::kMamba2, kda}) {
    for (int T : {1, 6, 7, 8, 16}) EXPECT_EQ(default_replay_ring(kind, T), default_replay_ring(T));
    // Every default keeps the longest replay of a verify (history up to R - T, then the window)
    // within the chunk where it is larger than the generic ring.
    for (int T = 1; T <= 16; ++T) {
      const int64_t R = default_replay_ring(kind, T);
      EXPECT_GE(R, 2 * T);
      if (R > default_replay_ring(T)) EXPECT_LE(R, 16) << "T = " << T;
    }
  }
  // A window no pool accepts is refused, naming it (default_replay_ring(0) answered 6, and a
  // window near 2^62 overflowed 3T).
  for (int64_t bad :
       {int64_t{0}, int64_t{-3}, int64_t{PoolOptions::kMaxWindow} + 1, int64_t{1} << 62}) {
    const std::string named = "default_replay_ring: max_window = " + std::to_string(bad);
    expect_rejected([&] { default_replay_ring(bad); }, Status::kInvalidArgument, {named});
    for (LayerKind kind : {gdn, LayerKind::kMamba2, LayerKind::kKda})
      expect_rejected([&] { default_replay_ring(kind, bad); }, Status::kInvalidArgument, {named});
  }
  EXPECT_EQ(default_replay_ring(PoolOptions::kMaxWindow), 2 * int64_t{PoolOptions::kMaxWindow});
  // A pool with replay_ring = 0 has exactly the records of an explicit default ring: GDN at T = 2
  // (R = 8, not 2T = 4) and T = 4 (R = 12), Mamba2 at T = 4 (R = 12, not 2T = 8).
  const ModelConfig m = ModelConfig::gated_delta_net(2, gdn_preset("small_f32"));
  const ModelConfig m2 = ModelConfig::mamba2(2, mamba2_preset("m2_small_f32"));
  for (int T : {2, 4}) {
    PoolOptions def = replay_options(2, 2, T), explicit_ring = def, two_t = def;
    explicit_ring.replay_ring = static_cast<int>(default_replay_ring(gdn, T));
    two_t.replay_ring = 2 * T;
    const int64_t w = StatePool(m, def).workspace_bytes();
    EXPECT_EQ(w, StatePool(m, explicit_ring).workspace_bytes()) << "T = " << T;
    EXPECT_GT(w, StatePool(m, two_t).workspace_bytes()) << "T = " << T;
  }
  PoolOptions def = replay_options(2, 2, 4), three_t = def, two_t = def;
  three_t.replay_ring = 12;
  two_t.replay_ring = 8;
  EXPECT_EQ(StatePool(m2, def).workspace_bytes(), StatePool(m2, three_t).workspace_bytes());
  EXPECT_GT(StatePool(m2, def).workspace_bytes(), StatePool(m2, two_t).workspace_bytes());
}

TEST(Replay, FoldLimitIsTheWholeRingFromEightRowsAndTheSmallRingsBelow) {
  // T = 4, R = 12: the whole ring allows h <= 4 without a fold; a ring of 2T, none.
  EXPECT_EQ(replay_fold_limit(4, 12, 1), 0);
  EXPECT_EQ(replay_fold_limit(4, 12, 7), 0);
  EXPECT_EQ(replay_fold_limit(4, 12, 8), 4);
  EXPECT_EQ(replay_fold_limit(4, 12, 15), 4);
  EXPECT_EQ(replay_fold_limit(4, 12, 128), 4);
  EXPECT_EQ(replay_fold_limit(4, 8, 128), 0);
  EXPECT_EQ(replay_fold_limit(4, 40, 7), 0);
  EXPECT_EQ(replay_fold_limit(4, 40, 8), 32);
  // T <= 2: the small limit is max(2T, 6) - 2T, what R = 6 allows.
  EXPECT_EQ(replay_fold_limit(1, 6, 1), 4);
  EXPECT_EQ(replay_fold_limit(1, 12, 1), 4);
  EXPECT_EQ(replay_fold_limit(2, 6, 1), 2);
  EXPECT_EQ(replay_fold_limit(2, 4, 1), 0);
  EXPECT_EQ(replay_fold_limit(2, 12, 16), 8);
  // fold_rows moves the 8 (0: the default; 1: the whole ring always).
  EXPECT_EQ(replay_fold_limit(4, 12, 1, 1), 4);
  EXPECT_EQ(replay_fold_limit(4, 12, 2, 3), 0);
  EXPECT_EQ(replay_fold_limit(4, 12, 3, 3), 4);
  EXPECT_EQ(replay_fold_limit(4, 12, 7, 0), 0);
  EXPECT_EQ(replay_fold_limit(4, 12, 8, 16), 0);  // the old default, on request
  // The ring model follows the round's rows: at T = 4, R = 12 a small round folds whenever it
  // has history, as R = 8 does; a large one about every other round.
  const ReplayRingModel small = replay_ring_model(4, 12, 7), r8 = replay_ring_model(4, 8);
  EXPECT_DOUBLE_EQ(small.fold_rate, r8.fold_rate);
  EXPECT_DOUBLE_EQ(small.mean_history, r8.mean_history);
  EXPECT_DOUBLE_EQ(replay_ring_model(4, 12).fold_rate, replay_ring_model(4, 12, 16).fold_rate);
  EXPECT_LT(replay_ring_model(4, 12, 16).fold_rate, 0.6);
  EXPECT_GT(replay_ring_model(4, 12, 16).fold_rate, 0.4);
  for (const auto& c :
       {std::tuple{0, 6, 1, 0, "max_window = 0"}, std::tuple{4, 7, 1, 0, "ring = 7"},
        std::tuple{4, 12, 0, 0, "rows = 0"}, std::tuple{4, 12, 1, -1, "fold_rows = -1"}}) {
    expect_rejected(
        [&] { replay_fold_limit(std::get<0>(c), std::get<1>(c), std::get<2>(c), std::get<3>(c)); },
        Status::kInvalidArgument, {std::get<4>(c)});
  }
  EXPECT_THROW(replay_ring_model(4, 12, 0), Error);
  EXPECT_THROW(replay_ring_model(4, 12, 16, -1), Error);
  // fold_rows moves the model's threshold as it moves the pool's.
  EXPECT_DOUBLE_EQ(replay_ring_model(4, 12, 2, 1).fold_rate, replay_ring_model(4, 12).fold_rate);
  EXPECT_DOUBLE_EQ(replay_ring_model(4, 12, 20, 32).fold_rate, r8.fold_rate);
}

// The fold limit is the round's: on a caller-owned replay pool (the checkpoint is the caller's
// memory, so a fold is visible at the verify) with T = 4 and the default ring (12), a verify
// with history 2 folds in a round of fewer than replay_fold_rows rows and not in a larger one.
TEST(Replay, AVerifyFoldsByItsRoundsRows) {
  const GdnConfig g = gdn_preset("small_f32");
  const ModelConfig m = ModelConfig::gated_delta_net(1, g);
  for (int fold_rows : {2, 0}) {
    SCOPED_TRACE("replay_fold_rows = " + std::to_string(fold_rows));
    auto mem = host_memory();
    PoolOptions o = replay_options(2, 2, 4);
    o.replay_fold_rows = fold_rows;
    const CallerMemory cm = make_caller_memory(m, o, CallerLayout::kOneTensor, *mem, 7);
    StatePool pool(m, o, cm.views);
    std::mt19937_64 rng(11);
    const LayerWeights w = random_weights(g, rng);
    const SlotHandle a = pool.acquire(), b = pool.acquire();
    auto verify = [&](std::vector<SlotHandle> rows) {
      const int n = static_cast<int>(rows.size());
      TokenInputs in = random_inputs(g, 4 * n, rng);
      TokenOutputs out = make_outputs(g, 4 * n);
      const std::vector<uint8_t> before = mem->bytes(cm.views.ssm[0]);
      pool.begin_verify(VerifyBatch{rows, 4, {}});
      pool.verify(0, w.view(), in.view(), out.view());
      const bool changed = mem->bytes(cm.views.ssm[0]) != before;
      EXPECT_GT(sum_squares(out.core_out.view()), 0.0);
      return changed;
    };
    EXPECT_FALSE(verify({a}));             // no history yet
    pool.commit(std::vector<int32_t>{2});  // two tokens accepted: h = 2
    // Two rows: with replay_fold_rows = 2 the whole ring (h = 2 <= 4, no fold); by default
    // (8 for GDN) the small limit (h = 2 > 0: a fold).
    EXPECT_EQ(verify({a, b}), fold_rows == 0);
    pool.commit(std::vector<int32_t>{1, 1});
    // One row: the small limit either way; a has history (3 records, or 1 after the fold).
    EXPECT_TRUE(verify({a}));
    pool.commit(std::vector<int32_t>{3});
    EXPECT_GT(sum_squares(pool.ssm_state(0)), 0.0);
  }
}

// Mamba2's default fold rows is 1 (default_replay_fold_rows): a round of any size uses the whole
// ring (measured faster from one row once its verify ran two channels a thread). On a caller-owned
// pool with T = 4 and Mamba2's default ring (12), a one-row verify with history 2 does not fold
// by default, and folds with replay_fold_rows = 8 (GDN's and KDA's default, the small limit).
TEST(Replay, AMamba2VerifyUsesTheWholeRingInRoundsOfAnySize) {
  EXPECT_EQ(default_replay_fold_rows(LayerKind::kMamba2), 1);
  EXPECT_EQ(default_replay_fold_rows(LayerKind::kGatedDeltaNet), 8);
  EXPECT_EQ(default_replay_fold_rows(LayerKind::kKda), 8);
  const Mamba2Config c = mamba2_preset("m2_small_f32");
  const ModelConfig m = ModelConfig::mamba2(1, c);
  for (int fold_rows : {0, 8}) {
    SCOPED_TRACE("replay_fold_rows = " + std::to_string(fold_rows));
    auto mem = host_memory();
    PoolOptions o = replay_options(1, 1, 4);
    o.replay_fold_rows = fold_rows;
    const CallerMemory cm = make_caller_memory(m, o, CallerLayout::kOneTensor, *mem, 7);
    StatePool pool(m, o, cm.views);
    std::mt19937_64 rng(13);
    const Mamba2LayerWeights w = random_weights(c, rng);
    const SlotHandle a = pool.acquire();
    auto verify = [&] {
      Mamba2TokenInputs in = random_inputs(c, 4, rng);
      Mamba2TokenOutputs out = make_outputs(c, 4);
      const std::vector<uint8_t> before = mem->bytes(cm.views.ssm[0]);
      pool.begin_verify(VerifyBatch{{a}, 4, {}});
      pool.verify(0, w.view(), in.view(), out.view());
      EXPECT_GT(sum_squares(out.y.view()), 0.0);
      return mem->bytes(cm.views.ssm[0]) != before;
    };
    EXPECT_FALSE(verify());                // no history yet
    pool.commit(std::vector<int32_t>{2});  // h = 2
    // The whole ring allows h <= R - 2T = 4 without a fold; the small limit, none.
    EXPECT_EQ(verify(), fold_rows == 8);
    pool.commit(std::vector<int32_t>{3});  // h = 5 by default (past 4: the next verify folds)
    EXPECT_TRUE(verify());
    pool.commit(std::vector<int32_t>{1});
    EXPECT_GT(sum_squares(pool.ssm_state(0)), 0.0);
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

TEST(Replay, NegativeFoldRowsAreRejectedNamingThem) {
  const ModelConfig m = ModelConfig::gated_delta_net(1, gdn_preset("small_f32"));
  for (int fold_rows : {-1, -16}) {
    PoolOptions o = replay_options(2, 2, 4);
    o.replay_fold_rows = fold_rows;
    expect_rejected([&] { StatePool pool(m, o); }, Status::kInvalidArgument,
                    {"options.replay_fold_rows = " + std::to_string(fold_rows)});
  }
  for (int fold_rows : {0, 1, 16, 1 << 30}) {
    PoolOptions o = replay_options(2, 2, 4);
    o.replay_fold_rows = fold_rows;
    EXPECT_NO_THROW(StatePool(m, o)) << fold_rows;
  }
}

// The pool and the ring helpers take one range of rings (PoolOptions::kMaxReplayRing): the pool
// accepted rings up to 2^30 - 1 (and named 2^30 as its limit when refusing 2^30) while
// replay_fold_limit / replay_ring_model refused a valid pool's ring above 2^20. Negative ring and
// fold-row values are refused by snapshot pools too (they were kept in options()), and the
// defaults refuse a kind that is no LayerKind (they answered 12 and 8).
TEST(Replay, OneRingRangeForThePoolAndTheHelpersAndNegativeValuesEverywhere) {
  const ModelConfig m = ModelConfig::gated_delta_net(1, gdn_preset("small_f32"));
  for (int ring : {PoolOptions::kMaxReplayRing + 1, 1 << 30}) {
    PoolOptions o = replay_options(2, 2, 4);
    o.replay_ring = ring;
    expect_rejected([&] { StatePool pool(m, o); }, Status::kInvalidArgument,
                    {"options.replay_ring = " + std::to_string(ring),
                     "kMaxReplayRing = " + std::to_string(PoolOptions::kMaxReplayRing)});
  }
  EXPECT_GE(replay_fold_limit(4, PoolOptions::kMaxReplayRing, 16), 0);
  expect_rejected([&] { replay_fold_limit(4, PoolOptions::kMaxReplayRing + 1, 16); },
                  Status::kInvalidArgument, {"ring = 1048577", "kMaxReplayRing"});
  for (Strategy strategy : {Strategy::kSnapshot, Strategy::kReplay}) {
    PoolOptions o = replay_options(2, 2, 4);
    o.strategy = strategy;
    o.replay_ring = -5;
    expect_rejected([&] { StatePool pool(m, o); }, Status::kInvalidArgument,
                    {"options.replay_ring = -5"});
    o.replay_ring = 0;
    o.replay_fold_rows = -7;
    expect_rejected([&] { StatePool pool(m, o); }, Status::kInvalidArgument,
                    {"options.replay_fold_rows = -7"});
  }
  const LayerKind none = static_cast<LayerKind>(9);
  expect_rejected([&] { default_replay_ring(none, 4); }, Status::kInvalidArgument,
                  {"default_replay_ring", "kind = 9"});
  expect_rejected([&] { default_replay_fold_rows(none); }, Status::kInvalidArgument,
                  {"default_replay_fold_rows", "kind = 9"});
}

// A dtype that is none of DType's is named by its value (the message said "unknown dtype").
TEST(Replay, ADTypeOutsideTheEnumIsNamedByItsValue) {
  GdnConfig g = gdn_preset("small_f32");
  g.ssm_state_dtype = static_cast<DType>(7);
  expect_rejected([&] { ModelConfig::gated_delta_net(1, g).validate(); }, Status::kInvalidArgument,
                  {"gdn.ssm_state_dtype = 7 (not a DType)"});
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

// A slot's committed bytes as the pool's memory holds them, read without materializing (the
// pool's views, committed_bytes' source, materialize every live slot first).
std::vector<uint8_t> raw_slot_bytes(const StatePool& pool, const SlotHandle& h) {
  const detail::PoolStorage& st = detail::PoolAccess::storage(pool);
  const int slot = pool.slot_index(h);
  std::vector<uint8_t> out;
  for (int l = 0; l < pool.config().num_layers; ++l) {
    const char* conv = st.conv(l, slot);
    const char* ssm = st.ssm(l, slot);
    out.insert(out.end(), conv, conv + st.conv_slot_stride);
    out.insert(out.end(), ssm, ssm + st.ssm_slot_stride);
  }
  return out;
}

// Materialize of a list of handles makes those slots' memory exact and leaves the others'
// history pending; it is idempotent, and changes nothing a view can see (views materialize
// themselves). The memory is read raw: through the views, materialize({r}) doing nothing would
// pass unseen.
TEST(Replay, MaterializeMakesTheMemoryExactOnceAndIsIdempotent) {
  std::mt19937_64 rng(21);
  const GdnConfig g = gdn_preset("small_f32");
  const ModelConfig m = ModelConfig::gated_delta_net(2, g);
  PoolOptions o = replay_options(2, 2, 3);
  StatePool replay(m, o);
  o.strategy = Strategy::kSnapshot;
  StatePool snap(m, o);
  const SlotHandle r1 = replay.acquire(), r2 = replay.acquire();
  const SlotHandle s1 = snap.acquire(), s2 = snap.acquire();
  ASSERT_EQ(replay.slot_index(r2), snap.slot_index(s2));
  std::vector<LayerWeights> w = {random_weights(g, rng), random_weights(g, rng)};
  TokenInputs in = random_inputs(g, 6, rng);
  TokenOutputs out = make_outputs(g, 6);
  for (StatePool* p : {&replay, &snap}) {
    const bool rp = p == &replay;
    p->begin_verify(VerifyBatch{{rp ? r1 : s1, rp ? r2 : s2}, 3, {}});
    for (int l = 0; l < 2; ++l)
      p->verify(l, w[static_cast<std::size_t>(l)].view(), in.view(), out.view());
    p->commit(std::vector<int32_t>{2, 3});
  }
  ASSERT_NE(raw_slot_bytes(replay, r1), raw_slot_bytes(snap, s1));  // history pending
  ASSERT_NE(raw_slot_bytes(replay, r2), raw_slot_bytes(snap, s2));
  replay.materialize({r1});
  EXPECT_EQ(raw_slot_bytes(replay, r1), raw_slot_bytes(snap, s1));
  EXPECT_NE(raw_slot_bytes(replay, r2), raw_slot_bytes(snap, s2));  // not in the list
  replay.materialize({r1});
  EXPECT_EQ(raw_slot_bytes(replay, r1), raw_slot_bytes(snap, s1));
  replay.materialize();
  EXPECT_EQ(raw_slot_bytes(replay, r2), raw_slot_bytes(snap, s2));
  EXPECT_EQ(committed_bytes(replay), committed_bytes(snap));
  EXPECT_GT(sum_squares(replay.ssm_state(1)), 0.0);
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
