// A layer verified more than once in one round (include/specstate/pool.h StatePool::verify,
// docs/lifecycle.md), for every layer kind, both strategies, chains and trees, bit-exact:
//   - a repeated verify with the same inputs gives the first one's outputs, and the round
//     commits exactly as a round with one verify per layer;
//   - with other inputs the last verify of a layer wins: its outputs and the committed state
//     equal a round that verified the layer once with those inputs;
//   - commit still needs every layer verified at least once.
// tests/common/strategy_equivalence.cpp repeats verifies at random; this pins the contract.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/expect.h"
#include "common/kind_cases.h"
#include "common/pool_rounds.h"
#include "common/slot_cases.h"
#include "common/twin_pools.h"

namespace specstate::test {
namespace {

using RepeatCase = KindCase;

const std::vector<KindCase>& cases() { return kind_window_strategy_cases(); }

constexpr int kLayers = 3;
constexpr int kT = kRoundT;
constexpr int kRequests = 2;

class RepeatedVerify : public ::testing::TestWithParam<RepeatCase> {};

TEST_P(RepeatedVerify, SameInputsGiveTheFirstOutputsAndCommitAsOneVerify) {
  const RepeatCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 1731);
    Twins<Kind> t(r, c, kRequests);
    const int64_t n = int64_t{kRequests} * kT;
    const auto in = r.inputs(n);
    const std::vector<int32_t> accepted = round_accept(c.tree, {4, 2});
    // p: every layer, then layer 1 again (after the others), then layer 0 twice in a row.
    auto first = r.outputs(n), again = r.outputs(n);
    t.p.begin_verify(round_batch(c.tree, t.hp));
    r.verify(t.p, in, first, 0, kLayers);
    r.verify(t.p, in, again, 1, 2);
    r.verify(t.p, in, again, 0, 1);
    r.verify(t.p, in, again, 0, 1);
    for (int l = 0; l < 2; ++l) {
      const std::vector<typename Kind::HostOutputs> f = {first[l]}, a = {again[l]};
      EXPECT_EQ(PoolRounds<Kind>::output_bytes(a, 0, n), PoolRounds<Kind>::output_bytes(f, 0, n))
          << "the repeated verify of layer " << l << " gave other outputs";
    }
    t.p.commit(accepted);
    const auto want = r.round(t.ref, round_batch(c.tree, t.hr), in, accepted);
    expect_same_outputs(PoolRounds<Kind>::output_bytes(first, 0, n),
                        PoolRounds<Kind>::output_bytes(want, 0, n), "the verify outputs");
    for (int i = 0; i < kRequests; ++i) t.expect_same_nonzero_state(i, "after the commit");
    t.expect_same_next_round({3, 1});
  });
}

TEST_P(RepeatedVerify, TheLastVerifyOfALayerIsTheOneCommitted) {
  const RepeatCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 1732);
    Twins<Kind> t(r, c, kRequests);
    const int64_t n = int64_t{kRequests} * kT;
    const auto stale = r.inputs(n), in = r.inputs(n);
    const std::vector<int32_t> accepted = round_accept(c.tree, {3, 4});
    // p: every layer with other tokens first (a dropped forward pass), then with the round's.
    auto dropped = r.outputs(n), last = r.outputs(n);
    t.p.begin_verify(round_batch(c.tree, t.hp));
    r.verify(t.p, stale, dropped, 0, kLayers);
    r.verify(t.p, in, last, 0, kLayers);
    t.p.commit(accepted);
    const auto want = r.round(t.ref, round_batch(c.tree, t.hr), in, accepted);
    EXPECT_EQ(PoolRounds<Kind>::output_bytes(last, 0, n),
              PoolRounds<Kind>::output_bytes(want, 0, n));
    expect_nonzero(PoolRounds<Kind>::output_bytes(want, 0, n), "the committed window's outputs");
    expect_nonzero(exported(t.ref, t.hr[0]), "the reference's committed state");
    EXPECT_NE(PoolRounds<Kind>::output_bytes(dropped, 0, n),
              PoolRounds<Kind>::output_bytes(want, 0, n))
        << "the two windows must differ for this test to mean anything";
    t.expect_same_state("after the commit");
    t.expect_same_next_round({3, 1});
  });
}

TEST_P(RepeatedVerify, CommitStillNeedsEveryLayerVerified) {
  const RepeatCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 1733);
    Twins<Kind> t(r, c, kRequests);
    const int64_t n = int64_t{kRequests} * kT;
    const auto in = r.inputs(n);
    auto out = r.outputs(n);
    const std::vector<int32_t> accepted = round_accept(c.tree, {2, 2});
    t.p.begin_verify(round_batch(c.tree, t.hp));
    r.verify(t.p, in, out, 0, 2);
    r.verify(t.p, in, out, 1, 2);  // layer 1 twice, layer 2 never
    expect_rejected([&] { t.p.commit(accepted); }, Status::kFailedPrecondition,
                    {"StatePool::commit", "layer 2 was not verified"});
    EXPECT_TRUE(t.p.round_open());
    r.verify(t.p, in, out, 2, 3);
    t.p.commit(accepted);
    const auto want = r.round(t.ref, round_batch(c.tree, t.hr), in, accepted);
    expect_same_outputs(PoolRounds<Kind>::output_bytes(out, 0, n),
                        PoolRounds<Kind>::output_bytes(want, 0, n), "the verify outputs");
    for (int i = 0; i < kRequests; ++i) t.expect_same_nonzero_state(i, "after the commit");
    t.expect_same_next_round({3, 1});
  });
}

INSTANTIATE_TEST_SUITE_P(Cpu, RepeatedVerify, ::testing::ValuesIn(cases()), kind_case_name);

}  // namespace
}  // namespace specstate::test
