// A random driver of the public StatePool API with a shadow oracle, shared by the API fuzz target
// (choices from the fuzzer's bytes) and the soak test (choices from a seeded std::mt19937_64).
//
// The layer kind is drawn per run (Gated DeltaNet, Mamba2 or KDA, PoolDriver at the end); the
// kind's config draw, tensors and argument names live in a traits struct (GdnKind, Mamba2Kind,
// KdaKind), the rest of the driver (KindDriver<K>) and every check below apply to every kind.
//
// Two pools of one config: `pool`, the one under test, takes every call (acquire, release,
// adopt, prefill, decode, materialize, begin_verify/verify/commit or abort_round (uniform or
// variable windows), releases in the middle of a round, and invalid calls of each); `shadow`
// only ever prefills and decodes (snapshot, owning). The pool under test draws its strategy
// (snapshot or replay) and its memory: its own, or caller-owned (StatePool(config, options,
// CommittedStateViews)) in one of two layouts, per-kind tensors with padded slot strides and
// irregular layer offsets, or vLLM v1's interleaved pages (one buffer per layer, page p = slot
// p's conv window, then its SSM state). A replay pool may run lazily: most comparisons are
// skipped, so accepted steps stay pending across releases, adopts, prefills, decodes and
// materializes. The oracle (DESIGN.md sections 4, 5.6, 5.7 and 7):
//   - a rejected call throws specstate::Error and changes nothing: the committed state of both
//     pools stays byte-identical, and a caller-owned pool's memory is not touched at all (no
//     deferred step runs, no byte of the caller's buffers changes);
//   - verify outputs of window token t equal the shadow's decode output of the same token;
//   - after every commit (lazily: at the next comparison), every live slot of `pool` equals the
//     shadow's slot bit for bit, where the shadow has decoded exactly the accepted tokens
//     (root .. accepted node) of each row;
//   - begin_verify over a verified round is rejected; after abort_round every slot is as before;
//   - a row released mid-round is padding: advancing it is rejected, the other rows commit; on a
//     caller-owned pool its slot may be adopt()ed again before the commit, which leaves it alone;
//   - caller-owned: release() leaves the caller's memory of the slot equal to its committed state
//     (pending steps run first), adopt() of that slot continues from it bit for bit, adopt() of
//     a free slot the engine wrote takes that state as it is (the shadow imports the same bytes),
//     materialize() writes the committed state into the caller's memory, the pool's views alias
//     the caller's tensors, and the pool never writes a byte outside a live slot's state (the
//     padding and every free slot keep what they held);
//   - prefill / decode may be given a temporary copy of the weights, poisoned (0xFF bytes, NaN)
//     right after the call: nothing later (materialize, verify, views) may read it;
//   - materialize with a handle twice, and any weight / input / output view one byte off its
//     dtype's alignment, are rejected with kInvalidArgument naming the handles / the view;
//   - so is any of the kind's views (GDN: conv_weight, conv_bias, A_log, dt_bias, mixed_qkv, a,
//     b, conv_out, core_out; Mamba2: conv_weight, conv_bias, A_log, dt_bias, D, xBC, dt, z,
//     conv_out, y) with a wrong extent, a wrong dtype, ndim > 6 or on another device, and an
//     optional argument (conv_bias; Mamba2 also D, z) given against the config or missing.
// Uses only include/specstate (a user's view of the library). Any violation prints what differs
// and aborts, which libFuzzer and ctest both report.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "specstate/specstate.h"

