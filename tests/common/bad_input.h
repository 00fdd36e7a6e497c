// The fixture of the bad-input suites of every layer kind (tests/cpu/test_bad_input*.cpp): a pool
// of two layers with slots a and b prefilled, per-layer weights, inputs and outputs of a round
// over rows (a, padding, b), and the check that a rejected call names what was wrong and changes
// nothing.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/expect.h"
#include "common/layer_kinds.h"

namespace specstate::test {

template <typename Kind, typename Base = ::testing::Test>
class BadInputPool : public Base {
 protected:
  static constexpr int kLayers = 2;
  static constexpr int kT = 3;

  // Builds the pool of kLayers layers of `config` (3 rows, window kT) and prefills a and b with
  // 2 random tokens per layer, all from seed_.
  void make_pool(const typename Kind::Config& config, Strategy strategy) {
    std::mt19937_64 rng(seed_);
    config_ = config;
    PoolOptions options;
    options.num_slots = 4;
    options.max_rows = 3;
    options.max_window = kT;
    options.strategy = strategy;
    pool_ = std::make_unique<StatePool>(Kind::model(kLayers, config_), options);
    a_ = pool_->acquire();
    b_ = pool_->acquire();
    for (int l = 0; l < kLayers; ++l) {
      w_.push_back(random_weights(config_, rng));
      in_.push_back(random_inputs(config_, 3 * kT, rng));
      out_.push_back(make_outputs(config_, 3 * kT));
      for (SlotHandle h : {a_, b_}) {
        typename Kind::HostInputs p = random_inputs(config_, 2, rng);
        typename Kind::HostOutputs o = make_outputs(config_, 2);
        pool_->prefill(l, h, w_[l].view(), p.view(), o.view());
      }
    }
  }

  // Opens a round over rows (a, padding, b).
  void begin_round(std::vector<int32_t> parents = {}) {
    pool_->begin_verify(VerifyBatch{{a_, SlotHandle::padding(), b_}, kT, std::move(parents)});
  }

  // Opens a round over rows (a, padding, b) and verifies every layer.
  void verified_round(std::vector<int32_t> parents = {}) {
    begin_round(std::move(parents));
    for (int l = 0; l < kLayers; ++l) {
      pool_->verify(l, w_[l].view(), in_[l].view(), out_[l].view());
    }
  }

  // Runs `call`, expects Error with `status` and every needle in its message, and no change.
  void expect_rejected(const std::function<void()>& call, Status status,
                       std::initializer_list<std::string> needles) {
    SCOPED_TRACE("seed " + std::to_string(seed_));
    const std::vector<uint8_t> before = committed_bytes(*pool_);
    test::expect_rejected(call, status, std::vector<std::string>(needles));
    EXPECT_EQ(committed_bytes(*pool_), before) << "a rejected call changed the committed state";
  }

  uint64_t seed_ = 0;
  typename Kind::Config config_;
  std::unique_ptr<StatePool> pool_;
  SlotHandle a_, b_;
  std::vector<typename Kind::HostWeights> w_;
  std::vector<typename Kind::HostInputs> in_;
  std::vector<typename Kind::HostOutputs> out_;
};

}  // namespace specstate::test
