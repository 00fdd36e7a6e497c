// The Mamba2 layer math of DESIGN.md section 3 (and the Mamba2 part of the golden README),
// checked at the library level: prefill, decode and verify (chain and tree) + commit on random
// small Mamba2 configs against an independent float64 implementation written here. Covered: z
// gate on/off, D skip on/off, conv bias on/off, the dt clamp, one and several groups, widths 2..4,
// and degenerate time steps: dt + dt_bias around the softplus threshold 20 (both sides) and inside
// (2, 20) where softplus(u) != u still shows, dt + dt_bias over [-30, 40], all-zero inputs. Every
// check asserts finite results and a reference that is not all zero. The same cases run on the
// CUDA backend (d_state 16 or 32, the kernels' sizes; skipped visibly without a device): a kernel
// whose gate or clamp is wrong fails here (issue 17.7).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cli/golden_case.h"
#include "common/backend_buffers.h"
#include "common/mamba2_data.h"

namespace specstate::test {
namespace {

// float64 reference state of one request: conv window [Dc][W-1], S [H][P][N].
struct RefState {
  std::vector<double> conv, S;
};

double softplus(double u) { return u > 20.0 ? u : std::log1p(std::exp(u)); }
double sigmoid(double u) { return 1.0 / (1.0 + std::exp(-u)); }
double silu(double u) { return u * sigmoid(u); }

RefState zero_state(const Mamba2Config& m) {
  return {std::vector<double>(static_cast<std::size_t>(m.conv_dim()) * (m.conv_width - 1), 0.0),
          std::vector<double>(static_cast<std::size_t>(m.ssm_state_elems()), 0.0)};
}

// One token: conv over xBC, split, Δ = softplus(dt + dt_bias) (clamped), dA = exp(-exp(A_log) Δ),
// S = dA S + Δ B x, y = S C + D x, y *= silu(z). Returns conv_out [Dc] and y [H*P].
void ref_step(const Mamba2Config& m, const Mamba2LayerWeights& w, RefState& st,
              const Mamba2TokenInputs& in, int64_t token, std::vector<double>& conv_out,
              std::vector<double>& y) {
  const int64_t Dc = m.conv_dim();
  const int W = m.conv_width, H = m.num_heads, P = m.head_dim, N = m.d_state;
  conv_out.assign(Dc, 0.0);
  for (int64_t c = 0; c < Dc; ++c) {
    const double x = in.xBC.get(token * Dc + c);
    double acc = m.conv_bias ? w.conv_bias.get(c) : 0.0;
    for (int j = 0; j < W - 1; ++j) acc += w.conv_weight.get(c * W + j) * st.conv[c * (W - 1) + j];
    acc += w.conv_weight.get(c * W + W - 1) * x;
    conv_out[c] = silu(acc);
    for (int j = 0; j + 1 < W - 1; ++j) st.conv[c * (W - 1) + j] = st.conv[c * (W - 1) + j + 1];
    st.conv[c * (W - 1) + W - 2] = x;
  }
  const double* xs = conv_out.data();
  const double* B = xs + int64_t{H} * P;
  const double* C = B + int64_t{m.n_groups} * N;
  y.assign(static_cast<std::size_t>(H) * P, 0.0);
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / m.n_groups);
    double dt = softplus(double(in.dt.get(token * H + h)) + w.dt_bias.get(h));
    if (m.dt_min) dt = std::max(dt, double(*m.dt_min));
    if (m.dt_max) dt = std::min(dt, double(*m.dt_max));
    const double dA = std::exp(-std::exp(double(w.A_log.get(h))) * dt);
    for (int p = 0; p < P; ++p) {
      const double x = xs[h * P + p];
      double acc = 0;
      for (int n = 0; n < N; ++n) {
        double& s = st.S[(static_cast<std::size_t>(h) * P + p) * N + n];
        s = s * dA + dt * B[g * N + n] * x;
        acc += s * C[g * N + n];
      }
      if (m.d_skip) acc += double(w.D.get(h)) * x;
      if (m.gate) acc *= silu(in.z.get(token * H * P + h * P + p));
      y[h * P + p] = acc;
    }
  }
}

