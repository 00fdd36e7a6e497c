#include "common/strategy_equivalence.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <string>

#include "common/kind_driver.h"
#include "common/layer_kinds.h"
#include "common/pool_rounds.h"

namespace specstate::test {
namespace {

class HostMemory final : public Memory {
 public:
  Backend backend() const override { return Backend::kCpu; }
  TensorView put(const Buffer& host, bool persistent) override {
    auto& list = persistent ? persistent_ : round_;
    list.push_back(host);
    return list.back().view();
  }
  std::vector<uint8_t> bytes(const TensorView& view) override {
    const auto* p = static_cast<const uint8_t*>(view.data);
    return std::vector<uint8_t>(p, p + view.numel() * dtype_size(view.dtype));
  }
  void clear() override { round_.clear(); }

 private:
  std::list<Buffer> persistent_, round_;
};

// Both pools, side by side; `vllm` says which keeps vLLM's element order (EquivalenceCase).
struct Pair {
  StatePool snap, replay;
  Pair(const ModelConfig& m, PoolOptions o, int vllm)
      : snap(m, with(o, Strategy::kSnapshot, m.kind, vllm & kSnapshotVllm)),
        replay(m, with(o, Strategy::kReplay, m.kind, vllm & kReplayVllm)) {}
  static PoolOptions with(PoolOptions o, Strategy s, LayerKind kind, bool vllm) {
    o.strategy = s;
    return vllm ? vllm_layout_options(o, kind) : o;
  }
};

// The driver, for any layer kind (common/layer_kinds.h).
template <typename Kind>
void run_case(const EquivalenceCase& c, const typename Kind::Config& g, Memory& mem, uint64_t seed,
              std::vector<int>* verify_rows) {
  using Inputs = typename Kind::Inputs;
  using Outputs = typename Kind::Outputs;
  KindDriver<Kind> d(g, mem, seed);
  std::mt19937_64& rng = d.rng;
  const int L = KindDriver<Kind>::kLayers;
  PoolOptions options = d.options(c.requests + 2, c.requests + 2, c.max_window);
  options.replay_ring = c.ring;
  options.replay_fold_rows = c.fold_rows;
  Pair pools(d.model, options, c.vllm);
  // Non-zero bytes of every output tensor compared, per kind of call ("prefill/core_out", ...):
  // both pools' outputs start zeroed, so a tensor a kind of call never wrote in either pool
  // would compare equal. Every one compared must have been non-zero somewhere (checked at the
  // end).
  std::map<std::string, int64_t> nonzero;
  auto same_outputs = [&](const Outputs& a, const Outputs& b, const std::string& what) {
    const NamedViews x = Kind::tensors(a), y = Kind::tensors(b);
    const std::string call = what.rfind("prefill", 0) == 0  ? "prefill"
                             : what.rfind("decode", 0) == 0 ? "decode"
                                                            : "verify";
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::vector<uint8_t> bytes = mem.bytes(x[i].second);
      ASSERT_EQ(bytes, mem.bytes(y[i].second)) << what << ": " << x[i].first << " differs";
      if (bytes.empty()) continue;
      nonzero[call + "/" + x[i].first] +=
          std::count_if(bytes.begin(), bytes.end(), [](uint8_t v) { return v; });
    }
  };
  // The committed states in their logical order (the pools' element orders may differ).
  auto logical = [&](const TensorView& v) { return logical_bytes(mem.bytes(v), v); };
  auto same_state = [&](const std::string& what) {
    for (int l = 0; l < L; ++l) {
      ASSERT_EQ(logical(pools.snap.conv_state(l)), logical(pools.replay.conv_state(l)))
          << what << ": layer " << l << " committed conv state differs";
      ASSERT_EQ(logical(pools.snap.ssm_state(l)), logical(pools.replay.ssm_state(l)))
          << what << ": layer " << l << " committed SSM state differs";
    }
  };

