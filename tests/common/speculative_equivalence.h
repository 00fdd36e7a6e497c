// Speculative equivalence (DESIGN.md section 7), one driver for every layer kind
// (common/layer_kinds.h): after verify + commit rounds the committed state equals plain
// sequential decoding of the accepted tokens, and every verify output of an accepted token equals
// the decode output at that step, bit for bit on the CPU. Also: verify is pure, a = 0 rows keep
// their state, padding rows' outputs are not written.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/layer_kinds.h"

namespace specstate::test {

// Window indices from the root to `node` (inclusive); empty for node = -1.
inline std::vector<int> path_to(const std::vector<int32_t>& parents, int offset, int node) {
  std::vector<int> path;
  for (int t = node; t >= 0; t = parents[offset + t]) path.push_back(t);
  std::reverse(path.begin(), path.end());
  return path;
}

// The window indices a commit of `accepted` keeps: a chain's first `accepted` tokens, or a tree's
// path from the root to node `accepted` (the row's parents at `offset`).
inline std::vector<int> accepted_path(bool tree, const std::vector<int32_t>& parents, int offset,
                                      int accepted) {
  if (tree) return path_to(parents, offset, accepted);
  std::vector<int> path;
  for (int t = 0; t < accepted; ++t) path.push_back(t);
  return path;
}

// Requests 0..n-1 in a random order.
inline std::vector<int> shuffled_requests(int n, std::mt19937_64& rng) {
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// Row `xrow` of x and row `yrow` of y (contiguous rows of the same width), byte for byte.
inline bool same_row_bytes(const TensorView& x, int64_t xrow, const TensorView& y, int64_t yrow) {
  const int64_t bytes = x.stride[0] * static_cast<int64_t>(dtype_size(x.dtype));
  return std::memcmp(static_cast<const char*>(x.data) + xrow * bytes,
                     static_cast<const char*>(y.data) + yrow * bytes, bytes) == 0;
}

// Element i of a contiguous host view (f32 or bf16) as float.
inline float host_element(const TensorView& v, int64_t i) {
  return v.dtype == DType::kBF16 ? float_from_bf16(static_cast<const uint16_t*>(v.data)[i])
                                 : static_cast<const float*>(v.data)[i];
}

// Each case of `base` once per strategy: all snapshot, then all replay.
template <typename Case>
std::vector<Case> for_both_strategies(const std::vector<Case>& base) {
  std::vector<Case> all;
  for (Strategy strategy : {Strategy::kSnapshot, Strategy::kReplay}) {
    for (Case c : base) {
      c.strategy = strategy;
      all.push_back(c);
    }
  }
  return all;
}

// "<name>_<strategy>": the test name of a case with a name and a strategy.
template <typename Case>
std::string name_and_strategy(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.name) + "_" + strategy_name(info.param.strategy);
}

struct SpecEquivalenceCase {
  bool tree = false;
  bool shared_tree = false;  // one parents array [T] for all rows
  Strategy strategy = Strategy::kSnapshot;
};

template <typename Kind>
void run_speculative_equivalence(const typename Kind::Config& g, const SpecEquivalenceCase& c,
                                 uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int layers = 3, requests = 5, T = 5, rounds = 24, max_rows = 7;
  const ModelConfig model = Kind::model(layers, g);
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
  std::vector<typename Kind::HostWeights> weights;
  for (int l = 0; l < layers; ++l) weights.push_back(random_weights(g, rng));

  int accepted_tokens = 0;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Rows: a random subset of requests in random order, padding rows in between.
    const std::vector<int> order = shuffled_requests(requests, rng);
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
    std::vector<typename Kind::HostInputs> inputs;
    std::vector<typename Kind::HostOutputs> outputs;
    const std::vector<uint8_t> before = committed_bytes(spec);
    for (int l = 0; l < layers; ++l) {
      inputs.push_back(random_inputs(g, int64_t{B} * T, rng));
      outputs.push_back(make_outputs(g, int64_t{B} * T));
      // A marker in the outputs: the padding rows' must keep it.
      for (const auto& named : Kind::tensors(outputs[l].view())) {
        if (named.second.data) host_fill(named.second, kPaddingMarker);
      }
      spec.verify(l, weights[l].view(), inputs[l].view(), outputs[l].view());
    }
    ASSERT_EQ(committed_bytes(spec), before) << "verify wrote the committed state";
    // Padding rows' outputs (every output tensor) are not written.
    for (const auto& [name, out] : Kind::tensors(outputs[0].view())) {
      if (!out.data) continue;
      const int64_t per_row = out.numel() / B;
      for (int r = 0; r < B; ++r) {
        if (row_request[r] >= 0) continue;
        for (int64_t i = r * per_row; i < (r + 1) * per_row; ++i) {
          ASSERT_EQ(host_element(out, i), kPaddingMarker)
              << "padding row " << r << " " << name << " written";
        }
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
      const std::vector<int> path =
          accepted_path(c.tree, batch.parents, parents_of(r), accepted[r]);
      accepted_tokens += static_cast<int>(path.size());
      for (int l = 0; l < layers; ++l) {
        const int n = static_cast<int>(path.size());
        if (n == 0) continue;
        typename Kind::HostOutputs dec = make_outputs(g, n);
        if (!c.tree && round % 2 == 1) {
          ref.prefill(l, ref_h[req], weights[l].view(), inputs[l].rows(int64_t{r} * T, n),
                      dec.view());
        } else {
          for (int i = 0; i < n; ++i) {
            ref.decode(l, {ref_h[req]}, weights[l].view(),
                       inputs[l].rows(int64_t{r} * T + path[i], 1), dec.rows(i, 1));
          }
        }
        const NamedViews got = Kind::tensors(outputs[l].view()), want = Kind::tensors(dec.view());
        for (int i = 0; i < n; ++i) {
          const int64_t token = int64_t{r} * T + path[i];
          for (std::size_t k = 0; k < got.size(); ++k) {
            ASSERT_TRUE(same_row_bytes(got[k].second, token, want[k].second, i))
                << "layer " << l << " row " << r << " token " << path[i] << ": " << got[k].first
                << " differs";
          }
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
  double norm = 0;
  for (int l = 0; l < layers; ++l) norm += sum_squares(spec.ssm_state(l));
  EXPECT_GT(norm, 0.0) << "committed SSM state is all zeros";
  typename Kind::HostOutputs last = make_outputs(g, 1);
  ref.decode(0, {ref_h[0]}, weights[0].view(), random_inputs(g, 1, rng).view(), last.view());
  EXPECT_GT(sum_squares(Kind::tensors(last.view())[0].second), 0.0) << "decode output is all zeros";
}

// A tree's snapshot of node t equals the final state of a fresh run over the path root..t (the
// ggml rollback idea, applied to trees), for a snapshot pool of one layer of `g`; golden case C's
// tree. `state_shape`: the SSM state's extents the snapshot view must have after [rows, T].
template <typename Kind>
void run_tree_snapshot_check(const typename Kind::Config& g, uint64_t seed,
                             const std::vector<int64_t>& state_shape) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int T = 6;
  PoolOptions options;
  options.num_slots = 2;
  options.max_rows = 1;
  options.max_window = T;
  const ModelConfig model = Kind::model(1, g);
  StatePool pool(model, options);
  SlotHandle h = pool.acquire();
  const typename Kind::HostWeights w = random_weights(g, rng);
  const typename Kind::HostInputs history = random_inputs(g, 3, rng);
  typename Kind::HostOutputs hist_out = make_outputs(g, 3);
  pool.prefill(0, h, w.view(), history.view(), hist_out.view());
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2};  // golden case C's tree
  const typename Kind::HostInputs window = random_inputs(g, T, rng);
  typename Kind::HostOutputs out = make_outputs(g, T);
  pool.begin_verify(VerifyBatch{{h}, T, parents});
  pool.verify(0, w.view(), window.view(), out.view());
  const TensorView snap_ssm = pool.snapshot_ssm(0), snap_conv = pool.snapshot_conv(0);
  ASSERT_EQ(snap_ssm.ndim, 2 + static_cast<int>(state_shape.size()));
  for (std::size_t i = 0; i < state_shape.size(); ++i) {
    EXPECT_EQ(snap_ssm.shape[2 + i], state_shape[i]) << "snapshot dimension " << 2 + i;
  }
  for (int node = 0; node < T; ++node) {
    StatePool fresh(model, options);
    SlotHandle f = fresh.acquire();
    typename Kind::HostOutputs o = make_outputs(g, 3);
    fresh.prefill(0, f, w.view(), history.view(), o.view());
    for (int t : path_to(parents, 0, node)) {
      typename Kind::HostOutputs step = make_outputs(g, 1);
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

}  // namespace specstate::test
