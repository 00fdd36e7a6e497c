// Strategy equivalence on the CPU oracle: replay and snapshot are bit-identical (outputs and
// committed states after materialize). The case table is shared with the GPU suite.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/strategy_equivalence.h"

namespace specstate::test {
namespace {

class StrategyEquivalence : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(StrategyEquivalence, ReplayEqualsSnapshotBitForBit) {
  const EquivalenceCase c = GetParam();
  auto mem = host_memory();
  run_strategy_equivalence(c, *mem, 0xC0FFEE + c.rounds * 31 + c.tree);
}

INSTANTIATE_TEST_SUITE_P(Cpu, StrategyEquivalence, ::testing::ValuesIn(cpu_equivalence_cases()),
                         [](const ::testing::TestParamInfo<EquivalenceCase>& info) {
                           return case_name(info.param);
                         });

// The cases of the GPU suite's ConvLeanDefaultGpu (lean_default_cases) on the CPU: replay equals
// snapshot, and each case's largest verified round has the rows that test relies on (the rounds
// are drawn on the host from the seed, the same on every backend): the lean conv's default rows per
// kind are pinned from both sides only if a case reaches lean_rows - 1 and another lean_rows.
class LeanDefaultCases : public ::testing::TestWithParam<LeanDefaultCase> {};

TEST_P(LeanDefaultCases, ReachTheirRowsAndReplayEqualsSnapshot) {
  const LeanDefaultCase& k = GetParam();
  auto mem = host_memory();
  std::vector<int> rows;
  run_strategy_equivalence(k.c, *mem, lean_default_seed(k.c), &rows);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(*std::max_element(rows.begin(), rows.end()), k.largest_rows);
}

INSTANTIATE_TEST_SUITE_P(Cpu, LeanDefaultCases, ::testing::ValuesIn(lean_default_cases()),
                         [](const ::testing::TestParamInfo<LeanDefaultCase>& info) {
                           return std::string(info.param.c.name);
                         });

}  // namespace
}  // namespace specstate::test
