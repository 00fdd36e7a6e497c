// Bad input is a feature: every rejected call throws specstate::Error whose message names the
// argument and the offending value, and changes nothing (committed state bit-identical, the
// round still open so that a corrected call succeeds).
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>

#include "common/bad_input.h"
#include "common/gdn_data.h"

namespace specstate::test {
namespace {

class BadInput : public BadInputPool<GdnKind> {
 protected:
  void SetUp() override {
    seed_ = 1234;
    make_pool(small_config(), Strategy::kSnapshot);
  }

  // After a rejected commit the round is still open: a valid commit works and moves the state.
  void expect_valid_commit_still_works(std::vector<int32_t> accepted) {
    const std::vector<uint8_t> before = committed_bytes(*pool_);
    pool_->commit(accepted);
    EXPECT_NE(committed_bytes(*pool_), before);
  }
};

TEST_F(BadInput, AcceptedLengthAboveWindow) {
  verified_round();
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{kT + 1, 0, 1});
      },
      Status::kOutOfRange, {"accepted[0] = 4", "[0, 3]"});
  expect_valid_commit_still_works({kT, 0, 1});
}

TEST_F(BadInput, NegativeAcceptedLength) {
  verified_round();
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{1, 0, -1});
      },
      Status::kOutOfRange, {"accepted[2] = -1"});
  expect_valid_commit_still_works({1, 0, 1});
}

TEST_F(BadInput, LaterRowInvalidWritesNothingForEarlierRows) {
  verified_round();
  // Row 0 is valid and would be written first by a naive implementation.
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{2, 0, 9});
      },
      Status::kOutOfRange, {"accepted[2] = 9"});
}

TEST_F(BadInput, TreeNodeOutOfRange) {
  verified_round({-1, 0, 0});
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{2, -1, 3});
      },
      Status::kOutOfRange, {"accepted[2] = 3", "tree"});
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{-2, -1, 0});
      },
      Status::kOutOfRange, {"accepted[0] = -2"});
  expect_valid_commit_still_works({2, -1, 1});
}

TEST_F(BadInput, ParentsNotATree) {
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{a_, b_}, kT, {-1, 0, 2}});
      },
      Status::kInvalidArgument, {"batch.parents[2] = 2", "token 2"});
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{a_, b_}, kT, {0, 0, 1}});
      },
      Status::kInvalidArgument, {"batch.parents[0] = 0", "root"});
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{a_, b_}, kT, {-1, 0, 1, -1, 0, 5}});
      },
      Status::kInvalidArgument, {"batch.parents[5] = 5"});
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{a_, b_}, kT, {-1, 0}});
      },
      Status::kInvalidArgument, {"batch.parents has 2 entries"});
}

TEST_F(BadInput, ReleasedSlotInBatch) {
  SlotHandle c = pool_->acquire();
  pool_->release(c);
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{a_, c}, kT, {}});
      },
      Status::kFailedPrecondition, {"rows[1]", "released"});
}

TEST_F(BadInput, SlotReleasedBetweenVerifyAndCommit) {
  verified_round();
  pool_->release(b_);
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{1, 0, 1});
      },
      Status::kFailedPrecondition, {"batch.rows[2]"});
}

TEST_F(BadInput, SlotReleasedAfterBeginVerifyBecomesPadding) {
  // DESIGN.md section 5.6: the released row is a padding row of the round from then on; the
  // slot's new occupant is no row of it (tests/cpu/test_lifecycle.cpp holds the full cases).
  pool_->begin_verify(VerifyBatch{{a_, SlotHandle::padding(), b_}, kT, {}});
  pool_->release(a_);
  SlotHandle again = pool_->acquire();  // the same slot, a new generation
  ASSERT_EQ(again.slot, a_.slot);
  EXPECT_TRUE(pool_->current_batch().rows[0].is_padding());
  pool_->verify(0, w_[0].view(), in_[0].view(), out_[0].view());
  pool_->prefill(0, again, w_[0].view(), in_[0].rows(0, 1), out_[0].rows(0, 1));
}

TEST_F(BadInput, StaleHandleInBatch) {
  SlotHandle c = pool_->acquire();
  pool_->release(c);
  SlotHandle d = pool_->acquire();
  ASSERT_EQ(c.slot, d.slot);
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{c}, kT, {}});
      },
      Status::kFailedPrecondition, {"rows[0]", "stale"});
}

