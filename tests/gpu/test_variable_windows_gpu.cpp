// Variable windows on the device (DESIGN.md section 2), both strategies and both layer kinds:
// packed rows equal a uniform window with filler tokens bit for bit (host batch.lengths, and
// device cu_seqlens read by the kernels), batched variable-length prefill equals one prefill per
// request; a malformed device cu_seqlens row computes nothing and refuses the round's commit
// (no row commits: all-or-nothing), reported by last_commit_status, and so does a host commit
// value past a row's device length.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/expect.h"
#include "common/pool_rounds.h"
#include "common/variable_windows.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

class VariableWindowsGpu : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(VariableWindowsGpu, PackedRowsEqualUniformWindowWithFiller) {
  SPECSTATE_REQUIRE_GPU();
  const VarlenCase& c = GetParam();
  EquivalenceCase e = c.base;
  e.rounds = std::min(e.rounds, 12);
  CudaStream stream(cudaStreamNonBlocking);
  ASSERT_NE(stream.get(), nullptr);
  DeviceMemory mem(stream.get());
  run_variable_windows(e, c.how, mem, 0x5EED + e.rounds + e.tree);
}

INSTANTIATE_TEST_SUITE_P(Gpu, VariableWindowsGpu,
                         ::testing::ValuesIn(varlen_cases(gpu_equivalence_cases(), {false, true})),
                         [](const ::testing::TestParamInfo<VarlenCase>& info) {
                           return varlen_case_name(info) + (info.param.how.device_cu_seqlens
                                                                ? "_device_cu"
                                                                : "_host_lengths");
                         });

class VariableWindowsGpuChecks : public ::testing::TestWithParam<Strategy> {};

// A round of rows a and b (b prefilled first) over device cu_seqlens {0, 4, row_b_end}, ended by
// `commit(pool)`, which must be refused as a whole (kOutOfRange from last_commit_status, both
// states as they were). Row a's verify outputs must equal a second CUDA pool's round without
// row b (the same kernels, so bit for bit), that pool keeping its state (commit 0); then both
// pools verify row a alone on the same inputs and commit 3: the same state, bit for bit (under
// replay the refused round's cursors and records left nothing behind).
template <typename Commit>
void expect_round_refused(Strategy strategy, uint64_t seed, int row_b_end, Commit&& commit) {
  std::mt19937_64 rng(seed);
  const GdnConfig g = gdn_preset("gpu_k32");
  PoolOptions o;
  o.num_slots = 2;
  o.max_rows = 2;
  o.max_window = 4;
  o.strategy = strategy;
  CudaStream stream(cudaStreamNonBlocking);
  o.stream = stream.get();
  o.backend = Backend::kCuda;
  const ModelConfig m = ModelConfig::gated_delta_net(1, g);
  StatePool gpu(m, o), ref(m, o);
  const LayerWeights w = random_weights(g, rng);
  const DeviceWeights dw(w);
  const SlotHandle a = gpu.acquire(), b = gpu.acquire();
  const SlotHandle ra = ref.acquire();
  {
    const TokenInputs in = random_inputs(g, 3, rng);
    const DeviceInputs din(in, 0);
    DeviceOutputs dout(make_outputs(g, 3), 0, true);
    gpu.prefill(0, b, dw.view(), din.view(), dout.view());
  }
  const std::vector<uint8_t> a_before = exported(gpu, a), b_before = exported(gpu, b);
  const TokenInputs in = random_inputs(g, 8, rng);
  const DeviceInputs din(in, 0);
  DeviceOutputs dout(make_outputs(g, 8), 0, true);
  Buffer cu(DType::kI32, {3});
  cu.set(0, 0);
  cu.set(1, 4);
  cu.set(2, static_cast<float>(row_b_end));
  const DeviceTensor dcu(cu);
  VerifyBatch batch;
  batch.rows = {a, b};
  batch.window = 4;
  batch.cu_seqlens = dcu.view();
  gpu.begin_verify(batch);
  gpu.verify(0, dw.view(), din.view(), dout.view());
  commit(gpu);
  EXPECT_EQ(gpu.last_commit_status(), Status::kOutOfRange);
  EXPECT_EQ(exported(gpu, b), b_before) << "row b was written";
  EXPECT_EQ(exported(gpu, a), a_before) << "row a was committed in a refused round";

  VerifyBatch one;
  one.rows = {ra};
  one.window = 4;
  DeviceOutputs rout(make_outputs(g, 4), 0, true);
  ref.begin_verify(one);
  ref.verify(0, dw.view(), din.rows(0, 4), rout.view());
  ref.commit(std::vector<int32_t>{0});
  EXPECT_EQ(ref.last_commit_status(), Status::kSuccess);
  EXPECT_EQ(rows_bytes(dout.core_out.view(), 0, 4), rows_bytes(rout.core_out.view(), 0, 4));
  double norm = 0;
  for (float x : to_floats(rout.core_out.view())) norm += double{x} * x;
  EXPECT_GT(norm, 0.0) << "core_out is all zeros";

  // The next round, row a alone in both pools: the refused round left nothing behind.
  const TokenInputs next = random_inputs(g, 4, rng);
  const DeviceInputs dnext(next, 0);
  for (StatePool* pool : {&gpu, &ref}) {
    VerifyBatch round;
    round.rows = {pool == &gpu ? a : ra};
    round.window = 4;
    DeviceOutputs out(make_outputs(g, 4), 0, true);
    pool->begin_verify(round);
    pool->verify(0, dw.view(), dnext.view(), out.view());
    pool->commit(std::vector<int32_t>{3});
    EXPECT_EQ(pool->last_commit_status(), Status::kSuccess);
  }
  const std::vector<uint8_t> a_after = exported(gpu, a);
  EXPECT_EQ(a_after, exported(ref, ra)) << "row a differs after the next round";
  EXPECT_NE(a_after, a_before) << "the next round committed nothing";
}

// Row 1's device range [4, 9) is longer than the window: the kernels compute nothing for it, and
// the commit (device values 3, 2) is refused: row 0, valid, does not commit either.
TEST_P(VariableWindowsGpuChecks, MalformedDeviceRangeRefusesTheRound) {
  SPECSTATE_REQUIRE_GPU();
  expect_round_refused(GetParam(), 5, 9, [](StatePool& pool) {
    Buffer acc(DType::kI32, {2});
    acc.set(0, 3);
    acc.set(1, 2);
    const DeviceTensor dacc(acc);
    pool.commit(dacc.view());
  });
}

// Host commit values in a round of device cu_seqlens: the host checks each value against the
// window only (it does not read the device lengths), the commit kernel against the row's own
// length. Row 1 verifies 2 tokens ([4, 6)) and is committed 3: the round is refused, reported
// by last_commit_status (pool.h), both rows left as they were.
TEST_P(VariableWindowsGpuChecks, HostValuePastADeviceRowLengthRefusesTheRound) {
  SPECSTATE_REQUIRE_GPU();
  expect_round_refused(GetParam(), 6, 6, [](StatePool& pool) {
    pool.commit(std::vector<int32_t>{3, 3});  // within the window: accepted by the host
  });
}

INSTANTIATE_TEST_SUITE_P(Gpu, VariableWindowsGpuChecks,
                         ::testing::Values(Strategy::kSnapshot, Strategy::kReplay),
                         strategy_test_name);

}  // namespace
}  // namespace specstate::test
