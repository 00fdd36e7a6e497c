// Strategy equivalence on the device: CUDA replay and CUDA snapshot give bit-identical outputs
// and committed states (after materialize), over the shared driver's random rounds (variable T,
// chains and trees, padding, a = 0, sit-outs, repeated verifies, dropped rounds, decodes,
// prefills, release/re-acquire), host and device accepted values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "common/strategy_equivalence.h"
#include "common/variable_windows.h"
#include "gpu_util.h"
#include "kernels/conv_update.h"

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
// the per-block fallback), heads whose last block is half full (V = 72, P = 72), and pools in
// vLLM's element order.
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
  // (Mamba2: one channel a thread; two a thread over several blocks is Mamba2RptMultiGpu's.)
  const ScopedEnv rpt("SPECSTATE_MAMBA2_RPT", "1");
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
            EquivalenceCase{"mamba2_p72_chain_ring40_long", "m2_gpu_p72", false, 4, 4, 60, 40},
            // vLLM's element order: fp32 [K][V] states take this path too, each block's state
            // through the tile (the next block's by cp.async), store_final stored directly.
            EquivalenceCase{"vllm_k128_chain", "gpu_k128", false, 4, 5, 16, 0, kReplayVllm},
            EquivalenceCase{"vllm_v72_chain_ring2t_both", "gpu_k128_v72", false, 4, 4, 24, 8,
                            kSnapshotVllm | kReplayVllm},
            EquivalenceCase{"vllm_v72_chain_ring40_long", "gpu_k128_v72", false, 4, 4, 60, 40,
                            kReplayVllm},
            EquivalenceCase{"vllm_kda_k128_chain_ring2t", "kda_gpu_k128", false, 4, 5, 24, 8,
                            kReplayVllm},
            EquivalenceCase{"vllm_f32_k32_chain", "gpu_f32", false, 8, 3, 12, 0, kReplayVllm},
            EquivalenceCase{"vllm_k64_f32_chain", "gpu_k64_f32", false, 4, 4, 12, 0, kReplayVllm}),
        ::testing::Values(2, 4, 8)),
    EnvCaseName{"_vb"});

// The GDN / KDA replay verify over several V blocks a CTA with two V rows a thread
// (SPECSTATE_GDN_RPT=2, kernels::gdn_multi_rpt; SPECSTATE_GDN_VBLOCKS forces the blocks a CTA,
// which these small batches would not take): replay equals snapshot bit for bit, the several
// blocks' fold, history and window per row as with one row a thread; V = 72 leaves the last
// block's second rows past V, a ring of 40 runs long histories.
class ReplayRptGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(ReplayRptGpu, TwoRowsAThreadEqualSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, vblocks] = GetParam();
  const ScopedEnv rpt("SPECSTATE_GDN_RPT", "2");
  run_under_env("SPECSTATE_GDN_VBLOCKS", c, vblocks, 0x2B10C + c.rounds * 29 + vblocks);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, ReplayRptGpu,
    ::testing::Combine(
        ::testing::Values(
            EquivalenceCase{"k128_chain", "gpu_k128", false, 4, 5, 16},
            EquivalenceCase{"k128_chain_ring2t", "gpu_k128", false, 4, 5, 24, 8},
            EquivalenceCase{"f32_chain", "gpu_f32", false, 8, 3, 12},
            EquivalenceCase{"k64_f32_chain", "gpu_k64_f32", false, 4, 4, 12},
            EquivalenceCase{"v72_chain_ring40_long", "gpu_k128_v72", false, 4, 4, 60, 40},
            EquivalenceCase{"kda_k128_chain_ring2t", "kda_gpu_k128", false, 4, 5, 24, 8},
            EquivalenceCase{"kda_lb_f32_chain", "kda_gpu_lb_f32", false, 4, 4, 16},
            // Everything bf16 (the state rounded after every token, cp.async of 8-byte parts),
            // V = 48: the second block half past V.
            EquivalenceCase{"kda_grouped_bf16_chain", "kda_gpu_grouped_bf16", false, 4, 4, 16}),
        ::testing::Values(2, 4)),
    EnvCaseName{"_vb"});

