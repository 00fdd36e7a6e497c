// The layer math of DESIGN.md section 3, checked at the library level (no CLI): prefill, decode
// and verify (chain and tree) on random small GDN configs against an independent float64
// implementation written here, including degenerate inputs: all-zero q/k tokens (the 1e-6 eps
// keeps them finite), q/k of about 1e-5 (where the eps sits inside the square root shows),
// huge and tiny gates, the softplus threshold at 20, a + dt_bias over [-20, 30] and b over
// [-10, 10]. Every check also asserts the result is finite and not all zero.
// The same cases run on the CUDA backend (head_k_dim 32, the kernels' smallest; skipped visibly
// without a device): a kernel whose gate or normalisation is wrong fails here (issue 17.7).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cli/golden_case.h"
#include "common/backend_buffers.h"
#include "common/gdn_data.h"
#include "specstate/specstate.h"

namespace specstate {
namespace {

struct Cfg {
  int H, HV, K, V, W;
  bool bias;
  std::optional<float> scale;
  int D() const { return 2 * H * K + HV * V; }
};

// float64 reference state of one request: conv window [D][W-1], S [HV][V][K].
struct RefState {
  std::vector<double> conv, S;
};

double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double silu(double x) { return x / (1.0 + std::exp(-x)); }

struct RefWeights {
  std::vector<float> conv_w, conv_b, A_log, dt_bias;
};

// One token of DESIGN.md section 3: returns conv_out [D] and core_out [HV*V]; advances `st`.
void ref_step(const Cfg& c, const RefWeights& w, RefState& st, const float* x, const float* a,
              const float* b, std::vector<double>& conv_out, std::vector<double>& core_out) {
  const int D = c.D(), W = c.W;
  conv_out.assign(D, 0.0);
  for (int ch = 0; ch < D; ++ch) {
    double acc = c.bias ? w.conv_b[ch] : 0.0;
    for (int j = 0; j < W - 1; ++j) acc += double(w.conv_w[ch * W + j]) * st.conv[ch * (W - 1) + j];
    acc += double(w.conv_w[ch * W + W - 1]) * x[ch];
    conv_out[ch] = silu(acc);
    for (int j = 0; j + 1 < W - 1; ++j) st.conv[ch * (W - 1) + j] = st.conv[ch * (W - 1) + j + 1];
    if (W > 1) st.conv[ch * (W - 1) + W - 2] = x[ch];
  }
  const double scale = c.scale ? double(*c.scale) : 1.0 / std::sqrt(double(c.K));
  core_out.assign(static_cast<std::size_t>(c.HV) * c.V, 0.0);
  for (int hv = 0; hv < c.HV; ++hv) {
    const int h = hv / (c.HV / c.H);
    const double* q = &conv_out[h * c.K];
    const double* k = &conv_out[c.H * c.K + h * c.K];
    const double* v = &conv_out[2 * c.H * c.K + hv * c.V];
    double qq = 0, kk = 0;
    for (int i = 0; i < c.K; ++i) qq += q[i] * q[i], kk += k[i] * k[i];
    const double qn = 1.0 / std::sqrt(qq + 1e-6), kn = 1.0 / std::sqrt(kk + 1e-6);
    const double g = -std::exp(double(w.A_log[hv])) * softplus(double(a[hv]) + w.dt_bias[hv]);
    const double beta = 1.0 / (1.0 + std::exp(-double(b[hv])));
    double* S = &st.S[static_cast<std::size_t>(hv) * c.V * c.K];
    const double decay = std::exp(g);
    for (int i = 0; i < c.V * c.K; ++i) S[i] *= decay;
    for (int vi = 0; vi < c.V; ++vi) {
      double sk = 0;
      for (int i = 0; i < c.K; ++i) sk += S[vi * c.K + i] * k[i] * kn;
      const double u = beta * (v[vi] - sk);
      for (int i = 0; i < c.K; ++i) S[vi * c.K + i] += u * k[i] * kn;
      double o = 0;
      for (int i = 0; i < c.K; ++i) o += S[vi * c.K + i] * q[i] * qn * scale;
      core_out[hv * c.V + vi] = o;
    }
  }
}

// The kind of inputs a case draws.
enum class Inputs { kRealistic, kZeroQK, kAllZero, kExtremeGates, kSoftplusEdge, kTinyQK };

struct Case {
  Cfg cfg;
  RefWeights w;
  std::vector<float> x, a, b;  // [tokens, D], [tokens, HV], [tokens, HV]
};

// `backend`: the CUDA kernels take head_k_dim 32, 64 or 128 (the CPU any): 32 there.
Case make_case(std::mt19937_64& rng, int tokens, Inputs kind, Backend backend) {
  std::uniform_int_distribution<int> pick(0, 1);
  Case cs;
  Cfg& c = cs.cfg;
  c.H = 1 + pick(rng);
  c.HV = c.H * (1 + pick(rng));
  c.K = 4 << pick(rng);
  if (backend == Backend::kCuda) c.K = 32;
  c.V = 4 << pick(rng);
  c.W = 2 + pick(rng) + pick(rng);
  c.bias = pick(rng) == 1;
  if (pick(rng)) c.scale = 0.3f;
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  const int D = c.D();
  cs.w.conv_w.resize(static_cast<std::size_t>(D) * c.W);
  for (float& v : cs.w.conv_w) v = 0.5f * normal(rng);
  if (c.bias) {
    cs.w.conv_b.resize(D);
    for (float& v : cs.w.conv_b) v = 0.2f * normal(rng);
  }
  cs.w.A_log.resize(c.HV);
  cs.w.dt_bias.resize(c.HV);
  for (int h = 0; h < c.HV; ++h) {
    cs.w.A_log[h] = std::log(1.f + 15.f * uni(rng));
    cs.w.dt_bias[h] = std::log(std::expm1(0.001f + 0.1f * uni(rng)));
  }
  cs.x.resize(static_cast<std::size_t>(tokens) * D);
  cs.a.resize(static_cast<std::size_t>(tokens) * c.HV);
  cs.b.resize(cs.a.size());
  for (float& v : cs.x) v = normal(rng);
  for (float& v : cs.a) v = normal(rng);
  for (float& v : cs.b) v = normal(rng);
  for (int t = 0; t < tokens; ++t) {
    float* xt = &cs.x[static_cast<std::size_t>(t) * D];
    float* at = &cs.a[static_cast<std::size_t>(t) * c.HV];
    float* bt = &cs.b[static_cast<std::size_t>(t) * c.HV];
    switch (kind) {
      case Inputs::kRealistic:
        break;
      case Inputs::kZeroQK:  // q and k channels zero (conv output is silu(bias) or 0 then)
        if (t % 2 == 0) {
          for (int i = 0; i < 2 * c.H * c.K; ++i) xt[i] = 0.f;
        }
        break;
      case Inputs::kAllZero:
        for (int i = 0; i < D; ++i) xt[i] = 0.f;
        for (int h = 0; h < c.HV; ++h) at[h] = bt[h] = 0.f;
        break;
      case Inputs::kExtremeGates:  // a + dt_bias across [-20, 30], b across [-10, 10]
        for (int h = 0; h < c.HV; ++h) {
          at[h] = -20.f + 50.f * uni(rng) - cs.w.dt_bias[h];
          bt[h] = -10.f + 20.f * uni(rng);
        }
        break;
      case Inputs::kSoftplusEdge:  // a + dt_bias at the threshold 20 (both sides) and inside
                                   // (2, 20), where softplus(x) != x still shows (a threshold
                                   // moved to 2 would treat x = 3 as the identity)
        for (int h = 0; h < c.HV; ++h) {
          const float x[] = {19.5f, 19.999f, 20.f, 20.001f, 20.5f, 3.f, 5.f, 1.f};
          at[h] = x[(t + h) % 8] - cs.w.dt_bias[h];
          // A = e^-1: exp(g) stays away from 0 for the x < 20 tokens, so the state carries the
          // gate's value into the next token.
          cs.w.A_log[h] = -1.f;
        }
        break;
      case Inputs::kTinyQK:  // q and k conv outputs near 1e-5: sum k^2 ~ 1e-9, far below the
                             // eps 1e-6, so where eps sits shows (1 / sqrt(sum + eps) against
                             // 1 / (sqrt(sum) + eps): 0.99 max_rel apart; at q = k = 0 both give 0)
        for (int i = 0; i < 2 * c.H * c.K; ++i) xt[i] *= 1e-5f;
        break;
    }
  }
  if (kind == Inputs::kTinyQK && c.bias) {  // the bias would lift q and k above the eps
    for (int ch = 0; ch < 2 * c.H * c.K; ++ch) cs.w.conv_b[ch] = 0.f;
  }
  // Zero conv weights on q/k too for kZeroQK, so the *conv output* of q/k is zero, not only the
  // input (bias aside): that is what drives sum q^2 = 0 into the eps.
  if (kind == Inputs::kZeroQK || kind == Inputs::kAllZero) {
    for (int ch = 0; ch < 2 * c.H * c.K; ++ch) {
      for (int j = 0; j < c.W; ++j) cs.w.conv_w[ch * c.W + j] = 0.f;
      if (c.bias) cs.w.conv_b[ch] = 0.f;
    }
  }
  return cs;
}

GdnConfig to_gdn(const Cfg& c) {
  GdnConfig g;
  g.num_k_heads = c.H;
  g.num_v_heads = c.HV;
  g.head_k_dim = c.K;
  g.head_v_dim = c.V;
  g.conv_width = c.W;
  g.conv_bias = c.bias;
  g.scale = c.scale;
  g.act_dtype = g.conv_state_dtype = g.ssm_state_dtype = DType::kF32;
  return g;
}

// The case's weights on the pool's backend.
GdnWeights weights_view(Case& cs, test::BackendBuffers& mem) {
  const Cfg& c = cs.cfg;
  return {mem.up(cs.w.conv_w, {c.D(), c.W}), c.bias ? mem.up(cs.w.conv_b, {c.D()}) : TensorView{},
          mem.up(cs.w.A_log, {c.HV}), mem.up(cs.w.dt_bias, {c.HV})};
}

PoolOptions options_for(Backend backend, int max_window = 1) {
  PoolOptions o;
  o.backend = backend;
  o.max_window = max_window;
  return o;
}

// max |ours - ref| / max(1, |ref|) over all elements; fails on non-finite values.
struct Compare {
  double worst = 0, norm = 0;
  std::string where;
  void add(const std::vector<float>& host, const std::vector<double>& ref,
           const std::string& what) {
    ASSERT_GE(host.size(), ref.size()) << what;
    const float* ours = host.data();
    for (std::size_t i = 0; i < ref.size(); ++i) {
      ASSERT_TRUE(std::isfinite(ours[i])) << what << "[" << i << "] = " << ours[i];
      ASSERT_TRUE(std::isfinite(ref[i])) << "reference " << what << "[" << i << "]";
      const double e = std::abs(double(ours[i]) - ref[i]) / std::max(1.0, std::abs(ref[i]));
      norm += ref[i] * ref[i];
      if (e > worst) {
        worst = e;
        where = what + "[" + std::to_string(i) + "]: ours " + std::to_string(ours[i]) + " ref " +
                std::to_string(ref[i]);
      }
    }
  }
};

constexpr double kTol = 2e-4;  // fp32 arithmetic against float64, small K/V

const char* kind_name(Inputs k) {
  switch (k) {
    case Inputs::kRealistic:
      return "realistic";
    case Inputs::kZeroQK:
      return "zero q/k";
    case Inputs::kAllZero:
      return "all zero";
    case Inputs::kExtremeGates:
      return "extreme gates";
    case Inputs::kSoftplusEdge:
      return "softplus edge";
    case Inputs::kTinyQK:
      return "tiny q/k";
  }
  return "?";
}

// Prefill `tokens` tokens (then decode 2 more) and compare outputs and the committed state.
void check_prefill_decode(uint64_t seed, Inputs kind, Backend backend) {
  SCOPED_TRACE("seed " + std::to_string(seed) + ", inputs " + kind_name(kind));
  std::mt19937_64 rng(seed);
  const int tokens = 5;
  Case cs = make_case(rng, tokens + 2, kind, backend);
  const Cfg& c = cs.cfg;
  const int D = c.D(), HV = c.HV, V = c.V;
  test::BackendBuffers mem(backend);
  StatePool pool(ModelConfig::gated_delta_net(1, to_gdn(c)), options_for(backend));
  const SlotHandle h = pool.acquire();
  RefState st{std::vector<double>(static_cast<std::size_t>(D) * (c.W - 1), 0.0),
              std::vector<double>(static_cast<std::size_t>(HV) * V * c.K, 0.0)};
  const GdnWeights w = weights_view(cs, mem);
  const auto first = [&](const std::vector<float>& v, int64_t n) {
    return std::vector<float>(v.begin(), v.begin() + n);
  };
  const TensorView conv_out = mem.zeros(std::size_t{tokens} * D, {tokens, D});
  const TensorView core_out = mem.zeros(std::size_t{tokens} * HV * V, {tokens, HV, V});
  pool.prefill(0, h, w,
               {mem.up(first(cs.x, int64_t{tokens} * D), {tokens, D}),
                mem.up(first(cs.a, int64_t{tokens} * HV), {tokens, HV}),
                mem.up(first(cs.b, int64_t{tokens} * HV), {tokens, HV})},
               {conv_out, core_out});
  const std::vector<float> pc = mem.down(conv_out.data, std::size_t{tokens} * D);
  const std::vector<float> po = mem.down(core_out.data, std::size_t{tokens} * HV * V);
  Compare cmp;
  std::vector<double> rc, ro;
  for (int t = 0; t < tokens + 2; ++t) {
    ref_step(c, cs.w, st, &cs.x[static_cast<std::size_t>(t) * D], &cs.a[t * HV], &cs.b[t * HV], rc,
             ro);
    if (t < tokens) {
      cmp.add(std::vector<float>(pc.begin() + int64_t{t} * D, pc.end()), rc,
              "prefill conv_out t" + std::to_string(t));
      cmp.add(std::vector<float>(po.begin() + int64_t{t} * HV * V, po.end()), ro,
              "prefill core_out t" + std::to_string(t));
    } else {  // decode one token through a batch with a padding row
      std::vector<float> x2(2 * static_cast<std::size_t>(D), 0.f), a2(2 * HV, 0.f), b2(2 * HV, 0.f);
      std::copy_n(&cs.x[static_cast<std::size_t>(t) * D], D, x2.begin() + D);
      std::copy_n(&cs.a[t * HV], HV, a2.begin() + HV);
      std::copy_n(&cs.b[t * HV], HV, b2.begin() + HV);
      // A marker in the outputs: the padding row's must keep it.
      const TensorView co =
          mem.up(std::vector<float>(2 * std::size_t(D), test::kPaddingMarker), {2, D});
      const TensorView oo =
          mem.up(std::vector<float>(2 * std::size_t(HV) * V, test::kPaddingMarker), {2, HV, V});
      pool.decode(0, {SlotHandle::padding(), h}, w,
                  {mem.up(x2, {2, D}), mem.up(a2, {2, HV}), mem.up(b2, {2, HV})}, {co, oo});
      cmp.add(mem.down(static_cast<const float*>(co.data) + D, D), rc,
              "decode conv_out t" + std::to_string(t));
      cmp.add(mem.down(static_cast<const float*>(oo.data) + HV * V, std::size_t(HV) * V), ro,
              "decode core_out t" + std::to_string(t));
      for (float x : mem.down(co.data, std::size_t(D))) {
        ASSERT_EQ(x, test::kPaddingMarker) << "padding row conv_out";
      }
      for (float x : mem.down(oo.data, std::size_t(HV) * V)) {
        ASSERT_EQ(x, test::kPaddingMarker) << "padding row core_out";
      }
    }
  }
  const int64_t slot = pool.slot_index(h);
  cmp.add(mem.slot(pool.ssm_state(0), slot, st.S.size()), st.S, "ssm state");
  cmp.add(mem.slot(pool.conv_state(0), slot, st.conv.size()), st.conv, "conv state");
  EXPECT_LE(cmp.worst, kTol) << cmp.where;
  if (kind != Inputs::kAllZero || c.bias) EXPECT_GT(cmp.norm, 0.0) << "all-zero reference";
}

// Verify a window (chain or tree) on top of a prefilled state, commit node `last`, and compare
// every token's outputs and the committed state with the float64 path reference.
void check_verify(uint64_t seed, Inputs kind, bool tree, Backend backend) {
  SCOPED_TRACE("seed " + std::to_string(seed) + ", inputs " + kind_name(kind) +
               (tree ? ", tree" : ", chain"));
  std::mt19937_64 rng(seed);
  const int pre = 3, T = 5;
  Case cs = make_case(rng, pre + T, kind, backend);
  const Cfg& c = cs.cfg;
  const int D = c.D(), HV = c.HV, V = c.V;
  test::BackendBuffers mem(backend);
  StatePool pool(ModelConfig::gated_delta_net(1, to_gdn(c)), options_for(backend, T));
  const SlotHandle h = pool.acquire();
  const GdnWeights w = weights_view(cs, mem);
  const auto range = [](const std::vector<float>& v, int64_t begin, int64_t n) {
    return std::vector<float>(v.begin() + begin, v.begin() + begin + n);
  };
  pool.prefill(0, h, w,
               {mem.up(range(cs.x, 0, int64_t{pre} * D), {pre, D}),
                mem.up(range(cs.a, 0, int64_t{pre} * HV), {pre, HV}),
                mem.up(range(cs.b, 0, int64_t{pre} * HV), {pre, HV})},
               {mem.zeros(std::size_t{pre} * D, {pre, D}),
                mem.zeros(std::size_t{pre} * HV * V, {pre, HV, V})});
  RefState base{std::vector<double>(static_cast<std::size_t>(D) * (c.W - 1), 0.0),
                std::vector<double>(static_cast<std::size_t>(HV) * V * c.K, 0.0)};
  std::vector<double> rc, ro;
  for (int t = 0; t < pre; ++t) {
    ref_step(c, cs.w, base, &cs.x[static_cast<std::size_t>(t) * D], &cs.a[t * HV], &cs.b[t * HV],
             rc, ro);
  }
  const std::vector<int32_t> parents =
      tree ? std::vector<int32_t>{-1, 0, 0, 1, 2} : std::vector<int32_t>{-1, 0, 1, 2, 3};
  pool.begin_verify(VerifyBatch{{h}, T, tree ? parents : std::vector<int32_t>{}});
  const float* x = &cs.x[static_cast<std::size_t>(pre) * D];
  const float* a = &cs.a[pre * HV];
  const float* b = &cs.b[pre * HV];
  // Inputs through a strided view (a token stride of D + 3) to exercise strides too.
  std::vector<float> xs(static_cast<std::size_t>(T) * (D + 3), 7.f);
  for (int t = 0; t < T; ++t) std::copy_n(x + static_cast<std::size_t>(t) * D, D, &xs[t * (D + 3)]);
  const TensorView vc = mem.zeros(std::size_t{T} * D, {T, D});
  const TensorView vo = mem.zeros(std::size_t{T} * HV * V, {T, HV, V});
  pool.verify(
      0, w,
      {mem.up(xs, {T, D}, {D + 3, 1}), mem.up(range(cs.a, int64_t{pre} * HV, T * HV), {T, HV}),
       mem.up(range(cs.b, int64_t{pre} * HV, T * HV), {T, HV})},
      {vc, vo});
  const std::vector<float> hc = mem.down(vc.data, std::size_t{T} * D);
  const std::vector<float> ho = mem.down(vo.data, std::size_t{T} * HV * V);
  Compare cmp;
  std::vector<RefState> after(T);
  for (int t = 0; t < T; ++t) {
    RefState st = parents[t] < 0 ? base : after[parents[t]];
    ref_step(c, cs.w, st, x + static_cast<std::size_t>(t) * D, a + t * HV, b + t * HV, rc, ro);
    after[t] = st;
    cmp.add(std::vector<float>(hc.begin() + int64_t{t} * D, hc.end()), rc,
            "verify conv_out t" + std::to_string(t));
    cmp.add(std::vector<float>(ho.begin() + int64_t{t} * HV * V, ho.end()), ro,
            "verify core_out t" + std::to_string(t));
  }
  const int last = tree ? 3 : 2;  // tree: path 0 -> 1 -> 3; chain: a = 3
  pool.commit(std::vector<int32_t>{tree ? last : last + 1});
  const int64_t slot = pool.slot_index(h);
  cmp.add(mem.slot(pool.ssm_state(0), slot, after[last].S.size()), after[last].S, "committed ssm");
  cmp.add(mem.slot(pool.conv_state(0), slot, after[last].conv.size()), after[last].conv,
          "committed conv");
  EXPECT_LE(cmp.worst, kTol) << cmp.where;
  if (kind != Inputs::kAllZero || c.bias) EXPECT_GT(cmp.norm, 0.0) << "all-zero reference";
}

// (Inputs, backend): the CPU oracle, and the CUDA kernels where a device is present.
class ReferenceF64 : public ::testing::TestWithParam<std::tuple<Inputs, Backend>> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam()) == Backend::kCuda && !cli::cuda_device_available()) {
      GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
    }
  }
};