enum class Kind { kRealistic, kAllZero, kExtremeDt, kSoftplusEdge, kClamp, kBf16 };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kRealistic:
      return "Realistic";
    case Kind::kAllZero:
      return "AllZero";
    case Kind::kExtremeDt:
      return "ExtremeDt";
    case Kind::kSoftplusEdge:
      return "SoftplusEdge";
    case Kind::kClamp:
      return "DtClamp";
    case Kind::kBf16:
      return "Bf16Activations";
  }
  return "X";
}

struct Case {
  Mamba2Config m;
  Mamba2LayerWeights w;
  Mamba2TokenInputs in;
};

// `backend`: the CUDA kernels take d_state 16, 32, 64, 128 or 256 (the CPU any): 16 or 32 there.
Case make_case(std::mt19937_64& rng, int tokens, Kind kind, Backend backend) {
  std::uniform_int_distribution<int> pick(0, 1);
  Case cs;
  Mamba2Config& m = cs.m;
  m.n_groups = 1 + pick(rng);
  m.num_heads = m.n_groups * (1 + pick(rng) + pick(rng));
  m.head_dim = 4 << pick(rng);
  m.d_state = 4 << (pick(rng) + pick(rng));
  if (backend == Backend::kCuda) m.d_state = 16 << pick(rng);
  m.conv_width = 2 + pick(rng) + pick(rng);
  m.conv_bias = pick(rng) == 1;
  m.d_skip = pick(rng) == 1;
  m.gate = pick(rng) == 1;
  const DType act = kind == Kind::kBf16 ? DType::kBF16 : DType::kF32;
  m.act_dtype = m.conv_state_dtype = act;
  m.ssm_state_dtype = DType::kF32;
  if (kind == Kind::kClamp) {
    m.dt_min = 0.02f;
    m.dt_max = 0.06f;
  }
  cs.w = random_weights(m, rng);
  cs.in = random_inputs(m, tokens, rng);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  const int H = m.num_heads;
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < H; ++h) {
      const float bias = cs.w.dt_bias.get(h);
      switch (kind) {
        case Kind::kExtremeDt:  // dt + dt_bias across [-30, 40]
          cs.in.dt.set(t * H + h, -30.f + 70.f * uni(rng) - bias);
          break;
        case Kind::kSoftplusEdge: {
          // dt + dt_bias at the threshold 20 (both sides) and inside (2, 20), where
          // softplus(u) = u + log1p(exp(-u)) still differs from u (a threshold moved to 2 would
          // take u = 3 as the identity). A = -0.05 keeps dA = exp(A dt) well away from 0, so the
          // state carries the step's value into later tokens.
          const float u[] = {19.5f, 19.999f, 20.f, 20.001f, 20.5f, 3.f, 5.f, 1.f};
          cs.in.dt.set(t * H + h, u[(t + h) % 8] - bias);
          cs.w.A_log.set(h, std::log(0.05f));
          break;
        }
        default:
          break;
      }
    }
    if (kind == Kind::kAllZero) {
      for (int64_t c = 0; c < m.conv_dim(); ++c) cs.in.xBC.set(t * m.conv_dim() + c, 0.f);
      for (int h = 0; h < H; ++h) cs.in.dt.set(t * H + h, 0.f);
    }
  }
  return cs;
}