namespace specstate::fuzz {

// Where the driver's choices come from.
class Source {
 public:
  virtual ~Source() = default;
  // A value in [0, n) (n >= 1).
  virtual uint32_t below(uint32_t n) = 0;
  virtual bool exhausted() const = 0;
  bool coin() { return below(2) == 1; }
};

class ByteSource final : public Source {
 public:
  ByteSource(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  uint32_t below(uint32_t n) override {
    if (n <= 1) return 0;
    uint32_t v = 0;
    for (int i = 0; i < (n > 256 ? 2 : 1); ++i) v = (v << 8) | (at_ < size_ ? data_[at_++] : 0);
    return v % n;
  }
  bool exhausted() const override { return at_ >= size_; }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

class RngSource final : public Source {
 public:
  explicit RngSource(uint64_t seed) : rng_(seed) {}
  uint32_t below(uint32_t n) override { return n <= 1 ? 0 : static_cast<uint32_t>(rng_() % n); }
  bool exhausted() const override { return false; }

 private:
  std::mt19937_64 rng_;
};

[[noreturn]] inline void violation(const std::string& what) {
  std::fprintf(stderr, "pool_driver: ORACLE VIOLATION: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Host bytes viewed in one dtype, row-major.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
    bytes.assign(static_cast<std::size_t>(numel()) * dtype_size(dtype), 0);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    return n;
  }
  void set(int64_t i, float v) {
    if (dtype == DType::kBF16) {
      const uint16_t b = bf16_from_float(v);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  }
  TensorView view() const {
    TensorView v;
    v.data = const_cast<uint8_t*>(bytes.data());
    v.dtype = dtype;
    v.ndim = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
      v.shape[i] = shape[i];
      v.stride[i] = stride;
      stride *= shape[i];
    }
    return v;
  }
  // Rows [begin, begin + count) of the leading dimension.
  TensorView rows(int64_t begin, int64_t count) const {
    TensorView v = view();
    v.data = const_cast<uint8_t*>(bytes.data()) + begin * v.stride[0] * dtype_size(dtype);
    v.shape[0] = count;
    return v;
  }
  std::size_t row_bytes() const {  // bytes of one index of the leading dimension
    int64_t n = 1;
    for (std::size_t d = 1; d < shape.size(); ++d) n *= shape[d];
    return static_cast<std::size_t>(n) * dtype_size(dtype);
  }
};

// One view of a layer call, named as the library names it in its messages.
struct NamedView {
  TensorView* view;
  const char* name;
  bool per_token;  // dim 0 is the call's tokens (inputs, outputs)
  bool any_float;  // any float dtype is accepted (weights); otherwise exactly the act dtype
};

// An optional argument of a layer call: given exactly when the config says so.
struct OptionalArg {
  TensorView* view;
  const char* name;
  bool wanted;                 // the config wants it given
  std::vector<int64_t> shape;  // its shape when given
};

inline TensorView optional_view(const HostTensor& t) {
  return t.shape.empty() ? TensorView{} : t.view();
}

// What the driver needs of a layer kind: its config draw, its weight / input / output tensors and
// their views, and the names of those views for the hostile-argument cases. The rest of the
// driver is kind-agnostic.
//
// What the two delta-rule kinds (Gated DeltaNet, KDA) share: the weights (conv, A_log per value
// head, dt_bias per value head or per value head and key channel), three inputs (mixed_qkv, the
// gate's input, b), two outputs, the config's draws before KDA's own and the views' order.
template <typename WeightsT, typename InputsT, typename OutputsT>
struct DeltaKind {
  using Weights = WeightsT;
  using Inputs = InputsT;
  using Outputs = OutputsT;

  struct Layer {
    HostTensor conv_weight, conv_bias, A_log, dt_bias;
    Weights view() const {
      return {conv_weight.view(), optional_view(conv_bias), A_log.view(), dt_bias.view()};
    }
    std::vector<HostTensor*> tensors() { return {&conv_weight, &conv_bias, &A_log, &dt_bias}; }
  };
  struct Tokens {  // n tokens of one layer; `gate`: GDN's a, KDA's g
    HostTensor qkv, gate, b;
    Inputs view() const { return {qkv.view(), gate.view(), b.view()}; }
    std::vector<const HostTensor*> tensors() const { return {&qkv, &gate, &b}; }
  };
  struct Outs {
    HostTensor conv_out, core_out;
    Outputs view() const { return {conv_out.view(), core_out.view()}; }
    std::vector<std::pair<const char*, const HostTensor*>> compared() const {
      return {{"core_out", &core_out}, {"conv_out", &conv_out}};
    }
  };

  // Heads H in {1, 2}, HV = H or 2H, K, V in {2, 4, 8}, W in {2, 3, 4}, conv bias or not, act and
  // conv-state dtypes f32 or bf16, SSM state f32 (in this order: a fuzz input's bytes mean it).
  template <typename C>
  static void draw_dims(Source& src, C& c) {
    c.num_k_heads = 1 + static_cast<int>(src.below(2));
    c.num_v_heads = c.num_k_heads * (1 + static_cast<int>(src.below(2)));
    c.head_k_dim = 2 << src.below(3);
    c.head_v_dim = 2 << src.below(3);
    c.conv_width = 2 + static_cast<int>(src.below(3));
    c.conv_bias = src.coin();
    c.act_dtype = src.coin() ? DType::kBF16 : DType::kF32;
    c.conv_state_dtype = src.coin() ? DType::kBF16 : DType::kF32;
    c.ssm_state_dtype = DType::kF32;
  }
  // Weights shaped like real ones: A = exp(A_log) in [1, 16], softplus(dt_bias) in [1e-3, 1e-1]
  // (`per_head` dt_bias values per value head: 1 for GDN, K for KDA).
  template <typename C>
  static Layer random_layer(const C& c, DType w, int64_t per_head, std::mt19937_64& rng) {
    const int64_t D = c.conv_dim(), HV = c.num_v_heads;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    Layer L;
    L.conv_weight = HostTensor(w, {D, c.conv_width});
    for (int64_t i = 0; i < L.conv_weight.numel(); ++i) L.conv_weight.set(i, 0.5f * normal(rng));
    if (c.conv_bias) {
      L.conv_bias = HostTensor(w, {D});
      for (int64_t i = 0; i < D; ++i) L.conv_bias.set(i, 0.1f * normal(rng));
    }
    L.A_log = HostTensor(w, {HV});
    L.dt_bias = per_head == 1 ? HostTensor(w, {HV}) : HostTensor(w, {HV, per_head});
    for (int64_t h = 0; h < HV; ++h) {
      L.A_log.set(h, static_cast<float>(std::log(1.0 + 15.0 * uni(rng))));
      for (int64_t i = 0; i < per_head; ++i) {
        const double dt = std::exp(std::log(1e-3) + uni(rng) * (std::log(1e-1) - std::log(1e-3)));
        L.dt_bias.set(h * per_head + i, static_cast<float>(std::log(std::expm1(dt))));
      }
    }
    return L;
  }
  // `gate_shape`: the gate input's shape past the tokens ({HV} for GDN's a, {HV, K} for KDA's g).
  template <typename C>
  static Tokens random_tokens(const C& c, int n, std::vector<int64_t> gate_shape,
                              std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    gate_shape.insert(gate_shape.begin(), n);
    Tokens t{HostTensor(c.act_dtype, {n, c.conv_dim()}), HostTensor(c.act_dtype, gate_shape),
             HostTensor(c.act_dtype, {n, c.num_v_heads})};
    for (int64_t i = 0; i < t.qkv.numel(); ++i) t.qkv.set(i, normal(rng));
    for (int64_t i = 0; i < t.gate.numel(); ++i) t.gate.set(i, normal(rng));
    for (int64_t i = 0; i < t.b.numel(); ++i) t.b.set(i, normal(rng));
    return t;
  }
  template <typename C>
  static Outs make_outs(const C& c, int n) {
    return {HostTensor(c.act_dtype, {n, c.conv_dim()}),
            HostTensor(c.act_dtype, {n, c.num_v_heads, c.head_v_dim})};
  }
  // Every view of a call the config gives (conv_bias only where the config has one); `gate`:
  // the gate input's view and name.
  static std::vector<NamedView> views(bool conv_bias, Weights& w, Inputs& in, TensorView& gate,
                                      const char* gate_name, Outputs& out) {
    std::vector<NamedView> v = {{&w.conv_weight, "weights.conv_weight", false, true},
                                {&w.A_log, "weights.A_log", false, true},
                                {&w.dt_bias, "weights.dt_bias", false, true},
                                {&in.mixed_qkv, "inputs.mixed_qkv", true, false},
                                {&gate, gate_name, true, false},
                                {&in.b, "inputs.b", true, false},
                                {&out.conv_out, "outputs.conv_out", true, false},
                                {&out.core_out, "outputs.core_out", true, false}};
    if (conv_bias) v.push_back({&w.conv_bias, "weights.conv_bias", false, true});
    return v;
  }
  template <typename C>
  static std::vector<OptionalArg> optionals(const C& c, Weights& w, Inputs&, int64_t) {
    return {{&w.conv_bias, "weights.conv_bias", c.conv_bias, {c.conv_dim()}}};
  }
};

// Gated DeltaNet: DeltaKind's draws; dt_bias and the gate input a per value head.
struct GdnKind : DeltaKind<GdnWeights, GdnInputs, GdnOutputs> {
  using Config = GdnConfig;
  static constexpr const char* kName = "gated_delta_net";
  static const Config& of(const ModelConfig& m) { return m.gdn; }

  static ModelConfig draw(Source& src) {
    GdnConfig g;
    draw_dims(src, g);
    return ModelConfig::gated_delta_net(1 + static_cast<int>(src.below(2)), g);
  }
  static Layer random_layer(const Config& g, DType w, std::mt19937_64& rng) {
    return DeltaKind::random_layer(g, w, 1, rng);
  }
  static Tokens random_tokens(const Config& g, int n, std::mt19937_64& rng) {
    return DeltaKind::random_tokens(g, n, {g.num_v_heads}, rng);
  }
  static std::vector<NamedView> views(const Config& g, Weights& w, Inputs& in, Outputs& out) {
    return DeltaKind::views(g.conv_bias, w, in, in.a, "inputs.a", out);
  }
};

// Mamba2: groups G in {1, 2}, nheads = G or 2G, P, N in {2, 4, 8}, W in {2, 3, 4}, conv bias,
// D skip and z gate each or not, a dt clamp (dt_min / dt_max) a quarter of the time, act and
// conv-state dtypes f32 or bf16, SSM state f32.
struct Mamba2Kind {
  using Config = Mamba2Config;
  using Weights = Mamba2Weights;
  using Inputs = Mamba2Inputs;
  using Outputs = Mamba2Outputs;
  static constexpr const char* kName = "mamba2";
  static const Config& of(const ModelConfig& m) { return m.mamba; }

  struct Layer {
    HostTensor conv_weight, conv_bias, A_log, dt_bias, D;
    Weights view() const {
      return {conv_weight.view(), optional_view(conv_bias), A_log.view(), dt_bias.view(),
              optional_view(D)};
    }
    std::vector<HostTensor*> tensors() { return {&conv_weight, &conv_bias, &A_log, &dt_bias, &D}; }
  };
  struct Tokens {
    HostTensor xBC, dt, z;  // z: empty unless the config gates
    Inputs view() const { return {xBC.view(), dt.view(), optional_view(z)}; }
    std::vector<const HostTensor*> tensors() const { return {&xBC, &dt, &z}; }
  };
  struct Outs {
    HostTensor conv_out, y;
    Outputs view() const { return {conv_out.view(), y.view()}; }
    std::vector<std::pair<const char*, const HostTensor*>> compared() const {
      return {{"y", &y}, {"conv_out", &conv_out}};
    }
  };

  static ModelConfig draw(Source& src) {
    Mamba2Config m;
    m.n_groups = 1 + static_cast<int>(src.below(2));
    m.num_heads = m.n_groups * (1 + static_cast<int>(src.below(2)));
    m.head_dim = 2 << src.below(3);
    m.d_state = 2 << src.below(3);
    m.conv_width = 2 + static_cast<int>(src.below(3));
    m.conv_bias = src.coin();
    m.d_skip = src.coin();
    m.gate = src.coin();
    if (src.below(4) == 0) {  // a clamp inside the drawn dt range
      m.dt_min = 2e-3f;
      m.dt_max = 5e-2f;
    }
    m.act_dtype = src.coin() ? DType::kBF16 : DType::kF32;
    m.conv_state_dtype = src.coin() ? DType::kBF16 : DType::kF32;
    m.ssm_state_dtype = DType::kF32;
    return ModelConfig::mamba2(1 + static_cast<int>(src.below(2)), m);
  }
  // As tests/common/mamba2_data.cpp: A = -exp(A_log), exp(A_log) in [1, 16], softplus(dt_bias)
  // in [1e-3, 1e-1], D around 1.
  static Layer random_layer(const Config& m, DType w, std::mt19937_64& rng) {
    const int64_t D = m.conv_dim(), H = m.num_heads;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    Layer L;
    L.conv_weight = HostTensor(w, {D, m.conv_width});
    for (int64_t i = 0; i < L.conv_weight.numel(); ++i) L.conv_weight.set(i, 0.5f * normal(rng));
    if (m.conv_bias) {
      L.conv_bias = HostTensor(w, {D});
      for (int64_t i = 0; i < D; ++i) L.conv_bias.set(i, 0.1f * normal(rng));
    }
    L.A_log = HostTensor(w, {H});
    L.dt_bias = HostTensor(w, {H});
    for (int64_t h = 0; h < H; ++h) {
      L.A_log.set(h, static_cast<float>(std::log(1.0 + 15.0 * uni(rng))));
      const double dt = std::exp(std::log(1e-3) + uni(rng) * (std::log(1e-1) - std::log(1e-3)));
      L.dt_bias.set(h, static_cast<float>(std::log(std::expm1(dt))));
    }
    if (m.d_skip) {
      L.D = HostTensor(w, {H});
      for (int64_t h = 0; h < H; ++h) L.D.set(h, 1.0f + 0.1f * normal(rng));
    }
    return L;
  }
  static Tokens random_tokens(const Config& m, int n, std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Tokens t{HostTensor(m.act_dtype, {n, m.conv_dim()}), HostTensor(m.act_dtype, {n, m.num_heads}),
             HostTensor()};
    if (m.gate) t.z = HostTensor(m.act_dtype, {n, int64_t{m.num_heads} * m.head_dim});
    for (int64_t i = 0; i < t.xBC.numel(); ++i) t.xBC.set(i, normal(rng));
    for (int64_t i = 0; i < t.dt.numel(); ++i) t.dt.set(i, normal(rng));
    if (m.gate) {
      for (int64_t i = 0; i < t.z.numel(); ++i) t.z.set(i, normal(rng));
    }
    return t;
  }
  static Outs make_outs(const Config& m, int n) {
    return {HostTensor(m.act_dtype, {n, m.conv_dim()}),
            HostTensor(m.act_dtype, {n, m.num_heads, m.head_dim})};
  }
  static std::vector<NamedView> views(const Config& m, Weights& w, Inputs& in, Outputs& out) {
    std::vector<NamedView> v = {{&w.conv_weight, "weights.conv_weight", false, true},
                                {&w.A_log, "weights.A_log", false, true},
                                {&w.dt_bias, "weights.dt_bias", false, true},
                                {&in.xBC, "inputs.xBC", true, false},
                                {&in.dt, "inputs.dt", true, false},
                                {&out.conv_out, "outputs.conv_out", true, false},
                                {&out.y, "outputs.y", true, false}};
    if (m.conv_bias) v.push_back({&w.conv_bias, "weights.conv_bias", false, true});
    if (m.d_skip) v.push_back({&w.D, "weights.D", false, true});
    if (m.gate) v.push_back({&in.z, "inputs.z", true, false});
    return v;
  }
  static std::vector<OptionalArg> optionals(const Config& m, Weights& w, Inputs& in,
                                            int64_t tokens) {
    return {{&w.conv_bias, "weights.conv_bias", m.conv_bias, {m.conv_dim()}},
            {&w.D, "weights.D", m.d_skip, {m.num_heads}},
            {&in.z, "inputs.z", m.gate, {tokens, int64_t{m.num_heads} * m.head_dim}}};
  }
};

// KDA (Kimi Delta Attention): DeltaKind's draws, then fla's lower-bound gate (bound -5) a quarter
// of the time; dt_bias and the gate input g per value head and key channel.
struct KdaKind : DeltaKind<KdaWeights, KdaInputs, KdaOutputs> {
  using Config = KdaConfig;
  static constexpr const char* kName = "kda";
  static const Config& of(const ModelConfig& m) { return m.kda_layer; }

  static ModelConfig draw(Source& src) {
    KdaConfig c;
    draw_dims(src, c);
    if (src.below(4) == 0) c.lower_bound = -5.0f;
    return ModelConfig::kda(1 + static_cast<int>(src.below(2)), c);
  }
  static Layer random_layer(const Config& c, DType w, std::mt19937_64& rng) {
    return DeltaKind::random_layer(c, w, c.head_k_dim, rng);
  }
  static Tokens random_tokens(const Config& c, int n, std::mt19937_64& rng) {
    return DeltaKind::random_tokens(c, n, {c.num_v_heads, c.head_k_dim}, rng);
  }
  static std::vector<NamedView> views(const Config& c, Weights& w, Inputs& in, Outputs& out) {
    return DeltaKind::views(c.conv_bias, w, in, in.g, "inputs.g", out);
  }
};

struct DriverStats {
  int64_t ops = 0, rounds = 0, commits = 0, rejected = 0, tree_rounds = 0, padded_rows = 0;
  int64_t acquired = 0, released = 0, compared_slots = 0;
  // Of the compared slot-layers, those whose SSM state has a nonzero byte; of the compared verify
  // output rows, those with a nonzero byte (all-zero states and outputs compare equal whatever the
  // pools did).
  int64_t nonzero_slots = 0, compared_rows = 0, nonzero_rows = 0;
  int64_t aborted = 0, released_mid_round = 0;  // rounds dropped by abort_round, rows released
  int64_t varlen_rounds = 0;                    // rounds with per-row window lengths
  // Drivers (runs) of each kind: caller-owned pools (of them vLLM-paged), lazy replay pools.
  int64_t caller_runs = 0, paged_runs = 0, lazy_runs = 0;
  int64_t mamba2_runs = 0;      // runs of Mamba2 pools
  int64_t kda_runs = 0;         // runs of KDA pools (the others Gated DeltaNet)
  int64_t vllm_order_runs = 0;  // runs in vLLM's element order (conv_layout / ssm_layout)
  int64_t ring_2t_runs = 0, long_ring_runs = 0;  // replay runs with R = 2T, with R = 3T+1 or 40
  int64_t bad_argument_rejected = 0;  // layer calls with a wrong shape / dtype / ndim / device /
                                      // optional argument of the kind (misaligned: below)
  int64_t adopted = 0;                // adopt() of a slot just released (mid-round included)
  int64_t adopted_mid_round = 0;      // of them, a row of the open round
  int64_t adopted_written = 0;        // adopt() of a free slot the caller wrote
  int64_t released_pending = 0;       // caller-owned releases with accepted steps not yet run
  int64_t materialized = 0;           // materialize() calls
  int64_t materialized_pending = 0;   // slots materialized with accepted steps not yet run
  int64_t poisoned_calls = 0;         // prefill / decode calls with weights poisoned after the call
  int64_t misaligned_rejected = 0, duplicate_materialize_rejected = 0, adopt_rejected = 0;

  void add(const DriverStats& s) {
    ops += s.ops, rounds += s.rounds, commits += s.commits, rejected += s.rejected;
    tree_rounds += s.tree_rounds, padded_rows += s.padded_rows, acquired += s.acquired;
    released += s.released, compared_slots += s.compared_slots, aborted += s.aborted;
    nonzero_slots += s.nonzero_slots, compared_rows += s.compared_rows;
    nonzero_rows += s.nonzero_rows;
    released_mid_round += s.released_mid_round, varlen_rounds += s.varlen_rounds;
    caller_runs += s.caller_runs, paged_runs += s.paged_runs, lazy_runs += s.lazy_runs;
    mamba2_runs += s.mamba2_runs, bad_argument_rejected += s.bad_argument_rejected;
    kda_runs += s.kda_runs;
    vllm_order_runs += s.vllm_order_runs;
    ring_2t_runs += s.ring_2t_runs, long_ring_runs += s.long_ring_runs;
    adopted += s.adopted, adopted_mid_round += s.adopted_mid_round;
    adopted_written += s.adopted_written, released_pending += s.released_pending;
    materialized += s.materialized, materialized_pending += s.materialized_pending;
    poisoned_calls += s.poisoned_calls, misaligned_rejected += s.misaligned_rejected;
    duplicate_materialize_rejected += s.duplicate_materialize_rejected;
    adopt_rejected += s.adopt_rejected;
  }
};

// Where the committed state of the pool under test lives.
enum class MemoryMode { kOwned, kCallerSlots, kCallerPaged };

// The caller's memory of a caller-owned pool: buffers filled with a sentinel, the views handed to
// the pool, where each (layer, slot) state lies, and which bytes are state (the rest is padding
// the pool must never write).
struct CallerMemory {
  std::vector<std::vector<uint64_t>> buffers;   // 8-byte aligned
  std::vector<std::vector<uint64_t>> sentinel;  // the buffers as filled
  std::vector<std::vector<uint8_t>> is_state;   // per byte of each buffer
  CommittedStateViews views;
  std::vector<uint8_t*> conv, ssm;  // [layer * slots + slot]
  int64_t conv_bytes = 0, ssm_bytes = 0;
  int slots = 0;

  uint8_t* conv_at(int layer, int slot) const { return conv[layer * slots + slot]; }
  uint8_t* ssm_at(int layer, int slot) const { return ssm[layer * slots + slot]; }
  // One slot's bytes of every layer in export_slot's layout (conv window, then SSM state).
  std::vector<uint8_t> slot(int s, int layers) const {
    std::vector<uint8_t> out;
    for (int l = 0; l < layers; ++l) {
      out.insert(out.end(), conv_at(l, s), conv_at(l, s) + conv_bytes);
      out.insert(out.end(), ssm_at(l, s), ssm_at(l, s) + ssm_bytes);
    }
    return out;
  }
  std::vector<uint8_t> raw() const {
    std::vector<uint8_t> out;
    for (const auto& b : buffers) {
      const auto* p = reinterpret_cast<const uint8_t*>(b.data());
      out.insert(out.end(), p, p + b.size() * 8);
    }
    return out;
  }
  // Whether every byte outside a slot's state still holds the sentinel.
  bool padding_intact() const {
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const auto* now = reinterpret_cast<const uint8_t*>(buffers[i].data());
      const auto* was = reinterpret_cast<const uint8_t*>(sentinel[i].data());
      for (std::size_t j = 0; j < is_state[i].size(); ++j) {
        if (!is_state[i][j] && now[j] != was[j]) return false;
      }
    }
    return true;
  }
};

// The kind-agnostic face of a driver (PoolDriver below picks the kind).
class DriverBase {
 public:
  virtual ~DriverBase() = default;
  virtual bool step() = 0;
  virtual void round() = 0;
  virtual void finish() = 0;
  virtual const DriverStats& stats() const = 0;
  virtual MemoryMode memory() const = 0;
};

// The driver of one layer kind K (GdnKind, Mamba2Kind, KdaKind): everything but K's tensors is
// shared.
template <typename K>
class KindDriver final : public DriverBase {
 public:
  using Config = typename K::Config;
  using Weights = typename K::Weights;
  using Inputs = typename K::Inputs;
  using Outputs = typename K::Outputs;
  using Layer = typename K::Layer;
  using Tokens = typename K::Tokens;
  using Outs = typename K::Outs;