TEST_P(ReferenceF64, PrefillAndDecode) {
  const auto [kind, backend] = GetParam();
  for (uint64_t seed = 1; seed <= 6; ++seed) check_prefill_decode(seed * 7919 + 1, kind, backend);
}

TEST_P(ReferenceF64, VerifyChainAndCommit) {
  const auto [kind, backend] = GetParam();
  for (uint64_t seed = 1; seed <= 6; ++seed) check_verify(seed * 104729 + 3, kind, false, backend);
}

TEST_P(ReferenceF64, VerifyTreeAndCommit) {
  const auto [kind, backend] = GetParam();
  for (uint64_t seed = 1; seed <= 6; ++seed) check_verify(seed * 15485863 + 5, kind, true, backend);
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, ReferenceF64,
    ::testing::Combine(::testing::Values(Inputs::kRealistic, Inputs::kZeroQK, Inputs::kAllZero,
                                         Inputs::kExtremeGates, Inputs::kSoftplusEdge,
                                         Inputs::kTinyQK),
                       ::testing::Values(Backend::kCpu, Backend::kCuda)),
    [](const auto& info) {
      std::string name = "X";
      switch (std::get<0>(info.param)) {
        case Inputs::kRealistic:
          name = "Realistic";
          break;
        case Inputs::kZeroQK:
          name = "ZeroQK";
          break;
        case Inputs::kAllZero:
          name = "AllZero";
          break;
        case Inputs::kExtremeGates:
          name = "ExtremeGates";
          break;
        case Inputs::kSoftplusEdge:
          name = "SoftplusEdge";
          break;
        case Inputs::kTinyQK:
          name = "TinyQK";
          break;
      }
      return name + (std::get<1>(info.param) == Backend::kCuda ? "_Cuda" : "");
    });

