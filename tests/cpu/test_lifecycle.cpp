// The round lifecycle (DESIGN.md section 5.6, docs/lifecycle.md), for every layer kind, both
// strategies, chains and trees, bit-exact against a reference pool that never made the call:
//   - begin_verify over a round that verified a layer is rejected and changes nothing; over a
//     round that verified none it replaces it;
//   - abort_round() then a new round equals never having started the first;
//   - a row released mid-round becomes padding (its commit value must be keep), the other rows
//     commit, and the released slot's pending steps do not leak into its next occupant.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/expect.h"
#include "common/kind_cases.h"
#include "common/pool_rounds.h"
#include "common/twin_pools.h"

namespace specstate::test {
namespace {

using LifecycleCase = KindCase;

const std::vector<KindCase>& cases() { return kind_window_strategy_cases(); }

constexpr int kLayers = 3;
constexpr int kT = kRoundT;

template <typename F>
void for_kind(const LifecycleCase& c, F&& f) {
  specstate::test::for_kind(c.preset, std::forward<F>(f));
}

VerifyBatch batch_of(const LifecycleCase& c, std::vector<SlotHandle> rows) {
  return round_batch(c.tree, std::move(rows));
}

std::vector<int32_t> accept(const LifecycleCase& c, const std::vector<int>& steps) {
  return round_accept(c.tree, steps);
}

class Lifecycle : public ::testing::TestWithParam<LifecycleCase> {};

// The refusal's list of verified layers is bounded: runs as ranges, at most 16 of them, then a
// count (it listed every layer: 8.3 MB for a round of 2^20 layers).
TEST(LifecycleMessages, TheVerifiedLayersOfARefusalAreListedAsBoundedRanges) {
  GdnConfig g;
  g.num_k_heads = g.num_v_heads = 1;
  g.head_k_dim = g.head_v_dim = 2;
  g.conv_width = 2;
  g.act_dtype = g.conv_state_dtype = g.ssm_state_dtype = DType::kF32;
  const int L = 4096;
  PoolRounds<GdnKind> r(g, L, 7);
  StatePool p = r.pool(Strategy::kReplay, 1, 1, kT);
  const SlotHandle h = p.acquire();
  const auto in = r.inputs(kT);
  auto out = r.outputs(kT);
  p.begin_verify(round_batch(false, {h}));
  const auto refusal = [&] {
    try {
      p.begin_verify(round_batch(false, {h}));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "begin_verify over a verified round accepted";
    return std::string();
  };
  r.verify(p, in, out, 0, 3);
  r.verify(p, in, out, 5, 6);
  EXPECT_NE(refusal().find("verified layers 0-2, 5 of 4096"), std::string::npos) << refusal();
  r.verify(p, in, out, 6, L - 1);  // 0-2, 5-4094
  EXPECT_NE(refusal().find("verified layers 0-2, 5-4094 of 4096"), std::string::npos) << refusal();
  p.abort_round();
  p.begin_verify(round_batch(false, {h}));
  for (int l = 0; l < L; l += 2) r.verify(p, in, out, l, l + 1);  // 2048 runs of one layer
  const std::string many = refusal();
  EXPECT_NE(many.find("verified layers 0, 2, 4, "), std::string::npos) << many;
  EXPECT_NE(many.find(", 30 and 2032 more of 4096"), std::string::npos) << many;
  EXPECT_LT(many.size(), 600u) << many;
  p.abort_round();
}

TEST_P(Lifecycle, BeginVerifyOverAVerifiedRoundIsRejectedAndChangesNothing) {
  const LifecycleCase& c = GetParam();
  for_kind(c, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 101);
    Twins<Kind> t(r, c, 2);
    const auto in = r.inputs(2 * kT);
    auto out_p = r.outputs(2 * kT), out_r = r.outputs(2 * kT);
    t.p.begin_verify(batch_of(c, t.hp));
    r.verify(t.p, in, out_p, 0, 2);
    const auto a = exported(t.p, t.hp[0]), b = exported(t.p, t.hp[1]);
    expect_rejected([&] { t.p.begin_verify(batch_of(c, {t.hp[1]})); }, Status::kFailedPrecondition,
                    {"StatePool::begin_verify", "open round (2 rows, window 4)",
                     "verified layers 0, 1 of 3", "abort_round()"});
    EXPECT_TRUE(t.p.round_open());
    ASSERT_EQ(t.p.current_batch().rows.size(), 2u);
    EXPECT_EQ(t.p.current_batch().rows[0], t.hp[0]);
    EXPECT_EQ(exported(t.p, t.hp[0]), a);
    EXPECT_EQ(exported(t.p, t.hp[1]), b);
    // The round goes on as if the call had not been made.
    r.verify(t.p, in, out_p, 2, kLayers);
    t.p.commit(accept(c, {3, 2}));
    t.ref.begin_verify(batch_of(c, t.hr));
    r.verify(t.ref, in, out_r, 0, kLayers);
    t.ref.commit(accept(c, {3, 2}));
    EXPECT_EQ(r.output_bytes(out_p, 0, 2 * kT), r.output_bytes(out_r, 0, 2 * kT));
    t.expect_same_nonzero_state(0, "after commit");
    t.expect_same_nonzero_state(1, "after commit");
  });
}

TEST_P(Lifecycle, BeginVerifyOverAnUnverifiedRoundReplacesIt) {
  const LifecycleCase& c = GetParam();
  for_kind(c, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 102);
    Twins<Kind> t(r, c, 2);
    t.p.begin_verify(batch_of(c, {t.hp[0]}));
    const auto in = r.inputs(2 * kT);
    r.round(t.p, batch_of(c, {t.hp[1], t.hp[0]}), in, accept(c, {2, 4}));
    r.round(t.ref, batch_of(c, {t.hr[1], t.hr[0]}), in, accept(c, {2, 4}));
    t.expect_same_nonzero_state(0, "after the replacing round");
    t.expect_same_nonzero_state(1, "after the replacing round");
  });
}