// The Mamba2 replay verify with two channels a thread (SPECSTATE_MAMBA2_RPT=2,
// kernels::mamba2_rpt; one channel block a CTA, SPECSTATE_MAMBA2_VBLOCKS=1), with one (1) and
// with four (4: blocks of 64 channels at N = 128; the N = 64 and 32 cases run two there), and
// under the rule (0, an ignored value: four for the 9-row case, two for the others): replay
// equals snapshot bit for bit. N = 64 with P = 32 (one whole block of 32 channels), N = 128
// with P = 24 (a thread's second channel past P for half the CTA) and P = 72 (three blocks, the
// last with 8 channels: every second channel past P), folds every round (ring 2T), long
// histories (ring 40: staged records, not merged), f32 and bf16 states; prefill, decode and
// materialize (the driver's) take the same kernel.
class Mamba2RptGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(Mamba2RptGpu, TwoChannelsAThreadEqualSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, rpt] = GetParam();
  const ScopedEnv vblocks("SPECSTATE_MAMBA2_VBLOCKS", "1");
  run_under_env("SPECSTATE_MAMBA2_RPT", c, rpt, 0x3B2C + c.rounds * 41 + rpt);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, Mamba2RptGpu,
    ::testing::Combine(
        ::testing::Values(
            EquivalenceCase{"mamba2_bf16_chain", "m2_gpu_bf16", false, 5, 5, 16},
            EquivalenceCase{"mamba2_bf16_chain_ring2t", "m2_gpu_bf16", false, 4, 5, 24, 8},
            EquivalenceCase{"mamba2_f32_chain", "m2_gpu_f32", false, 8, 3, 12},
            EquivalenceCase{"mamba2_f32_chain_ring2t", "m2_gpu_f32", false, 4, 4, 24, 8},
            EquivalenceCase{"mamba2_p72_chain", "m2_gpu_p72", false, 4, 6, 16},
            EquivalenceCase{"mamba2_p72_chain_ring40_long", "m2_gpu_p72", false, 4, 4, 60, 40},
            EquivalenceCase{"vllm_mamba2_p72_chain_ring2t", "m2_gpu_p72", false, 4, 4, 24, 8,
                            kSnapshotVllm | kReplayVllm},
            EquivalenceCase{"mamba2_n64_f32_chain_ring2t", "m2_gpu_n64_p72_f32", false, 4, 5, 24,
                            8},
            EquivalenceCase{"mamba2_n32_bf16_chain", "m2_gpu_n32_p72", false, 4, 6, 16},
            // 9 rows: kernels::mamba2_rpt's rule (the value 0, ignored) takes four channels here.
            EquivalenceCase{"mamba2_p72_chain_rows9", "m2_gpu_p72", false, 4, 9, 8}),
        ::testing::Values(0, 1, 2, 4)),
    EnvCaseName{"_rpt"});

// A replay verify skips the state update of each row's last window token (nothing reads that
// state: the window's records carry it); SPECSTATE_GDN_LAST_STATE=1 forms it anyway. Both ways
// replay equals snapshot bit for bit, over every path of the GDN / KDA replay verify: the
// fused launch (B = 1, 2), one block a CTA, several blocks a CTA with one and two rows a thread
// (SPECSTATE_GDN_VBLOCKS / SPECSTATE_GDN_RPT forced), long histories, variable windows, trees,
// decode and prefill (store_final), vLLM's element order.
class LastStateGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(LastStateGpu, ReplayEqualsSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, last] = GetParam();
  const std::string name = c.name;
  const bool multi = name.find("_vb4") != std::string::npos;
  const ScopedEnv vblocks("SPECSTATE_GDN_VBLOCKS", multi ? "4" : "1");
  const ScopedEnv rpt("SPECSTATE_GDN_RPT", name.find("_rpt2") != std::string::npos ? "2" : "1");
  const ScopedEnv fused("SPECSTATE_GDN_FUSED",
                        name.find("_fused") != std::string::npos ? "1" : "0");
  run_under_env("SPECSTATE_GDN_LAST_STATE", c, last, 0x1A57 + c.rounds * 37 + last);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, LastStateGpu,
    ::testing::Combine(
        ::testing::Values(
            EquivalenceCase{"k128_chain_fused", "gpu_k128", false, 2, 6, 16},
            EquivalenceCase{"kda_k128_chain_fused", "kda_gpu_k128", false, 1, 6, 16},
            EquivalenceCase{"k128_chain", "gpu_k128", false, 4, 5, 16},
            EquivalenceCase{"k128_chain_vb4", "gpu_k128", false, 4, 5, 16},
            EquivalenceCase{"k128_chain_ring2t_vb4_rpt2", "gpu_k128", false, 4, 5, 24, 8},
            EquivalenceCase{"kda_k128_chain_vb4_rpt2", "kda_gpu_k128", false, 4, 5, 16},
            EquivalenceCase{"f32_chain_vb4", "gpu_f32", false, 8, 3, 12},
            EquivalenceCase{"v72_chain_ring40_long_vb4", "gpu_k128_v72", false, 4, 4, 60, 40},
            EquivalenceCase{"k128_tree", "gpu_k128", true, 4, 5, 16},
            EquivalenceCase{"vllm_k128_chain_vb4", "gpu_k128", false, 4, 5, 16, 0, kReplayVllm}),
        ::testing::Values(0, 1)),
    EnvCaseName{"_last"});

