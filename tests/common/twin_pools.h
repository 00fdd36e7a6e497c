// Two pools of one PoolRounds model with the same requests, prefilled alike and one committed
// round behind them (so that replay has pending steps): the calls under test go to `p`, the twin
// `ref` never sees them, and the two are compared after (tests/cpu/test_lifecycle.cpp,
// test_repeated_verify.cpp, test_output_overlap.cpp, test_padding_handles.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/kind_cases.h"
#include "common/pool_rounds.h"

namespace specstate::test {

template <typename Kind>
struct Twins {
  using HostInputs = typename Kind::HostInputs;
  using HostOutputs = typename Kind::HostOutputs;

  PoolRounds<Kind>& r;
  const bool tree;
  const int requests;
  StatePool p, ref;
  std::vector<SlotHandle> hp, hr;

  // Request i prefilled with 3 + i tokens in both pools, then one round of kRoundT tokens per
  // row committing 1 + (i + 1) % kRoundT of request i's (2, 3, 4, 1, ...) in both.
  Twins(PoolRounds<Kind>& rounds, const KindCase& c, int num_requests)
      : r(rounds),
        tree(c.tree),
        requests(num_requests),
        p(rounds.pool(c.strategy)),
        ref(rounds.pool(c.strategy)) {
    std::vector<int> steps;
    for (int i = 0; i < requests; ++i) {
      hp.push_back(p.acquire());
      hr.push_back(ref.acquire());
      const auto in = r.inputs(3 + i);
      r.prefill(p, hp.back(), in);
      r.prefill(ref, hr.back(), in);
      steps.push_back(1 + (i + 1) % kRoundT);
    }
    const auto in = r.inputs(int64_t{requests} * kRoundT);
    r.round(p, batch(hp), in, accept(steps));
    r.round(ref, batch(hr), in, accept(steps));
  }

  // The round's batch over `rows` (chain or tree as the case says).
  VerifyBatch batch(const std::vector<SlotHandle>& rows) const { return round_batch(tree, rows); }
  // The commit values of `steps` accepted tokens per row.
  std::vector<int32_t> accept(const std::vector<int>& steps) const {
    return round_accept(tree, steps);
  }

  // Every request's committed state is the same in both pools.
  void expect_same_state(const std::string& when) {
    for (int i = 0; i < requests; ++i) {
      EXPECT_EQ(exported(p, hp[i]), exported(ref, hr[i])) << when << ": request " << i;
    }
  }

  // Request i's committed state is the same in both pools and not all zero.
  void expect_same_nonzero_state(int i, const std::string& when) {
    const auto a = exported(p, hp[i]);
    EXPECT_EQ(a, exported(ref, hr[i])) << when << ": request " << i;
    double norm = 0;
    for (uint8_t byte : a) norm += byte;
    EXPECT_GT(norm, 0) << when << ": request " << i << " is all zero";
  }

  // `got`, p's outputs of a round over `in` that accepted `steps`, equal ref's outputs of the same
  // round (run here), and the states go on alike.
  void expect_same_round(const std::vector<HostInputs>& in, const std::vector<HostOutputs>& got,
                         const std::vector<int>& steps) {
    const auto want = r.round(ref, batch(hr), in, accept(steps));
    const auto want_bytes = PoolRounds<Kind>::output_bytes(want, 0, int64_t{requests} * kRoundT);
    EXPECT_EQ(PoolRounds<Kind>::output_bytes(got, 0, int64_t{requests} * kRoundT), want_bytes);
    // Outputs start zeroed: a round that wrote nothing on either side would compare equal.
    double norm = 0;
    for (uint8_t byte : want_bytes) norm += byte;
    EXPECT_GT(norm, 0) << "the round's outputs are all zero";
    expect_same_state("after the next round");
  }

  // The next round, the same on both pools, accepting `steps`: outputs and states go on alike
  // (replay: from the pending steps the last commit left).
  void expect_same_next_round(const std::vector<int>& steps) {
    const auto in = r.inputs(int64_t{requests} * kRoundT);
    expect_same_round(in, r.round(p, batch(hp), in, accept(steps)), steps);
  }
};

}  // namespace specstate::test