// Largest error: f32 per element |ours - ref| / max(1, |ref|); bf16 max|ours - ref| / max|ref|
// (the README's max_rel). Fails on non-finite values.
struct Compare {
  bool relative_to_max = false;
  double worst = 0, max_ref = 0, max_diff = 0, norm = 0;
  std::string where;
  void add(const TensorView& ours, int64_t offset, const std::vector<double>& ref,
           const std::string& what) {
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const float o = ours.dtype == DType::kBF16
                          ? float_from_bf16(static_cast<const uint16_t*>(ours.data)[offset + i])
                          : static_cast<const float*>(ours.data)[offset + i];
      ASSERT_TRUE(std::isfinite(o)) << what << "[" << i << "] = " << o;
      ASSERT_TRUE(std::isfinite(ref[i])) << "reference " << what << "[" << i << "]";
      const double d = std::abs(double(o) - ref[i]);
      const double e = d / std::max(1.0, std::abs(ref[i]));
      norm += ref[i] * ref[i];
      max_ref = std::max(max_ref, std::abs(ref[i]));
      max_diff = std::max(max_diff, d);
      if (e > worst) {
        worst = e;
        where = what + "[" + std::to_string(i) + "]: ours " + std::to_string(o) + " ref " +
                std::to_string(ref[i]);
      }
    }
  }
  void expect_within(double tol) const {
    if (relative_to_max) {
      EXPECT_LE(max_diff / std::max(max_ref, 1e-30), tol)
          << "max_rel; worst element " << where << " (max|ref| " << max_ref << ")";
    } else {
      EXPECT_LE(worst, tol) << where;
    }
  }
};

double tolerance(Kind kind) { return kind == Kind::kBf16 ? 1e-2 : 1e-5; }

// The host views of a call on the pool's backend (copies there), and its outputs brought back.
Mamba2Weights on(BackendBuffers& mem, const Mamba2Weights& w) {
  const auto up = [&](const TensorView& v) { return v.data ? mem.up(v) : TensorView{}; };
  return {up(w.conv_weight), up(w.conv_bias), up(w.A_log), up(w.dt_bias), up(w.D)};
}
Mamba2Inputs on(BackendBuffers& mem, const Mamba2Inputs& in) {
  return {mem.up(in.xBC), mem.up(in.dt), in.z.data ? mem.up(in.z) : TensorView{}};
}
// Runs `call(outputs on the backend)` and copies them into `host`.
template <typename Call>
void with_outputs(BackendBuffers& mem, const Mamba2Outputs& host, Call call) {
  const Mamba2Outputs dev{mem.up(host.conv_out), mem.up(host.y)};
  call(dev);
  mem.down(dev.conv_out, host.conv_out);
  mem.down(dev.y, host.y);
}
// A pool state view (all slots) copied to the host, held by `bytes`.
TensorView host_state(BackendBuffers& mem, const TensorView& state,
                      std::vector<unsigned char>& bytes) {
  bytes.resize(static_cast<std::size_t>(state.numel()) * dtype_size(state.dtype));
  TensorView host = state;
  host.data = bytes.data();
  host.device = Device::kCpu;
  mem.down(state, host);
  return host;
}

// Skips the CUDA instances without a device.
bool runs_here(Backend backend) { return backend == Backend::kCpu || cli::cuda_device_available(); }

