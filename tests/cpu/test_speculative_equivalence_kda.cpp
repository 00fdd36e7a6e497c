// KDA trees (DESIGN.md section 7), on the CPU oracle: a tree's snapshot of node t equals a fresh
// run over its path. KDA's speculative equivalence (verify + commit == sequential decode) runs
// from the kind table of test_speculative_equivalence.cpp.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/kda_data.h"
#include "common/presets.h"
#include "common/speculative_equivalence.h"

namespace specstate::test {
namespace {

// A tree's snapshot of node t equals the final state of a fresh run over the path root..t.
TEST(TreeSnapshotsKda, EachNodeSnapshotEqualsAFreshRunOverItsPath) {
  const KdaConfig k = kda_preset("kda_lb_f32");  // the helper compares f32 states
  run_tree_snapshot_check<KdaKind>(k, 79, {k.num_v_heads, k.head_v_dim, k.head_k_dim});
}

}  // namespace
}  // namespace specstate::test