TEST_F(BadInput, SameSlotTwiceInOneBatch) {
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{a_, b_, a_}, kT, {}});
      },
      Status::kInvalidArgument, {"rows[2]", "rows[0]", "at most once"});
  expect_rejected(
      [&] {
        pool_->decode(0, {b_, b_}, w_[0].view(), in_[0].rows(0, 2), out_[0].rows(0, 2));
      },
      Status::kInvalidArgument, {"rows[1]"});
}

TEST_F(BadInput, HandleFromAnotherPool) {
  PoolOptions options;
  options.num_slots = 4;
  StatePool other(ModelConfig::gated_delta_net(kLayers, config_), options);
  SlotHandle foreign = other.acquire();
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{a_, foreign}, kT, {}});
      },
      Status::kFailedPrecondition, {"rows[1]", "another pool"});
  expect_rejected(
      [&] { pool_->prefill(0, foreign, w_[0].view(), in_[0].rows(0, 2), out_[0].rows(0, 2)); },
      Status::kFailedPrecondition, {"handle", "another pool"});
}

TEST_F(BadInput, WindowLongerThanScratch) {
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{a_}, kT + 1, {}});
      },
      Status::kOutOfRange, {"batch.window = 4", "max_window"});
  expect_rejected(
      [&] {
        pool_->begin_verify(
            VerifyBatch{{a_, b_, SlotHandle::padding(), SlotHandle::padding()}, kT, {}});
      },
      Status::kOutOfRange, {"4 rows", "max_rows"});
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{a_}, 0, {}});
      },
      Status::kInvalidArgument, {"batch.window = 0"});
}

TEST_F(BadInput, ShapeMismatch) {
  pool_->begin_verify(VerifyBatch{{a_, SlotHandle::padding(), b_}, kT, {}});
  // Inputs for 2 rows while the round has 3.
  expect_rejected([&] { pool_->verify(0, w_[0].view(), in_[0].rows(0, 2 * kT), out_[0].view()); },
                  Status::kInvalidArgument, {"inputs.mixed_qkv", "dim 0 = 6", "expected 9"});
  GdnWeights bad = w_[0].view();
  bad.conv_weight.shape[1] = 3;
  expect_rejected([&] { pool_->verify(0, bad, in_[0].view(), out_[0].view()); },
                  Status::kInvalidArgument, {"weights.conv_weight", "dim 1 = 3"});
  GdnOutputs flat = out_[0].view();
  flat.core_out.ndim = 2;
  expect_rejected([&] { pool_->verify(0, w_[0].view(), in_[0].view(), flat); },
                  Status::kInvalidArgument, {"outputs.core_out", "2 dims"});
}

TEST_F(BadInput, StrideMismatch) {
  pool_->begin_verify(VerifyBatch{{a_, SlotHandle::padding(), b_}, kT, {}});
  GdnInputs in = in_[0].view();
  in.a.stride[0] = -4;
  expect_rejected([&] { pool_->verify(0, w_[0].view(), in, out_[0].view()); },
                  Status::kInvalidArgument, {"inputs.a", "stride 0 = -4"});
}

TEST_F(BadInput, DTypeMismatch) {
  pool_->begin_verify(VerifyBatch{{a_, SlotHandle::padding(), b_}, kT, {}});
  Buffer bf(DType::kBF16, {3 * kT, config_.num_v_heads});
  GdnInputs in = in_[0].view();
  in.b = bf.view();
  expect_rejected([&] { pool_->verify(0, w_[0].view(), in, out_[0].view()); },
                  Status::kInvalidArgument, {"inputs.b", "dtype = bf16", "expected f32"});
  GdnWeights w = w_[0].view();
  Buffer ints(DType::kI32, {config_.num_v_heads});
  w.A_log = ints.view();
  expect_rejected([&] { pool_->verify(0, w, in_[0].view(), out_[0].view()); },
                  Status::kInvalidArgument, {"weights.A_log", "dtype = i32"});
}

TEST_F(BadInput, ConvBiasPresenceMustMatchConfig) {
  pool_->begin_verify(VerifyBatch{{a_, SlotHandle::padding(), b_}, kT, {}});
  GdnWeights w = w_[0].view();
  w.conv_bias = TensorView{};
  expect_rejected([&] { pool_->verify(0, w, in_[0].view(), out_[0].view()); },
                  Status::kInvalidArgument, {"weights.conv_bias", "empty"});
}

