// Variable windows (DESIGN.md section 2): a round whose rows verify different numbers of tokens,
// packed by cumulative offsets with no filler, gives bit-identical outputs (on every row's own
// tokens) and committed states to the same round run with a uniform window and filler tokens;
// a batched variable-length prefill equals one prefill per request. One driver for every
// backend, strategy and layer kind (`Memory` as in strategy_equivalence.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/presets.h"
#include "common/strategy_equivalence.h"

namespace specstate::test {

struct VariableWindowsRun {
  Strategy strategy = Strategy::kSnapshot;
  // CUDA only: the variable pool reads its ranges from a device cu_seqlens view (inputs hold
  // rows * window tokens, the packed ones first) instead of host batch.lengths.
  bool device_cu_seqlens = false;
};

// A case of the variable-windows suites: an equivalence case and how to run it.
struct VarlenCase {
  EquivalenceCase base;
  VariableWindowsRun how;
};

// Every case of `base` under each strategy (snapshot, then replay) and each of `device_cu`
// (CUDA suites: host lengths, then device cu_seqlens).
std::vector<VarlenCase> varlen_cases(const std::vector<EquivalenceCase>& base,
                                     const std::vector<bool>& device_cu = {false});

// "<name>_snapshot" / "<name>_replay": the test name of a case.
std::string varlen_case_name(const ::testing::TestParamInfo<VarlenCase>& info);

// gtest prints a case by its name.
void PrintTo(const VarlenCase& c, std::ostream* out);

// Runs the case (preset, tree, max_window, requests, rounds) on `mem`'s backend.
void run_variable_windows(const EquivalenceCase& c, const VariableWindowsRun& how, Memory& mem,
                          uint64_t seed);

}  // namespace specstate::test