// Layers overlap (kernels/common.cuh, the CUDA backend's programmatic_edge): each layer's first
// kernel is a programmatic dependent of the previous layer's last one and reads its own layer's
// state before it waits. SPECSTATE_LAYER_OVERLAP=0 turns the edges off, 1 leaves them on (the
// default: wherever safe, any rows; B = 40 here; 2, once "any rows", is the same). Every
// way, replay equals snapshot bit for bit over the equivalence's rounds (repeated verifies of a
// layer, aborted rounds, releases, forks, decode, prefill, materialize between rounds: every way
// the previous kernel may have written this layer's state), over the fused launch (B <= 2), the
// small-batch conv, the token loop, trees, variable windows, Mamba2 and KDA (12 rows: two V rows a
// thread).
class LayerOverlapGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(LayerOverlapGpu, ReplayEqualsSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, overlap] = GetParam();
  run_under_env("SPECSTATE_LAYER_OVERLAP", c, overlap, 0x0E1A + c.rounds * 41);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, LayerOverlapGpu,
    ::testing::Combine(
        ::testing::Values(EquivalenceCase{"k128_chain_b1", "gpu_k128", false, 4, 1, 24},
                          EquivalenceCase{"k128_chain_b2_ring2t", "gpu_k128", false, 4, 2, 24, 8},
                          EquivalenceCase{"k128_chain", "gpu_k128", false, 4, 5, 16},
                          EquivalenceCase{"k128_chain_b40", "gpu_k128", false, 4, 40, 8},
                          EquivalenceCase{"k128_tree", "gpu_k128", true, 4, 5, 16},
                          EquivalenceCase{"kda_k128_chain_b1", "kda_gpu_k128", false, 4, 1, 24},
                          EquivalenceCase{"kda_k128_chain", "kda_gpu_k128", false, 4, 6, 16},
                          // 8 rows and more: two V rows a thread, two blocks a CTA by default.
                          EquivalenceCase{"kda_k128_chain_b12", "kda_gpu_k128", false, 4, 12, 16},
                          EquivalenceCase{"mamba2_bf16_chain", "m2_gpu_bf16", false, 5, 5, 16},
                          EquivalenceCase{"mamba2_bf16_tree", "m2_gpu_bf16", true, 4, 4, 12},
                          EquivalenceCase{"f32_chain", "gpu_f32", false, 8, 3, 12}),
        ::testing::Values(0, 1)),
    EnvCaseName{"_overlap"});

// The small-batch replay conv (a channel group's input history in shared memory, VT = 8 loader
// threads where pending + window fit, else 16, one per window token), forced on every launch it
// can serve by SPECSTATE_CONV_SMALL=1, and forced off by 0: replay still equals snapshot bit for
// bit, chains and trees, every kind. Rounds draw T in 1..max_window (max_window 4: VT 8; 6 and 8:
// VT 16).
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
            EquivalenceCase{"kda_grouped_bf16_tree_vt16", "kda_gpu_grouped_bf16", true, 8, 3, 12},
            // Channels-last conv windows (vLLM's order): the committed window staged and stored
            // as columns of contiguous channels.
            EquivalenceCase{"vllm_k32_tree_vt16", "gpu_k32", true, 6, 5, 16, 0, kReplayVllm},
            EquivalenceCase{"vllm_mamba2_bf16_chain_vt8", "m2_gpu_bf16", false, 4, 5, 16, 0,
                            kReplayVllm | kSnapshotVllm}),
        ::testing::Values(0, 1)),
    EnvCaseName{"_small"});