  // Layer l of the open round verified in both pools on the same random inputs.
  int round_rows = 0;        // rows of the open round
  bool round_noted = false;  // its rows are in verify_rows
  auto verify_both = [&](int l, int64_t tokens, const std::string& what) {
    if (verify_rows != nullptr && !round_noted) {
      verify_rows->push_back(round_rows);
      round_noted = true;
    }
    const Inputs in = d.inputs(tokens);
    const Outputs os = d.outputs(tokens), orp = d.outputs(tokens);
    pools.snap.verify(l, d.weights[l], in, os);
    pools.replay.verify(l, d.weights[l], in, orp);
    same_outputs(os, orp, what);
  };
  // A request: its handle in each pool (the pools allocate identically, so the slots agree).
  std::vector<SlotHandle> hs, hr;
  auto prefill = [&](int i, int n) {
    for (int l = 0; l < L; ++l) {
      const Inputs in = d.inputs(n);
      const Outputs os = d.outputs(n), orp = d.outputs(n);
      pools.snap.prefill(l, hs[i], d.weights[l], in, os);
      pools.replay.prefill(l, hr[i], d.weights[l], in, orp);
      same_outputs(os, orp, "prefill of request " + std::to_string(i));
    }
  };
  for (int i = 0; i < c.requests; ++i) {
    hs.push_back(pools.snap.acquire());
    hr.push_back(pools.replay.acquire());
    ASSERT_EQ(pools.snap.slot_index(hs[i]), pools.replay.slot_index(hr[i]));
    prefill(i, 1 + static_cast<int>(rng() % 3));
  }

