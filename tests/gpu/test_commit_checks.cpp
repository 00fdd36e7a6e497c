// Bad device-side accepted values: the commit reads them from device memory (no host check
// possible without a sync), so the device checks every row before the commit's launch. One bad
// row (chain a > T or a < 0, tree node outside [-1, T-1]) refuses the whole round: no slot is
// written (all-or-nothing, DESIGN.md section 5), and the round's error flag is raised, which
// StatePool::last_commit_status() reports.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "gpu_util.h"

namespace specstate::test {
namespace {

constexpr int kT = 4;
constexpr int kLayers = 2;
constexpr int kManyRows = 300;  // more rows than the check kernel's 256 threads

class CommitChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
    g_.num_k_heads = 2;
    g_.num_v_heads = 4;
    g_.head_k_dim = 32;
    g_.head_v_dim = 32;
    g_.conv_width = 4;
    g_.act_dtype = g_.conv_state_dtype = g_.ssm_state_dtype = DType::kF32;
    PoolOptions options;
    options.num_slots = 6;
    options.max_rows = kManyRows;
    options.max_window = kT;
    options.backend = Backend::kCuda;
    pool_ = std::make_unique<StatePool>(ModelConfig::gated_delta_net(kLayers, g_), options);
    std::mt19937_64 rng(99);
    for (int l = 0; l < kLayers; ++l) {
      weights_.push_back(random_weights(g_, rng));
      dweights_.emplace_back(weights_.back());
    }
    for (int i = 0; i < 4; ++i) handles_.push_back(pool_->acquire());
    for (int i = 0; i < 4; ++i) {
      for (int l = 0; l < kLayers; ++l) {
        TokenInputs in = random_inputs(g_, 2, rng);
        TokenOutputs out = make_outputs(g_, 2);
        DeviceInputs din(in, 0);
        DeviceOutputs dout(out, 0, true);
        pool_->prefill(l, handles_[i], dweights_[l].view(), din.view(), dout.view());
      }
    }
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_accepted_), sizeof(int32_t) * kManyRows),
              cudaSuccess);
    rng_.seed(1234);
  }
  void TearDown() override {
    if (d_accepted_) cudaFree(d_accepted_);
  }

  // Rows: [h0, h1, padding, h2, h3] by default. Verifies every layer with random inputs.
  void verify_round(bool tree, std::vector<SlotHandle> rows = {}) {
    if (rows.empty())
      rows = {handles_[0], handles_[1], SlotHandle::padding(), handles_[2], handles_[3]};
    rows_ = rows;
    const int B = static_cast<int>(rows.size());
    VerifyBatch batch;
    batch.window = kT;
    batch.rows = rows;
    if (tree) batch.parents = {-1, 0, 0, 2};
    pool_->begin_verify(batch);
    for (int l = 0; l < kLayers; ++l) {
      TokenInputs in = random_inputs(g_, B * kT, rng_);
      TokenOutputs out = make_outputs(g_, B * kT);
      DeviceInputs din(in, 0);
      DeviceOutputs dout(out, 0, true);
      pool_->verify(l, dweights_[l].view(), din.view(), dout.view());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }

  // Commits `accepted` from device memory; checks that rows with `expect_step[r] >= 0` now hold
  // snapshot step expect_step[r] and that every other slot is bit-identical to before.
  void commit_and_check(const std::vector<int32_t>& accepted, const std::vector<int>& expect_step,
                        Status expect_status) {
    const int B = static_cast<int>(accepted.size());
    std::vector<std::vector<uint8_t>> conv_before, ssm_before, conv_snap, ssm_snap;
    for (int l = 0; l < kLayers; ++l) {
      conv_before.push_back(rows_bytes(pool_->conv_state(l), 0, 6));
      ssm_before.push_back(rows_bytes(pool_->ssm_state(l), 0, 6));
      conv_snap.push_back(rows_bytes(pool_->snapshot_conv(l), 0, B));
      ssm_snap.push_back(rows_bytes(pool_->snapshot_ssm(l), 0, B));
    }
    ASSERT_EQ(cudaMemcpy(d_accepted_, accepted.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice),
              cudaSuccess);
    pool_->commit(TensorView::contiguous(d_accepted_, DType::kI32, {B}, Device::kCuda));
    EXPECT_EQ(pool_->last_commit_status(), expect_status);
    std::vector<int> row_slot;
    for (const SlotHandle& h : rows_)
      row_slot.push_back(h.is_padding() ? -1 : pool_->slot_index(h));
    const std::size_t conv_bytes = g_.conv_dim() * (g_.conv_width - 1) * sizeof(float);
    const std::size_t ssm_bytes = g_.ssm_state_elems() * sizeof(float);
    int committed = 0;
    for (int l = 0; l < kLayers; ++l) {
      std::vector<uint8_t> conv_expect = conv_before[l], ssm_expect = ssm_before[l];
      for (int r = 0; r < B; ++r) {
        if (expect_step[r] < 0 || row_slot[r] < 0) continue;
        std::memcpy(conv_expect.data() + row_slot[r] * conv_bytes,
                    conv_snap[l].data() + (r * kT + expect_step[r]) * conv_bytes, conv_bytes);
        std::memcpy(ssm_expect.data() + row_slot[r] * ssm_bytes,
                    ssm_snap[l].data() + (r * kT + expect_step[r]) * ssm_bytes, ssm_bytes);
        ++committed;
      }
      EXPECT_EQ(rows_bytes(pool_->conv_state(l), 0, 6), conv_expect) << "conv, layer " << l;
      EXPECT_EQ(rows_bytes(pool_->ssm_state(l), 0, 6), ssm_expect) << "ssm, layer " << l;
      EXPECT_GT(sum_squares_host(ssm_expect), 0.0);
    }
    (void)committed;
  }

  static double sum_squares_host(const std::vector<uint8_t>& bytes) {
    double total = 0;
    for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
      float v;
      std::memcpy(&v, bytes.data() + i, 4);
      total += double(v) * v;
    }
    return total;
  }

  GdnConfig g_;
  std::unique_ptr<StatePool> pool_;
  std::vector<LayerWeights> weights_;
  std::vector<DeviceWeights> dweights_;
  std::vector<SlotHandle> handles_;
  std::vector<SlotHandle> rows_;  // the last verify_round's
  int32_t* d_accepted_ = nullptr;
  std::mt19937_64 rng_;
};

