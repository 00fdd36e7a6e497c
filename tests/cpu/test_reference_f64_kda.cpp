// The KDA step of DESIGN.md section 3 checked at the library level against an independent float64
// implementation written here (fla's naive_recurrent_kda with naive_kda_gate /
// naive_kda_lowerbound_gate, state S[hv][v][k]): prefill, decode and a verify window, random
// small configs (grouped value heads, K != V, both gates), and degenerate inputs: all-zero q/k
// (the 1e-6 eps keeps them finite), a huge gate (e^g = 0: the state is forgotten), g -> 0
// (e^g = 1: nothing decays), beta = 0 (sigmoid(-30): no update) and beta = 1 (sigmoid(30)).
// Every check asserts the result is finite and not all zero. The same checks run on the CUDA
// backend (head_k_dim 32 or 64, the kernel's sizes, and a half-full last V block; skipped visibly
// without a device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/backend_buffers.h"
#include "specstate/specstate.h"

namespace specstate {
namespace {

using test::BackendBuffers;

struct Cfg {
  int H, HV, K, V, W;
  bool bias;
  std::optional<float> lower_bound;
  int D() const { return 2 * H * K + HV * V; }
};

double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double silu(double x) { return x / (1.0 + std::exp(-x)); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Weights {
  std::vector<float> conv_w, conv_b, A_log, dt_bias;  // [D, W], [D], [HV], [HV, K]
};

struct RefState {
  std::vector<double> conv, S;  // [D][W-1], [HV][V][K]
};

// One token: conv_out [D], core_out [HV*V]; advances `st`.
void ref_step(const Cfg& c, const Weights& w, RefState& st, const float* x, const float* g_raw,
              const float* b, std::vector<double>& conv_out, std::vector<double>& core_out) {
  const int D = c.D(), W = c.W;
  conv_out.assign(D, 0.0);
  for (int ch = 0; ch < D; ++ch) {
    double acc = c.bias ? w.conv_b[ch] : 0.0;
    for (int j = 0; j < W - 1; ++j) acc += double(w.conv_w[ch * W + j]) * st.conv[ch * (W - 1) + j];
    acc += double(w.conv_w[ch * W + W - 1]) * x[ch];
    conv_out[ch] = silu(acc);
    for (int j = 0; j + 1 < W - 1; ++j) st.conv[ch * (W - 1) + j] = st.conv[ch * (W - 1) + j + 1];
    st.conv[ch * (W - 1) + W - 2] = x[ch];
  }
  const double scale = 1.0 / std::sqrt(double(c.K));
  core_out.assign(static_cast<std::size_t>(c.HV) * c.V, 0.0);
  for (int hv = 0; hv < c.HV; ++hv) {
    const int h = hv / (c.HV / c.H);
    const double* q = &conv_out[h * c.K];
    const double* k = &conv_out[c.H * c.K + h * c.K];
    const double* v = &conv_out[2 * c.H * c.K + hv * c.V];
    double qq = 0, kk = 0;
    for (int i = 0; i < c.K; ++i) qq += q[i] * q[i], kk += k[i] * k[i];
    const double qn = scale / std::sqrt(qq + 1e-6), kn = 1.0 / std::sqrt(kk + 1e-6);
    const double A = std::exp(double(w.A_log[hv]));
    const double beta = sigmoid(double(b[hv]));
    double* S = &st.S[static_cast<std::size_t>(hv) * c.V * c.K];
    for (int i = 0; i < c.K; ++i) {
      const double xg = double(g_raw[hv * c.K + i]) + w.dt_bias[hv * c.K + i];
      const double g = c.lower_bound ? *c.lower_bound * sigmoid(A * xg) : -A * softplus(xg);
      for (int vi = 0; vi < c.V; ++vi) S[vi * c.K + i] *= std::exp(g);
    }
    for (int vi = 0; vi < c.V; ++vi) {
      double sk = 0;
      for (int i = 0; i < c.K; ++i) sk += S[vi * c.K + i] * k[i] * kn;
      const double u = beta * (v[vi] - sk);
      double o = 0;
      for (int i = 0; i < c.K; ++i) {
        S[vi * c.K + i] += u * k[i] * kn;
        o += S[vi * c.K + i] * q[i] * qn;
      }
      core_out[hv * c.V + vi] = o;
    }
  }
}

enum class Kind { kRealistic, kZeroQK, kHugeGate, kNoDecay, kBetaZero, kBetaOne };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kRealistic:
      return "realistic";
    case Kind::kZeroQK:
      return "zero q/k";
    case Kind::kHugeGate:
      return "huge gate";
    case Kind::kNoDecay:
      return "g -> 0";
    case Kind::kBetaZero:
      return "beta 0";
    case Kind::kBetaOne:
      return "beta 1";
  }
  return "?";
}

struct Case {
  Cfg c;
  Weights w;
  std::vector<float> x, g, b;  // [tokens, D], [tokens, HV, K], [tokens, HV]
};

// `backend`: the CUDA kernels take head_k_dim 32, 64 or 128 (the CPU any): 32 or 64 there, with
// V = 40 or 24 (V blocks of 16 rows: the last one partly full).
Case make_case(std::mt19937_64& rng, int tokens, Kind kind, bool lower_bound,
               Backend backend = Backend::kCpu) {
  std::uniform_int_distribution<int> pick(0, 1);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  Case cs;
  Cfg& c = cs.c;
  c.H = 1 + pick(rng);
  c.HV = c.H * (1 + pick(rng));
  c.K = (backend == Backend::kCuda ? 32 : 4) << pick(rng);
  if (backend == Backend::kCuda) {
    c.V = c.K == 32 ? 40 : 24;
  } else {
    c.V = c.K == 4 ? 8 : 4;  // K != V: a transposed state would show
  }
  c.W = 2 + pick(rng) + pick(rng);
  c.bias = pick(rng) == 1;
  if (lower_bound) c.lower_bound = -5.0f;
  const int D = c.D();
  cs.w.conv_w.resize(static_cast<std::size_t>(D) * c.W);
  for (float& v : cs.w.conv_w) v = 0.5f * normal(rng);
  if (c.bias) {
    cs.w.conv_b.resize(D);
    for (float& v : cs.w.conv_b) v = 0.2f * normal(rng);
  }
  cs.w.A_log.resize(c.HV);
  cs.w.dt_bias.resize(static_cast<std::size_t>(c.HV) * c.K);
  for (int h = 0; h < c.HV; ++h) cs.w.A_log[h] = std::log(1.f + 15.f * uni(rng));
  for (float& v : cs.w.dt_bias) v = std::log(std::expm1(0.001f + 0.1f * uni(rng)));
  cs.x.resize(static_cast<std::size_t>(tokens) * D);
  cs.g.resize(static_cast<std::size_t>(tokens) * c.HV * c.K);
  cs.b.resize(static_cast<std::size_t>(tokens) * c.HV);
  for (float& v : cs.x) v = normal(rng);
  for (float& v : cs.g) v = normal(rng);
  for (float& v : cs.b) v = normal(rng);
  const int HK = c.HV * c.K;
  for (int t = 0; t < tokens; ++t) {
    float* gt = &cs.g[static_cast<std::size_t>(t) * HK];
    float* bt = &cs.b[static_cast<std::size_t>(t) * c.HV];
    switch (kind) {
      case Kind::kRealistic:
      case Kind::kZeroQK:
        break;
      case Kind::kHugeGate:  // every other token: g_raw + dt_bias = 60 (lower bound: A x = 60)
        if (t % 2 == 1) {
          for (int i = 0; i < HK; ++i) gt[i] = 60.f - cs.w.dt_bias[i];
        }
        break;
      case Kind::kNoDecay:  // g_raw + dt_bias = -60: softplus -> 0 (lower bound: sigmoid -> 0)
        for (int i = 0; i < HK; ++i) gt[i] = -60.f - cs.w.dt_bias[i];
        break;
      case Kind::kBetaZero:
        if (t % 2 == 1) std::fill(bt, bt + c.HV, -30.f);
        break;
      case Kind::kBetaOne:
        std::fill(bt, bt + c.HV, 30.f);
        break;
    }
  }
  if (kind == Kind::kZeroQK) {  // q/k conv outputs zero (weights and bias): sum q^2 = 0
    for (int ch = 0; ch < 2 * c.H * c.K; ++ch) {
      for (int j = 0; j < c.W; ++j) cs.w.conv_w[ch * c.W + j] = 0.f;
      if (c.bias) cs.w.conv_b[ch] = 0.f;
    }
  }
  return cs;
}

KdaConfig to_kda(const Cfg& c) {
  KdaConfig k;
  k.num_k_heads = c.H;
  k.num_v_heads = c.HV;
  k.head_k_dim = c.K;
  k.head_v_dim = c.V;
  k.conv_width = c.W;
  k.conv_bias = c.bias;
  k.lower_bound = c.lower_bound;
  k.act_dtype = k.conv_state_dtype = k.ssm_state_dtype = DType::kF32;
  return k;
}

KdaWeights weights_view(Case& cs) {
  const Cfg& c = cs.c;
  return {TensorView::contiguous(cs.w.conv_w.data(), DType::kF32, {c.D(), c.W}),
          c.bias ? TensorView::contiguous(cs.w.conv_b.data(), DType::kF32, {c.D()}) : TensorView{},
          TensorView::contiguous(cs.w.A_log.data(), DType::kF32, {c.HV}),
          TensorView::contiguous(cs.w.dt_bias.data(), DType::kF32, {c.HV, c.K})};
}

KdaInputs inputs_view(Case& cs, int t0, int n) {
  const Cfg& c = cs.c;
  return {
      TensorView::contiguous(&cs.x[static_cast<std::size_t>(t0) * c.D()], DType::kF32, {n, c.D()}),
      TensorView::contiguous(&cs.g[static_cast<std::size_t>(t0) * c.HV * c.K], DType::kF32,
                             {n, c.HV, c.K}),
      TensorView::contiguous(&cs.b[static_cast<std::size_t>(t0) * c.HV], DType::kF32, {n, c.HV})};
}

struct Compare {
  double worst = 0, norm = 0;
  std::string where;
  void add(const float* ours, const std::vector<double>& ref, const std::string& what) {
    for (std::size_t i = 0; i < ref.size(); ++i) {
      ASSERT_TRUE(std::isfinite(ours[i])) << what << "[" << i << "] = " << ours[i];
      const double e = std::abs(double(ours[i]) - ref[i]) / std::max(1.0, std::abs(ref[i]));
      norm += double(ours[i]) * ours[i];
      if (e > worst) {
        worst = e;
        where = what + "[" + std::to_string(i) + "]: ours " + std::to_string(ours[i]) + " ref " +
                std::to_string(ref[i]);
      }
    }
  }
};

constexpr double kTol = 2e-4;  // fp32 against float64, small K/V

// A call's host views on the pool's backend (copies there), and its outputs brought back.
KdaWeights on(BackendBuffers& mem, const KdaWeights& w) {
  const auto up = [&](const TensorView& v) { return v.data ? mem.up(v) : TensorView{}; };
  return {up(w.conv_weight), up(w.conv_bias), up(w.A_log), up(w.dt_bias)};
}
KdaInputs on(BackendBuffers& mem, const KdaInputs& in) {
  return {mem.up(in.mixed_qkv), mem.up(in.g), mem.up(in.b)};
}

// Prefill 4 tokens, decode 1, verify a window of 3 (chain) under `strategy`, commit 2; every
// output and the committed SSM state against the reference.
void check(uint64_t seed, Kind kind, bool lower_bound, Strategy strategy,
           Backend backend = Backend::kCpu) {
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + kind_name(kind) +
               (lower_bound ? ", lower bound" : "") + ", " + strategy_name(strategy));
  std::mt19937_64 rng(seed);
  const int P = 4, T = 3, N = P + 1 + T;
  Case cs = make_case(rng, N, kind, lower_bound, backend);
  const Cfg& c = cs.c;
  const int D = c.D(), O = c.HV * c.V;
  BackendBuffers mem(backend);
  PoolOptions options;
  options.max_window = T;
  options.strategy = strategy;
  options.backend = backend;
  StatePool pool(ModelConfig::kda(1, to_kda(c)), options);
  const SlotHandle h = pool.acquire();
  const KdaWeights w = on(mem, weights_view(cs));
  std::vector<float> conv(static_cast<std::size_t>(N) * D), core(static_cast<std::size_t>(N) * O);
  // Runs `call` with outputs on the backend for tokens [t0, t0 + n), then copies them back.
  auto with_outputs = [&](int t0, int n, auto call) {
    const KdaOutputs host{
        TensorView::contiguous(&conv[static_cast<std::size_t>(t0) * D], DType::kF32, {n, D}),
        TensorView::contiguous(&core[static_cast<std::size_t>(t0) * O], DType::kF32,
                               {n, c.HV, c.V})};
    const KdaOutputs dev{mem.up(host.conv_out), mem.up(host.core_out)};
    call(dev);
    mem.down(dev.conv_out, host.conv_out);
    mem.down(dev.core_out, host.core_out);
  };
  with_outputs(
      0, P, [&](const KdaOutputs& o) { pool.prefill(0, h, w, on(mem, inputs_view(cs, 0, P)), o); });
  with_outputs(P, 1, [&](const KdaOutputs& o) {
    pool.decode(0, {h}, w, on(mem, inputs_view(cs, P, 1)), o);
  });
  pool.begin_verify(VerifyBatch{{h}, T, {}});
  with_outputs(P + 1, T, [&](const KdaOutputs& o) {
    pool.verify(0, w, on(mem, inputs_view(cs, P + 1, T)), o);
  });
  pool.commit(std::vector<int32_t>{2});
  RefState st{std::vector<double>(static_cast<std::size_t>(D) * (c.W - 1), 0.0),
              std::vector<double>(static_cast<std::size_t>(c.HV) * c.V * c.K, 0.0)};
  Compare cmp;
  std::vector<double> rc, ro;
  RefState committed;
  for (int t = 0; t < N; ++t) {
    ref_step(c, cs.w, st, &cs.x[static_cast<std::size_t>(t) * D],
             &cs.g[static_cast<std::size_t>(t) * c.HV * c.K], &cs.b[t * c.HV], rc, ro);
    cmp.add(&conv[static_cast<std::size_t>(t) * D], rc, "conv_out t" + std::to_string(t));
    cmp.add(&core[static_cast<std::size_t>(t) * O], ro, "core_out t" + std::to_string(t));
    if (t == P + 2) committed = st;  // accepted: the window's tokens 0 and 1
  }
  const TensorView ssm = pool.ssm_state(0, h);
  const std::vector<float> S = mem.down(ssm.data, committed.S.size());
  cmp.add(S.data(), committed.S, "committed S");
  EXPECT_LE(cmp.worst, kTol) << cmp.where;
  EXPECT_GT(cmp.norm, 0.0) << "every output is zero";
}

