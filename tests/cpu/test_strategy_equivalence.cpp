// Strategy equivalence on the CPU oracle: replay and snapshot are bit-identical (outputs and
// committed states after materialize). The case table is shared with the GPU suite.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace specstate::test
