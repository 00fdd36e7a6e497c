// Speculative equivalence of KDA layers (DESIGN.md section 7), on the CPU oracle, both strategies:
// after verify + commit rounds the committed state equals plain sequential decoding of the
// accepted tokens, and every verify output of an accepted token equals the decode output at that
// step, bit for bit. Also: verify is pure, a = 0 and padding rows are untouched, and a tree's
// snapshot of node t equals a fresh run over its path.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/kda_data.h"
#include "common/presets.h"
#include "common/speculative_equivalence.h"

namespace specstate::test {
namespace {

struct Case {
  const char* name;
  const char* preset;  // kda_preset
  bool tree;
  bool shared_tree;  // one parents array [T] for all rows
  Strategy strategy = Strategy::kSnapshot;
};

class SpeculativeEquivalenceKda : public ::testing::TestWithParam<Case> {};

TEST_P(SpeculativeEquivalenceKda, CommittedStateEqualsSequentialDecode) {
  const Case c = GetParam();
  const uint64_t seed = 0x4bda5u + std::hash<std::string>{}(c.name) % 1000;
  run_speculative_equivalence<KdaKind>(kda_preset(c.preset), {c.tree, c.shared_tree, c.strategy},
                                       seed);
}

std::vector<Case> cases() {
  const std::vector<Case> base = {
      {"f32_chain", "kda_small_f32", false, false},
      {"f32_tree_per_row", "kda_small_f32", true, false},
      {"f32_tree_shared", "kda_small_f32", true, true},
      {"bf16_act_f32_ssm_chain", "kda_small_bf16", false, false},
      {"bf16_act_f32_ssm_tree", "kda_small_bf16", true, false},
      {"lower_bound_all_bf16_chain", "kda_lb_all_bf16", false, false},
      {"lower_bound_all_bf16_tree", "kda_lb_all_bf16", true, false},
      {"lower_bound_f32_tree", "kda_lb_f32", true, true},
  };
  return for_both_strategies(base);
}

INSTANTIATE_TEST_SUITE_P(Cpu, SpeculativeEquivalenceKda, ::testing::ValuesIn(cases()),
                         name_and_strategy<Case>);

// A tree's snapshot of node t equals the final state of a fresh run over the path root..t.
TEST(TreeSnapshotsKda, EachNodeSnapshotEqualsAFreshRunOverItsPath) {
  const KdaConfig k = kda_preset("kda_lb_f32");  // the helper compares f32 states
  run_tree_snapshot_check<KdaKind>(k, 79, {k.num_v_heads, k.head_v_dim, k.head_k_dim});
}

}  // namespace
}  // namespace specstate::test