  // A small random config of kind K and pool shape drawn from `src`; weights and inputs from a
  // seeded generator (shaped like real ones, see K).
  explicit KindDriver(Source& src) : src_(src) {
    config_ = K::draw(src);
    options_.num_slots = 1 + static_cast<int>(src.below(4));
    options_.max_rows = 1 + static_cast<int>(src.below(4));
    options_.max_window = 1 + static_cast<int>(src.below(5));
    const uint32_t seed = src.below(1u << 16);
    rng_.seed(seed);
    // One pool in five keeps vLLM's element order (PoolOptions::conv_layout, and for GDN half of
    // the time ssm_layout = kKV), the shadow the same order, so that every comparison below is
    // byte for byte in it (StateLayout* and the vllm_* equivalence cases compare the orders with
    // each other). Taken from the seed, so the source's bytes keep their meaning.
    if (seed % 5 == 1) {
      options_.conv_layout = ConvLayout::kChannelsLast;
      if (config_.kind != LayerKind::kMamba2 && seed % 2 == 1) options_.ssm_layout = SsmLayout::kKV;
    }
    // The pool under test runs either strategy; the shadow only decodes (the strategy does not
    // matter there). Under replay every comparison goes through views, which materialize.
    PoolOptions tested = options_;
    replay_ = src.coin();
    tested.strategy = replay_ ? Strategy::kReplay : Strategy::kSnapshot;
    // The replay fold limit's row threshold (PoolOptions::replay_fold_rows: 0, the kind's default,
    // 8 for GDN and KDA (never reached by these batches) and 1 for Mamba2 (the whole ring
    // always); 1-3: whole-ring rounds beside small-limit ones), from the seed so that the
    // source's bytes keep their meaning.
    tested.replay_fold_rows = static_cast<int>((seed / 5) % 4);
    // The replay ring (PoolOptions::replay_ring): the default, 2T (a fold at every verify with
    // history), 3T + 1 or 40 records (long histories, wrap-around), also from the seed.
    const int rings[] = {0, 2 * options_.max_window, 3 * options_.max_window + 1, 40};
    tested.replay_ring = rings[(seed / 20) % 4];
    ring_draw_ = static_cast<int>((seed / 20) % 4);
    // Half of the pools under test own their memory; the others adopt the caller's, in either
    // layout. Half of the replay pools compare lazily (pending steps survive).
    const uint32_t memory = src.below(4);
    memory_ = memory < 2 ? MemoryMode::kOwned
                         : (memory == 2 ? MemoryMode::kCallerSlots : MemoryMode::kCallerPaged);
    lazy_ = replay_ && src.coin();
    shadow_ = std::make_unique<StatePool>(config_, options_);
    if (memory_ == MemoryMode::kOwned) {
      pool_ = std::make_unique<StatePool>(config_, tested);
    } else {
      make_caller_memory();
      pool_ = std::make_unique<StatePool>(config_, tested, caller_.views);
      for (int l = 0; l < config_.num_layers; ++l) {
        const TensorView c = pool_->conv_state(l), s = pool_->ssm_state(l);
        // (With one slot the slot stride is immaterial: the pool reports one state's.)
        const bool one = options_.num_slots == 1;
        if (c.data != caller_.views.conv[l].data || s.data != caller_.views.ssm[l].data ||
            (!one && (c.stride[0] != caller_.views.conv[l].stride[0] ||
                      s.stride[0] != caller_.views.ssm[l].stride[0]))) {
          violation("a caller-owned pool's views are not the caller's tensors (layer " +
                    std::to_string(l) + ")");
        }
      }
      for (int s = 0; s < options_.num_slots; ++s) {
        free_raw_.push_back(caller_.slot(s, config_.num_layers));
      }
      ++stats_.caller_runs;
      stats_.paged_runs += memory_ == MemoryMode::kCallerPaged;
    }
    stats_.lazy_runs += lazy_;
    stats_.ring_2t_runs += replay_ && ring_draw_ == 1;
    stats_.long_ring_runs += replay_ && ring_draw_ >= 2;
    stats_.mamba2_runs += config_.kind == LayerKind::kMamba2;
    stats_.kda_runs += config_.kind == LayerKind::kKda;
    stats_.vllm_order_runs += options_.conv_layout == ConvLayout::kChannelsLast;
    for (int l = 0; l < config_.num_layers; ++l) {
      const DType w = src.coin() ? DType::kBF16 : DType::kF32;  // weights: any float dtype
      layers_.push_back(K::random_layer(cfg(), w, rng_));
    }
  }