TEST_P(Lifecycle, AbortRoundThenANewRoundEqualsNeverStartingTheFirst) {
  const LifecycleCase& c = GetParam();
  for_kind(c, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    for (int verified = 0; verified <= kLayers; ++verified) {
      SCOPED_TRACE("layers verified before abort_round: " + std::to_string(verified));
      PoolRounds<Kind> r(layer, kLayers, 103 + verified);
      Twins<Kind> t(r, c, 3);
      expect_rejected([&] { t.p.abort_round(); }, Status::kFailedPrecondition,
                      {"StatePool::abort_round", "no open round"});
      const auto dropped = r.inputs(3 * kT);
      auto out = r.outputs(3 * kT);
      t.p.begin_verify(batch_of(c, t.hp));
      r.verify(t.p, dropped, out, 0, verified);
      t.p.abort_round();
      EXPECT_FALSE(t.p.round_open());
      EXPECT_TRUE(t.p.current_batch().rows.empty());
      expect_rejected(
          [&] {
            t.p.commit(accept(c, {1, 1, 1}));
          },
          Status::kFailedPrecondition, {"no open round"});
      expect_rejected([&] { t.p.abort_round(); }, Status::kFailedPrecondition, {"no open round"});
      for (int i = 0; i < 3; ++i) t.expect_same_nonzero_state(i, "after abort_round");
      // A new round (other rows, other order) equals the reference's only round.
      const auto in = r.inputs(2 * kT);
      const auto op = r.round(t.p, batch_of(c, {t.hp[2], t.hp[0]}), in, accept(c, {4, 1}));
      const auto orf = r.round(t.ref, batch_of(c, {t.hr[2], t.hr[0]}), in, accept(c, {4, 1}));
      EXPECT_EQ(r.output_bytes(op, 0, 2 * kT), r.output_bytes(orf, 0, 2 * kT));
      for (int i = 0; i < 3; ++i) t.expect_same_nonzero_state(i, "after the next round");
      // And a prefill of the aborted round's rows is allowed again.
      const auto more = r.inputs(2);
      r.prefill(t.p, t.hp[1], more);
      r.prefill(t.ref, t.hr[1], more);
      t.expect_same_nonzero_state(1, "after a prefill");
    }
  });
}

