// Variable windows (DESIGN.md section 2) on the CPU oracle, both strategies and both layer kinds:
//   - a round whose rows verify different numbers of tokens (0..T, packed by cumulative offsets,
//     trees packed or padded) equals the same round with a uniform window and filler tokens,
//     bit for bit, in every row's outputs and in the committed states after commit;
//   - a batched variable-length prefill equals one prefill per request;
//   - bad input (a commit past a row's own window, lengths out of range, the wrong number of
//     tokens or parents, device cu_seqlens on a CPU pool) is rejected, naming the argument, and
//     changes nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/expect.h"
#include "common/pool_rounds.h"
#include "common/variable_windows.h"

namespace specstate::test {
namespace {

class VariableWindows : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(VariableWindows, PackedRowsEqualUniformWindowWithFiller) {
  const VarlenCase& c = GetParam();
  EquivalenceCase e = c.base;
  e.rounds = std::min(e.rounds, 24);
  auto mem = host_memory();
  run_variable_windows(e, c.how, *mem, 0x7A1 + e.rounds * 3 + e.tree);
}

INSTANTIATE_TEST_SUITE_P(Cpu, VariableWindows,
                         ::testing::ValuesIn(varlen_cases(cpu_equivalence_cases())),
                         varlen_case_name);

// --- bad input --------------------------------------------------------------------------------

// Each test: a pool of one small_f32 layer under the parameter's strategy, its random weights w
// (the first draw of the test's seed) and two slots a and b.
class VariableWindowsBadInput : public ::testing::TestWithParam<Strategy> {
 protected:
  const GdnConfig g = gdn_preset("small_f32");
  std::mt19937_64 rng;
  LayerWeights w;

