// Speculative equivalence of Mamba2 layers (DESIGN.md section 7), on the CPU oracle, both
// strategies: after verify + commit rounds the committed state equals plain sequential decoding
// of the accepted tokens, and every verify output of an accepted token equals the decode output
// at that step, bit for bit. Also: verify is pure, a = 0 and padding rows are untouched (their
// outputs are not written), and a tree's snapshot of node t equals a fresh run over its path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "common/mamba2_data.h"
#include "common/presets.h"

namespace specstate::test {
namespace {

struct Case {
  const char* name;
  const char* preset;  // mamba2_preset
  bool tree;
  bool shared_tree;  // one parents array [T] for all rows
  Strategy strategy = Strategy::kSnapshot;
};

// Window indices from the root to `node` (inclusive); empty for node = -1.
std::vector<int> path_to(const std::vector<int32_t>& parents, int offset, int node) {
  std::vector<int> path;
  for (int t = node; t >= 0; t = parents[offset + t]) path.push_back(t);
  std::reverse(path.begin(), path.end());
  return path;
}

bool same_bytes(const TensorView& x, int64_t xrow, const TensorView& y, int64_t yrow) {
  const int64_t bytes = x.stride[0] * static_cast<int64_t>(dtype_size(x.dtype));
  return std::memcmp(static_cast<const char*>(x.data) + xrow * bytes,
                     static_cast<const char*>(y.data) + yrow * bytes, bytes) == 0;
}

class SpeculativeEquivalenceMamba2 : public ::testing::TestWithParam<Case> {};

TEST_P(SpeculativeEquivalenceMamba2, CommittedStateEqualsSequentialDecode) {
  const Case c = GetParam();
  const uint64_t seed = 0x3a3ba2u + std::hash<std::string>{}(c.name) % 1000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Mamba2Config m = mamba2_preset(c.preset);
  const int layers = 3, requests = 5, T = 5, rounds = 24, max_rows = 7;
  const ModelConfig model = ModelConfig::mamba2(layers, m);
  PoolOptions options;
  options.num_slots = requests + 2;
  options.max_rows = max_rows;
  options.max_window = T;
  PoolOptions spec_options = options;
  spec_options.strategy = c.strategy;
  StatePool spec(model, spec_options), ref(model, options);
  std::vector<SlotHandle> spec_h, ref_h;
  // Burn a slot in `ref` so the two pools map requests to different slots.
  SlotHandle burn = ref.acquire();
  for (int i = 0; i < requests; ++i) {
    spec_h.push_back(spec.acquire());
    ref_h.push_back(ref.acquire());
  }
  ref.release(burn);
  std::vector<Mamba2LayerWeights> weights;
  for (int l = 0; l < layers; ++l) weights.push_back(random_weights(m, rng));

  int accepted_tokens = 0;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<int> order(requests);
    for (int i = 0; i < requests; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    const int live = std::uniform_int_distribution<int>(1, requests)(rng);
    std::vector<int> row_request;  // -1 = padding
    for (int i = 0; i < live; ++i) row_request.push_back(order[i]);
    while (static_cast<int>(row_request.size()) < max_rows && rng() % 3 == 0) {
      row_request.insert(row_request.begin() + rng() % (row_request.size() + 1), -1);
    }
    const int B = static_cast<int>(row_request.size());
    VerifyBatch batch;
    batch.window = T;
    for (int r = 0; r < B; ++r) {
      batch.rows.push_back(row_request[r] < 0 ? SlotHandle::padding() : spec_h[row_request[r]]);
    }
    if (c.tree) {
      if (c.shared_tree) {
        batch.parents = random_tree(T, rng);
      } else {
        for (int r = 0; r < B; ++r) {
          std::vector<int32_t> p = random_tree(T, rng);
          batch.parents.insert(batch.parents.end(), p.begin(), p.end());
        }
      }
    }
    auto parents_of = [&](int r) { return c.shared_tree ? 0 : r * T; };

    spec.begin_verify(batch);
    std::vector<Mamba2TokenInputs> inputs;
    std::vector<Mamba2TokenOutputs> outputs;
    const std::vector<uint8_t> before = committed_bytes(spec);
    for (int l = 0; l < layers; ++l) {
      inputs.push_back(random_inputs(m, int64_t{B} * T, rng));
      outputs.push_back(make_outputs(m, int64_t{B} * T));
      spec.verify(l, weights[l].view(), inputs[l].view(), outputs[l].view());
    }
    ASSERT_EQ(committed_bytes(spec), before) << "verify wrote the committed state";
    // Padding rows' outputs are not written.
    for (int r = 0; r < B; ++r) {
      if (row_request[r] >= 0) continue;
      const int64_t per_row = int64_t{T} * m.num_heads * m.head_dim;
      for (int64_t i = r * per_row; i < (r + 1) * per_row; ++i) {
        ASSERT_EQ(outputs[0].y.get(i), 0.0f) << "padding row " << r << " output written";
      }
    }

    std::vector<int32_t> accepted(B);
    for (int r = 0; r < B; ++r) {
      if (row_request[r] < 0) {
        accepted[r] = c.tree ? -1 : 0;
      } else {
        accepted[r] = std::uniform_int_distribution<int>(c.tree ? -1 : 0, c.tree ? T - 1 : T)(rng);
      }
    }
    std::vector<std::vector<uint8_t>> untouched(B);
    for (int r = 0; r < B; ++r) {
      const bool keep = row_request[r] >= 0 && accepted[r] == (c.tree ? -1 : 0);
      if (keep) untouched[r] = slot_bytes(spec, spec.slot_index(spec_h[row_request[r]]));
    }
    spec.commit(accepted);

    // The reference: decode (or prefill, for chains on odd rounds) the accepted tokens.
    for (int r = 0; r < B; ++r) {
      const int req = row_request[r];
      if (req < 0) continue;
      if (!untouched[r].empty()) {
        ASSERT_EQ(slot_bytes(spec, spec.slot_index(spec_h[req])), untouched[r])
            << "row " << r << " kept its state (accepted " << accepted[r] << ") but changed";
      }
      std::vector<int> path;
      if (c.tree) {
        path = path_to(batch.parents, parents_of(r), accepted[r]);
      } else {
        for (int t = 0; t < accepted[r]; ++t) path.push_back(t);
      }
      accepted_tokens += static_cast<int>(path.size());
      for (int l = 0; l < layers; ++l) {
        const int n = static_cast<int>(path.size());
        if (n == 0) continue;
        Mamba2TokenOutputs dec = make_outputs(m, n);
        if (!c.tree && round % 2 == 1) {
          ref.prefill(l, ref_h[req], weights[l].view(), inputs[l].rows(int64_t{r} * T, n),
                      dec.view());
        } else {
          for (int i = 0; i < n; ++i) {
            ref.decode(l, {ref_h[req]}, weights[l].view(),
                       inputs[l].rows(int64_t{r} * T + path[i], 1), dec.rows(i, 1));
          }
        }
        for (int i = 0; i < n; ++i) {
          const int64_t token = int64_t{r} * T + path[i];
          ASSERT_TRUE(same_bytes(outputs[l].y.view(), token, dec.y.view(), i))
              << "layer " << l << " row " << r << " token " << path[i] << ": y differs";
          ASSERT_TRUE(same_bytes(outputs[l].conv_out.view(), token, dec.conv_out.view(), i))
              << "layer " << l << " row " << r << " token " << path[i] << ": conv_out differs";
        }
      }
    }
    for (int i = 0; i < requests; ++i) {
      ASSERT_EQ(slot_bytes(spec, spec.slot_index(spec_h[i])),
                slot_bytes(ref, ref.slot_index(ref_h[i])))
          << "request " << i << ": committed state differs from sequential decoding";
    }
  }
  EXPECT_GT(accepted_tokens, rounds) << "the trace accepted almost nothing";
  double norm = 0, out_norm = 0;
  for (int l = 0; l < layers; ++l) norm += sum_squares(spec.ssm_state(l));
  EXPECT_GT(norm, 0.0) << "committed SSM state is all zeros";
  Mamba2TokenOutputs last = make_outputs(m, 1);
  ref.decode(0, {ref_h[0]}, weights[0].view(), random_inputs(m, 1, rng).view(), last.view());
  out_norm = sum_squares(last.y.view());
  EXPECT_GT(out_norm, 0.0) << "decode output is all zeros";
}

std::vector<Case> cases() {
  const std::vector<Case> base = {
      {"f32_chain", "m2_small_f32", false, false},
      {"f32_tree_per_row", "m2_small_f32", true, false},
      {"f32_tree_shared", "m2_small_f32", true, true},
      {"bf16_act_f32_ssm_chain", "m2_small_bf16", false, false},
      {"bf16_act_f32_ssm_tree", "m2_small_bf16", true, false},
      {"all_bf16_chain", "m2_all_bf16", false, false},
      {"all_bf16_tree", "m2_all_bf16", true, false},
      {"f32_act_bf16_conv_dt_clamp_tree", "m2_bf16_conv", true, false},
      {"one_group_w3_chain", "m2_g1", false, false},
  };
  std::vector<Case> all;
  for (Strategy strategy : {Strategy::kSnapshot, Strategy::kReplay}) {
    for (Case c : base) {
      c.strategy = strategy;
      all.push_back(c);
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cpu, SpeculativeEquivalenceMamba2, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name) + "_" +
                                  strategy_name(info.param.strategy);
                         });

// A tree's snapshot of node t equals the final state of a fresh run over the path root..t.
TEST(TreeSnapshotsMamba2, EachNodeSnapshotEqualsAFreshRunOverItsPath) {
  const uint64_t seed = 78;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Mamba2Config m = mamba2_preset("m2_small_f32");
  const int T = 6;
  PoolOptions options;
  options.num_slots = 2;
  options.max_rows = 1;
  options.max_window = T;
  const ModelConfig model = ModelConfig::mamba2(1, m);
  StatePool pool(model, options);
  SlotHandle h = pool.acquire();
  Mamba2LayerWeights w = random_weights(m, rng);
  Mamba2TokenInputs history = random_inputs(m, 3, rng);
  Mamba2TokenOutputs hist_out = make_outputs(m, 3);
  pool.prefill(0, h, w.view(), history.view(), hist_out.view());
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2};
  Mamba2TokenInputs window = random_inputs(m, T, rng);
  Mamba2TokenOutputs out = make_outputs(m, T);
  pool.begin_verify(VerifyBatch{{h}, T, parents});
  pool.verify(0, w.view(), window.view(), out.view());
  const TensorView snap_ssm = pool.snapshot_ssm(0), snap_conv = pool.snapshot_conv(0);
  ASSERT_EQ(snap_ssm.ndim, 5);
  EXPECT_EQ(snap_ssm.shape[2], m.num_heads);
  EXPECT_EQ(snap_ssm.shape[3], m.head_dim);
  EXPECT_EQ(snap_ssm.shape[4], m.d_state);
  for (int node = 0; node < T; ++node) {
    StatePool fresh(model, options);
    SlotHandle f = fresh.acquire();
    Mamba2TokenOutputs o = make_outputs(m, 3);
    fresh.prefill(0, f, w.view(), history.view(), o.view());
    for (int t : path_to(parents, 0, node)) {
      Mamba2TokenOutputs step = make_outputs(m, 1);
      fresh.decode(0, {f}, w.view(), window.rows(t, 1), step.view());
    }
    const TensorView fs = fresh.ssm_state(0), fc = fresh.conv_state(0);
    const int64_t ssm_bytes = fs.stride[0] * 4, conv_bytes = fc.stride[0] * 4;
    EXPECT_EQ(std::memcmp(static_cast<char*>(snap_ssm.data) + node * ssm_bytes, fs.data, ssm_bytes),
              0)
        << "node " << node;
    EXPECT_EQ(
        std::memcmp(static_cast<char*>(snap_conv.data) + node * conv_bytes, fc.data, conv_bytes), 0)
        << "node " << node;
  }
  EXPECT_GT(sum_squares(snap_ssm), 0.0);
}

// Strided caller views (rows of wider buffers; z and dt interleaved) give bit-identical results
// to contiguous ones.
TEST(StridedViewsMamba2, RowStridedInputsAndOutputsMatchContiguous) {
  const uint64_t seed = 6;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Mamba2Config m = mamba2_preset("m2_small_f32");
  PoolOptions options;
  options.num_slots = 2;
  options.max_rows = 1;
  options.max_window = 3;
  const ModelConfig model = ModelConfig::mamba2(1, m);
  StatePool p1(model, options), p2(model, options);
  SlotHandle h1 = p1.acquire(), h2 = p2.acquire();
  Mamba2LayerWeights w = random_weights(m, rng);
  Mamba2TokenInputs in = random_inputs(m, 3, rng);
  Mamba2TokenOutputs out1 = make_outputs(m, 3);
  const int64_t d = m.conv_dim(), H = m.num_heads, P = m.head_dim;
  // One wide row per token as an engine's in_proj output: [z | xBC | dt | 5 spare].
  const int64_t row = H * P + d + H + 5;
  std::vector<float> wide(3 * row), wide_y(3 * (H * P + 3));
  for (int t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < H * P; ++i) wide[t * row + i] = in.z.get(t * H * P + i);
    for (int64_t c = 0; c < d; ++c) wide[t * row + H * P + c] = in.xBC.get(t * d + c);
    for (int64_t h = 0; h < H; ++h) wide[t * row + H * P + d + h] = in.dt.get(t * H + h);
  }
  Mamba2Inputs strided{TensorView::strided(wide.data() + H * P, DType::kF32, {3, d}, {row, 1}),
                       TensorView::strided(wide.data() + H * P + d, DType::kF32, {3, H}, {row, 1}),
                       TensorView::strided(wide.data(), DType::kF32, {3, H * P}, {row, 1})};
  Mamba2Outputs strided_out{
      {}, TensorView::strided(wide_y.data(), DType::kF32, {3, H, P}, {H * P + 3, P, 1})};
  p1.begin_verify(VerifyBatch{{h1}, 3, {}});
  p1.verify(0, w.view(), in.view(), out1.view());
  p1.commit(std::vector<int32_t>{2});
  p2.begin_verify(VerifyBatch{{h2}, 3, {}});
  p2.verify(0, w.view(), strided, strided_out);
  p2.commit(std::vector<int32_t>{2});
  EXPECT_EQ(committed_bytes(p1), committed_bytes(p2));
  for (int t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < H * P; ++i) {
      ASSERT_EQ(out1.y.get(t * H * P + i), wide_y[t * (H * P + 3) + i]);
    }
  }
  EXPECT_GT(sum_squares(out1.y.view()), 0.0);
}

}  // namespace
}  // namespace specstate::test