  const DriverStats& stats() const override { return stats_; }
  MemoryMode memory() const override { return memory_; }

  // The final comparison of a run (a lazy pool may not have compared its last commits).
  void finish() override { compare_all("at the end of the run"); }

  // One random operation. Returns false when the source is exhausted.
  bool step() override {
    if (src_.exhausted()) return false;
    ++stats_.ops;
    switch (src_.below(12)) {
      case 0:
      case 1:
        acquire();
        break;
      case 2:
        release();
        break;
      case 3:
        prefill();
        break;
      case 4:
        decode();
        break;
      case 5:
        invalid_outside_round();
        break;
      case 6:
        materialize("materialize");
        break;
      case 7:
        adopt();
        break;
      default:
        round();
        break;
    }
    return true;
  }

  // One speculative round over random live requests, padding included (the soak test's unit).
  void round() override {
    if (live_.empty()) {
      acquire();
      if (live_.empty()) return;
    }
    const int T = 1 + static_cast<int>(src_.below(static_cast<uint32_t>(options_.max_window)));
    const int B = 1 + static_cast<int>(src_.below(static_cast<uint32_t>(options_.max_rows)));
    // Rows: distinct live requests, some padding.
    std::vector<int> order(live_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    for (std::size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[src_.below(static_cast<uint32_t>(i))]);
    }
    std::vector<int> row_req(B, -1);
    std::size_t next = 0;
    for (int r = 0; r < B; ++r) {
      if (next < order.size() && src_.below(4) != 0) row_req[r] = order[next++];
    }
    VerifyBatch batch;
    batch.window = T;
    for (int r = 0; r < B; ++r) {
      batch.rows.push_back(row_req[r] < 0 ? SlotHandle::padding() : live_[row_req[r]].pool);
      stats_.padded_rows += row_req[r] < 0;
    }
    const bool tree = T > 1 && src_.coin();
    std::vector<int32_t> parents(T);
    for (int t = 0; t < T; ++t) {
      parents[t] = t == 0 ? -1 : (tree ? static_cast<int32_t>(src_.below(t)) : t - 1);
    }
    if (tree) batch.parents = parents;
    stats_.tree_rounds += tree;
    // Variable windows (DESIGN.md section 2): each row its own length 0..T, packed with no filler
    // (a tree then given per row at r * T, the shared tree's prefix used).
    const bool varlen = src_.coin();
    std::vector<int> len(B, T), tok0(B);
    if (varlen) {
      for (int r = 0; r < B; ++r) {
        len[r] = row_req[r] < 0 ? 0 : static_cast<int>(src_.below(static_cast<uint32_t>(T + 1)));
        batch.lengths.push_back(len[r]);
      }
      if (tree) {
        batch.parents.clear();
        for (int r = 0; r < B; ++r)
          batch.parents.insert(batch.parents.end(), parents.begin(), parents.end());
      }
      ++stats_.varlen_rounds;
    }
    int n = 0;
    for (int r = 0; r < B; ++r) {
      tok0[r] = varlen ? n : r * T;
      n = varlen ? n + len[r] : (r + 1) * T;
    }

    // (Reading the committed state materializes every slot: a lazy pool mostly skips it.)
    const bool check_verify = check_now();
    const auto before = check_verify ? committed(*pool_) : std::vector<uint8_t>();
    pool_->begin_verify(batch);
    std::vector<Tokens> inputs;
    std::vector<Outs> outs;
    for (int l = 0; l < config_.num_layers; ++l) {
      inputs.push_back(random_tokens(n));
      outs.push_back(make_outs(n));
      if (src_.below(16) == 0) {
        // One view a byte off its alignment: rejected, the layer still to verify.
        Misaligned bad(layers_[l].view(), inputs[l].view(), outs[l].view());
        const char* name = bad.shift(src_, cfg());
        expect_rejected("verify with a misaligned view",
                        [&] { pool_->verify(l, bad.weights, bad.inputs, bad.outputs); },
                        Status::kInvalidArgument, {name, "aligned"});
        ++stats_.misaligned_rejected;
      }
      pool_->verify(l, layers_[l].view(), inputs[l].view(), outs[l].view());
    }
    for (int r = 0; r < B; ++r) {
      // Verify re-ran the row's pending steps.
      if (row_req[r] >= 0 && len[r] > 0) live_[row_req[r]].pending = false;
    }
    if (check_verify && committed(*pool_) != before) {
      violation("verify changed the committed state");
    }
    // Inside the open round: a materialize of some slots (rows or not), or one with a handle
    // twice (rejected before any work).
    if (src_.below(8) == 0) materialize("materialize inside a round");
    if (src_.below(16) == 0) duplicate_materialize();

    // DESIGN.md section 5.6: a verified round is committed or aborted, never replaced.
    if (src_.below(8) == 0) {
      expect_rejected("begin_verify over a verified round", [&] { pool_->begin_verify(batch); });
    }
    if (src_.below(16) == 0) {
      pool_->abort_round();
      ++stats_.rounds;
      ++stats_.aborted;
      if (check_now()) compare_all("after abort_round");
      return;
    }
    // A request that leaves mid-round: its row becomes padding, the others still commit.
    // On a caller-owned pool its slot may be adopted again at once, as a new request outside
    // the round: the commit must leave it alone.
    int released_req = -1;
    bool readopted = false;
    SlotHandle released_handle;
    if (src_.below(8) == 0) {
      const int r = static_cast<int>(src_.below(static_cast<uint32_t>(B)));
      if (row_req[r] >= 0) {
        released_req = row_req[r];
        row_req[r] = -1;
        released_handle = live_[released_req].pool;
        readopted = release_request(static_cast<std::size_t>(released_req), "a release mid-round");
        if (readopted) ++stats_.adopted_mid_round;
        std::vector<int32_t> bad(B, tree ? -1 : 0);
        bad[r] = tree ? 0 : 1;
        expect_rejected("commit advancing a released row", [&] { pool_->commit(bad); });
        ++stats_.released_mid_round;
      }
    }

    // Invalid commits first: each rejected, nothing changed, the round still open.
    if (src_.coin()) {
      std::vector<int32_t> bad(B, tree ? -1 : 0);
      const int r = static_cast<int>(src_.below(static_cast<uint32_t>(B)));
      switch (src_.below(5)) {
        case 0:
          bad[r] = tree ? T : T + 1;
          break;
        case 4:
          // Past the row's own window (variable windows), within the round's: a > T_row.
          if (len[r] < T) {
            bad[r] = tree ? len[r] : len[r] + 1;
          } else {
            bad.pop_back();
          }
          break;
        case 1:
          bad[r] = tree ? -2 : -1;
          break;
        case 2:
          bad.push_back(0);
          break;
        default:
          bad[r] = src_.coin() ? std::numeric_limits<int32_t>::min()
                               : std::numeric_limits<int32_t>::max();
          break;
      }
      expect_rejected("commit with an invalid accepted vector", [&] { pool_->commit(bad); });
      // A padding row that claims to advance.
      for (int p = 0; p < B; ++p) {
        if (row_req[p] >= 0) continue;
        std::vector<int32_t> pad(B, tree ? -1 : 0);
        pad[p] = tree ? 0 : 1;
        expect_rejected("commit advancing a padding row", [&] { pool_->commit(pad); });
        break;
      }
    }

    // The accepted node of every row (tree: any node; chain: a length in [0, T]).
    std::vector<int32_t> accepted(B), last(B, -1);
    for (int r = 0; r < B; ++r) {
      if (row_req[r] < 0 || len[r] == 0 || src_.below(5) == 0) {
        accepted[r] = tree ? -1 : 0;
        continue;
      }
      last[r] = static_cast<int32_t>(src_.below(static_cast<uint32_t>(len[r])));
      accepted[r] = tree ? last[r] : last[r] + 1;
    }
    for (int r = 0; r < B; ++r) {
      if (last[r] >= 0 && replay_) live_[row_req[r]].pending = true;  // deferred to the next use
    }
    if (src_.coin()) {
      pool_->commit(accepted);
    } else {
      // Through a strided host view (stride 3): a commit that ignored the stride would read
      // the filler values, which are all out of range.
      std::vector<int32_t> spaced(static_cast<std::size_t>(3 * B), 1 << 20);
      for (int r = 0; r < B; ++r) spaced[3 * r] = accepted[r];
      pool_->commit(TensorView::strided(spaced.data(), DType::kI32, {B}, {3}));
    }
    ++stats_.rounds;
    ++stats_.commits;

    // The shadow decodes the accepted path of every row; verify's outputs of those tokens must
    // equal the shadow's.
    for (int r = 0; r < B; ++r) {
      if (last[r] < 0) continue;
      std::vector<int> path;
      for (int t = last[r]; t >= 0; t = parents[t]) path.insert(path.begin(), t);
      const SlotHandle s = live_[row_req[r]].shadow;
      for (int l = 0; l < config_.num_layers; ++l) {
        Tokens gathered = gather(inputs[l], tok0[r], path);
        Outs o = make_outs(static_cast<int>(path.size()));
        shadow_->prefill(l, s, layers_[l].view(), gathered.view(), o.view());
        const auto mine = outs[l].compared(), theirs = o.compared();
        for (std::size_t i = 0; i < path.size(); ++i) {
          const std::size_t tok = static_cast<std::size_t>(tok0[r] + path[i]);
          bool nonzero = false;
          for (std::size_t k = 0; k < mine.size(); ++k) {
            same_row(*mine[k].second, tok, *theirs[k].second, i, mine[k].first, l, r, path[i]);
            nonzero = nonzero || row_nonzero(*mine[k].second, tok);
          }
          ++stats_.compared_rows;
          stats_.nonzero_rows += nonzero;
        }
      }
    }
    if (released_req >= 0) {
      stale_.push_back(released_handle);
      if (!readopted) live_.erase(live_.begin() + released_req);
      ++stats_.released;
    }
    if (check_now()) compare_all("after commit");
  }

