// The CUDA Mamba2 and KDA layers against the CPU oracle (ggml test-backend-ops style), for both
// strategies: prefill, decode, then verify + commit rounds of chains or trees with padding rows,
// host and device accepted values; outputs and committed states within the dtype tolerances. One
// driver over the kinds of common/layer_kinds.h (GDN's own suite is test_cuda_vs_cpu.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <list>
#include <random>
#include <string>

#include "common/layer_kinds.h"
#include "common/presets.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

struct CudaKindCase {
  const char* name;
  const char* preset;
  bool tree;
  Strategy strategy;
};

template <typename Config>
double tolerance(const Config& m) {
  return m.act_dtype == DType::kBF16 || m.ssm_state_dtype == DType::kBF16 ? 2e-2 : 1e-5;
}

template <typename Kind>
void run_cuda_vs_cpu(const CudaKindCase& c, const typename Kind::Config& m, uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int L = 2, requests = 4, T = 5, rounds = 8;
  const ModelConfig model = Kind::model(L, m);
  PoolOptions options = test_pool_options(requests + 1, requests + 1, T, c.strategy);
  CudaStream stream;
  OraclePools p(model, options, stream.get(), requests);
  std::list<DeviceTensor> keep;
  const PutBuffer put = [&](const Buffer& b) {
    keep.emplace_back(b);
    return keep.back().view();
  };
  const PutBuffer host = [](const Buffer& b) { return b.view(); };
  std::vector<typename Kind::HostWeights> w;
  std::vector<typename Kind::Weights> cw, gw;
  for (int l = 0; l < L; ++l) {
    w.push_back(random_weights(m, rng));
    cw.push_back(Kind::put(w[l], host));
    gw.push_back(Kind::put(w[l], put));
  }
  // Device outputs of `n` tokens filled with 0xff bytes (NaN in f32 and bf16), so that a row the
  // kernels must not write (padding) shows if they did: padding_untouched checks it.
  auto poisoned_outputs = [&](int64_t n) {
    typename Kind::HostOutputs o = make_outputs(m, n);
    for (const auto& named : Kind::tensors(Kind::put(o, host))) {
      std::memset(named.second.data, 0xff,
                  static_cast<std::size_t>(named.second.numel()) * dtype_size(named.second.dtype));
    }
    return Kind::put(o, put);
  };
  auto padding_untouched = [&](const typename Kind::Outputs& dev, int64_t begin, int64_t count,
                               const std::string& what) {
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream.get()));
    for (const auto& named : Kind::tensors(dev)) {
      for (float v : rows_to_floats(named.second, begin, count)) {
        ASSERT_TRUE(std::isnan(v)) << what << ": " << named.first << " of a padding row written";
      }
    }
  };
  auto compare_state = [&](const std::string& what) {
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream.get()));
    p.gpu.materialize();
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream.get()));
    for (int l = 0; l < L; ++l) {
      expect_close(to_floats(p.cpu.ssm_state(l)), to_floats(p.gpu.ssm_state(l)), tolerance(m),
                   what + ": committed ssm, layer " + std::to_string(l));
      expect_close(to_floats(p.cpu.conv_state(l)), to_floats(p.gpu.conv_state(l)), tolerance(m),
                   what + ": committed conv, layer " + std::to_string(l));
    }
  };
  // Every output tensor of the kind (Kind::tensors: y or core_out, and conv_out).
  auto compare_y = [&](const typename Kind::HostOutputs& ref, const typename Kind::Outputs& dev,
                       int64_t begin, int64_t count, const std::string& what) {
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream.get()));
    const auto refs = Kind::tensors(Kind::put(ref, host));
    const auto devs = Kind::tensors(dev);
    for (std::size_t i = 0; i < refs.size(); ++i) {
      expect_close(rows_to_floats(refs[i].second, begin, count),
                   rows_to_floats(devs[i].second, begin, count), tolerance(m),
                   what + ": " + refs[i].first);
    }
  };
  // Prefill a few tokens per request, then one decode step over every request and a padding row.
  for (int i = 0; i < requests; ++i) {
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int l = 0; l < L; ++l) {
      const typename Kind::HostInputs in = random_inputs(m, n, rng);
      typename Kind::HostOutputs ref = make_outputs(m, n);
      const typename Kind::Outputs dev = Kind::put(make_outputs(m, n), put);
      p.cpu.prefill(l, p.ch[i], cw[l], Kind::put(in, host), Kind::put(ref, host));
      p.gpu.prefill(l, p.gh[i], gw[l], Kind::put(in, put), dev);
      compare_y(ref, dev, 0, n, "prefill " + std::to_string(i));
    }
  }
  compare_state("after prefill");
  // One decode step over every request, a padding row after the first (the header promised a
  // decode, which the suite never made: CUDA decode of these kinds was not set against the
  // oracle at these shapes).
  {
    std::vector<SlotHandle> cr(p.ch), gr(p.gh);
    cr.insert(cr.begin() + 1, SlotHandle::padding());
    gr.insert(gr.begin() + 1, SlotHandle::padding());
    const int64_t n = static_cast<int64_t>(cr.size());
    for (int l = 0; l < L; ++l) {
      const typename Kind::HostInputs in = random_inputs(m, n, rng);
      typename Kind::HostOutputs ref = make_outputs(m, n);
      const typename Kind::Outputs dev = poisoned_outputs(n);
      p.cpu.decode(l, cr, cw[l], Kind::put(in, host), Kind::put(ref, host));
      p.gpu.decode(l, gr, gw[l], Kind::put(in, put), dev);
      padding_untouched(dev, 1, 1, "decode layer " + std::to_string(l));
      for (int64_t r = 0; r < n; ++r) {
        if (r == 1) continue;
        compare_y(ref, dev, r, 1,
                  "decode layer " + std::to_string(l) + " row " + std::to_string(r));
      }
    }
    compare_state("after decode");
  }
  int accepted_total = 0;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<SlotHandle> cr(p.ch), gr(p.gh);
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
    p.cpu.begin_verify(cb);
    p.gpu.begin_verify(gb);
    for (int l = 0; l < L; ++l) {
      const typename Kind::HostInputs in = random_inputs(m, int64_t{B} * T, rng);
      typename Kind::HostOutputs ref = make_outputs(m, int64_t{B} * T);
      const typename Kind::Outputs dev = poisoned_outputs(int64_t{B} * T);
      p.cpu.verify(l, cw[l], Kind::put(in, host), Kind::put(ref, host));
      p.gpu.verify(l, gw[l], Kind::put(in, put), dev);
      padding_untouched(dev, T, T, "verify layer " + std::to_string(l));
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
    p.cpu.commit(accepted);
    if (round % 2 == 0) {
      p.gpu.commit(accepted);
    } else {
      Buffer acc(DType::kI32, {B});
      for (int r = 0; r < B; ++r) acc.set(r, static_cast<float>(accepted[r]));
      p.gpu.commit(put(acc));
    }
    EXPECT_EQ(p.gpu.last_commit_status(), Status::kSuccess);
    // Under replay, look at the memory only now and then (a view materializes it).
    if (c.strategy == Strategy::kSnapshot || round % 3 == 2) compare_state("after commit");
    if (::testing::Test::HasFailure()) break;
  }
  compare_state("at the end");
  EXPECT_GT(accepted_total, rounds);
}