  // Seeds rng with `seed`, draws w from it and returns the pool.
  StatePool one_layer_pool(uint64_t seed, int num_slots, int max_rows, int max_window) {
    rng.seed(seed);
    w = random_weights(g, rng);
    return StatePool(ModelConfig::gated_delta_net(1, g),
                     test_pool_options(num_slots, max_rows, max_window, GetParam()));
  }
};

TEST_P(VariableWindowsBadInput, RejectedWithTheArgumentAndNothingChanges) {
  StatePool pool = one_layer_pool(11, 4, 4, 4);
  const SlotHandle a = pool.acquire(), b = pool.acquire();
  {
    const TokenInputs in = random_inputs(g, 3, rng);
    const TokenOutputs out = make_outputs(g, 3);
    pool.prefill(0, a, w.view(), in.view(), out.view());
  }
  const std::vector<uint8_t> before_a = exported(pool, a), before_b = exported(pool, b);

  VerifyBatch batch;
  batch.rows = {a, b};
  batch.window = 4;
  batch.lengths = {4, 2};

  // begin_verify: lengths of the wrong size, out of range, both lengths and cu_seqlens, device
  // cu_seqlens on a CPU pool, parents neither packed nor padded, a bad parent in a row's range.
  {
    VerifyBatch bad = batch;
    bad.lengths = {4};
    expect_rejected([&] { pool.begin_verify(bad); }, Status::kInvalidArgument,
                    {"batch.lengths has 1 entries", "2 rows"});
    bad.lengths = {4, 5};
    expect_rejected([&] { pool.begin_verify(bad); }, Status::kOutOfRange,
                    {"batch.lengths[1] = 5", "0..4"});
    bad.lengths = {-1, 2};
    expect_rejected([&] { pool.begin_verify(bad); }, Status::kOutOfRange,
                    {"batch.lengths[0] = -1"});
    bad = batch;
    int32_t cu[3] = {0, 4, 6};
    bad.cu_seqlens = TensorView::contiguous(cu, DType::kI32, {3});
    expect_rejected([&] { pool.begin_verify(bad); }, Status::kInvalidArgument,
                    {"batch.lengths and batch.cu_seqlens"});
    bad.lengths.clear();
    expect_rejected([&] { pool.begin_verify(bad); }, Status::kInvalidArgument,
                    {"batch.cu_seqlens", "device memory of a cuda pool"});
    bad = batch;
    bad.parents = {-1, 0, 1};  // neither 6 (packed) nor 8 (padded)
    expect_rejected([&] { pool.begin_verify(bad); }, Status::kInvalidArgument,
                    {"batch.parents has 3 entries", "6 (a tree per row, packed", "8"});
    bad.parents = {-1, 0, 1, 2, -1, 2};  // row 1's token 1 (packed index 5) has parent 2
    expect_rejected([&] { pool.begin_verify(bad); }, Status::kInvalidArgument,
                    {"batch.parents[5] = 2", "row 1"});
    EXPECT_FALSE(pool.round_open());
  }

  // verify: the inputs must hold sum(lengths) = 6 tokens, not B * T = 8.
  pool.begin_verify(batch);
  {
    const TokenInputs in = random_inputs(g, 8, rng);
    const TokenOutputs out = make_outputs(g, 8);
    expect_rejected([&] { pool.verify(0, w.view(), in.view(), out.view()); },
                    Status::kInvalidArgument, {"inputs.mixed_qkv", "6"});
  }
  const TokenInputs in = random_inputs(g, 6, rng);
  const TokenOutputs out = make_outputs(g, 6);
  pool.verify(0, w.view(), in.view(), out.view());
  EXPECT_GT(sum_squares(out.core_out.view()), 0.0);

  // commit: a = 3 for row 1, whose window is 2, would commit the state after another row's
  // tokens: rejected, naming the row's length; nothing changes and the round stays open.
  expect_rejected(
      [&] {
        pool.commit(std::vector<int32_t>{4, 3});
      },
      Status::kOutOfRange,
      {"accepted[1] = 3", "[0, 2]", "row 1 verified 2 tokens", "batch.lengths[1]"});
  EXPECT_TRUE(pool.round_open());
  EXPECT_EQ(exported(pool, a), before_a);
  EXPECT_EQ(exported(pool, b), before_b);
  pool.commit(std::vector<int32_t>{4, 2});
  EXPECT_NE(exported(pool, a), before_a);
  EXPECT_NE(exported(pool, b), before_b);

  // A row of length 0 must keep.
  batch.lengths = {0, 1};
  pool.begin_verify(batch);
  {
    const TokenInputs in1 = random_inputs(g, 1, rng);
    const TokenOutputs out1 = make_outputs(g, 1);
    pool.verify(0, w.view(), in1.view(), out1.view());
  }
  expect_rejected(
      [&] {
        pool.commit(std::vector<int32_t>{1, 1});
      },
      Status::kOutOfRange, {"accepted[0] = 1", "[0, 0]"});
  pool.abort_round();
}

TEST_P(VariableWindowsBadInput, BatchedPrefillRejectsBadLengths) {
  StatePool pool = one_layer_pool(12, 3, 2, 2);
  const SlotHandle a = pool.acquire(), b = pool.acquire();
  const TokenInputs in = random_inputs(g, 5, rng);
  const TokenOutputs out = make_outputs(g, 5);
  const std::vector<uint8_t> before = exported(pool, a);
  auto call = [&](std::vector<SlotHandle> rows, std::vector<int32_t> lengths) {
    pool.prefill(0, rows, lengths, w.view(), in.view(), out.view());
  };
  expect_rejected(
      [&] {
        call({a, b}, {5});
      },
      Status::kInvalidArgument, {"lengths has 1 entries", "handles 2"});
  expect_rejected(
      [&] {
        call({a, b}, {6, -1});
      },
      Status::kInvalidArgument, {"lengths[1] = -1", "negative"});
  expect_rejected(
      [&] {
        call({a, SlotHandle::padding()}, {3, 2});
      },
      Status::kInvalidArgument, {"handles[1] is padding", "lengths[1] = 2"});
  expect_rejected(
      [&] {
        call({a, b}, {2, 2});
      },
      Status::kInvalidArgument, {"inputs.mixed_qkv", "4"});
  expect_rejected([&] { call({a, a}, {2, 3}); }, Status::kInvalidArgument, {"repeats the slot"});
  EXPECT_EQ(exported(pool, a), before);
  call({a, b}, {2, 3});
  EXPECT_NE(exported(pool, a), before);
}

INSTANTIATE_TEST_SUITE_P(Cpu, VariableWindowsBadInput,
                         ::testing::Values(Strategy::kSnapshot, Strategy::kReplay),
                         strategy_test_name);

}  // namespace
}  // namespace specstate::test