  // Every live slot of the pool equals the shadow's (bit for bit). Caller-owned: so does the
  // caller's memory of it, every free slot holds what it held when it was released (or the
  // sentinel), and no padding byte changed.
  void compare_all(const char* when) {
    for (Request& q : live_) {
      for (int l = 0; l < config_.num_layers; ++l) {
        const auto ssm = slot_bytes(pool_->ssm_state(l), pool_->slot_index(q.pool));
        if (slot_bytes(pool_->conv_state(l), pool_->slot_index(q.pool)) !=
                slot_bytes(shadow_->conv_state(l), shadow_->slot_index(q.shadow)) ||
            ssm != slot_bytes(shadow_->ssm_state(l), shadow_->slot_index(q.shadow))) {
          violation(std::string(when) + ": layer " + std::to_string(l) + " slot " +
                    std::to_string(pool_->slot_index(q.pool)) +
                    " differs from sequential decode of the accepted tokens");
        }
        ++stats_.compared_slots;
        stats_.nonzero_slots += std::any_of(ssm.begin(), ssm.end(), [](auto b) { return b != 0; });
      }
      q.pending = false;
    }
    if (memory_ == MemoryMode::kOwned) return;
    for (const Request& q : live_) expect_caller_slot(q, when);
    check_caller_rest(when);
  }

 private:
  struct Request {
    SlotHandle pool, shadow;
    bool pending = false;  // replay: accepted steps committed since the slot was last materialized
  };

  // Lazy pools skip three comparisons in four (each reads every slot, which materializes it).
  bool check_now() { return !lazy_ || src_.below(4) == 0; }

  void acquire() {
    if (pool_->free_slots() == 0) {
      expect_rejected("acquire on a full pool", [&] { pool_->acquire(); });
      return;
    }
    Request q{pool_->acquire(), shadow_->acquire()};
    live_.push_back(q);
    ++stats_.acquired;
  }

  void release() {
    if (live_.empty()) return;
    const std::size_t i = src_.below(static_cast<uint32_t>(live_.size()));
    stale_.push_back(live_[i].pool);
    if (!release_request(i, "release")) live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
    ++stats_.released;
  }

  // Releases live_[i] from the pool. Caller-owned: the caller's memory of the slot must then hold
  // its committed state (the shadow's), and the slot may be adopted again at once, which keeps
  // the request (true; the shadow's slot stays) with the new handle. Otherwise (false) the
  // shadow's slot is released too and the caller erases the request.
  bool release_request(std::size_t i, const char* what) {
    Request& q = live_[i];
    const int slot = q.pool.slot;
    pool_->release(q.pool);
    if (memory_ != MemoryMode::kOwned) {
      stats_.released_pending += q.pending;
      expect_caller_slot(q, what);
      free_raw_[static_cast<std::size_t>(slot)] = caller_.slot(slot, config_.num_layers);
      if (src_.coin()) {
        const SlotHandle again = pool_->adopt(slot);
        if (again.slot != slot || !pool_->is_live(again) || pool_->is_live(q.pool)) {
          violation(std::string(what) + ": adopt(" + std::to_string(slot) +
                    ") of the released slot gave slot " + std::to_string(again.slot));
        }
        q.pool = again;
        q.pending = false;
        ++stats_.adopted;
        return true;
      }
    }
    shadow_->release(q.shadow);
    return false;
  }