// Prefill 5 tokens, then decode 2 more through a batch with a padding row; compare outputs and
// the committed state.
void check_prefill_decode(uint64_t seed, Kind kind, Backend backend) {
  SCOPED_TRACE("seed " + std::to_string(seed) + ", inputs " + kind_name(kind));
  std::mt19937_64 rng(seed);
  const int tokens = 5;
  Case cs = make_case(rng, tokens + 2, kind, backend);
  const Mamba2Config& m = cs.m;
  const int64_t HP = int64_t{m.num_heads} * m.head_dim;
  BackendBuffers mem(backend);
  PoolOptions po;
  po.backend = backend;
  StatePool pool(ModelConfig::mamba2(1, m), po);
  const SlotHandle h = pool.acquire();
  RefState st = zero_state(m);
  const Mamba2Weights w = on(mem, cs.w.view());
  Mamba2TokenOutputs out = make_outputs(m, tokens);
  with_outputs(mem, out.view(), [&](const Mamba2Outputs& o) {
    pool.prefill(0, h, w, on(mem, cs.in.rows(0, tokens)), o);
  });
  Compare cmp;
  cmp.relative_to_max = kind == Kind::kBf16;
  std::vector<double> rc, ry;
  for (int t = 0; t < tokens + 2; ++t) {
    ref_step(m, cs.w, st, cs.in, t, rc, ry);
    const std::string ts = " t" + std::to_string(t);
    if (t < tokens) {
      cmp.add(out.conv_out.view(), t * m.conv_dim(), rc, "prefill conv_out" + ts);
      cmp.add(out.y.view(), t * HP, ry, "prefill y" + ts);
      continue;
    }
    Mamba2TokenInputs two = random_inputs(m, 2, rng);  // row 0 is padding: never read
    for (int64_t c = 0; c < m.conv_dim(); ++c) {
      two.xBC.set(m.conv_dim() + c, cs.in.xBC.get(t * m.conv_dim() + c));
    }
    for (int k = 0; k < m.num_heads; ++k)
      two.dt.set(m.num_heads + k, cs.in.dt.get(t * m.num_heads + k));
    for (int64_t i = 0; m.gate && i < HP; ++i) two.z.set(HP + i, cs.in.z.get(t * HP + i));
    Mamba2TokenOutputs o2 = make_outputs(m, 2);
    host_fill(o2.y.view(), kPaddingMarker);  // the padding row's must keep it
    host_fill(o2.conv_out.view(), kPaddingMarker);
    with_outputs(mem, o2.view(), [&](const Mamba2Outputs& o) {
      pool.decode(0, {SlotHandle::padding(), h}, w, on(mem, two.view()), o);
    });
    cmp.add(o2.conv_out.view(), m.conv_dim(), rc, "decode conv_out" + ts);
    cmp.add(o2.y.view(), HP, ry, "decode y" + ts);
    for (int64_t i = 0; i < HP; ++i) ASSERT_EQ(o2.y.get(i), kPaddingMarker) << "padding row y";
    for (int64_t i = 0; i < m.conv_dim(); ++i) {
      ASSERT_EQ(o2.conv_out.get(i), kPaddingMarker) << "padding row conv_out";
    }
  }
  std::vector<unsigned char> ssm_bytes, conv_bytes;
  const TensorView ssm = host_state(mem, pool.ssm_state(0), ssm_bytes);
  const TensorView conv = host_state(mem, pool.conv_state(0), conv_bytes);
  cmp.add(ssm, pool.slot_index(h) * ssm.stride[0], st.S, "ssm state");
  cmp.add(conv, pool.slot_index(h) * conv.stride[0], st.conv, "conv state");
  cmp.expect_within(tolerance(kind));
  if (kind != Kind::kAllZero || m.conv_bias) EXPECT_GT(cmp.norm, 0.0) << "all-zero reference";
}

