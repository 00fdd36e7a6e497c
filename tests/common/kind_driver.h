// The parts the two-pool drivers of strategy_equivalence.cpp and variable_windows.cpp share, for
// any layer kind (common/layer_kinds.h) and backend (`Memory`): the random model of a run with
// its weights, per-round inputs and outputs, the commit of both pools, the final non-zero check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/layer_kinds.h"
#include "common/presets.h"
#include "common/strategy_equivalence.h"

namespace specstate::test {

// A driver run's seed trace, rng, model of `kLayers` layers of `g` with random weights (put once in
// `mem`), and random inputs / empty outputs put in `mem` for the round.
template <typename Kind>
struct KindDriver {
  static constexpr int kLayers = 2;

  KindDriver(const typename Kind::Config& config, Memory& memory, uint64_t seed)
      : trace(__FILE__, __LINE__, "seed " + std::to_string(seed)),
        g(config),
        mem(memory),
        rng(seed),
        model(Kind::model(kLayers, config)) {
    const PutBuffer put_persistent = [this](const Buffer& b) { return mem.put(b, true); };
    for (int l = 0; l < kLayers; ++l) {
      weights.push_back(Kind::put(random_weights(g, rng), put_persistent));
    }
  }
  // Pool options on mem's backend and stream.
  PoolOptions options(int num_slots, int max_rows, int max_window) const {
    PoolOptions o = test_pool_options(num_slots, max_rows, max_window);
    o.backend = mem.backend();
    o.stream = mem.stream();
    return o;
  }
  // `host` put in mem until the round's clear().
  template <typename Host>
  auto put(const Host& host) {
    return Kind::put(host, [this](const Buffer& b) { return mem.put(b); });
  }
  // Random inputs of `tokens` tokens, put for the round.
  typename Kind::Inputs inputs(int64_t tokens) { return put(random_inputs(g, tokens, rng)); }
  // Zeroed outputs of `tokens` tokens, put for the round.
  typename Kind::Outputs outputs(int64_t tokens) { return put(make_outputs(g, tokens)); }

  const ::testing::ScopedTrace trace;  // the seed, on every failure of the run
  const typename Kind::Config& g;
  Memory& mem;
  std::mt19937_64 rng;
  const ModelConfig model;
  std::vector<typename Kind::Weights> weights;
};

// A verify batch of window T whose row r is request row_request[r]'s handle in `handles`
// (row_request[r] < 0: a padding row).
inline VerifyBatch request_batch(const std::vector<int>& row_request,
                                 const std::vector<SlotHandle>& handles, int T) {
  VerifyBatch batch;
  batch.window = T;
  for (int i : row_request) batch.rows.push_back(i < 0 ? SlotHandle::padding() : handles[i]);
  return batch;
}

// Between rounds, one time in `one_in`: a random one of `requests` requests leaves, its slots in
// pools `a` and `b` are released and a new request takes one in each. Returns it, else -1.
inline int maybe_replace_request(std::mt19937_64& rng, int one_in, int requests, StatePool& a,
                                 std::vector<SlotHandle>& ha, StatePool& b,
                                 std::vector<SlotHandle>& hb) {
  if (rng() % one_in != 0) return -1;
  const int i = static_cast<int>(rng() % requests);
  a.release(ha[i]);
  b.release(hb[i]);
  ha[i] = a.acquire();
  hb[i] = b.acquire();
  return i;
}

// Commits `accepted` in pools `a` and `b`: on CUDA every odd round from one device view (returns
// true), else from the host values (returns false).
inline bool commit_both(Memory& mem, int round, const std::vector<int32_t>& accepted, StatePool& a,
                        StatePool& b) {
  if (mem.backend() == Backend::kCuda && round % 2 == 1) {
    Buffer acc(DType::kI32, {static_cast<int64_t>(accepted.size())});
    for (std::size_t r = 0; r < accepted.size(); ++r) {
      acc.set(static_cast<int64_t>(r), static_cast<float>(accepted[r]));
    }
    const TensorView dev = mem.put(acc);
    a.commit(dev);
    b.commit(dev);
    // A device-valued commit that refused the round commits nothing in either pool, and the
    // states would still compare equal: the values here are valid, so both must have committed.
    EXPECT_EQ(a.last_commit_status(), Status::kSuccess) << "round " << round;
    EXPECT_EQ(b.last_commit_status(), Status::kSuccess) << "round " << round;
    return true;
  }
  a.commit(accepted);
  b.commit(accepted);
  return false;
}

// Expects some byte of the committed SSM state of `pool`'s first `layers` layers to be non-zero.
inline void expect_nonzero_ssm_state(Memory& mem, const StatePool& pool, int layers) {
  int64_t norm = 0;
  for (int l = 0; l < layers; ++l) {
    const std::vector<uint8_t> b = mem.bytes(pool.ssm_state(l));
    norm += std::count_if(b.begin(), b.end(), [](uint8_t x) { return x != 0; });
  }
  EXPECT_GT(norm, 0) << "committed SSM state is all zeros";
}

}  // namespace specstate::test