TEST_F(CommitChecks, ValidChainCommitsEveryRowAndReportsSuccess) {
  verify_round(false);
  // Row 2 is padding: whatever its value (even out of range), it is never read or written.
  commit_and_check({2, kT, 99, 1, 0}, {1, kT - 1, -1, 0, -1}, Status::kSuccess);
}

// One bad row refuses the round: every row keeps its state (-1 everywhere), the valid ones too.
TEST_F(CommitChecks, AcceptedAboveWindowRefusesTheRoundAndRaisesTheFlag) {
  verify_round(false);
  commit_and_check({2, kT + 1, 0, 3, 1}, {-1, -1, -1, -1, -1}, Status::kOutOfRange);
}

TEST_F(CommitChecks, NegativeAcceptedRefusesTheRoundAndRaisesTheFlag) {
  verify_round(false);
  commit_and_check({-1, 4, 0, -7, 1}, {-1, -1, -1, -1, -1}, Status::kOutOfRange);
}

TEST_F(CommitChecks, TreeNodeOutOfRangeRefusesTheRoundAndRaisesTheFlag) {
  verify_round(true);
  commit_and_check({kT, 3, -1, -2, 1}, {-1, -1, -1, -1, -1}, Status::kOutOfRange);
}

TEST_F(CommitChecks, ValidTreeCommitAfterABadOneReportsSuccess) {
  verify_round(true);
  commit_and_check({kT + 3, 0, -1, 2, -1}, {-1, -1, -1, -1, -1}, Status::kOutOfRange);
  verify_round(true);
  commit_and_check({3, -1, -1, 0, 2}, {3, -1, -1, 0, 2}, Status::kSuccess);
}

// 300 rows (the check's CTA strides over them): live rows at 0, 150, 298 and 299, padding between
// holding out-of-range values (never read). A bad value in the last row refuses the round; the
// same round's values all valid commit every live row.
TEST_F(CommitChecks, ABadValueInTheLastOfManyRowsRefusesTheRound) {
  std::vector<SlotHandle> rows(kManyRows, SlotHandle::padding());
  rows[0] = handles_[0];
  rows[150] = handles_[1];
  rows[298] = handles_[2];
  rows[299] = handles_[3];
  std::vector<int32_t> accepted(kManyRows, kT + 5);  // padding: any value
  accepted[0] = 1;
  accepted[150] = kT;
  accepted[298] = 2;
  accepted[299] = kT + 1;
  std::vector<int> keep(kManyRows, -1);
  verify_round(false, rows);
  commit_and_check(accepted, keep, Status::kOutOfRange);
  verify_round(false, rows);
  accepted[299] = 3;
  std::vector<int> steps = keep;
  steps[0] = 0;
  steps[150] = kT - 1;
  steps[298] = 1;
  steps[299] = 2;
  commit_and_check(accepted, steps, Status::kSuccess);
}

}  // namespace
}  // namespace specstate::test
