// Mamba2 layers (DESIGN.md section 7), on the CPU oracle: a tree's snapshot of node t equals a
// fresh run over its path, and strided caller views equal contiguous ones. Mamba2's speculative
// equivalence (verify + commit == sequential decode) runs from the kind table of
// test_speculative_equivalence.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "common/mamba2_data.h"
#include "common/presets.h"
#include "common/speculative_equivalence.h"
#include "common/strided_views.h"

namespace specstate::test {
namespace {

// A tree's snapshot of node t equals the final state of a fresh run over the path root..t.
TEST(TreeSnapshotsMamba2, EachNodeSnapshotEqualsAFreshRunOverItsPath) {
  const Mamba2Config m = mamba2_preset("m2_small_f32");
  run_tree_snapshot_check<Mamba2Kind>(m, 78, {m.num_heads, m.head_dim, m.d_state});
}

// Strided caller views (rows of wider buffers; z and dt interleaved) give bit-identical results
// to contiguous ones.
TEST(StridedViewsMamba2, RowStridedInputsAndOutputsMatchContiguous) {
  const Mamba2Config m = mamba2_preset("m2_small_f32");
  run_strided_views_check<Mamba2Kind>(
      m, 6, [&](const Mamba2TokenInputs& in, StridedLayout<Mamba2Kind>& s) {
        const int64_t d = m.conv_dim(), H = m.num_heads, P = m.head_dim;
        // One wide row per token as an engine's in_proj output: [z | xBC | dt | 5 spare].
        const int64_t row = H * P + d + H + 5;
        s.buffers = {std::vector<float>(3 * row), std::vector<float>(3 * (H * P + 3))};
        std::vector<float>&wide = s.buffers[0], &wide_y = s.buffers[1];
        for (int t = 0; t < 3; ++t) {
          for (int64_t i = 0; i < H * P; ++i) wide[t * row + i] = in.z.get(t * H * P + i);
          for (int64_t c = 0; c < d; ++c) wide[t * row + H * P + c] = in.xBC.get(t * d + c);
          for (int64_t h = 0; h < H; ++h) wide[t * row + H * P + d + h] = in.dt.get(t * H + h);
        }
        s.in = {TensorView::strided(wide.data() + H * P, DType::kF32, {3, d}, {row, 1}),
                TensorView::strided(wide.data() + H * P + d, DType::kF32, {3, H}, {row, 1}),
                TensorView::strided(wide.data(), DType::kF32, {3, H * P}, {row, 1})};
        s.out = {{}, TensorView::strided(wide_y.data(), DType::kF32, {3, H, P}, {H * P + 3, P, 1})};
      });
}

}  // namespace
}  // namespace specstate::test
