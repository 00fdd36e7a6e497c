// Greedy acceptance against brute force on random chains and trees.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "specstate/spec/acceptance.h"
#include "specstate/status.h"

namespace specstate::spec {
namespace {

constexpr uint64_t kSeed = 0xacce97;

// Brute force for a chain: the largest a such that every draft 1..a-1 equals the target's
// prediction after its predecessor.
int brute_chain(const std::vector<int32_t>& tokens, const std::vector<int32_t>& target) {
  int best = 1;
  for (int a = 1; a <= static_cast<int>(tokens.size()); ++a) {
    bool ok = true;
    for (int t = 1; t < a; ++t) ok = ok && tokens[t] == target[t - 1];
    if (ok) best = a;
  }
  return best;
}

// Brute force for a tree whose siblings carry distinct tokens: a node is acceptable when every
// node on its path matches its parent's target; the acceptable nodes then form one path, and
// the answer is its deepest node.
int brute_tree(const Window& w, const std::vector<int32_t>& tokens,
               const std::vector<int32_t>& target) {
  int best = 0;
  for (int node = 0; node < w.size(); ++node) {
    const auto path = w.path_to(node);
    bool ok = true;
    for (std::size_t i = 1; i < path.size(); ++i) ok = ok && tokens[path[i]] == target[path[i - 1]];
    if (ok && w.depth(node) > w.depth(best)) best = node;
  }
  return best;
}

TEST(SpecAcceptance, ChainMatchesBruteForce) {
  std::mt19937_64 rng(kSeed);
  std::vector<int64_t> seen(17, 0);
  for (int trial = 0; trial < 2000; ++trial) {
    const int T = 1 + static_cast<int>(rng() % 16);
    const int vocab = 2 + static_cast<int>(rng() % 3);  // small vocab: long matches happen
    std::vector<int32_t> tokens(T), target(T);
    for (auto& x : tokens) x = static_cast<int32_t>(rng() % vocab);
    for (auto& x : target) x = static_cast<int32_t>(rng() % vocab);
    const Acceptance a = accept_greedy_chain(tokens, target);
    SCOPED_TRACE("seed " + std::to_string(kSeed) + " trial " + std::to_string(trial));
    const int expected = brute_chain(tokens, target);
    ASSERT_EQ(a.accepted_length(), expected);
    ++seen[expected];
    for (int t = 0; t < expected; ++t) EXPECT_EQ(a.path[t], t);
    EXPECT_EQ(a.bonus_token, target[expected - 1]);
    EXPECT_EQ(a.commit_value(false), expected);
    EXPECT_EQ(a.commit_value(true), expected - 1);
    // Emitted: the accepted drafts, then the bonus token.
    const auto out = a.emitted(tokens.data());
    ASSERT_EQ(static_cast<int>(out.size()), expected);
    for (int t = 1; t < expected; ++t) EXPECT_EQ(out[t - 1], tokens[t]);
    EXPECT_EQ(out.back(), target[expected - 1]);
  }
  // The random cases covered short and long acceptances alike.
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[4], 0);
  EXPECT_GT(seen[8], 0);
}

TEST(SpecAcceptance, AllOrNothingChains) {
  const std::vector<int32_t> tokens{5, 1, 2, 3}, all{1, 2, 3, 9}, none{7, 2, 3, 9};
  EXPECT_EQ(accept_greedy_chain(tokens, all).accepted_length(), 4);
  EXPECT_EQ(accept_greedy_chain(tokens, all).bonus_token, 9);
  EXPECT_EQ(accept_greedy_chain(tokens, none).accepted_length(), 1);
  EXPECT_EQ(accept_greedy_chain(tokens, none).bonus_token, 7);
  // A later match after a mismatch is not accepted.
  EXPECT_EQ(accept_greedy_chain(tokens, std::vector<int32_t>{1, 0, 3, 9}).accepted_length(), 2);
}

TEST(SpecAcceptance, TreeMatchesBruteForce) {
  std::mt19937_64 rng(kSeed + 1);
  int deep = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int T = 1 + static_cast<int>(rng() % 14);
    std::vector<int32_t> parents(T, -1);
    for (int t = 1; t < T; ++t) parents[t] = static_cast<int32_t>(rng() % t);
    const Window w = Window::from_parents(parents);
    // Siblings get distinct tokens (as a drafter's top-k does); targets from a small vocab.
    std::vector<int32_t> tokens(T, 0), target(T);
    for (int p = 0; p < T; ++p) {
      int32_t next = static_cast<int32_t>(rng() % 2);
      for (int32_t c : w.children(p)) tokens[c] = next++;
    }
    for (auto& x : target) x = static_cast<int32_t>(rng() % 3);
    SCOPED_TRACE("seed " + std::to_string(kSeed + 1) + " trial " + std::to_string(trial) + " " +
                 w.describe());
    const Acceptance a = accept_greedy_tree(w, tokens, target);
    const int node = brute_tree(w, tokens, target);
    ASSERT_EQ(a.last_node(), node);
    EXPECT_EQ(a.path, w.path_to(node));
    EXPECT_EQ(a.bonus_token, target[node]);
    EXPECT_EQ(a.commit_value(true), node);
    EXPECT_NO_THROW(check_path(w, a.path, "accepted"));
    deep += a.accepted_length() >= 3;
  }
  EXPECT_GT(deep, 50);
}

TEST(SpecAcceptance, TreeTakesTheFirstMatchingChild) {
  // Root's children 1 and 2 both carry token 4 = target[0]; 2 would lead deeper, but greedy
  // acceptance takes the lowest index, as SGLang's tree verification does.
  const Window w = Window::from_parents({-1, 0, 0, 2});
  const std::vector<int32_t> tokens{9, 4, 4, 6}, target{4, 0, 6, 1};
  const Acceptance a = accept_greedy_tree(w, tokens, target);
  EXPECT_EQ(a.path, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(a.bonus_token, 0);
}

TEST(SpecAcceptance, ChainWindowThroughTreeFunctionAgrees) {
  std::mt19937_64 rng(kSeed + 2);
  for (int trial = 0; trial < 200; ++trial) {
    const int T = 1 + static_cast<int>(rng() % 8);
    std::vector<int32_t> tokens(T), target(T);
    for (auto& x : tokens) x = static_cast<int32_t>(rng() % 2);
    for (auto& x : target) x = static_cast<int32_t>(rng() % 2);
    const Window w = Window::chain(T);
    EXPECT_EQ(accept_greedy_tree(w, tokens, target).path, accept_greedy_chain(tokens, target).path);
    EXPECT_EQ(accept_greedy(w, tokens.data(), target.data()).path,
              accept_greedy_chain(tokens, target).path);
  }
}

TEST(SpecAcceptance, RejectsBadArguments) {
  const std::vector<int32_t> three{1, 2, 3}, two{1, 2};
  EXPECT_THROW(accept_greedy_chain(three, two), Error);
  EXPECT_THROW(accept_greedy_chain(nullptr, three.data(), 3), Error);
  EXPECT_THROW(accept_greedy_chain(three.data(), three.data(), 0), Error);
  EXPECT_THROW(accept_greedy_tree(Window::chain(3), two, two), Error);
  try {
    accept_greedy_chain(three, two);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("window size 3"), std::string::npos) << e.what();
  }
  // Empty vectors: said to be empty (their null data() was reported as "tokens is null").
  try {
    accept_greedy_chain(std::vector<int32_t>{}, std::vector<int32_t>{});
    ADD_FAILURE() << "an empty window was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tokens and target are empty"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace specstate::spec