// The conv's token loop at four channels a thread (conv_update_kernel's C = 4; by default for
// replay verifies of 32 rows or more, kernels::conv_narrow_choice) forced on every token-loop
// launch by SPECSTATE_CONV_NARROW=1 (replay's verifies and materializes, decode, prefill) and off
// by 0: replay equals snapshot bit for bit (whose verify conv at these batches runs a thread per
// token and eight channels: the narrow kernel checked against the wide one), chains and trees,
// every kind, both element orders.
class ConvNarrowGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(ConvNarrowGpu, ReplayEqualsSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, force] = GetParam();
  run_under_env("SPECSTATE_CONV_NARROW", c, force, 0xC0A7 + c.rounds * 17 + force);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, ConvNarrowGpu,
    ::testing::Combine(
        ::testing::Values(EquivalenceCase{"k32_chain", "gpu_k32", false, 4, 6, 16},
                          EquivalenceCase{"k32_tree", "gpu_k32", true, 6, 5, 16},
                          EquivalenceCase{"k128_chain", "gpu_k128", false, 8, 3, 12},
                          EquivalenceCase{"f32_chain", "gpu_f32", false, 8, 3, 12},
                          EquivalenceCase{"mamba2_bf16_tree", "m2_gpu_bf16", true, 4, 5, 16},
                          EquivalenceCase{"mamba2_f32_chain", "m2_gpu_f32", false, 8, 3, 12},
                          EquivalenceCase{"kda_lb_f32_chain", "kda_gpu_lb_f32", false, 4, 4, 16},
                          EquivalenceCase{"vllm_k32_tree", "gpu_k32", true, 6, 5, 16, 0,
                                          kReplayVllm},
                          EquivalenceCase{"vllm_mamba2_bf16_chain", "m2_gpu_bf16", false, 4, 5, 16,
                                          0, kReplayVllm | kSnapshotVllm}),
        ::testing::Values(0, 1)),
    EnvCaseName{"_narrow"});

// The replay conv's token loop at two channels a thread (SPECSTATE_CONV_TWO=1: chains of width 4
// with bf16 activations, at any batch; by default up to kConvTwoRows rows; the small-batch kernel
// kept off, SPECSTATE_CONV_SMALL=0, so that every replay conv launch is the token loop): replay
// equals snapshot bit for bit, every kind, both window element orders; 0 runs the same cases on
// eight channels a thread.
class ConvTwoGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(ConvTwoGpu, ReplayEqualsSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, force] = GetParam();
  const ScopedEnv small("SPECSTATE_CONV_SMALL", "0");
  run_under_env("SPECSTATE_CONV_TWO", c, force, 0xC2C2 + c.rounds * 23 + force);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, ConvTwoGpu,
    ::testing::Combine(
        ::testing::Values(EquivalenceCase{"k128_chain", "gpu_k128", false, 8, 3, 12},
                          EquivalenceCase{"k128_chain_ring2t", "gpu_k128", false, 4, 6, 16, 8},
                          EquivalenceCase{"kda_k128_chain", "kda_gpu_k128", false, 4, 5, 16},
                          EquivalenceCase{"mamba2_bf16_chain", "m2_gpu_bf16", false, 4, 5, 16},
                          EquivalenceCase{"vllm_mamba2_bf16_chain", "m2_gpu_bf16", false, 4, 5, 16,
                                          0, kReplayVllm | kSnapshotVllm}),
        ::testing::Values(0, 1)),
    EnvCaseName{"_two"});

// A variable-windows case (rounds capped at 10) on a stream of its own: its packed rows against
// the uniform window with filler (run_variable_windows), seeded seed + rounds + salt.
void run_varlen(const VarlenCase& c, uint64_t seed, int salt) {
  CudaStream stream(cudaStreamNonBlocking);
  ASSERT_NE(stream.get(), nullptr);
  {
    DeviceMemory mem(stream.get());
    EquivalenceCase e = c.base;
    e.rounds = std::min(e.rounds, 10);
    run_variable_windows(e, c.how, mem, seed + e.rounds + salt);
  }
}
// "<case>_<strategy>_<how the lengths travel>", e.g. k32_chain_replay_device_cu.
std::string varlen_name(const VarlenCase& c) {
  return std::string(c.base.name) +
         (c.how.strategy == Strategy::kReplay ? "_replay" : "_snapshot") +
         (c.how.device_cu_seqlens ? "_device_cu" : "_host_lengths");
}
struct VarlenCaseName {
  std::string operator()(const ::testing::TestParamInfo<VarlenCase>& info) const {
    return varlen_name(info.param);
  }
};