uint64_t case_seed(const CudaKindCase& c, uint64_t base) {
  return base + std::hash<std::string>{}(c.name) % 100000;
}

class Mamba2CudaVsCpu : public ::testing::TestWithParam<CudaKindCase> {};

TEST_P(Mamba2CudaVsCpu, PrefillDecodeVerifyCommitMatchTheOracle) {
  SPECSTATE_REQUIRE_GPU();
  const CudaKindCase c = GetParam();
  run_cuda_vs_cpu<Mamba2Kind>(c, mamba2_preset(c.preset), case_seed(c, 0x3a3b0000u));
}

class KdaCudaVsCpu : public ::testing::TestWithParam<CudaKindCase> {};

TEST_P(KdaCudaVsCpu, PrefillDecodeVerifyCommitMatchTheOracle) {
  SPECSTATE_REQUIRE_GPU();
  const CudaKindCase c = GetParam();
  run_cuda_vs_cpu<KdaKind>(c, kda_preset(c.preset), case_seed(c, 0x4bda0000u));
}

std::string case_name(const ::testing::TestParamInfo<CudaKindCase>& info) {
  return std::string(info.param.name) + "_" + strategy_name(info.param.strategy);
}

std::vector<CudaKindCase> mamba2_cases() {
  std::vector<CudaKindCase> all;
  for (Strategy s : {Strategy::kSnapshot, Strategy::kReplay}) {
    all.push_back({"bf16_chain", "m2_gpu_bf16", false, s});
    all.push_back({"bf16_tree", "m2_gpu_bf16", true, s});
    all.push_back({"f32_clamp_chain", "m2_gpu_f32", false, s});
    all.push_back({"f32_clamp_tree", "m2_gpu_f32", true, s});
    all.push_back({"n256_chain", "m2_gpu_n256", false, s});
    // N = 128 with the z gate and a half-full last channel block: the per-block staging's vector
    // B and C (kVecBC) beside the x and gate items.
    all.push_back({"p72_gate_chain", "m2_gpu_p72", false, s});
    all.push_back({"p72_gate_tree", "m2_gpu_p72", true, s});
    all.push_back({"nemotron_h_8b_chain", "nemotron_h_8b_tp1", false, s});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Gpu, Mamba2CudaVsCpu, ::testing::ValuesIn(mamba2_cases()), case_name);

// KDA runs GDN's kernel with the gate per key channel: both gates, grouped value heads, every
// dtype mix, K = 32 / 64 / 128, a half-full last V block, and Kimi-Linear-48B's own shape.
std::vector<CudaKindCase> kda_cases() {
  std::vector<CudaKindCase> all;
  for (Strategy s : {Strategy::kSnapshot, Strategy::kReplay}) {
    all.push_back({"k128_chain", "kda_gpu_k128", false, s});
    all.push_back({"k128_tree", "kda_gpu_k128", true, s});
    all.push_back({"lb_f32_chain", "kda_gpu_lb_f32", false, s});
    all.push_back({"lb_f32_tree", "kda_gpu_lb_f32", true, s});
    all.push_back({"grouped_bf16_tree", "kda_gpu_grouped_bf16", true, s});
    all.push_back({"kimi_linear_tp1_chain", "kimi_linear_tp1", false, s});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Gpu, KdaCudaVsCpu, ::testing::ValuesIn(kda_cases()), case_name);

}  // namespace
}  // namespace specstate::test
