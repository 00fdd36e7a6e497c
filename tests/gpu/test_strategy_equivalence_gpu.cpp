// Strategy equivalence on the device: CUDA replay and CUDA snapshot give bit-identical outputs
// and committed states (after materialize), over the shared driver's random rounds (variable T,
// chains and trees, padding, a = 0, sit-outs, repeated verifies, dropped rounds, decodes,
// prefills, release/re-acquire), host and device accepted values.
#include <gtest/gtest.h>

#include "common/strategy_equivalence.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

class StrategyEquivalenceGpu : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(StrategyEquivalenceGpu, ReplayEqualsSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const EquivalenceCase c = GetParam();
  CudaStream stream(cudaStreamNonBlocking);
  ASSERT_NE(stream.get(), nullptr);
  {
    DeviceMemory mem(stream.get());
    run_strategy_equivalence(c, mem, 0xD1CE + c.rounds * 17 + c.tree);
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, StrategyEquivalenceGpu, ::testing::ValuesIn(gpu_equivalence_cases()),
                         [](const ::testing::TestParamInfo<EquivalenceCase>& info) {
                           return case_name(info.param);
                         });

}  // namespace
}  // namespace specstate::test