  // Caller-owned: a free slot the engine wrote (a state it restored) is adopted as it is; the
  // shadow imports the same bytes. Otherwise, or with no free slot: adopt's rejections.
  void adopt() {
    std::vector<int> free;
    for (int s = 0; s < options_.num_slots; ++s) {
      if (!holds_slot(s)) free.push_back(s);
    }
    if (memory_ == MemoryMode::kOwned || free.empty() || src_.below(4) == 0) {
      if (!live_.empty() && src_.coin()) {
        const int s = live_[src_.below(static_cast<uint32_t>(live_.size()))].pool.slot;
        expect_rejected("adopt of a live slot", [&] { pool_->adopt(s); },
                        Status::kFailedPrecondition, {"StatePool::adopt", "is live"});
      } else {
        static const int kOut[] = {-1, std::numeric_limits<int>::min(),
                                   std::numeric_limits<int>::max()};
        const uint32_t k = src_.below(4);
        const int s = k == 3 ? options_.num_slots : kOut[k];
        expect_rejected("adopt of a slot out of range", [&] { pool_->adopt(s); },
                        Status::kOutOfRange, {"StatePool::adopt", "outside [0, "});
      }
      ++stats_.adopt_rejected;
      return;
    }
    const int s = free[src_.below(static_cast<uint32_t>(free.size()))];
    const DType conv_dtype = config_.conv_state_dtype(), ssm_dtype = config_.ssm_state_dtype();
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int l = 0; l < config_.num_layers; ++l) {
      HostTensor conv(conv_dtype,
                      {caller_.conv_bytes / static_cast<int64_t>(dtype_size(conv_dtype))});
      HostTensor ssm(ssm_dtype, {caller_.ssm_bytes / static_cast<int64_t>(dtype_size(ssm_dtype))});
      for (int64_t e = 0; e < conv.numel(); ++e) conv.set(e, normal(rng_));
      for (int64_t e = 0; e < ssm.numel(); ++e) ssm.set(e, 0.25f * normal(rng_));
      std::memcpy(caller_.conv_at(l, s), conv.bytes.data(), conv.bytes.size());
      std::memcpy(caller_.ssm_at(l, s), ssm.bytes.data(), ssm.bytes.size());
    }
    const std::vector<uint8_t> written = caller_.slot(s, config_.num_layers);
    const SlotHandle h = pool_->adopt(s);
    if (h.slot != s) violation("adopt(" + std::to_string(s) + ") gave another slot");
    if (caller_.slot(s, config_.num_layers) != written) {
      violation("adopt(" + std::to_string(s) + ") changed the caller's state of the slot");
    }
    // The shadow gets the same state through export / import: a fresh slot's export, its state
    // bytes (the layers', after whatever header the format has) replaced by the written ones.
    const int64_t total = shadow_->slot_state_bytes();
    const auto state = static_cast<int64_t>(written.size());
    if (total < state) violation("slot_state_bytes() is below the layers' state bytes");
    std::vector<uint32_t> words(static_cast<std::size_t>((total + 3) / 4), 0);
    const TensorView buffer =
        TensorView::contiguous(words.data(), DType::kI32, {static_cast<int64_t>(words.size())});
    const SlotHandle sh = shadow_->acquire();
    shadow_->export_slot(sh, buffer);
    std::memcpy(reinterpret_cast<uint8_t*>(words.data()) + (total - state), written.data(),
                written.size());
    shadow_->import_slot(sh, buffer);
    live_.push_back({h, sh, false});
    ++stats_.adopted_written;
    if (check_now()) compare_all("after adopt of a slot the caller wrote");
  }

  bool holds_slot(int s) const {
    for (const Request& q : live_) {
      if (q.pool.slot == s) return true;
    }
    return false;
  }

  // A random subset of the live requests (all of them: the empty list, or every handle) in a
  // random order, materialized; then each equals the shadow: in the caller's memory (read
  // directly, no view) for a caller-owned pool, through its per-slot views otherwise.
  void materialize(const char* what) {
    std::vector<std::size_t> chosen;
    const bool all = src_.below(4) == 0;
    for (std::size_t i = 0; i < live_.size(); ++i) {
      if (all || src_.coin()) chosen.push_back(i);
    }
    for (std::size_t i = chosen.size(); i > 1; --i) {
      std::swap(chosen[i - 1], chosen[src_.below(static_cast<uint32_t>(i))]);
    }
    std::vector<SlotHandle> handles;
    if (!all || src_.coin()) {
      for (std::size_t i : chosen) handles.push_back(live_[i].pool);
    }
    pool_->materialize(handles);
    ++stats_.materialized;
    for (std::size_t i : chosen) {
      Request& q = live_[i];
      stats_.materialized_pending += q.pending;
      q.pending = false;
      if (memory_ != MemoryMode::kOwned) {
        expect_caller_slot(q, what);
        continue;
      }
      for (int l = 0; l < config_.num_layers; ++l) {
        if (view_bytes(pool_->conv_state(l, q.pool)) !=
                view_bytes(shadow_->conv_state(l, q.shadow)) ||
            view_bytes(pool_->ssm_state(l, q.pool)) !=
                view_bytes(shadow_->ssm_state(l, q.shadow))) {
          violation(std::string(what) + ": layer " + std::to_string(l) + " slot " +
                    std::to_string(q.pool.slot) + " differs from sequential decode");
        }
      }
    }
    if (memory_ != MemoryMode::kOwned) check_caller_rest(what);
  }

  // materialize({h, h}) or ({h, x, h}): rejected naming both places, before any work.
  void duplicate_materialize() {
    if (live_.empty()) return;
    const std::size_t i = src_.below(static_cast<uint32_t>(live_.size()));
    std::vector<SlotHandle> handles = {live_[i].pool};
    if (live_.size() >= 2 && src_.coin()) {
      const std::size_t j =
          (i + 1 + src_.below(static_cast<uint32_t>(live_.size() - 1))) % live_.size();
      handles.push_back(live_[j].pool);
    }
    handles.push_back(live_[i].pool);
    const std::string repeat = "handles[" + std::to_string(handles.size() - 1) + "]";
    expect_rejected("materialize with a handle twice", [&] { pool_->materialize(handles); },
                    Status::kInvalidArgument, {repeat.c_str(), "repeats handles[0]"});
    ++stats_.duplicate_materialize_rejected;
  }

  // Whether this call gives the pool under test temporary weights (a third of the calls): per
  // layer a copy of `layers_[l]`, poisoned (every byte 0xFF: NaN in both float dtypes) right
  // after the call and kept, so a later read of it shows in the state.
  bool temporary_weights() {
    if (src_.below(3) != 0) return false;
    ++stats_.poisoned_calls;
    return true;
  }
  template <typename Fn>
  void with_weights(bool temporary, int l, Fn&& call) {
    if (!temporary) {
      call(layers_[l].view());
      return;
    }
    poisoned_.push_back(std::make_unique<Layer>(layers_[l]));
    Layer& w = *poisoned_.back();
    call(w.view());
    for (HostTensor* t : w.tensors()) {
      if (!t->bytes.empty()) std::memset(t->bytes.data(), 0xFF, t->bytes.size());
    }
  }

  void prefill() {
    if (live_.empty()) return;
    Request& q = live_[src_.below(static_cast<uint32_t>(live_.size()))];
    const int n = 1 + static_cast<int>(src_.below(3));
    const bool temp = temporary_weights();
    for (int l = 0; l < config_.num_layers; ++l) {
      const Tokens in = random_tokens(n);
      Outs a = make_outs(n), b = make_outs(n);
      with_weights(temp, l,
                   [&](const Weights& w) { pool_->prefill(l, q.pool, w, in.view(), a.view()); });
      shadow_->prefill(l, q.shadow, layers_[l].view(), in.view(), b.view());
      if (!same_outs(a, b)) violation("prefill outputs differ between pools");
    }
    q.pending = false;
    if (check_now()) compare_all("after prefill");
  }

  void decode() {
    if (live_.empty()) return;
    std::vector<SlotHandle> rows, shadow_rows;
    for (Request& q : live_) {
      if (src_.coin()) {
        rows.push_back(q.pool);
        shadow_rows.push_back(q.shadow);
        q.pending = false;
      } else if (src_.below(4) == 0) {
        rows.push_back(SlotHandle::padding());
        shadow_rows.push_back(SlotHandle::padding());
      }
    }
    if (rows.empty()) return;
    const int n = static_cast<int>(rows.size());
    const bool temp = temporary_weights();
    for (int l = 0; l < config_.num_layers; ++l) {
      const Tokens in = random_tokens(n);
      Outs a = make_outs(n), b = make_outs(n);
      with_weights(temp, l,
                   [&](const Weights& w) { pool_->decode(l, rows, w, in.view(), a.view()); });
      shadow_->decode(l, shadow_rows, layers_[l].view(), in.view(), b.view());
      if (!same_outs(a, b)) violation("decode outputs differ between pools");
    }
    if (check_now()) compare_all("after decode");
  }

  // A layer call's views with one of them (weights, inputs or outputs) moved a byte off its
  // dtype's alignment (its values copied along, so only the address is wrong).
  struct Misaligned {
    Weights weights;
    Inputs inputs;
    Outputs outputs;
    std::vector<uint64_t> buffer;

    Misaligned(const Weights& w, const Inputs& in, const Outputs& out)
        : weights(w), inputs(in), outputs(out) {}
    // Shifts one view drawn from `src` (of those the config gives); returns its name as the
    // library spells it.
    const char* shift(Source& src, const Config& c) {
      const std::vector<NamedView> views = K::views(c, weights, inputs, outputs);
      const NamedView& pick = views[src.below(static_cast<uint32_t>(views.size()))];
      TensorView& v = *pick.view;
      const std::size_t bytes = static_cast<std::size_t>(v.numel()) * dtype_size(v.dtype);
      buffer.assign(bytes / 8 + 2, 0);
      uint8_t* p = reinterpret_cast<uint8_t*>(buffer.data()) + 1;
      if (bytes > 0) std::memcpy(p, v.data, bytes);  // (a round of 0 tokens has none)
      v.data = p;
      return pick.name;
    }
  };