// The CPU oracle, and the CUDA kernels where a device is present (the _Cuda instance).
class ReferenceF64KdaBackend : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kCuda && !cli::cuda_device_available())
      GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  }
};

TEST_P(ReferenceF64KdaBackend, PrefillDecodeVerifyMatchFloat64) {
  for (Kind kind : {Kind::kRealistic, Kind::kZeroQK, Kind::kHugeGate, Kind::kNoDecay,
                    Kind::kBetaZero, Kind::kBetaOne}) {
    for (bool lb : {false, true}) {
      for (uint64_t s = 0; s < 3; ++s) {
        const Strategy strategy = s % 2 ? Strategy::kReplay : Strategy::kSnapshot;
        check(0x4bda00 + 17 * s + 101 * static_cast<int>(kind) + (lb ? 7 : 0), kind, lb, strategy,
              GetParam());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ReferenceF64Kda, ReferenceF64KdaBackend,
                         ::testing::Values(Backend::kCpu, Backend::kCuda), [](const auto& info) {
                           return std::string(info.param == Backend::kCuda ? "Cuda" : "Cpu");
                         });

// The degenerate gates have the effect the formula says, seen through the library alone. With
// W = 2 token 2's conv output depends only on tokens 1 and 2, so two histories that differ in
// token 0 only reach token 2 with different states: a huge gate (g <= -120, so e^g = 0 in float32
// on every key channel; at -60 it was about 1e-26, lost only to the update's rounding)
// makes the state after token 2 bit-identical, an ordinary gate does not. Beta = 0 on every
// token leaves a zero state zero.
TEST(ReferenceF64Kda, HugeGateForgetsAndBetaZeroOnlyDecays) {
  std::mt19937_64 rng(99);
  Case cs = make_case(rng, 4, Kind::kRealistic, false);
  cs.c.W = 2;
  cs.w.conv_w.resize(static_cast<std::size_t>(cs.c.D()) * 2);
  if (cs.c.bias) cs.w.conv_b.resize(cs.c.D());
  const Cfg& c = cs.c;
  const int D = c.D(), HK = c.HV * c.K;
  // Token 3 is token 0 with other values: history A = tokens 0, 1, 2; history B = 3, 1, 2.
  auto final_state = [&](bool huge) {
    Case run = cs;
    if (huge) {
      for (int i = 0; i < HK; ++i) run.g[2 * HK + i] = 120.f - run.w.dt_bias[i];
    }
    std::vector<std::vector<float>> out;
    for (int first : {0, 3}) {
      StatePool pool(ModelConfig::kda(1, to_kda(c)), PoolOptions{});
      const SlotHandle h = pool.acquire();
      const KdaWeights w = weights_view(run);
      std::vector<float> conv(D), core(c.HV * c.V);
      const KdaOutputs o{TensorView::contiguous(conv.data(), DType::kF32, {1, D}),
                         TensorView::contiguous(core.data(), DType::kF32, {1, c.HV, c.V})};
      for (int t : {first, 1, 2}) pool.prefill(0, h, w, inputs_view(run, t, 1), o);
      const TensorView s = pool.ssm_state(0, h);
      const float* p = static_cast<const float*>(s.data);
      out.emplace_back(p, p + s.numel());
    }
    return out;
  };
  const auto forgotten = final_state(true);
  EXPECT_EQ(forgotten[0], forgotten[1]) << "e^g = 0 kept something of the history";
  double norm = 0;
  for (float v : forgotten[0]) norm += double(v) * v;
  EXPECT_GT(norm, 0.0);
  const auto kept = final_state(false);
  EXPECT_NE(kept[0], kept[1]) << "an ordinary gate forgot the history (the test cannot fail)";
  // Beta = 0 on every token: a zero state stays zero.
  std::fill(cs.b.begin(), cs.b.end(), -200.f);
  const auto none = final_state(false);
  for (std::size_t i = 0; i < none[0].size(); ++i) ASSERT_EQ(none[0][i], 0.0f) << i;
}

}  // namespace
}  // namespace specstate