// The softplus threshold itself: a + dt_bias = 19.9 and 20.1 with A = 1 give decays exp(-19.9)
// and exp(-20.1); with a threshold at 2 (a plausible bug) both would be exp(-x) as well, so the
// edge that can tell is x in (2, 20): softplus(5) = 5.0067, not 5.
class ReferenceF64Edges : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kCuda && !cli::cuda_device_available()) {
      GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
    }
  }
};

TEST_P(ReferenceF64Edges, SoftplusBelowTheThresholdIsNotTheIdentity) {
  Cfg c{1, 1, 32, 4, 2, false, std::nullopt};  // K = 32: the CUDA kernels' smallest
  Case cs;
  cs.cfg = c;
  const int D = c.D(), VK = c.V * c.K;
  cs.w.conv_w.assign(static_cast<std::size_t>(D) * 2, 0.f);
  for (int ch = 0; ch < D; ++ch) cs.w.conv_w[ch * 2 + 1] = 1.f;  // conv passes x through
  cs.w.A_log = {std::log(0.2f)};
  cs.w.dt_bias = {0.f};
  test::BackendBuffers mem(GetParam());
  StatePool pool(ModelConfig::gated_delta_net(1, to_gdn(c)), options_for(GetParam()));
  const SlotHandle h = pool.acquire();
  const GdnWeights w = weights_view(cs, mem);
  std::vector<float> x(static_cast<std::size_t>(D) * 2, 1.f), a = {0.f, 5.f}, b = {10.f, -3.f};
  pool.prefill(0, h, w, {mem.up(x, {2, D}), mem.up(a, {2, 1}), mem.up(b, {2, 1})},
               {mem.zeros(std::size_t(D) * 2, {2, D}), mem.zeros(2 * std::size_t(c.V), {2, 1, 4})});
  RefState st{std::vector<double>(D, 0.0), std::vector<double>(VK, 0.0)};
  std::vector<double> rc, ro;
  for (int t = 0; t < 2; ++t) ref_step(c, cs.w, st, &x[t * D], &a[t], &b[t], rc, ro);
  const std::vector<float> S = mem.slot(pool.ssm_state(0), pool.slot_index(h), VK);
  // Token 0 builds the state, token 1 (beta small, so the decay does not cancel) decays it by
  // exp(-0.2 * softplus(5)): 0.13% off if softplus(5) were taken as 5.
  for (int i = 0; i < VK; ++i) {
    EXPECT_NEAR(S[i], st.S[i], 1e-5 * std::max(1.0, std::abs(st.S[i]))) << i;
  }
  EXPECT_GT(std::abs(st.S[0]), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Backends, ReferenceF64Edges,
                         ::testing::Values(Backend::kCpu, Backend::kCuda), [](const auto& info) {
                           return std::string(info.param == Backend::kCuda ? "Cuda" : "Cpu");
                         });

}  // namespace
}  // namespace specstate
