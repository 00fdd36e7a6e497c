// Strategy equivalence on the device: CUDA replay and CUDA snapshot give bit-identical outputs
// and committed states (after materialize), over the shared driver's random rounds (variable T,
// chains and trees, padding, a = 0, sit-outs, repeated verifies, dropped rounds, decodes,
// prefills, release/re-acquire), host and device accepted values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>

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

// The replay kernels' path that runs several blocks of a row per CTA (GDN: V blocks; Mamba2:
// channel blocks; chosen by the launcher at large batches only, SPECSTATE_GDN_VBLOCKS and
// SPECSTATE_MAMBA2_VBLOCKS force it here): the same equivalence with 2, 4 and 8 blocks per CTA,
// over short histories (history and window staged once for every block), long ones (ring 40:
// the per-block fallback) and heads whose last block is half full (V = 72, P = 72).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// A case run with a tuning variable forced to a value: replay equals snapshot bit for bit.
using EnvCase = std::tuple<EquivalenceCase, int>;
void run_under_env(const char* var, const EquivalenceCase& c, int value, uint64_t seed) {
  const ScopedEnv env(var, std::to_string(value));
  CudaStream stream(cudaStreamNonBlocking);
  ASSERT_NE(stream.get(), nullptr);
  {
    DeviceMemory mem(stream.get());
    run_strategy_equivalence(c, mem, seed);
  }
}
// "<case><tag><value>", e.g. k128_chain_vb4.
struct EnvCaseName {
  const char* tag;
  std::string operator()(const ::testing::TestParamInfo<EnvCase>& info) const {
    return std::string(std::get<0>(info.param).name) + tag +
           std::to_string(std::get<1>(info.param));
  }
};

class ReplayVblocksGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(ReplayVblocksGpu, ReplayEqualsSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, vblocks] = GetParam();
  run_under_env(is_mamba2_preset(c.preset) ? "SPECSTATE_MAMBA2_VBLOCKS" : "SPECSTATE_GDN_VBLOCKS",
                c, vblocks, 0x5B10C + c.rounds * 31 + vblocks);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, ReplayVblocksGpu,
    ::testing::Combine(
        ::testing::Values(
            EquivalenceCase{"k128_chain", "gpu_k128", false, 4, 5, 16},
            EquivalenceCase{"k128_chain_ring2t", "gpu_k128", false, 4, 5, 24, 8},
            EquivalenceCase{"f32_chain", "gpu_f32", false, 8, 3, 12},
            EquivalenceCase{"v72_chain_ring40_long", "gpu_k128_v72", false, 4, 4, 60, 40},
            EquivalenceCase{"mamba2_bf16_chain", "m2_gpu_bf16", false, 5, 5, 16},
            EquivalenceCase{"mamba2_f32_chain", "m2_gpu_f32", false, 8, 3, 12},
            EquivalenceCase{"mamba2_p72_chain_ring2t", "m2_gpu_p72", false, 4, 4, 24, 8},
            EquivalenceCase{"mamba2_p72_chain_ring40_long", "m2_gpu_p72", false, 4, 4, 60, 40}),
        ::testing::Values(2, 4, 8)),
    EnvCaseName{"_vb"});

// The small-batch replay conv (a thread per channel group and pending or window token, VT = 8
// virtual tokens where pending + window fit, else 16), forced on every launch it can serve by
// SPECSTATE_CONV_SMALL=1, and forced off by 0: replay still equals snapshot bit for bit, chains
// and trees, every kind. Rounds draw T in 1..max_window (max_window 4: VT 8; 6 and 8: VT 16).
class ConvSmallGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(ConvSmallGpu, ReplayEqualsSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, force] = GetParam();
  run_under_env("SPECSTATE_CONV_SMALL", c, force, 0xC0A5 + c.rounds * 13 + force);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, ConvSmallGpu,
    ::testing::Combine(
        ::testing::Values(
            EquivalenceCase{"k32_chain_vt8", "gpu_k32", false, 4, 6, 16},
            EquivalenceCase{"k32_tree_vt16", "gpu_k32", true, 6, 5, 16},
            EquivalenceCase{"k128_chain_vt16", "gpu_k128", false, 8, 3, 12},
            EquivalenceCase{"mamba2_bf16_tree_vt8", "m2_gpu_bf16", true, 4, 5, 16},
            EquivalenceCase{"kda_lb_f32_chain_vt8", "kda_gpu_lb_f32", false, 4, 4, 16},
            EquivalenceCase{"kda_grouped_bf16_tree_vt16", "kda_gpu_grouped_bf16", true, 8, 3, 12}),
        ::testing::Values(0, 1)),
    EnvCaseName{"_small"});

}  // namespace
}  // namespace specstate::test
