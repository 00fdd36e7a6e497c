// detail::rows_overlap (lib/validate.h), the exact overlap test of two views' byte intervals that
// every caller-owned pool's binding runs per pair of views: against a brute force on small cases,
// and in O(1) where the strides differ but no residue can meet (two views interleaving their
// slots in one buffer, one slot stride a multiple of the other's).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <random>

#include "lib/validate.h"

namespace specstate::detail {
namespace {

bool brute(const ByteRows& a, const ByteRows& b) {
  for (int64_t i = 0; i < a.count; ++i) {
    for (int64_t j = 0; j < b.count; ++j) {
      const int64_t x0 = a.begin + i * a.stride, y0 = b.begin + j * b.stride;
      if (x0 < y0 + b.len && y0 < x0 + a.len) return true;
    }
  }
  return false;
}

TEST(RowsOverlap, MatchesABruteForceOnSmallCases) {
  std::mt19937_64 rng(5);
  const auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  int overlapping = 0;
  for (int t = 0; t < 20000; ++t) {
    ByteRows a{pick(0, 64), pick(1, 24), pick(1, 24), pick(1, 12)};
    ByteRows b{pick(0, 64), pick(1, 24), pick(1, 24), pick(1, 12)};
    int64_t i = -1, j = -1;
    const bool got = rows_overlap(a, b, &i, &j);
    ASSERT_EQ(got, brute(a, b)) << "a {" << a.begin << ", " << a.stride << ", " << a.len << ", "
                                << a.count << "} b {" << b.begin << ", " << b.stride << ", "
                                << b.len << ", " << b.count << "}";
    if (got) {
      ++overlapping;
      ASSERT_TRUE(i >= 0 && i < a.count && j >= 0 && j < b.count);
      const int64_t x0 = a.begin + i * a.stride, y0 = b.begin + j * b.stride;
      ASSERT_TRUE(x0 < y0 + b.len && y0 < x0 + a.len) << "the pair it names does not meet";
    }
  }
  EXPECT_GT(overlapping, 1000);  // both answers were exercised
  EXPECT_LT(overlapping, 19000);
}

// Conv windows of each slot in a block of P bytes, SSM states in the blocks' gaps at twice the
// stride: no byte shared, decided without walking the 2^30 slots.
TEST(RowsOverlap, InterleavedSlotsOfUnequalStridesAreDecidedAtOnce) {
  constexpr int64_t P = 4096, kSlots = int64_t{1} << 30;
  const ByteRows conv{0, P, 1024, kSlots};
  const ByteRows ssm{1024, 2 * P, 3072, kSlots / 2};
  int64_t i = -1, j = -1;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(rows_overlap(conv, ssm, &i, &j));
  EXPECT_FALSE(rows_overlap(ssm, conv, &i, &j));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.1);
  // One byte more of SSM state and they meet (the next block's conv window).
  const ByteRows wider{1024, 2 * P, 3073, kSlots / 2};
  EXPECT_TRUE(rows_overlap(conv, wider, &i, &j));
  EXPECT_EQ(conv.begin + i * conv.stride, wider.begin + j * wider.stride + 3072);
}

}  // namespace
}  // namespace specstate::detail