// The narrow token loop over chains loads a batch of kConvBatch (4) window inputs at once and
// slides the window in registers (conv_update_kernel's kChain); SPECSTATE_CONV_BATCH=0 keeps the
// token-by-token ancestor walk. With the narrow kernel forced on every token-loop launch
// (replay's verifies and materializes, decode, prefill), replay equals snapshot bit for bit both
// ways: windows of up to 8 tokens (two batches, the second partial), every kind, both element
// orders, f32 activations; the tree cases check that trees keep the walk.
class ConvBatchGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(ConvBatchGpu, ReplayEqualsSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, batch] = GetParam();
  const ScopedEnv narrow("SPECSTATE_CONV_NARROW", "1");
  run_under_env("SPECSTATE_CONV_BATCH", c, batch, 0xBA7C + c.rounds * 19 + batch);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, ConvBatchGpu,
    ::testing::Combine(
        ::testing::Values(EquivalenceCase{"k32_chain", "gpu_k32", false, 6, 6, 16},
                          EquivalenceCase{"k128_chain", "gpu_k128", false, 8, 3, 12},
                          EquivalenceCase{"k128_chain_ring2t", "gpu_k128", false, 5, 4, 12, 10},
                          EquivalenceCase{"f32_chain", "gpu_f32", false, 8, 3, 12},
                          EquivalenceCase{"k32_tree", "gpu_k32", true, 6, 5, 12},
                          EquivalenceCase{"mamba2_bf16_chain", "m2_gpu_bf16", false, 7, 4, 12},
                          EquivalenceCase{"mamba2_f32_chain", "m2_gpu_f32", false, 8, 3, 12},
                          EquivalenceCase{"kda_lb_f32_chain", "kda_gpu_lb_f32", false, 6, 4, 12},
                          EquivalenceCase{"vllm_mamba2_bf16_chain", "m2_gpu_bf16", false, 6, 5, 12,
                                          0, kReplayVllm | kSnapshotVllm}),
        ::testing::Values(0, 1)),
    EnvCaseName{"_batch"});

// Variable windows through the batched chain (rows of 0 .. T tokens, packed; rows of length 0
// beside rows with pending steps): packed rows equal the uniform window with filler.
class ConvBatchVarlenGpu : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(ConvBatchVarlenGpu, PackedRowsEqualUniformWindowWithFiller) {
  SPECSTATE_REQUIRE_GPU();
  const VarlenCase& c = GetParam();
  const ScopedEnv narrow("SPECSTATE_CONV_NARROW", "1");
  const ScopedEnv batch("SPECSTATE_CONV_BATCH", "1");
  run_varlen(c, 0xBA7D, c.base.tree);
}

INSTANTIATE_TEST_SUITE_P(Gpu, ConvBatchVarlenGpu,
                         ::testing::ValuesIn(varlen_cases(
                             {EquivalenceCase{"k32_chain", "gpu_k32", false, 7, 6, 16},
                              EquivalenceCase{"mamba2_bf16_chain", "m2_gpu_bf16", false, 6, 4, 12}},
                             {false, true})),
                         VarlenCaseName{});

