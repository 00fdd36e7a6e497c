// The CUDA Mamba2 recurrence against the CPU oracle (ggml test-backend-ops style), for both
// strategies: prefill, decode, then verify + commit rounds of chains or trees with padding rows,
// host and device accepted values; outputs and committed states within the dtype tolerances.
#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>
#include <string>

#include "common/layer_kinds.h"
#include "common/presets.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

struct M2Case {
  const char* name;
  const char* preset;
  bool tree;
  Strategy strategy;
};

double tolerance(const Mamba2Config& m) {
  return m.act_dtype == DType::kBF16 || m.ssm_state_dtype == DType::kBF16 ? 2e-2 : 1e-5;
}

class Mamba2CudaVsCpu : public ::testing::TestWithParam<M2Case> {};

TEST_P(Mamba2CudaVsCpu, PrefillDecodeVerifyCommitMatchTheOracle) {
  SPECSTATE_REQUIRE_GPU();
  const M2Case c = GetParam();
  const uint64_t seed = 0x3a3b0000u + std::hash<std::string>{}(c.name) % 100000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Mamba2Config m = mamba2_preset(c.preset);
  const int L = 2, requests = 4, T = 5, rounds = 8;
  const ModelConfig model = ModelConfig::mamba2(L, m);
  PoolOptions options;
  options.num_slots = requests + 1;
  options.max_rows = requests + 1;
  options.max_window = T;
  options.strategy = c.strategy;
  CudaStream stream;
  PoolOptions gpu_options = options;
  gpu_options.backend = Backend::kCuda;
  gpu_options.stream = stream.get();
  StatePool cpu(model, options), gpu(model, gpu_options);
  std::vector<SlotHandle> ch, gh;
  for (int i = 0; i < requests; ++i) {
    ch.push_back(cpu.acquire());
    gh.push_back(gpu.acquire());
  }
  std::list<DeviceTensor> keep;
  const PutBuffer put = [&](const Buffer& b) {
    keep.emplace_back(b);
    return keep.back().view();
  };
  std::vector<Mamba2LayerWeights> w;
  std::vector<Mamba2Weights> cw, gw;
  for (int l = 0; l < L; ++l) {
    w.push_back(random_weights(m, rng));
    cw.push_back(Mamba2Kind::put(w[l], [](const Buffer& b) { return b.view(); }));
    gw.push_back(Mamba2Kind::put(w[l], put));
  }
  auto compare_state = [&](const std::string& what) {
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream.get()));
    gpu.materialize();
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream.get()));
    for (int l = 0; l < L; ++l) {
      expect_close(to_floats(cpu.ssm_state(l)), to_floats(gpu.ssm_state(l)), tolerance(m),
                   what + ": committed ssm, layer " + std::to_string(l));
      expect_close(to_floats(cpu.conv_state(l)), to_floats(gpu.conv_state(l)), tolerance(m),
                   what + ": committed conv, layer " + std::to_string(l));
    }
  };
  auto compare_y = [&](const Mamba2TokenOutputs& ref, const Mamba2Outputs& dev, int64_t begin,
                       int64_t count, const std::string& what) {
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream.get()));
    expect_close(rows_to_floats(ref.y.view(), begin, count), rows_to_floats(dev.y, begin, count),
                 tolerance(m), what + ": y");
    expect_close(rows_to_floats(ref.conv_out.view(), begin, count),
                 rows_to_floats(dev.conv_out, begin, count), tolerance(m), what + ": conv_out");
  };
  // Prefill a few tokens per request, then one decode step over every request and a padding row.
  for (int i = 0; i < requests; ++i) {
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int l = 0; l < L; ++l) {
      const Mamba2TokenInputs in = random_inputs(m, n, rng);
      Mamba2TokenOutputs ref = make_outputs(m, n);
      const Mamba2Outputs dev = Mamba2Kind::put(make_outputs(m, n), put);
      cpu.prefill(l, ch[i], cw[l], Mamba2Kind::put(in, [](const Buffer& b) { return b.view(); }),
                  Mamba2Kind::put(ref, [](const Buffer& b) { return b.view(); }));
      gpu.prefill(l, gh[i], gw[l], Mamba2Kind::put(in, put), dev);
      compare_y(ref, dev, 0, n, "prefill " + std::to_string(i));
    }
  }
  compare_state("after prefill");
  int accepted_total = 0;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<SlotHandle> cr(ch), gr(gh);
    cr.insert(cr.begin() + 1, SlotHandle::padding());
    gr.insert(gr.begin() + 1, SlotHandle::padding());
    const int B = static_cast<int>(cr.size());
    VerifyBatch cb{cr, T, {}}, gb{gr, T, {}};
    if (c.tree) {
      for (int r = 0; r < B; ++r) {
        for (int t = 0; t < T; ++t) {
          cb.parents.push_back(t == 0 ? -1 : static_cast<int32_t>(rng() % t));
        }
      }
      gb.parents = cb.parents;
    }
    cpu.begin_verify(cb);
    gpu.begin_verify(gb);
    for (int l = 0; l < L; ++l) {
      const Mamba2TokenInputs in = random_inputs(m, int64_t{B} * T, rng);
      Mamba2TokenOutputs ref = make_outputs(m, int64_t{B} * T);
      const Mamba2Outputs dev = Mamba2Kind::put(make_outputs(m, int64_t{B} * T), put);
      cpu.verify(l, cw[l], Mamba2Kind::put(in, [](const Buffer& b) { return b.view(); }),
                 Mamba2Kind::put(ref, [](const Buffer& b) { return b.view(); }));
      gpu.verify(l, gw[l], Mamba2Kind::put(in, put), dev);
      for (int r = 0; r < B; ++r) {
        if (r == 1) continue;
        compare_y(ref, dev, int64_t{r} * T, T,
                  "verify layer " + std::to_string(l) + " row " + std::to_string(r));
      }
    }
    std::vector<int32_t> accepted(B);
    for (int r = 0; r < B; ++r) {
      accepted[r] = r == 1 ? (c.tree ? -1 : 0)
                           : (c.tree ? static_cast<int>(rng() % (T + 1)) - 1
                                     : static_cast<int>(rng() % (T + 1)));
      accepted_total += accepted[r] > 0;
    }
    cpu.commit(accepted);
    if (round % 2 == 0) {
      gpu.commit(accepted);
    } else {
      Buffer acc(DType::kI32, {B});
      for (int r = 0; r < B; ++r) acc.set(r, static_cast<float>(accepted[r]));
      gpu.commit(put(acc));
    }
    EXPECT_EQ(gpu.last_commit_status(), Status::kSuccess);
    // Under replay, look at the memory only now and then (a view materializes it).
    if (c.strategy == Strategy::kSnapshot || round % 3 == 2) compare_state("after commit");
    if (HasFailure()) break;
  }
  compare_state("at the end");
  EXPECT_GT(accepted_total, rounds);
}

std::vector<M2Case> cases() {
  std::vector<M2Case> all;
  for (Strategy s : {Strategy::kSnapshot, Strategy::kReplay}) {
    all.push_back({"bf16_chain", "m2_gpu_bf16", false, s});
    all.push_back({"bf16_tree", "m2_gpu_bf16", true, s});
    all.push_back({"f32_clamp_chain", "m2_gpu_f32", false, s});
    all.push_back({"f32_clamp_tree", "m2_gpu_f32", true, s});
    all.push_back({"n256_chain", "m2_gpu_n256", false, s});
    all.push_back({"nemotron_h_8b_chain", "nemotron_h_8b_tp1", false, s});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Gpu, Mamba2CudaVsCpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<M2Case>& info) {
                           return std::string(info.param.name) + "_" +
                                  strategy_name(info.param.strategy);
                         });

}  // namespace
}  // namespace specstate::test