  int kept_rows = 0, accepted_total = 0;
  for (int round = 0; round < c.rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    mem.clear();
    // Between rounds: a request leaves and another arrives in its slot; a decode step; an
    // explicit materialize. Each lands on slots that may hold pending replay steps.
    const int left = maybe_replace_request(rng, 8, c.requests, pools.snap, hs, pools.replay, hr);
    if (left >= 0) prefill(left, 2);
    if (rng() % 6 == 0) {
      std::vector<SlotHandle> rs, rr;
      for (int i = 0; i < c.requests; ++i) {
        if (rng() % 2) {
          rs.push_back(hs[i]);
          rr.push_back(hr[i]);
        }
      }
      if (!rs.empty()) {
        rs.insert(rs.begin(), SlotHandle::padding());
        rr.insert(rr.begin(), SlotHandle::padding());
        for (int l = 0; l < L; ++l) {
          const Inputs in = d.inputs(static_cast<int64_t>(rs.size()));
          const Outputs os = d.outputs(static_cast<int64_t>(rs.size()));
          const Outputs orp = d.outputs(static_cast<int64_t>(rs.size()));
          pools.snap.decode(l, rs, d.weights[l], in, os);
          pools.replay.decode(l, rr, d.weights[l], in, orp);
          same_outputs(os, orp, "decode");
        }
      }
    }
    if (rng() % 10 == 0) pools.replay.materialize({hr[rng() % c.requests]});
    if (c.requests > 1 && rng() % 9 == 0) {
      // A fork (copy_slot) of a slot with history onto another slot with history.
      const int i = static_cast<int>(rng() % c.requests);
      const int j = (i + 1 + static_cast<int>(rng() % (c.requests - 1))) % c.requests;
      pools.snap.copy_slot(hs[i], hs[j]);
      pools.replay.copy_slot(hr[i], hr[j]);
    }

    // The round: T in 1..max_window, a random subset of the requests (the rest sit out) in
    // random order, padding rows in between.
    const int T = 1 + static_cast<int>(rng() % c.max_window);
    std::vector<int> order(c.requests);
    for (int i = 0; i < c.requests; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    const int live = 1 + static_cast<int>(rng() % c.requests);
    std::vector<int> row_request(order.begin(), order.begin() + live);
    while (static_cast<int>(row_request.size()) < options.max_rows && rng() % 3 == 0) {
      row_request.insert(row_request.begin() + rng() % (row_request.size() + 1), -1);
    }
    const int B = static_cast<int>(row_request.size());
    round_rows = B;
    round_noted = false;
    VerifyBatch bs = request_batch(row_request, hs, T), br = request_batch(row_request, hr, T);
    if (c.tree) {
      for (int r = 0; r < B; ++r) {
        const std::vector<int32_t> p = random_tree(T, rng);
        bs.parents.insert(bs.parents.end(), p.begin(), p.end());
      }
      br.parents = bs.parents;
    }
    if (rng() % 8 == 0) {
      // A round that is verified for some layers and then dropped by abort_round(): the layers
      // it verified consumed their pending steps, the others keep them. A round that verified
      // no layer may also be replaced by the next begin_verify (DESIGN.md section 5.6).
      pools.snap.begin_verify(bs);
      pools.replay.begin_verify(br);
      const int verified = static_cast<int>(rng() % (L + 1));
      for (int l = 0; l < verified; ++l) {
        verify_both(l, int64_t{B} * T, "dropped round, layer " + std::to_string(l));
      }
      if (verified > 0 || rng() % 2 == 0) {
        pools.snap.abort_round();
        pools.replay.abort_round();
      }
    }
    pools.snap.begin_verify(bs);
    pools.replay.begin_verify(br);
    for (int l = 0; l < L; ++l) {
      const int repeats = rng() % 7 == 0 ? 2 : 1;  // a repeated verify of the layer
      for (int k = 0; k < repeats; ++k) {
        verify_both(l, int64_t{B} * T, "verify of layer " + std::to_string(l));
      }
    }
    // An occasional look at the committed memory mid-round (implicit materialize).
    if (rng() % 9 == 0) same_state("mid-round view");
    // A request released mid-round (after its layers were verified, maybe folded): its row is
    // padding now and keeps; a new request takes the slot after the commit.
    int released = -1;
    if (rng() % 10 == 0) {
      const int r = static_cast<int>(rng() % B);
      if (row_request[r] >= 0) {
        released = row_request[r];
        pools.snap.release(hs[released]);
        pools.replay.release(hr[released]);
        row_request[r] = -1;
      }
    }
    std::vector<int32_t> accepted(B);
    for (int r = 0; r < B; ++r) {
      if (row_request[r] < 0) {
        accepted[r] = c.tree ? -1 : 0;
      } else {
        accepted[r] =
            c.tree ? static_cast<int>(rng() % (T + 1)) - 1 : static_cast<int>(rng() % (T + 1));
        const bool keep = accepted[r] == (c.tree ? -1 : 0);
        kept_rows += keep;
        accepted_total += keep ? 0 : 1;
      }
    }
    commit_both(mem, round, accepted, pools.snap, pools.replay);
    if (released >= 0) {
      hs[released] = pools.snap.acquire();
      hr[released] = pools.replay.acquire();
      ASSERT_EQ(pools.snap.slot_index(hs[released]), pools.replay.slot_index(hr[released]));
      prefill(released, 2);
    }
    if (round % 5 == 4) same_state("after commit");
  }
  same_state("at the end");
  expect_nonzero_ssm_state(mem, pools.replay, L);
  for (const char* call : {"prefill/", "verify/"}) {
    EXPECT_TRUE(std::any_of(nonzero.begin(), nonzero.end(),
                            [&](const auto& e) { return e.first.rfind(call, 0) == 0; }))
        << "no " << call << " output was compared";
  }
  for (const auto& [tensor, count] : nonzero) {
    EXPECT_GT(count, 0) << tensor << ": every compared output was all zero";
  }
  EXPECT_GT(kept_rows, 0) << "no round kept a row (a = 0)";
  EXPECT_GT(accepted_total, c.rounds / 2) << "the trace accepted almost nothing";
}

}  // namespace

std::unique_ptr<Memory> host_memory() { return std::make_unique<HostMemory>(); }

void run_strategy_equivalence(const EquivalenceCase& c, Memory& mem, uint64_t seed,
                              std::vector<int>* verify_rows) {
  for_kind(c.preset, [&](auto kind, const auto& g) {
    run_case<decltype(kind)>(c, g, mem, seed, verify_rows);
  });
}

std::vector<LeanDefaultCase> lean_default_cases() {
  // name, preset, tree, max_window, requests, rounds (the seed: lean_default_seed).
  return {
      {EquivalenceCase{"k128_max7", "gpu_k128", false, 3, 5, 12}, 7, false},
      {EquivalenceCase{"k128_max8", "gpu_k128", false, 4, 6, 12}, 8, true},
      {EquivalenceCase{"mamba2_max7", "m2_gpu_bf16", false, 4, 5, 12}, 7, false},
      {EquivalenceCase{"mamba2_max8", "m2_gpu_bf16", false, 3, 6, 12}, 8, true},
      {EquivalenceCase{"kda_max3", "kda_gpu_k128", false, 4, 1, 12}, 3, false},
      {EquivalenceCase{"kda_max4", "kda_gpu_k128", false, 4, 2, 12}, 4, true},
  };
}

}  // namespace specstate::test