// The lean replay conv of chains (conv_lean_kernel: the slot's count, path and committed window
// loaded together, then the kept records together), forced on every replay verify it can serve
// and off: replay equals snapshot bit for bit both ways, and the lean kernel ran exactly where it
// applies (kernels::conv_lean_launches). Windows up to 12 tokens (three input batches; pending
// steps past the 8 path entries loaded with the count), rings of 2T (a fold every round), every
// kind, bf16 and f32 throughout; vLLM's channels-last windows, trees and width 3 keep the other
// kernels. (No CUDA-sized preset keeps its conv window in another dtype than its activations.)
class ConvLeanGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(ConvLeanGpu, ReplayEqualsSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, lean] = GetParam();
  const std::string name = c.name;
  // The cases whose replay verifies the lean kernel can serve (width 4, chains, channels first).
  const bool applies = name.find("tree") == std::string::npos &&
                       name.find("w3") == std::string::npos &&
                       name.find("vllm") == std::string::npos;
  const int64_t before = kernels::conv_lean_launches();
  run_under_env("SPECSTATE_CONV_LEAN", c, lean, 0x1EA0 + c.rounds * 23 + lean);
  const int64_t ran = kernels::conv_lean_launches() - before;
  if (lean == 1 && applies) {
    EXPECT_GT(ran, 0) << "the forced lean conv never ran";
  } else {
    EXPECT_EQ(ran, 0) << "the lean conv ran where it " << (lean == 0 ? "was forced off" : "cannot");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, ConvLeanGpu,
    ::testing::Combine(
        ::testing::Values(EquivalenceCase{"k64_f32_chain", "gpu_k64_f32", false, 6, 6, 16},
                          EquivalenceCase{"k128_chain", "gpu_k128", false, 8, 4, 12},
                          EquivalenceCase{"k128_chain_long", "gpu_k128", false, 12, 4, 10, 24},
                          EquivalenceCase{"k128_chain_ring2t", "gpu_k128", false, 5, 4, 12, 10},
                          EquivalenceCase{"f32_chain", "gpu_f32", false, 8, 4, 12},
                          EquivalenceCase{"k32_w3_chain", "gpu_k32", false, 6, 5, 12},
                          EquivalenceCase{"k128_tree", "gpu_k128", true, 6, 5, 12},
                          EquivalenceCase{"mamba2_bf16_chain", "m2_gpu_bf16", false, 7, 4, 12},
                          EquivalenceCase{"mamba2_f32_chain", "m2_gpu_n64_p72_f32", false, 8, 4,
                                          12},
                          EquivalenceCase{"kda_k128_chain", "kda_gpu_k128", false, 6, 4, 12},
                          EquivalenceCase{"kda_lb_f32_chain", "kda_gpu_lb_f32", false, 6, 4, 12},
                          EquivalenceCase{"vllm_mamba2_bf16_chain", "m2_gpu_bf16", false, 6, 5, 12,
                                          0, kReplayVllm | kSnapshotVllm}),
        ::testing::Values(0, 1)),
    EnvCaseName{"_lean"});

// The lean replay conv's default rows per kind (ConvUpdateParams::lean_rows, kernels::
// conv_lean_choice: 8 for GDN and Mamba2, 4 for KDA), no switch set (lean_default_cases,
// tests/common/strategy_equivalence.h): per kind a case whose largest verified round has
// lean_rows - 1 rows, where the lean conv never runs (a smaller lean_rows would take it), and one
// whose largest has lean_rows, where it runs (a larger one would not). Padding rows count. The
// rounds are drawn on the host, the same on every backend: Cpu/LeanDefaultCases
// (tests/cpu/test_strategy_equivalence.cpp) checks their largest rounds in CI.
class ConvLeanDefaultGpu : public ::testing::TestWithParam<LeanDefaultCase> {};

