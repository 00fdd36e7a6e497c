// Strategy equivalence (DESIGN.md section 7): the replay and snapshot strategies give
// bit-identical outputs and committed states (after materialize) on the same backend, over many
// random rounds with chains or trees, variable T per round, padding rows, a = 0, slots that sit
// out rounds, repeated verifies, released and re-acquired slots, decode steps and prefills
// between rounds, explicit materializes. One driver for every backend: `Memory` puts host test
// buffers in the backend's memory and reads views back.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/gdn_data.h"
#include "common/presets.h"

namespace specstate::test {

class Memory {
 public:
  virtual ~Memory() = default;
  virtual Backend backend() const = 0;
  virtual void* stream() const { return nullptr; }
  // A view of a copy of `host` in the backend's memory, valid until clear() (or, when
  // `persistent`, for the Memory's lifetime).
  virtual TensorView put(const Buffer& host, bool persistent = false) = 0;
  // The bytes of a contiguous view (host or device).
  virtual std::vector<uint8_t> bytes(const TensorView& view) = 0;
  virtual void clear() = 0;
};

std::unique_ptr<Memory> host_memory();

// Runs the case on `mem`'s backend; failures are reported through gtest (ASSERT/EXPECT).
// `verify_rows` (optional): the rows of every round that verified a layer, in order (padding rows
// count), the rounds an abort_round() dropped included. The rounds are drawn on the host from the
// seed, so they are the same on every backend.
void run_strategy_equivalence(const EquivalenceCase& c, Memory& mem, uint64_t seed,
                              std::vector<int>* verify_rows = nullptr);

// The cases of ConvLeanDefaultGpu (tests/gpu): per kind, one whose largest verified round is the
// kind's lean conv rows - 1 (ConvUpdateParams::lean_rows: 8 for GDN and Mamba2, 4 for KDA) and one
// whose largest is lean_rows; `lean`: whether the lean conv must run. Seeded with
// lean_default_seed; the largest rounds are checked on the CPU (test_strategy_equivalence.cpp).
struct LeanDefaultCase {
  EquivalenceCase c;
  int largest_rows;  // of its verified rounds
  bool lean;
};
std::vector<LeanDefaultCase> lean_default_cases();
inline uint64_t lean_default_seed(const EquivalenceCase& c) { return 0x1EA2 + c.requests * 7; }

}  // namespace specstate::test
