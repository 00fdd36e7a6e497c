// The case of the slot-operation suites (tests/cpu/test_slot_ops.cpp on the CPU oracle,
// tests/gpu/test_slot_ops_gpu.cpp on CUDA) and the helpers both use: a preset, a strategy, chain
// or tree, the round's batch and accepted values, the other strategy, a non-zero check.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/pool_rounds.h"

namespace specstate::test {

struct SlotCase {
  const char* name;
  const char* preset;  // gdn_preset or mamba2_preset name (the layer kind follows)
  Strategy strategy;
  bool tree;
};

inline void PrintTo(const SlotCase& c, std::ostream* out) { *out << c.name; }

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

}  // namespace specstate::test