TEST_P(ConvLeanDefaultGpu, FromTheKindsRowsAndReplayEqualsSnapshot) {
  SPECSTATE_REQUIRE_GPU();
  const LeanDefaultCase& k = GetParam();
  for (const char* var : {"SPECSTATE_CONV_LEAN", "SPECSTATE_CONV_SMALL", "SPECSTATE_CONV_NARROW",
                          "SPECSTATE_CONV_BATCH", "SPECSTATE_CONV_TWO", "SPECSTATE_GDN_FUSED"}) {
    ASSERT_EQ(std::getenv(var), nullptr) << var << " is set: the default rule is not what runs";
  }
  const int64_t before = kernels::conv_lean_launches();
  std::vector<int> rows;
  {
    CudaStream stream(cudaStreamNonBlocking);
    ASSERT_NE(stream.get(), nullptr);
    DeviceMemory mem(stream.get());
    run_strategy_equivalence(k.c, mem, lean_default_seed(k.c), &rows);
  }
  const int64_t ran = kernels::conv_lean_launches() - before;
  ASSERT_FALSE(rows.empty());
  ASSERT_EQ(*std::max_element(rows.begin(), rows.end()), k.largest_rows);
  if (k.lean) {
    EXPECT_GT(ran, 0) << "no round took the lean conv; the largest had " << k.largest_rows
                      << " rows";
  } else {
    EXPECT_EQ(ran, 0) << "a round took the lean conv; the largest had " << k.largest_rows
                      << " rows";
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, ConvLeanDefaultGpu, ::testing::ValuesIn(lean_default_cases()),
                         [](const ::testing::TestParamInfo<LeanDefaultCase>& info) {
                           return std::string(info.param.c.name);
                         });

// Variable windows through the lean replay conv (rows of 0 .. T tokens, packed; rows of length 0
// beside rows with pending steps: the committed window advanced with no window token).
class ConvLeanVarlenGpu : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(ConvLeanVarlenGpu, PackedRowsEqualUniformWindowWithFiller) {
  SPECSTATE_REQUIRE_GPU();
  const VarlenCase& c = GetParam();
  const ScopedEnv lean("SPECSTATE_CONV_LEAN", "1");
  run_varlen(c, 0x1EA1, c.base.tree);
}

INSTANTIATE_TEST_SUITE_P(Gpu, ConvLeanVarlenGpu,
                         ::testing::ValuesIn(varlen_cases(
                             {EquivalenceCase{"k128_chain", "gpu_k128", false, 7, 6, 16},
                              EquivalenceCase{"mamba2_bf16_chain", "m2_gpu_bf16", false, 6, 4, 12}},
                             {false, true})),
                         VarlenCaseName{});

// The small-batch replay conv under variable windows (packed rows, rows of length 0 beside rows
// with pending steps: the committed window advanced with no window token), host lengths and
// device cu_seqlens, forced on: packed rows equal the uniform window with filler bit for bit.
class ConvSmallVarlenGpu : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(ConvSmallVarlenGpu, PackedRowsEqualUniformWindowWithFiller) {
  SPECSTATE_REQUIRE_GPU();
  const VarlenCase& c = GetParam();
  const ScopedEnv env("SPECSTATE_CONV_SMALL", "1");
  run_varlen(c, 0xC0A6, c.base.tree);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, ConvSmallVarlenGpu,
    ::testing::ValuesIn(varlen_cases({EquivalenceCase{"k32_chain_vt8", "gpu_k32", false, 4, 6, 16},
                                      EquivalenceCase{"mamba2_bf16_tree_vt16", "m2_gpu_bf16", true,
                                                      8, 4, 12}},
                                     {false, true})),
    VarlenCaseName{});

// The Mamba2 replay verify with two channels a thread over several channel blocks a CTA
// (SPECSTATE_MAMBA2_RPT=2 with SPECSTATE_MAMBA2_VBLOCKS 2 and 4: blocks of 32 channels, the next
// block's state copied while the current one computes): replay equals snapshot bit for bit.
// P = 72 (three blocks, the last with 8 channels: a CTA of one block beside CTAs of two), long
// histories (ring 40: the per-block fallback, mamba2_chain_rows), folds every round, f32 and bf16
// states, vLLM's element order.
class Mamba2RptMultiGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(Mamba2RptMultiGpu, TwoChannelsAThreadOverBlocksEqualSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, vblocks] = GetParam();
  const ScopedEnv rpt("SPECSTATE_MAMBA2_RPT", "2");
  run_under_env("SPECSTATE_MAMBA2_VBLOCKS", c, vblocks, 0x3B2E + c.rounds * 43 + vblocks);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, Mamba2RptMultiGpu,
    ::testing::Combine(
        ::testing::Values(
            EquivalenceCase{"mamba2_p72_chain", "m2_gpu_p72", false, 4, 6, 16},
            EquivalenceCase{"mamba2_p72_chain_ring2t", "m2_gpu_p72", false, 4, 5, 24, 8},
            EquivalenceCase{"mamba2_p72_chain_ring40_long", "m2_gpu_p72", false, 4, 4, 60, 40},
            EquivalenceCase{"vllm_mamba2_p72_chain_ring2t", "m2_gpu_p72", false, 4, 4, 24, 8,
                            kSnapshotVllm | kReplayVllm},
            // f32 activations (the instantiations that spill), N = 64 and N = 32.
            EquivalenceCase{"mamba2_n64_f32_chain_ring2t", "m2_gpu_n64_p72_f32", false, 4, 5, 24,
                            8},
            EquivalenceCase{"mamba2_n64_f32_chain_ring40_long", "m2_gpu_n64_p72_f32", false, 4, 4,
                            60, 40},
            EquivalenceCase{"mamba2_n32_bf16_chain", "m2_gpu_n32_p72", false, 4, 6, 16}),
        ::testing::Values(2, 4)),
    EnvCaseName{"_vb"});

// The Mamba2 replay verify with two channels a thread under variable windows (packed rows, rows
// of length 0 beside rows with history and folds), host lengths and device cu_seqlens: packed rows
// equal the uniform window with filler bit for bit.
class Mamba2RptVarlenGpu : public ::testing::TestWithParam<VarlenCase> {};

