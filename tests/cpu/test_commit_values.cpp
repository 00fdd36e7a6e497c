// The checks the CUDA commit runs on device-resident accepted values (kernels::commit_step and
// kernels::row_window, which commit_check_kernel and the replay commit kernel call per row):
// every out-of-range value and malformed range gets its error bit and keeps the row, every valid
// one its step. Host-only: runs in CI, where the kernels cannot (their GPU tests: CommitChecks,
// ReplayCommitChecks, VariableWindowsGpuChecks).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/kernel_types.h"

namespace specstate::kernels {
namespace {

struct Check {
  int step;
  int32_t error;
};
Check check(CommitMode mode, int value, int window) {
  int32_t error = 0;
  const int step = commit_step(mode, value, window, &error);
  return {step, error};
}

TEST(CommitValues, ChainLengthsInZeroToTheWindowCommitTheirLastToken) {
  constexpr int T = 4;
  for (int a = 0; a <= T; ++a) {
    const Check c = check(CommitMode::kAcceptedLength, a, T);
    EXPECT_EQ(c.step, a - 1) << "a = " << a;  // a = 0: -1, the row keeps its state
    EXPECT_EQ(c.error, 0) << "a = " << a;
  }
}

TEST(CommitValues, ChainLengthsOutsideTheWindowKeepTheRowAndRaiseTheirBit) {
  constexpr int T = 4;
  for (const int a : {T + 1, 1 << 30}) {
    const Check c = check(CommitMode::kAcceptedLength, a, T);
    EXPECT_EQ(c.step, -1);
    EXPECT_EQ(c.error, kCommitErrorLengthAboveWindow) << "a = " << a;
  }
  for (const int a : {-1, -(1 << 30)}) {
    const Check c = check(CommitMode::kAcceptedLength, a, T);
    EXPECT_EQ(c.step, -1);
    EXPECT_EQ(c.error, kCommitErrorLengthNegative) << "a = " << a;
  }
}

TEST(CommitValues, TreeNodesInMinusOneToTheLastTokenAreValidOthersRaiseTheirBit) {
  constexpr int T = 4;
  for (int node = -1; node < T; ++node) {
    const Check c = check(CommitMode::kNode, node, T);
    EXPECT_EQ(c.step, node);
    EXPECT_EQ(c.error, 0) << "node " << node;
  }
  for (const int node : {-2, T, T + 7}) {
    const Check c = check(CommitMode::kNode, node, T);
    EXPECT_EQ(c.step, -1);
    EXPECT_EQ(c.error, kCommitErrorNodeOutOfRange) << "node " << node;
  }
}

TEST(CommitValues, RowWindowsComeFromTheOffsetsAndMalformedRangesAreFlagged) {
  constexpr int T = 4;
  int32_t error = 0;
  EXPECT_EQ(row_window(RowTokensParams{}, 3, T, &error), T);  // no offsets: every row has T
  EXPECT_EQ(error, 0);
  // Rows: [0, 2) 2 tokens, [2, 2) 0, [2, 6) 4, then malformed: [6, 5) backwards, [5, 10) 5 > T
  // tokens, [-1, 0) negative start, [10, 13) past the 12 tokens the inputs hold.
  const std::vector<int32_t> cu = {0, 2, 2, 6};
  const RowTokensParams v{cu.data(), 12};
  const int expect[] = {2, 0, 4};
  for (int r = 0; r < 3; ++r) {
    error = 0;
    EXPECT_EQ(row_window(v, r, T, &error), expect[r]) << "row " << r;
    EXPECT_EQ(error, 0) << "row " << r;
  }
  const std::vector<std::vector<int32_t>> bad = {{6, 5}, {5, 10}, {-1, 0}, {10, 13}};
  for (const std::vector<int32_t>& range : bad) {
    error = 0;
    EXPECT_EQ(row_window(RowTokensParams{range.data(), 12}, 0, T, &error), -1)
        << "[" << range[0] << ", " << range[1] << ")";
    EXPECT_EQ(error, kCommitErrorBadLengths);
    // A flagged row's value is not judged again: it keeps, with the range's bit alone.
    int32_t value_error = 0;
    EXPECT_EQ(commit_step(CommitMode::kAcceptedLength, 99, -1, &value_error), -1);
    EXPECT_EQ(value_error, 0);
  }
  // A value checked against the row's own length, not T.
  error = 0;
  const int w = row_window(v, 0, T, &error);
  const Check c = check(CommitMode::kAcceptedLength, 3, w);
  EXPECT_EQ(c.error, kCommitErrorLengthAboveWindow) << "a = 3 past a row of 2 tokens";
}

}  // namespace
}  // namespace specstate::kernels