  // One of the kind's arguments made wrong (all the others as the config wants): a wrong extent
  // (a dim past the tokens), a wrong dtype (weights: not a float; the rest: the other float), an
  // optional argument given where the config has none or missing where it wants one, ndim > 6,
  // or CUDA memory given to a CPU pool. Rejected with kInvalidArgument naming the view.
  // (One-token inputs and outputs.)
  void bad_argument(uint32_t how, int layer, SlotHandle h, const Inputs& in0, const Outputs& out0) {
    Weights w = layers_[static_cast<std::size_t>(layer)].view();
    Inputs in = in0;
    Outputs out = out0;
    const std::vector<NamedView> views = K::views(cfg(), w, in, out);
    const NamedView& v = views[src_.below(static_cast<uint32_t>(views.size()))];
    HostTensor given;  // an optional argument the config does not want
    const char* name = v.name;
    const char* what = "";
    switch (how) {
      case 0: {
        const int first = v.per_token ? 1 : 0;
        const int d =
            first + static_cast<int>(src_.below(static_cast<uint32_t>(v.view->ndim - first)));
        v.view->shape[d] += 1;
        what = "prefill with a wrong extent";
        break;
      }
      case 1:
        v.view->dtype =
            v.any_float ? DType::kI32 : (v.view->dtype == DType::kF32 ? DType::kBF16 : DType::kF32);
        what = "prefill with a wrong dtype";
        break;
      case 2: {
        const std::vector<OptionalArg> opts = K::optionals(cfg(), w, in, 1);
        const OptionalArg& o = opts[src_.below(static_cast<uint32_t>(opts.size()))];
        if (o.wanted) {
          *o.view = TensorView{};  // missing where the config wants one
        } else {
          given = HostTensor(config_.act_dtype(), o.shape);  // given where the config has none
          *o.view = given.view();
        }
        name = o.name;
        what = "prefill with an optional argument that does not match the config";
        break;
      }
      case 3:
        v.view->ndim = 7 + static_cast<int>(src_.below(1000));
        what = "prefill with ndim > 6";
        break;
      default:
        v.view->device = Device::kCuda;
        what = "prefill with a view on another device";
        break;
    }
    expect_rejected(what, [&] { pool_->prefill(layer, h, w, in, out); }, Status::kInvalidArgument,
                    {name});
    ++stats_.bad_argument_rejected;
  }
  // Calls every one of which must be rejected and change nothing.
  void invalid_outside_round() {
    const int L = config_.num_layers;
    const Tokens in = random_tokens(1);
    Outs out = make_outs(1);
    const Weights w = layers_[0].view();
    const SlotHandle h = live_.empty() ? SlotHandle::padding() : live_[0].pool;
    switch (src_.below(15)) {
      case 12:
        duplicate_materialize();
        break;
      case 13:
      case 14:
        if (!live_.empty()) {
          // A weight, input or output view one byte off: prefill or decode (a padding row too).
          Misaligned bad(w, in.view(), out.view());
          const char* name = bad.shift(src_, cfg());
          const int l = static_cast<int>(src_.below(static_cast<uint32_t>(L)));
          if (src_.coin()) {
            expect_rejected("prefill with a misaligned view",
                            [&] { pool_->prefill(l, h, bad.weights, bad.inputs, bad.outputs); },
                            Status::kInvalidArgument, {name, "aligned"});
          } else {
            std::vector<SlotHandle> rows = {h};
            if (src_.coin()) rows.insert(rows.begin(), SlotHandle::padding());
            Tokens in2 = random_tokens(static_cast<int>(rows.size()));
            Outs out2 = make_outs(static_cast<int>(rows.size()));
            Misaligned bad2(w, in2.view(), out2.view());
            const char* name2 = bad2.shift(src_, cfg());
            expect_rejected(
                "decode with a misaligned view",
                [&] { pool_->decode(l, rows, bad2.weights, bad2.inputs, bad2.outputs); },
                Status::kInvalidArgument, {name2, "aligned"});
          }
          ++stats_.misaligned_rejected;
        }
        break;
      case 0:
        expect_rejected("commit without a round", [&] { pool_->commit(std::vector<int32_t>{0}); });
        break;
      case 1:
        expect_rejected("verify without a round",
                        [&] { pool_->verify(0, w, in.view(), out.view()); });
        break;
      case 2:
        if (!stale_.empty()) {
          const SlotHandle s = stale_[src_.below(static_cast<uint32_t>(stale_.size()))];
          if (!pool_->is_live(s)) {
            expect_rejected("prefill of a released handle",
                            [&] { pool_->prefill(0, s, w, in.view(), out.view()); });
            expect_rejected("begin_verify with a released handle", [&] {
              pool_->begin_verify(VerifyBatch{{s}, 1, {}});
            });
            expect_rejected("release of a released handle", [&] { pool_->release(s); });
          }
        }
        break;
      case 3:
        if (!live_.empty() && options_.max_rows >= 2) {
          expect_rejected("begin_verify with a slot twice", [&] {
            pool_->begin_verify(VerifyBatch{{h, h}, 1, {}});
          });
        }
        break;
      case 4:
        if (!live_.empty()) {
          expect_rejected("begin_verify with a window beyond max_window", [&] {
            pool_->begin_verify(VerifyBatch{{h}, options_.max_window + 1, {}});
          });
          std::vector<int32_t> bad_parents = {0};
          expect_rejected("begin_verify with a root whose parent is not -1", [&] {
            pool_->begin_verify(VerifyBatch{{h}, 1, bad_parents});
          });
        }
        break;
      case 5:
        if (!live_.empty()) {
          expect_rejected("prefill of a layer out of range",
                          [&] { pool_->prefill(L, h, w, in.view(), out.view()); });
          expect_rejected("prefill of layer -1",
                          [&] { pool_->prefill(-1, h, w, in.view(), out.view()); });
        }
        break;
      case 6:
      case 7:
      case 8:
      case 9:
      case 10:
        if (!live_.empty()) {
          const int l = static_cast<int>(src_.below(static_cast<uint32_t>(L)));
          bad_argument(src_.below(5), l, h, in.view(), out.view());
        }
        break;
      default: {
        SlotHandle foreign = h;
        foreign.pool_id += 1000;
        if (!live_.empty()) {
          expect_rejected("prefill of another pool's handle",
                          [&] { pool_->prefill(0, foreign, w, in.view(), out.view()); });
        }
        break;
      }
    }
  }

  // `fn` must throw specstate::Error (with `want`'s status and every string of `names` in its
  // message, when given) and change nothing: the committed state of every slot stays the same,
  // and a caller-owned pool's memory, read directly, not a byte of it (so no pending step ran).
  template <typename Fn>
  void expect_rejected(const char* what, Fn&& fn, Status want = Status::kSuccess,
                       std::initializer_list<const char*> names = {}) {
    const bool caller = memory_ != MemoryMode::kOwned;
    // A lazy pool's owning state is not read before (that would materialize every slot); the
    // next comparison with the shadow covers it.
    const bool read = caller || check_now();
    const auto before =
        caller ? caller_.raw() : (read ? committed(*pool_) : std::vector<uint8_t>());
    bool threw = false;
    try {
      fn();
    } catch (const Error& e) {
      threw = true;
      if (want != Status::kSuccess && e.status() != want) {
        violation(std::string(what) + " was rejected with " + status_name(e.status()) +
                  ", expected " + status_name(want) + ": " + e.what());
      }
      for (const char* name : names) {
        if (std::strstr(e.what(), name) == nullptr) {
          violation(std::string(what) + ": the message does not name \"" + name +
                    "\": " + e.what());
        }
      }
    }
    if (!threw) violation(std::string(what) + " was accepted");
    if (caller) {
      if (caller_.raw() != before) violation(std::string(what) + " changed the caller's memory");
    } else if (read && committed(*pool_) != before) {
      violation(std::string(what) + " changed the committed state");
    }
    ++stats_.rejected;
  }

  // The elements a state view spans (1 + the largest offset), in elements: numel for a compact
  // state in any element order (PoolOptions::conv_layout / ssm_layout), from dimension `from` on.
  static int64_t span(const TensorView& v, int from) {
    int64_t last = 0;
    for (int d = from; d < v.ndim; ++d) last += (v.shape[d] - 1) * v.stride[d];
    return last + 1;
  }
  static std::vector<uint8_t> view_bytes(const TensorView& v) {
    if (span(v, 0) != v.numel()) violation("a per-slot state view is not compact");
    const auto* p = static_cast<const uint8_t*>(v.data);
    return std::vector<uint8_t>(p, p + v.numel() * static_cast<int64_t>(dtype_size(v.dtype)));
  }
  // Every slot's committed state, all layers (views: materializes every slot).
  std::vector<uint8_t> committed(const StatePool& p) const {
    std::vector<uint8_t> out;
    for (int l = 0; l < config_.num_layers; ++l) {
      for (const TensorView& v : {p.conv_state(l), p.ssm_state(l)}) {
        for (int s = 0; s < options_.num_slots; ++s) {
          const auto b = slot_bytes(v, s);
          out.insert(out.end(), b.begin(), b.end());
        }
      }
    }
    return out;
  }
  // Slot `slot` of a committed-state view in the pool's element order: each slot's state
  // compact, the slot stride the view's (a caller's views may pad or interleave slots).
  static std::vector<uint8_t> slot_bytes(const TensorView& v, int slot) {
    const int64_t per = v.numel() / v.shape[0];
    if (span(v, 1) != per) violation("a committed state view's slot is not compact");
    if (v.shape[0] > 1 && v.stride[0] < per) violation("a committed state view's slots overlap");
    const auto* p = static_cast<const uint8_t*>(v.data) +
                    slot * v.stride[0] * static_cast<int64_t>(dtype_size(v.dtype));
    return std::vector<uint8_t>(p, p + per * static_cast<int64_t>(dtype_size(v.dtype)));
  }