// Verify a window (chain or tree) on top of a prefilled state under `strategy`, commit a node,
// and compare every token's outputs and the committed state with the float64 path reference.
void check_verify(uint64_t seed, Kind kind, bool tree, Strategy strategy, Backend backend) {
  SCOPED_TRACE("seed " + std::to_string(seed) + ", inputs " + kind_name(kind) +
               (tree ? ", tree, " : ", chain, ") + strategy_name(strategy));
  std::mt19937_64 rng(seed);
  const int pre = 3, T = 5;
  Case cs = make_case(rng, pre + T, kind, backend);
  const Mamba2Config& m = cs.m;
  const int64_t HP = int64_t{m.num_heads} * m.head_dim;
  BackendBuffers mem(backend);
  PoolOptions o;
  o.max_window = T;
  o.strategy = strategy;
  o.backend = backend;
  StatePool pool(ModelConfig::mamba2(1, m), o);
  const SlotHandle h = pool.acquire();
  const Mamba2Weights w = on(mem, cs.w.view());
  Mamba2TokenOutputs pre_out = make_outputs(m, pre);
  with_outputs(mem, pre_out.view(), [&](const Mamba2Outputs& out) {
    pool.prefill(0, h, w, on(mem, cs.in.rows(0, pre)), out);
  });
  RefState base = zero_state(m);
  std::vector<double> rc, ry;
  for (int t = 0; t < pre; ++t) ref_step(m, cs.w, base, cs.in, t, rc, ry);
  const std::vector<int32_t> parents =
      tree ? std::vector<int32_t>{-1, 0, 0, 1, 2} : std::vector<int32_t>{-1, 0, 1, 2, 3};
  pool.begin_verify(VerifyBatch{{h}, T, tree ? parents : std::vector<int32_t>{}});
  Mamba2TokenOutputs out = make_outputs(m, T);
  with_outputs(mem, out.view(), [&](const Mamba2Outputs& dev) {
    pool.verify(0, w, on(mem, cs.in.rows(pre, T)), dev);
  });
  Compare cmp;
  cmp.relative_to_max = kind == Kind::kBf16;
  std::vector<RefState> after(T);
  for (int t = 0; t < T; ++t) {
    RefState st = parents[t] < 0 ? base : after[parents[t]];
    ref_step(m, cs.w, st, cs.in, pre + t, rc, ry);
    after[t] = st;
    cmp.add(out.conv_out.view(), t * m.conv_dim(), rc, "verify conv_out t" + std::to_string(t));
    cmp.add(out.y.view(), t * HP, ry, "verify y t" + std::to_string(t));
  }
  const int last = tree ? 3 : 2;  // tree: path 0 -> 1 -> 3; chain: a = 3
  pool.commit(std::vector<int32_t>{tree ? last : last + 1});
  std::vector<unsigned char> ssm_bytes, conv_bytes;  // the views materialize (replay)
  const TensorView ssm = host_state(mem, pool.ssm_state(0), ssm_bytes);
  const TensorView conv = host_state(mem, pool.conv_state(0), conv_bytes);
  cmp.add(ssm, pool.slot_index(h) * ssm.stride[0], after[last].S, "committed ssm");
  cmp.add(conv, pool.slot_index(h) * conv.stride[0], after[last].conv, "committed conv");
  cmp.expect_within(tolerance(kind));
  if (kind != Kind::kAllZero || m.conv_bias) EXPECT_GT(cmp.norm, 0.0) << "all-zero reference";
}

// (inputs, backend): the CPU oracle, and the CUDA kernels where a device is present.
class ReferenceF64Mamba2 : public ::testing::TestWithParam<std::tuple<Kind, Backend>> {
 protected:
  void SetUp() override {
    if (!runs_here(std::get<1>(GetParam())))
      GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  }
};

TEST_P(ReferenceF64Mamba2, PrefillAndDecode) {
  const auto [kind, backend] = GetParam();
  for (uint64_t seed = 1; seed <= 8; ++seed) check_prefill_decode(seed * 7919 + 11, kind, backend);
}

TEST_P(ReferenceF64Mamba2, VerifyChainAndCommit) {
  const auto [kind, backend] = GetParam();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    for (Strategy s : {Strategy::kSnapshot, Strategy::kReplay}) {
      check_verify(seed * 104729 + 13, kind, false, s, backend);
    }
  }
}

TEST_P(ReferenceF64Mamba2, VerifyTreeAndCommit) {
  const auto [kind, backend] = GetParam();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    for (Strategy s : {Strategy::kSnapshot, Strategy::kReplay}) {
      check_verify(seed * 15485863 + 17, kind, true, s, backend);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Inputs, ReferenceF64Mamba2,
                         ::testing::Combine(::testing::Values(Kind::kRealistic, Kind::kAllZero,
                                                              Kind::kExtremeDt, Kind::kSoftplusEdge,
                                                              Kind::kClamp, Kind::kBf16),
                                            ::testing::Values(Backend::kCpu, Backend::kCuda)),
                         [](const auto& info) {
                           return std::string(kind_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) == Backend::kCuda ? "_Cuda" : "");
                         });