// One channel block a CTA, `rpt` channels a thread forced.
void run_mamba2_rpt_varlen(const VarlenCase& c, const char* rpt, uint64_t seed) {
  const ScopedEnv vblocks("SPECSTATE_MAMBA2_VBLOCKS", "1");
  const ScopedEnv channels("SPECSTATE_MAMBA2_RPT", rpt);
  run_varlen(c, seed, c.base.tree);
}

TEST_P(Mamba2RptVarlenGpu, PackedRowsEqualUniformWindowWithFiller) {
  SPECSTATE_REQUIRE_GPU();
  run_mamba2_rpt_varlen(GetParam(), "2", 0x3B2D);
}

// The same with four channels a thread (SPECSTATE_MAMBA2_RPT=4: blocks of 64 channels for the
// N = 128 case; the N = 64 case runs two).
TEST_P(Mamba2RptVarlenGpu, FourChannelsPackedRowsEqualUniformWindowWithFiller) {
  SPECSTATE_REQUIRE_GPU();
  run_mamba2_rpt_varlen(GetParam(), "4", 0x3B2F);
}

INSTANTIATE_TEST_SUITE_P(Gpu, Mamba2RptVarlenGpu,
                         ::testing::ValuesIn(varlen_cases(
                             {EquivalenceCase{"mamba2_p72_chain", "m2_gpu_p72", false, 6, 6, 12},
                              EquivalenceCase{"mamba2_bf16_chain_ring2t", "m2_gpu_bf16", false, 4,
                                              5, 12, 8}},
                             {false, true})),
                         VarlenCaseName{});

// The fused small-batch launch of GDN and KDA replay verifies (conv + recurrence in one kernel,
// kernels/gdn_fused.h), forced on every launch it can serve by SPECSTATE_GDN_FUSED=1 and off by
// 0: replay (fused) equals snapshot (the conv and recurrence kernels) bit for bit. Chains of
// K = 128 with bf16 conv state (what it serves), a head whose last V block is half full (V = 72:
// a v channel group with no channels), KDA, rings folding every round (2T) and the largest the
// kernel takes (16); the tree case checks that trees still take the two launches.
class FusedGpu : public ::testing::TestWithParam<EnvCase> {};

TEST_P(FusedGpu, ReplayEqualsSnapshotBitForBit) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, force] = GetParam();
  run_under_env("SPECSTATE_GDN_FUSED", c, force, 0xF05ED + c.rounds * 7 + force);
}

const std::vector<EquivalenceCase>& fused_cases() {
  static const std::vector<EquivalenceCase> cases = {
      {"k128_chain", "gpu_k128", false, 4, 6, 16},
      {"k128_chain_ring2t", "gpu_k128", false, 4, 5, 16, 8},
      {"k128_chain_t8_ring16", "gpu_k128", false, 8, 4, 12, 16},
      {"v72_chain", "gpu_k128_v72", false, 5, 4, 14},
      {"kda_k128_chain", "kda_gpu_k128", false, 4, 6, 16},
      {"kda_k128_chain_ring2t", "kda_gpu_k128", false, 3, 5, 16, 6},
      {"k128_tree", "gpu_k128", true, 4, 4, 10},
  };
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Gpu, FusedGpu,
                         ::testing::Combine(::testing::ValuesIn(fused_cases()),
                                            ::testing::Values(0, 1)),
                         EnvCaseName{"_fused"});

// Variable windows under the fused launch (rows of 0 .. T tokens beside each other, packed by
// offsets from the host or the device): the packed round equals the uniform one with filler.
class FusedVarlenGpu : public ::testing::TestWithParam<std::tuple<VarlenCase, int>> {};

TEST_P(FusedVarlenGpu, PackedRowsEqualUniformWindowWithFiller) {
  SPECSTATE_REQUIRE_GPU();
  const auto& [c, force] = GetParam();
  const ScopedEnv env("SPECSTATE_GDN_FUSED", std::to_string(force));
  run_varlen(c, 0xF0A5, force);
}

INSTANTIATE_TEST_SUITE_P(Gpu, FusedVarlenGpu,
                         ::testing::Combine(::testing::ValuesIn(varlen_cases({fused_cases()[0],
                                                                              fused_cases()[4]},
                                                                             {false, true})),
                                            ::testing::Values(1)),
                         [](const ::testing::TestParamInfo<std::tuple<VarlenCase, int>>& info) {
                           return varlen_name(std::get<0>(info.param)) + "_fused" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace specstate::test