  // The caller's memory for the pool under test, shaped after the shadow's views: either two
  // tensors (conv, SSM) of [layers][slots] states with padded slot strides and gaps between the
  // layers, or vLLM v1's pages: one buffer per layer, page p = [slot p's conv window | pad to 16
  // bytes | its SSM state | pad], both views with the page as slot stride. Strides and gaps come
  // from the source; the sentinel from the generator.
  void make_caller_memory() {
    const int L = config_.num_layers, S = options_.num_slots;
    const TensorView c = shadow_->conv_state(0), s = shadow_->ssm_state(0);
    const auto ce = static_cast<int64_t>(dtype_size(c.dtype));
    const auto se = static_cast<int64_t>(dtype_size(s.dtype));
    CallerMemory& m = caller_;
    m.slots = S;
    m.conv_bytes = c.numel() / c.shape[0] * ce;
    m.ssm_bytes = s.numel() / s.shape[0] * se;
    auto up16 = [](int64_t x) { return (x + 15) / 16 * 16; };
    // Byte offsets (buffer, offset) of every state; then the buffers.
    std::vector<std::pair<int, int64_t>> conv_at(static_cast<std::size_t>(L * S)),
        ssm_at(static_cast<std::size_t>(L * S));
    std::vector<int64_t> sizes;
    int64_t conv_stride = 0, ssm_stride = 0;
    if (memory_ == MemoryMode::kCallerPaged) {
      const int64_t ssm_in_page = up16(m.conv_bytes) + 16 * src_.below(2);
      const int64_t page = up16(ssm_in_page + m.ssm_bytes) + 16 * src_.below(3);
      conv_stride = ssm_stride = page;
      for (int l = 0; l < L; ++l) {
        const int64_t lead = 16 * src_.below(2);  // the first page need not start the buffer
        for (int p = 0; p < S; ++p) {
          conv_at[l * S + p] = {l, lead + p * page};
          ssm_at[l * S + p] = {l, lead + p * page + ssm_in_page};
        }
        sizes.push_back(lead + S * page + 16);
      }
    } else {
      // Extra bytes between slots and gaps between layers, multiples of 4 bytes (the alignment
      // of both state dtypes).
      conv_stride = m.conv_bytes + 4 * src_.below(3);
      ssm_stride = m.ssm_bytes + 4 * src_.below(3);
      int64_t conv_end = 0, ssm_end = 0;
      for (int l = 0; l < L; ++l) {
        conv_end += 4 * src_.below(4);
        ssm_end += 4 * src_.below(4);
        for (int p = 0; p < S; ++p) {
          conv_at[l * S + p] = {0, conv_end + p * conv_stride};
          ssm_at[l * S + p] = {1, ssm_end + p * ssm_stride};
        }
        conv_end += S * conv_stride;
        ssm_end += S * ssm_stride;
      }
      sizes = {conv_end + 8, ssm_end + 8};
    }
    for (int64_t bytes : sizes) {
      std::vector<uint64_t> b(static_cast<std::size_t>((bytes + 7) / 8));
      for (uint64_t& w : b) w = rng_() | 0x0101010101010101ull;  // no zero byte
      m.buffers.push_back(std::move(b));
      m.is_state.emplace_back(m.buffers.back().size() * 8, 0);
    }
    m.sentinel = m.buffers;
    auto place = [&](const std::pair<int, int64_t>& at, int64_t len) {
      std::fill_n(m.is_state[at.first].begin() + at.second, len, 1);
      return reinterpret_cast<uint8_t*>(m.buffers[at.first].data()) + at.second;
    };
    for (int i = 0; i < L * S; ++i) {
      m.conv.push_back(place(conv_at[i], m.conv_bytes));
      m.ssm.push_back(place(ssm_at[i], m.ssm_bytes));
    }
    for (int l = 0; l < L; ++l) {
      TensorView cv = c, sv = s;
      cv.data = m.conv_at(l, 0);
      sv.data = m.ssm_at(l, 0);
      cv.stride[0] = conv_stride / ce;
      sv.stride[0] = ssm_stride / se;
      m.views.conv.push_back(cv);
      m.views.ssm.push_back(sv);
    }
  }

  // Caller-owned: the caller's memory of q's slot, read directly, equals the shadow's state.
  void expect_caller_slot(const Request& q, const char* when) const {
    for (int l = 0; l < config_.num_layers; ++l) {
      const int s = shadow_->slot_index(q.shadow);
      if (std::memcmp(caller_.conv_at(l, q.pool.slot), slot_bytes(shadow_->conv_state(l), s).data(),
                      static_cast<std::size_t>(caller_.conv_bytes)) != 0 ||
          std::memcmp(caller_.ssm_at(l, q.pool.slot), slot_bytes(shadow_->ssm_state(l), s).data(),
                      static_cast<std::size_t>(caller_.ssm_bytes)) != 0) {
        violation(std::string(when) + ": the caller's memory of layer " + std::to_string(l) +
                  " slot " + std::to_string(q.pool.slot) + " is not its committed state");
      }
    }
  }

  // Caller-owned: the padding keeps the sentinel and every free slot what it held.
  void check_caller_rest(const char* when) const {
    if (!caller_.padding_intact()) {
      violation(std::string(when) + ": the pool wrote the caller's padding");
    }
    for (int s = 0; s < options_.num_slots; ++s) {
      if (!holds_slot(s) && caller_.slot(s, config_.num_layers) != free_raw_[s]) {
        violation(std::string(when) + ": the pool wrote free slot " + std::to_string(s) +
                  " of the caller's memory");
      }
    }
  }

  const Config& cfg() const { return K::of(config_); }
  Tokens random_tokens(int n) { return K::random_tokens(cfg(), n, rng_); }
  Outs make_outs(int n) const { return K::make_outs(cfg(), n); }
  static bool same_outs(const Outs& a, const Outs& b) {
    const auto x = a.compared(), y = b.compared();
    for (std::size_t k = 0; k < x.size(); ++k) {
      if (x[k].second->bytes != y[k].second->bytes) return false;
    }
    return true;
  }
  // The tokens `path` (offsets from `base`) of `all`, in that order (absent tensors stay absent).
  static Tokens gather(const Tokens& all, int base, const std::vector<int>& path) {
    Tokens t = all;
    const auto to = t.tensors(), from = all.tensors();
    for (std::size_t k = 0; k < from.size(); ++k) {
      if (from[k]->shape.empty()) continue;
      HostTensor& dst = *const_cast<HostTensor*>(to[k]);
      const std::size_t rb = from[k]->row_bytes();
      dst.shape[0] = static_cast<int64_t>(path.size());
      dst.bytes.assign(rb * path.size(), 0);
      for (std::size_t i = 0; i < path.size(); ++i) {
        const std::size_t src = static_cast<std::size_t>(base + path[i]);
        std::memcpy(dst.bytes.data() + i * rb, from[k]->bytes.data() + src * rb, rb);
      }
    }
    return t;
  }
  static bool row_nonzero(const HostTensor& x, std::size_t xi) {
    const std::size_t rb = x.row_bytes();
    const uint8_t* p = x.bytes.data() + xi * rb;
    return std::any_of(p, p + rb, [](uint8_t b) { return b != 0; });
  }
  static void same_row(const HostTensor& x, std::size_t xi, const HostTensor& y, std::size_t yi,
                       const char* name, int layer, int row, int token) {
    const std::size_t rb = x.row_bytes();
    if (std::memcmp(x.bytes.data() + xi * rb, y.bytes.data() + yi * rb, rb) != 0) {
      violation(std::string("verify ") + name + " of layer " + std::to_string(layer) + " row " +
                std::to_string(row) + " token " + std::to_string(token) +
                " differs from sequential decode");
    }
  }

  Source& src_;
  ModelConfig config_;
  PoolOptions options_;
  bool replay_ = false, lazy_ = false;
  int ring_draw_ = 0;  // which replay ring the seed drew (0 default, 1 2T, 2 3T+1, 3 40)
  MemoryMode memory_ = MemoryMode::kOwned;
  std::mt19937_64 rng_;
  // Declared before the pools, which must not outlive the caller's memory or the weights.
  CallerMemory caller_;
  std::vector<std::vector<uint8_t>> free_raw_;  // caller-owned: what each free slot holds
  std::vector<Layer> layers_;
  std::vector<std::unique_ptr<Layer>> poisoned_;  // temporary weights after their call
  std::unique_ptr<StatePool> pool_, shadow_;
  std::vector<Request> live_;
  std::vector<SlotHandle> stale_;
  DriverStats stats_;
};

// The driver of a run: the layer kind drawn first (Gated DeltaNet or Mamba2, even odds), then
// everything else by that kind's KindDriver.
class PoolDriver {
 public:
  // One draw in [0, 6) picks the kind: odd Mamba2 (the same parity as the coin that chose
  // between two kinds, so a fuzz input or soak seed that drew Mamba2 still does), 4 KDA, 0 and
  // 2 Gated DeltaNet.
  explicit PoolDriver(Source& src) {
    const uint32_t kind = src.below(6);
    if (kind % 2 == 1) {
      d_ = std::make_unique<KindDriver<Mamba2Kind>>(src);
    } else if (kind == 4) {
      d_ = std::make_unique<KindDriver<KdaKind>>(src);
    } else {
      d_ = std::make_unique<KindDriver<GdnKind>>(src);
    }
  }
  bool step() { return d_->step(); }
  void round() { d_->round(); }
  void finish() { d_->finish(); }
  const DriverStats& stats() const { return d_->stats(); }
  MemoryMode memory() const { return d_->memory(); }

 private:
  std::unique_ptr<DriverBase> d_;
};

}  // namespace specstate::fuzz