// The softplus branch below the threshold: dt + dt_bias = 3 gives Δ = softplus(3) = 3.0486, not
// 3 (what a threshold moved to 2 would give); with A = -0.1 the state after two tokens differs by
// about 1.6% between the two. And the clamp: Δ = dt_max when softplus exceeds it.
class ReferenceF64Mamba2Edges : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (!runs_here(GetParam())) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  }
};

TEST_P(ReferenceF64Mamba2Edges, SoftplusBelowTheThresholdAndTheClamp) {
  for (bool clamp : {false, true}) {
    SCOPED_TRACE(clamp ? "dt clamp [0.5, 1.5]" : "no clamp");
    Mamba2Config m;
    m.num_heads = 1;
    m.head_dim = 2;
    m.d_state = 16;  // the CUDA kernels' smallest
    m.n_groups = 1;
    m.conv_width = 2;
    m.conv_bias = false;
    m.d_skip = false;
    m.gate = false;
    m.act_dtype = m.conv_state_dtype = m.ssm_state_dtype = DType::kF32;
    if (clamp) {
      m.dt_min = 0.5f;
      m.dt_max = 1.5f;
    }
    std::mt19937_64 rng(3);
    Mamba2LayerWeights w = random_weights(m, rng);
    for (int64_t i = 0; i < w.conv_weight.numel(); ++i) w.conv_weight.set(i, i % 2 ? 1.f : 0.f);
    w.A_log.set(0, std::log(0.1f));
    w.dt_bias.set(0, 0.f);
    Mamba2TokenInputs in = random_inputs(m, 2, rng);
    for (int64_t i = 0; i < in.xBC.numel(); ++i) in.xBC.set(i, 1.f);  // x = B = C = silu(1)
    in.dt.set(0, 3.f);
    in.dt.set(1, -3.f);  // softplus(-3) = 0.0486 < dt_min when clamped
    BackendBuffers mem(GetParam());
    PoolOptions po;
    po.backend = GetParam();
    StatePool pool(ModelConfig::mamba2(1, m), po);
    const SlotHandle h = pool.acquire();
    Mamba2TokenOutputs out = make_outputs(m, 2);
    with_outputs(mem, out.view(), [&](const Mamba2Outputs& o) {
      pool.prefill(0, h, on(mem, w.view()), on(mem, in.view()), o);
    });
    RefState st = zero_state(m);
    std::vector<double> rc, ry;
    for (int t = 0; t < 2; ++t) ref_step(m, w, st, in, t, rc, ry);
    const std::vector<float> S = mem.slot(pool.ssm_state(0), pool.slot_index(h), st.S.size());
    for (std::size_t i = 0; i < st.S.size(); ++i) {
      EXPECT_NEAR(S[i], st.S[i], 1e-6 * std::abs(st.S[i])) << i;
    }
    // Token 0's step alone: Δ = softplus(3) (or the clamp's 1.5), S = Δ silu(1)^2.
    const double s1 = silu(1.0) * silu(1.0);
    const double d0 = clamp ? 1.5 : softplus(3.0), d1 = clamp ? 0.5 : softplus(-3.0);
    const double expect = std::exp(-0.1 * d1) * d0 * s1 + d1 * s1;
    EXPECT_NEAR(S[0], expect, 1e-6 * expect);
    EXPECT_GT(std::abs(S[0]), 1e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ReferenceF64Mamba2Edges,
                         ::testing::Values(Backend::kCpu, Backend::kCuda), [](const auto& info) {
                           return std::string(info.param == Backend::kCuda ? "Cuda" : "Cpu");
                         });

}  // namespace
}  // namespace specstate::test
