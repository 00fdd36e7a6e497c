// The case tables over layer kind x dtype x strategy that the per-call CPU suites share (presets of
// common/presets.h: the f32 and bf16 small configs of each kind).
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "specstate/specstate.h"

namespace specstate::test {

struct KindCase {
  const char* name;
  const char* preset;  // a preset of common/presets.h (the layer kind follows its name)
  Strategy strategy;
  bool tree = false;  // a tree window (else a chain), where the suite distinguishes them
};

inline void PrintTo(const KindCase& c, std::ostream* out) { *out << c.name; }

// The case's name: the test-name suffix of a suite parameterized by a KindCase.
inline std::string kind_case_name(const ::testing::TestParamInfo<KindCase>& info) {
  return info.param.name;
}

// Every kind, f32 and bf16, both strategies (12 cases).
inline const std::vector<KindCase>& kind_dtype_strategy_cases() {
  static const std::vector<KindCase> all = {
      {"gdn_f32_snapshot", "small_f32", Strategy::kSnapshot},
      {"gdn_f32_replay", "small_f32", Strategy::kReplay},
      {"gdn_bf16_snapshot", "small_bf16", Strategy::kSnapshot},
      {"gdn_bf16_replay", "small_bf16", Strategy::kReplay},
      {"m2_f32_snapshot", "m2_small_f32", Strategy::kSnapshot},
      {"m2_f32_replay", "m2_small_f32", Strategy::kReplay},
      {"m2_bf16_snapshot", "m2_small_bf16", Strategy::kSnapshot},
      {"m2_bf16_replay", "m2_small_bf16", Strategy::kReplay},
      {"kda_f32_snapshot", "kda_small_f32", Strategy::kSnapshot},
      {"kda_f32_replay", "kda_small_f32", Strategy::kReplay},
      {"kda_lb_bf16_snapshot", "kda_lb_all_bf16", Strategy::kSnapshot},
      {"kda_lb_bf16_replay", "kda_lb_all_bf16", Strategy::kReplay},
  };
  return all;
}

// Every kind, both strategies, each dtype with a chain or a tree window (12 cases).
inline const std::vector<KindCase>& kind_window_strategy_cases() {
  static const std::vector<KindCase> all = {
      {"gdn_f32_chain_snapshot", "small_f32", Strategy::kSnapshot, false},
      {"gdn_f32_chain_replay", "small_f32", Strategy::kReplay, false},
      {"gdn_bf16_tree_snapshot", "small_bf16", Strategy::kSnapshot, true},
      {"gdn_bf16_tree_replay", "small_bf16", Strategy::kReplay, true},
      {"m2_f32_tree_snapshot", "m2_small_f32", Strategy::kSnapshot, true},
      {"m2_f32_tree_replay", "m2_small_f32", Strategy::kReplay, true},
      {"m2_bf16_chain_snapshot", "m2_small_bf16", Strategy::kSnapshot, false},
      {"m2_bf16_chain_replay", "m2_small_bf16", Strategy::kReplay, false},
      {"kda_f32_tree_snapshot", "kda_lb_f32", Strategy::kSnapshot, true},
      {"kda_f32_tree_replay", "kda_lb_f32", Strategy::kReplay, true},
      {"kda_bf16_chain_snapshot", "kda_small_bf16", Strategy::kSnapshot, false},
      {"kda_bf16_chain_replay", "kda_small_bf16", Strategy::kReplay, false},
  };
  return all;
}

}  // namespace specstate::test