TEST_F(BadInput, DeviceMismatch) {
  pool_->begin_verify(VerifyBatch{{a_, SlotHandle::padding(), b_}, kT, {}});
  GdnInputs in = in_[0].view();
  in.mixed_qkv.device = Device::kCuda;
  expect_rejected([&] { pool_->verify(0, w_[0].view(), in, out_[0].view()); },
                  Status::kInvalidArgument, {"inputs.mixed_qkv", "cuda"});
}

TEST_F(BadInput, LayerOutOfRange) {
  pool_->begin_verify(VerifyBatch{{a_, SlotHandle::padding(), b_}, kT, {}});
  expect_rejected([&] { pool_->verify(kLayers, w_[0].view(), in_[0].view(), out_[0].view()); },
                  Status::kOutOfRange, {"layer = 2"});
  expect_rejected([&] { pool_->conv_state(-1); }, Status::kOutOfRange, {"layer = -1"});
}

TEST_F(BadInput, CommitOutOfProtocolOrder) {
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{1, 0, 1});
      },
      Status::kFailedPrecondition, {"begin_verify"});
  pool_->begin_verify(VerifyBatch{{a_, SlotHandle::padding(), b_}, kT, {}});
  pool_->verify(0, w_[0].view(), in_[0].view(), out_[0].view());
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{1, 0, 1});
      },
      Status::kFailedPrecondition, {"layer 1 was not verified"});
  pool_->verify(1, w_[1].view(), in_[1].view(), out_[1].view());
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{1, 0});
      },
      Status::kInvalidArgument, {"accepted has 2 entries", "3 rows"});
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{1, 2, 1});
      },
      Status::kInvalidArgument, {"accepted[1] = 2", "padding row"});
  expect_valid_commit_still_works({1, 0, 1});
  // A round commits once.
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{1, 0, 1});
      },
      Status::kFailedPrecondition, {"no open round"});
  expect_rejected([&] { pool_->verify(0, w_[0].view(), in_[0].view(), out_[0].view()); },
                  Status::kFailedPrecondition, {"begin_verify"});
}

TEST_F(BadInput, AcceptedViewWrongDtypeOrShape) {
  verified_round();
  std::vector<float> floats = {1, 0, 1};
  expect_rejected([&] { pool_->commit(TensorView::contiguous(floats.data(), DType::kF32, {3})); },
                  Status::kInvalidArgument, {"accepted", "dtype = f32", "i32"});
  std::vector<int32_t> ints = {1, 0, 1, 1};
  expect_rejected([&] { pool_->commit(TensorView::contiguous(ints.data(), DType::kI32, {4})); },
                  Status::kInvalidArgument, {"accepted", "dim 0 = 4"});
  // Values in device memory on a CPU pool: refused by the pool, the round still open.
  TensorView on_device = TensorView::contiguous(ints.data(), DType::kI32, {3});
  on_device.device = Device::kCuda;
  expect_rejected([&] { pool_->commit(on_device); }, Status::kInvalidArgument,
                  {"accepted lives on cuda, the pool's backend is cpu"});
  pool_->commit(TensorView::contiguous(ints.data(), DType::kI32, {3}));
}

TEST_F(BadInput, PrefillWithNoTokens) {
  expect_rejected(
      [&] { pool_->prefill(0, a_, w_[0].view(), in_[0].rows(0, 0), out_[0].rows(0, 0)); },
      Status::kInvalidArgument, {"0 tokens"});
}

TEST_F(BadInput, RejectedCallsInTheMiddleLeaveTheRoundUsable) {
  verified_round();
  expect_rejected(
      [&] {
        pool_->commit(std::vector<int32_t>{7, 0, 0});
      },
      Status::kOutOfRange, {"accepted[0] = 7"});
  expect_rejected(
      [&] {
        pool_->begin_verify(VerifyBatch{{a_, a_}, kT, {}});
      },
      Status::kInvalidArgument, {"rows[1]"});
  // The failed begin_verify did not discard the open round.
  expect_valid_commit_still_works({3, 0, 2});
}

}  // namespace
}  // namespace specstate::test