TEST_P(Lifecycle, ARowReleasedMidRoundBecomesPaddingAndTheOthersCommit) {
  const LifecycleCase& c = GetParam();
  for_kind(c, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    for (int verified = 0; verified <= kLayers; ++verified) {
      SCOPED_TRACE("layers verified before release: " + std::to_string(verified));
      PoolRounds<Kind> r(layer, kLayers, 107 + verified);
      Twins<Kind> t(r, c, 3);
      const auto in = r.inputs(3 * kT);
      auto out_p = r.outputs(3 * kT), out_r = r.outputs(3 * kT);
      const SlotHandle gone = t.hp[1];
      t.p.begin_verify(batch_of(c, t.hp));
      r.verify(t.p, in, out_p, 0, verified);
      t.p.release(gone);
      EXPECT_TRUE(t.p.round_open());
      EXPECT_TRUE(t.p.current_batch().rows[1].is_padding());
      EXPECT_EQ(t.p.current_batch().rows[0], t.hp[0]);
      r.verify(t.p, in, out_p, verified, kLayers);
      const auto a0 = exported(t.p, t.hp[0]), a2 = exported(t.p, t.hp[2]);
      // The released row must keep: anything else is rejected naming the row, nothing changes.
      expect_rejected(
          [&] {
            t.p.commit(accept(c, {3, 2, 1}));
          },
          Status::kFailedPrecondition,
          {"accepted[1]", "batch.rows[1]", "released during the round",
           c.tree ? "must keep (-1)" : "must keep (0)"});
      EXPECT_TRUE(t.p.round_open());
      EXPECT_EQ(exported(t.p, t.hp[0]), a0);
      EXPECT_EQ(exported(t.p, t.hp[2]), a2);
      t.p.commit(accept(c, {3, 0, 1}));
      // The reference: the same round with a padding row from the start.
      t.ref.begin_verify(batch_of(c, {t.hr[0], SlotHandle::padding(), t.hr[2]}));
      r.verify(t.ref, in, out_r, 0, kLayers);
      t.ref.commit(accept(c, {3, 0, 1}));
      t.ref.release(t.hr[1]);
      EXPECT_EQ(r.output_bytes(out_p, 0, kT), r.output_bytes(out_r, 0, kT));
      EXPECT_EQ(r.output_bytes(out_p, 2 * kT, kT), r.output_bytes(out_r, 2 * kT, kT));
      t.expect_same_nonzero_state(0, "after commit");
      t.expect_same_nonzero_state(2, "after commit");
      // The slot's next occupant starts from zero: no pending step of the released request
      // leaks into it (replay: its device counts of the verified layers were stale).
      const SlotHandle next = t.p.acquire(), next_ref = t.ref.acquire();
      ASSERT_EQ(next.slot, gone.slot);
      for (uint8_t byte : exported(t.p, next)) ASSERT_EQ(byte, 0);
      t.hp[1] = next;
      t.hr[1] = next_ref;
      const auto fresh = r.inputs(2);
      r.prefill(t.p, next, fresh);
      r.prefill(t.ref, next_ref, fresh);
      const auto in2 = r.inputs(3 * kT);
      r.round(t.p, batch_of(c, t.hp), in2, accept(c, {1, 2, 3}));
      r.round(t.ref, batch_of(c, t.hr), in2, accept(c, {1, 2, 3}));
      for (int i = 0; i < 3; ++i) t.expect_same_nonzero_state(i, "after the next occupant's round");
    }
  });
}

TEST_P(Lifecycle, AReleasedRowsSlotMayBeReacquiredAndAdvancedInsideTheRound) {
  const LifecycleCase& c = GetParam();
  for_kind(c, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 111);
    Twins<Kind> t(r, c, 2);
    const auto in = r.inputs(2 * kT);
    auto out = r.outputs(2 * kT);
    t.p.begin_verify(batch_of(c, t.hp));
    r.verify(t.p, in, out, 0, 1);
    t.p.release(t.hp[0]);
    const SlotHandle again = t.p.acquire();
    ASSERT_EQ(again.slot, t.hp[0].slot);
    // The new occupant is no row of the round: it may be advanced, and the commit leaves it.
    const auto fresh = r.inputs(3);
    r.prefill(t.p, again, fresh);
    const auto before = exported(t.p, again);
    r.verify(t.p, in, out, 1, kLayers);
    t.p.commit(accept(c, {0, 2}));
    EXPECT_EQ(exported(t.p, again), before);
    // Bit-identical to a fresh request that never was in a round.
    t.ref.release(t.hr[0]);
    const SlotHandle ref_again = t.ref.acquire();
    r.prefill(t.ref, ref_again, fresh);
    EXPECT_EQ(exported(t.ref, ref_again), before);
  });
}

INSTANTIATE_TEST_SUITE_P(Cpu, Lifecycle, ::testing::ValuesIn(cases()), kind_case_name);

}  // namespace
}  // namespace specstate::test
