// spec::Window: chains, trees from parents and from EAGLE first-child / next-sibling links, and
// the errors that name the bad entry.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "specstate/spec/window.h"
#include "specstate/status.h"

namespace specstate::spec {
namespace {

// Expects `fn` to throw Error(status) whose message contains every fragment.
template <typename Fn>
void expect_error(Fn&& fn, Status status, std::initializer_list<const char*> fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const char* f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
          << "missing \"" << f << "\" in: " << e.what();
  }
}

std::vector<int32_t> random_parents(int T, std::mt19937_64& rng) {
  std::vector<int32_t> parents(static_cast<std::size_t>(T), -1);
  for (int t = 1; t < T; ++t) parents[t] = static_cast<int32_t>(rng() % static_cast<uint64_t>(t));
  return parents;
}

TEST(SpecWindow, ChainHasSequentialParents) {
  const Window w = Window::chain(5);
  EXPECT_EQ(w.size(), 5);
  EXPECT_TRUE(w.is_chain());
  EXPECT_EQ(w.parents(), (std::vector<int32_t>{-1, 0, 1, 2, 3}));
  EXPECT_EQ(w.max_depth(), 5);
  EXPECT_EQ(w.path_to(3), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(w.children(1), (std::vector<int32_t>{2}));
  EXPECT_EQ(w.describe(), "chain(5)");
  EXPECT_EQ(Window().size(), 1);
  expect_error([] { Window::chain(0); }, Status::kInvalidArgument, {"length = 0"});
}

TEST(SpecWindow, TreeFromParents) {
  //        0
  //      1   2
  //     3 4   5
  const Window w = Window::from_parents({-1, 0, 0, 1, 1, 2});
  EXPECT_FALSE(w.is_chain());
  EXPECT_EQ(w.max_depth(), 3);
  EXPECT_EQ(w.depth(0), 1);
  EXPECT_EQ(w.depth(4), 3);
  EXPECT_EQ(w.children(0), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(w.children(1), (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(w.children(5).empty());
  EXPECT_EQ(w.path_to(5), (std::vector<int32_t>{0, 2, 5}));
  EXPECT_EQ(w.describe(), "tree[-1,0,0,1,1,2]");
  // A parents array that happens to be a chain is a chain.
  EXPECT_TRUE(Window::from_parents({-1, 0, 1}).is_chain());
  EXPECT_EQ(Window::from_parents({-1, 0, 1}), Window::chain(3));
  expect_error([&] { w.path_to(6); }, Status::kOutOfRange, {"node = 6"});
  expect_error([&] { w.children(-1); }, Status::kOutOfRange, {"node = -1"});
  EXPECT_EQ(w.parent(0), -1);
  EXPECT_EQ(w.parent(5), 2);
  // parent() named no argument (std::out_of_range from vector::at) before.
  expect_error([&] { w.parent(6); }, Status::kOutOfRange, {"spec::Window::parent", "node = 6"});
  expect_error([&] { w.parent(-1); }, Status::kOutOfRange, {"node = -1", "[0, 5]"});
}

// A window's size is bounded (kMaxWindowNodes): a length alone no longer allocates gigabytes
// (Window::chain(2^31 - 1) asked for 16 GB).
TEST(SpecWindow, SizeIsBounded) {
  EXPECT_EQ(Window::chain(kMaxWindowNodes).size(), kMaxWindowNodes);
  expect_error([] { Window::chain(kMaxWindowNodes + 1); }, Status::kInvalidArgument,
               {"spec::Window::chain", "length = 65537", "[1, 65536]"});
  expect_error([] { Window::chain(2147483647); }, Status::kInvalidArgument, {"2147483647"});
  std::vector<int32_t> parents(static_cast<std::size_t>(kMaxWindowNodes) + 1);
  for (std::size_t t = 0; t < parents.size(); ++t) parents[t] = static_cast<int32_t>(t) - 1;
  expect_error([&] { Window::from_parents(parents); }, Status::kInvalidArgument,
               {"parents has 65537 entries", "kMaxWindowNodes = 65536"});
  std::vector<int32_t> first(parents.size(), -1), next(parents.size(), -1);
  expect_error([&] { Window::from_links(first, next); }, Status::kInvalidArgument,
               {"first_child has 65537 entries"});
}

TEST(SpecWindow, FromParentsRejectsEachBadEntry) {
  expect_error([] { Window::from_parents({}); }, Status::kInvalidArgument, {"empty"});
  expect_error(
      [] {
        Window::from_parents({0, 0});
      },
      Status::kInvalidArgument, {"parents[0] = 0", "root"});
  expect_error(
      [] {
        Window::from_parents({-1, 0, 2});
      },
      Status::kInvalidArgument, {"parents[2] = 2", "[0, 1]"});
  expect_error(
      [] {
        Window::from_parents({-1, 0, 3, 1});
      },
      Status::kInvalidArgument, {"parents[2] = 3"});
  expect_error(
      [] {
        Window::from_parents({-1, -1});
      },
      Status::kInvalidArgument, {"parents[1] = -1"});
}

TEST(SpecWindow, LinksRoundTripOnRandomTrees) {
  std::mt19937_64 rng(0x77ee);
  for (int trial = 0; trial < 200; ++trial) {
    const int T = 1 + static_cast<int>(rng() % 12);
    const Window w = Window::from_parents(random_parents(T, rng));
    std::vector<int32_t> first_child, next_sibling;
    w.to_links(first_child, next_sibling);
    SCOPED_TRACE("seed 0x77ee trial " + std::to_string(trial) + " " + w.describe());
    EXPECT_EQ(Window::from_links(first_child, next_sibling), w);
  }
}

TEST(SpecWindow, FromLinksEagleExample) {
  // SGLang's retrive_next_token / retrive_next_sibling for the tree 0 -> {1, 2}, 1 -> {3}.
  const Window w = Window::from_links({1, 3, -1, -1}, {-1, 2, -1, -1});
  EXPECT_EQ(w.parents(), (std::vector<int32_t>{-1, 0, 0, 1}));
}

TEST(SpecWindow, FromLinksRejectsBrokenTrees) {
  expect_error([] { Window::from_links({}, {}); }, Status::kInvalidArgument, {"empty"});
  expect_error(
      [] {
        Window::from_links({1, -1}, {-1});
      },
      Status::kInvalidArgument, {"first_child has 2", "next_sibling has 1"});
  expect_error(
      [] {
        Window::from_links({5, -1}, {-1, -1});
      },
      Status::kInvalidArgument, {"first_child[0] = 5", "out of range"});
  expect_error(
      [] {
        Window::from_links({1, -1}, {-1, -7});
      },
      Status::kInvalidArgument, {"next_sibling[1] = -7"});
  expect_error(
      [] {
        Window::from_links({1, -1}, {1, -1});
      },
      Status::kInvalidArgument, {"next_sibling[0] = 1", "root has no sibling"});
  // Node 2 unreachable.
  expect_error(
      [] {
        Window::from_links({1, -1, -1}, {-1, -1, -1});
      },
      Status::kInvalidArgument, {"node 2 is not reached"});
  // Node 2 reached twice: as child of 0 (sibling of 1) and child of 1.
  expect_error(
      [] {
        Window::from_links({1, 2, -1}, {-1, 2, -1});
      },
      Status::kInvalidArgument, {"first_child[1] = 2: node 2 is reached twice"});
  // A child with a smaller index than its parent.
  expect_error(
      [] {
        Window::from_links({1, -1, 1}, {-1, 2, -1});
      },
      Status::kInvalidArgument, {"node 1 is a child of node 2"});
  // A sibling cycle 1 -> 2 -> 1, named by the entry that closes it (it was "node 1 is reached
  // twice (children of 0 and of 0)").
  expect_error(
      [] {
        Window::from_links({1, -1, -1}, {-1, 2, 1});
      },
      Status::kInvalidArgument, {"next_sibling[2] = 1 closes a loop among the children of node 0"});
  // A node its own child.
  expect_error([] { Window::from_links({0}, {-1}); }, Status::kInvalidArgument,
               {"node 0 is a child of node 0"});
}

TEST(SpecWindow, CheckPath) {
  const Window w = Window::from_parents({-1, 0, 0, 1});
  EXPECT_NO_THROW(check_path(w, {}, "p"));
  EXPECT_NO_THROW(check_path(w, {0, 1, 3}, "p"));
  EXPECT_NO_THROW(check_path(w, {0, 2}, "p"));
  expect_error([&] { check_path(w, {1}, "p"); }, Status::kInvalidArgument, {"path[0] = 1"});
  expect_error(
      [&] {
        check_path(w, {0, 2, 3}, "p");
      },
      Status::kInvalidArgument, {"path[2] = 3", "not a child of path[1] = 2"});
  expect_error(
      [&] {
        check_path(w, {0, 4}, "p");
      },
      Status::kInvalidArgument, {"path[1] = 4", "not a node"});
  expect_error(
      [&] {
        check_path(w, {0, 2, 3}, "p");
      },
      Status::kInvalidArgument, {"(its parent is 1)"});
  // A message quotes at most 64 characters of the window: a 65536-node tree described whole
  // made a 371 KB message.
  std::vector<int32_t> parents(kMaxWindowNodes);
  for (int t = 0; t < kMaxWindowNodes; ++t) parents[static_cast<std::size_t>(t)] = t / 2 - (t == 0);
  const Window big = Window::from_parents(parents);
  for (const std::vector<int32_t>& path :
       {std::vector<int32_t>{0, 5}, std::vector<int32_t>{0, -3}}) {
    try {
      check_path(big, path, "p");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
      EXPECT_NE(std::string(e.what()).find("(65536 nodes)"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace specstate::spec
