// The draft_verify_loop example as a test: greedy speculative decoding of a tiny hybrid model
// (GDN or KDA layers through StatePool, attention with a KV cache) emits exactly the tokens of
// plain autoregressive decoding and leaves bit-identical committed states.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "draft_verify_loop/hybrid_model.h"

namespace draft_verify_loop {
namespace {

struct Case {
  int window, requests, new_tokens;
  float noise;
  uint64_t seed;
  bool branch = false;
  bool kda = false;  // the recurrent layers are KDA (ModelShape::kda)
};

class DraftVerifyLoop : public ::testing::TestWithParam<Case> {};

TEST_P(DraftVerifyLoop, SpeculativeEqualsAutoregressive) {
  const Case c = GetParam();
  SCOPED_TRACE("seed " + std::to_string(c.seed) + " window " + std::to_string(c.window));
  LoopOptions o;
  o.window = c.window;
  o.requests = c.requests;
  o.new_tokens = c.new_tokens;
  o.draft_noise = c.noise;
  o.seed = c.seed;
  o.branch = c.branch;
  ModelShape shape;
  shape.kda = c.kda;
  const HybridModel target(shape, o.seed);
  EXPECT_EQ(target.state_config().kind,
            c.kda ? specstate::LayerKind::kKda : specstate::LayerKind::kGatedDeltaNet);
  const HybridModel drafter = target.perturbed(o.draft_noise, o.seed + 1);
  const LoopResult spec = run_speculative(target, drafter, o);
  std::vector<int> lengths;
  for (const auto& t : spec.tokens) {
    EXPECT_GE(static_cast<int>(t.size()), o.new_tokens);
    EXPECT_LT(static_cast<int>(t.size()), o.new_tokens + o.window);
    lengths.push_back(static_cast<int>(t.size()));
  }
  const LoopResult plain = run_autoregressive(target, o, lengths);
  for (int r = 0; r < o.requests; ++r) {
    SCOPED_TRACE("request " + std::to_string(r));
    EXPECT_EQ(spec.tokens[r], plain.tokens[r]);
    EXPECT_TRUE(spec.states[r] == plain.states[r]) << "committed states differ";
    EXPECT_TRUE(spec.caches[r] == plain.caches[r]) << "KV caches differ";
    // The state is not trivially zero.
    bool nonzero = false;
    for (uint8_t b : spec.states[r]) nonzero = nonzero || b != 0;
    EXPECT_TRUE(nonzero);
  }
  // Every round of every live request is in the histogram, and a >= 1 always.
  int64_t rounds = 0, tokens = 0;
  for (std::size_t a = 0; a < spec.accepted_histogram.size(); ++a) {
    rounds += spec.accepted_histogram[a];
    tokens += static_cast<int64_t>(a) * spec.accepted_histogram[a];
  }
  EXPECT_EQ(spec.accepted_histogram[0], 0);
  int64_t emitted = 0;
  for (const auto& t : spec.tokens) emitted += static_cast<int64_t>(t.size());
  EXPECT_EQ(tokens, emitted);
  if (c.window > 1 && c.noise < 0.1f) {
    // A close drafter gets drafts accepted: fewer rounds than tokens.
    EXPECT_LT(rounds, emitted);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Loops, DraftVerifyLoop,
    ::testing::Values(Case{4, 3, 24, 0.05f, 1}, Case{1, 2, 10, 0.05f, 2}, Case{2, 4, 20, 0.05f, 3},
                      Case{6, 5, 40, 0.02f, 4}, Case{4, 3, 24, 1.0f, 5},  // a poor drafter
                      Case{8, 1, 30, 0.0f, 6},                            // a perfect drafter
                      // Draft trees: chain + second choices as leaves.
                      Case{4, 3, 24, 0.3f, 7, true}, Case{1, 2, 10, 0.3f, 8, true},
                      Case{5, 5, 40, 1.0f, 9, true},
                      // KDA layers: chains and trees, close and poor
                      Case{4, 3, 24, 0.05f, 10, false, true},
                      Case{6, 4, 30, 0.02f, 11, false, true}, Case{4, 3, 24, 0.3f, 12, true, true},
                      Case{5, 2, 20, 1.0f, 13, true, true}));

TEST(DraftVerifyLoop, TreesAcceptSecondChoices) {
  // With a mediocre drafter, the drafter's second choices (the tree's extra leaves) are
  // sometimes what the target wanted: the tree needs fewer rounds than the chain.
  LoopOptions o;
  o.window = 4;
  o.requests = 4;
  o.new_tokens = 40;
  o.seed = 31;
  const HybridModel target(ModelShape{}, 31);
  const HybridModel drafter = target.perturbed(0.3f, 32);
  o.branch = true;
  const LoopResult tree = run_speculative(target, drafter, o);
  o.branch = false;
  const LoopResult chain = run_speculative(target, drafter, o);
  // The same tokens either way (greedy decoding of one target), up to where each run stopped.
  for (int r = 0; r < o.requests; ++r) {
    ASSERT_GE(tree.tokens[r].size(), 40u);
    ASSERT_GE(chain.tokens[r].size(), 40u);
    EXPECT_TRUE(
        std::equal(tree.tokens[r].begin(), tree.tokens[r].begin() + 40, chain.tokens[r].begin()));
  }
  EXPECT_LT(tree.rounds, chain.rounds);
}

TEST(DraftVerifyLoop, PerfectDrafterAcceptsEverything) {
  LoopOptions o;
  o.window = 5;
  o.requests = 2;
  o.new_tokens = 20;
  const HybridModel target(ModelShape{}, 11);
  const LoopResult spec = run_speculative(target, target, o);
  int64_t rounds = 0;
  for (auto c : spec.accepted_histogram) rounds += c;
  EXPECT_GT(rounds, 0);
  EXPECT_EQ(spec.accepted_histogram[5], rounds);
}

TEST(DraftVerifyLoop, TheComparisonCanFail) {
  // The same check against a different model, and against one token too few, must fail: the
  // proof above is not vacuous.
  LoopOptions o;
  o.requests = 2;
  o.new_tokens = 16;
  const HybridModel target(ModelShape{}, 21);
  const HybridModel other(ModelShape{}, 22);
  const LoopResult spec = run_speculative(target, target.perturbed(0.05f, 23), o);
  std::vector<int> lengths, shorter;
  for (const auto& t : spec.tokens) {
    lengths.push_back(static_cast<int>(t.size()));
    shorter.push_back(static_cast<int>(t.size()) - 1);
  }
  const LoopResult wrong_model = run_autoregressive(other, o, lengths);
  EXPECT_NE(spec.tokens, wrong_model.tokens);
  const LoopResult one_short = run_autoregressive(target, o, shorter);
  EXPECT_NE(spec.states[0], one_short.states[0]);
}

}  // namespace
}  // namespace draft_verify_loop
