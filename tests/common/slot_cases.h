// The cases of the slot-operation suite (common/slot_ops.h, run by tests/cpu/test_slot_ops.cpp on
// the CPU oracle and by tests/gpu/test_slot_ops_gpu.cpp on CUDA) and the helpers its tests use: a
// backend, a preset, a strategy, chain or tree, the round's batch and accepted values, the other
// strategy, a non-zero check, the backend's memory as PoolRounds' PutBuffer and its pools.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/pool_rounds.h"
#include "common/strategy_equivalence.h"

namespace specstate::test {

struct SlotCase {
  Backend backend;
  const char* name;
  const char* preset;  // gdn_preset, mamba2_preset or kda_preset name (the layer kind follows)
  Strategy strategy;
  bool tree;
};

inline void PrintTo(const SlotCase& c, std::ostream* out) { *out << c.name; }

// The cases of one backend: on the CPU every layer kind in f32 and bf16; on CUDA the presets its
// kernels take (GDN with K = 32 and f32, Mamba2 of one group, KDA with both gates).
inline std::vector<SlotCase> slot_cases(Backend backend) {
  constexpr Backend kCpu = Backend::kCpu, kCuda = Backend::kCuda;
  constexpr Strategy kSnap = Strategy::kSnapshot, kReplay = Strategy::kReplay;
  static const SlotCase all[] = {
      {kCpu, "gdn_f32_chain_snapshot", "small_f32", kSnap, false},
      {kCpu, "gdn_f32_tree_replay", "small_f32", kReplay, true},
      {kCpu, "gdn_bf16_tree_snapshot", "small_bf16", kSnap, true},
      {kCpu, "gdn_bf16_chain_replay", "small_bf16", kReplay, false},
      {kCpu, "m2_f32_tree_snapshot", "m2_small_f32", kSnap, true},
      {kCpu, "m2_f32_chain_replay", "m2_small_f32", kReplay, false},
      {kCpu, "m2_bf16_chain_snapshot", "m2_small_bf16", kSnap, false},
      {kCpu, "m2_bf16_tree_replay", "m2_small_bf16", kReplay, true},
      {kCpu, "kda_f32_tree_snapshot", "kda_small_f32", kSnap, true},
      {kCpu, "kda_f32_chain_replay", "kda_small_f32", kReplay, false},
      {kCpu, "kda_bf16_chain_snapshot", "kda_small_bf16", kSnap, false},
      {kCpu, "kda_lb_bf16_tree_replay", "kda_lb_all_bf16", kReplay, true},
      {kCuda, "gdn_k32_chain_snapshot", "gpu_k32", kSnap, false},
      {kCuda, "gdn_k32_tree_replay", "gpu_k32", kReplay, true},
      {kCuda, "gdn_f32_tree_snapshot", "gpu_f32", kSnap, true},
      {kCuda, "gdn_f32_chain_replay", "gpu_f32", kReplay, false},
      {kCuda, "m2_g1_tree_snapshot", "m2_g1", kSnap, true},
      {kCuda, "m2_g1_chain_replay", "m2_g1", kReplay, false},
      {kCuda, "kda_lb_f32_tree_snapshot", "kda_gpu_lb_f32", kSnap, true},
      {kCuda, "kda_grouped_bf16_chain_replay", "kda_gpu_grouped_bf16", kReplay, false},
  };
  std::vector<SlotCase> out;
  for (const SlotCase& c : all) {
    if (c.backend == backend) out.push_back(c);
  }
  return out;
}

inline VerifyBatch batch_of(const SlotCase& c, std::vector<SlotHandle> rows) {
  return round_batch(c.tree, std::move(rows));
}

inline std::vector<int32_t> accept(const SlotCase& c, const std::vector<int>& steps) {
  return round_accept(c.tree, steps);
}

inline Strategy other(Strategy s) {
  return s == Strategy::kSnapshot ? Strategy::kReplay : Strategy::kSnapshot;
}

// Some byte of `bytes` is non-zero (a numeric result that is not all zeros).
inline void expect_nonzero(const std::vector<uint8_t>& bytes, const std::string& what) {
  double norm = 0;
  for (uint8_t b : bytes) norm += b;
  EXPECT_GT(norm, 0) << what << " is all zero";
}

// Two outputs' bytes equal and not all zero (outputs start zeroed: a call that wrote nothing in
// either would compare equal).
inline void expect_same_outputs(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                const std::string& what) {
  EXPECT_EQ(got, want) << what;
  expect_nonzero(got, what);
}

// PoolRounds' buffers in `mem` (alive as long as `mem`); with `count` >= 0 each view is cut to
// rows [begin, begin + count) of its leading dimension (one request's tokens of a batch).
inline PutBuffer memory_put(Memory& mem, int64_t begin = 0, int64_t count = -1) {
  return [&mem, begin, count](const Buffer& b) {
    TensorView v = mem.put(b, /*persistent=*/true);
    if (count >= 0) {
      v.data = static_cast<char*>(v.data) + begin * v.stride[0] * dtype_size(v.dtype);
      v.shape[0] = count;
    }
    return v;
  };
}

// A pool of `r`'s model on `mem`'s backend (CUDA: device 0, mem's stream).
template <typename Kind>
StatePool memory_pool(const PoolRounds<Kind>& r, Memory& mem, Strategy strategy, int slots = 6) {
  PoolOptions o = r.options(strategy, slots);
  if (mem.backend() == Backend::kCuda) {
    o.backend = Backend::kCuda;
    o.device = 0;
    o.stream = mem.stream();
  }
  return StatePool(r.model(), o);
}

}  // namespace specstate::test
