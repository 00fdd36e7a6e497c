// Strategy equivalence on the device: CUDA replay and CUDA snapshot give bit-identical outputs
// and committed states (after materialize), over the shared driver's random rounds (variable T,
// chains and trees, padding, a = 0, sit-outs, repeated verifies, dropped rounds, decodes,
// prefills, release/re-acquire), host and device accepted values.
#include <gtest/gtest.h>

#include <list>

#include "common/strategy_equivalence.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

class DeviceMemory final : public Memory {
 public:
  explicit DeviceMemory(cudaStream_t stream) : stream_(stream) {}
  Backend backend() const override { return Backend::kCuda; }
  void* stream() const override { return stream_; }
  TensorView put(const Buffer& host, bool persistent) override {
    auto& list = persistent ? persistent_ : round_;
    list.emplace_back(host);
    return list.back().view();
  }
  std::vector<uint8_t> bytes(const TensorView& view) override {
    cudaStreamSynchronize(stream_);
    return rows_bytes(view, 0, view.shape[0]);
  }
  void clear() override {
    cudaStreamSynchronize(stream_);
    round_.clear();
  }

 private:
  cudaStream_t stream_;
  std::list<DeviceTensor> persistent_, round_;
};

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
