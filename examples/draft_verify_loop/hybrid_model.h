// A tiny synthetic hybrid model and the draft -> verify -> accept -> commit loop around it,
// through specstate's public API only. Header-only so that the example and the tests share it.
//
// The model is shaped like Qwen3-Next, in miniature: token embedding, then layers of two kinds,
// Gated DeltaNet (recurrent state in a specstate::StatePool; or, with ModelShape::kda,
// Kimi-Linear's KDA: the same layer with its gate per key channel) and causal softmax attention (a
// KV cache the example keeps itself: it rolls back by truncation, so accepted tokens are simply
// appended), each as a residual block after an RMS norm, and an output projection whose argmax
// is the next token. The drafter is the same model with perturbed weights and its own pool; it
// drafts by verifying growing windows and rolls its own state back with commit, like the target.
//
// The proof: greedy speculative decoding must emit exactly the tokens of plain autoregressive
// decoding (StatePool::decode, one token per step), and leave bit-identical committed states.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "specstate/spec/acceptance.h"
#include "specstate/spec/verify_batch.h"
#include "specstate/spec/window.h"
#include "specstate/specstate.h"

namespace draft_verify_loop {

using specstate::DType;
using specstate::GdnConfig;
using specstate::GdnInputs;
using specstate::GdnOutputs;
using specstate::GdnWeights;
using specstate::KdaConfig;
using specstate::KdaInputs;
using specstate::KdaOutputs;
using specstate::KdaWeights;
using specstate::ModelConfig;
using specstate::SlotHandle;
using specstate::StatePool;
using specstate::TensorView;

enum class LayerKind { kGdn, kAttention };

struct ModelShape {
  int vocab = 48;
  int d_model = 32;
  // Qwen3-Next's pattern in miniature: three linear-attention layers, then full attention.
  std::vector<LayerKind> layers = {LayerKind::kGdn, LayerKind::kGdn, LayerKind::kAttention,
                                   LayerKind::kGdn};
  GdnConfig gdn = [] {
    GdnConfig g;
    g.num_k_heads = 2;
    g.num_v_heads = 4;
    g.head_k_dim = 16;
    g.head_v_dim = 16;
    g.conv_width = 4;
    g.act_dtype = DType::kF32;  // activations f32; conv state bf16 and SSM f32 as in Qwen3-Next
    return g;
  }();
  // The recurrent layers are KDA (Kimi-Linear) instead of GDN: `gdn`'s heads, dims and dtypes,
  // the gate g per value head and key channel, dt_bias [HV, K].
  bool kda = false;
  KdaConfig kda_config() const {
    KdaConfig k;
    k.num_k_heads = gdn.num_k_heads;
    k.num_v_heads = gdn.num_v_heads;
    k.head_k_dim = gdn.head_k_dim;
    k.head_v_dim = gdn.head_v_dim;
    k.conv_width = gdn.conv_width;
    k.act_dtype = gdn.act_dtype;
    k.conv_state_dtype = gdn.conv_state_dtype;
    k.ssm_state_dtype = gdn.ssm_state_dtype;
    return k;
  }
  // Columns of a recurrent layer's gate input per token: GDN's a [HV], KDA's g [HV, K].
  int gate_cols() const { return gdn.num_v_heads * (kda ? gdn.head_k_dim : 1); }
};

// Reproducible across standard libraries.
inline double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}
inline float normal(std::mt19937_64& rng) {
  const double u1 = 1.0 - uniform01(rng), u2 = uniform01(rng);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// A recurrent (delta-rule) layer: GDN, or KDA with ModelShape::kda.
struct GdnLayer {
  std::vector<float> w_in;         // [d_model, conv_dim + G + HV]: -> mixed_qkv | gate | b
  std::vector<float> conv_weight;  // [conv_dim, W]
  std::vector<float> A_log;        // [HV]
  std::vector<float> dt_bias;      // [HV] (GDN) or [HV, K] (KDA)
  std::vector<float> w_out;        // [HV*V, d_model]
  GdnWeights view() const {
    const int64_t d = static_cast<int64_t>(A_log.size());
    return GdnWeights{conv(),
                      {},
                      TensorView::contiguous(A_log.data(), DType::kF32, {d}),
                      TensorView::contiguous(dt_bias.data(), DType::kF32, {d})};
  }
  KdaWeights kda_view() const {
    const int64_t hv = static_cast<int64_t>(A_log.size());
    const int64_t k = static_cast<int64_t>(dt_bias.size()) / hv;
    return KdaWeights{conv(),
                      {},
                      TensorView::contiguous(A_log.data(), DType::kF32, {hv}),
                      TensorView::contiguous(dt_bias.data(), DType::kF32, {hv, k})};
  }
  TensorView conv() const {
    const int64_t c = static_cast<int64_t>(conv_weight.size()) / conv_width;
    return TensorView::contiguous(conv_weight.data(), DType::kF32, {c, conv_width});
  }
  int64_t conv_width = 4;
};

struct AttentionLayer {
  std::vector<float> wq, wk, wv, wo;  // [d_model, d_model] each
};

class HybridModel {
 public:
  HybridModel(const ModelShape& shape, uint64_t seed) : shape_(shape) {
    std::mt19937_64 rng(seed);
    const int d = shape.d_model, D = shape.gdn.conv_dim(), HV = shape.gdn.num_v_heads;
    const int V = shape.gdn.head_v_dim, W = shape.gdn.conv_width, G = shape.gate_cols();
    auto fill = [&](std::vector<float>& w, std::size_t n, float std) {
      w.resize(n);
      for (auto& x : w) x = std * normal(rng);
    };
    fill(embed_, static_cast<std::size_t>(shape.vocab) * d, 1.0f);
    fill(lm_head_, static_cast<std::size_t>(d) * shape.vocab, 1.0f / std::sqrt(float(d)));
    for (LayerKind kind : shape.layers) {
      if (kind == LayerKind::kGdn) {
        GdnLayer g;
        g.conv_width = W;
        fill(g.w_in, static_cast<std::size_t>(d) * (D + G + HV), 1.0f / std::sqrt(float(d)));
        fill(g.conv_weight, static_cast<std::size_t>(D) * W, 0.5f);
        g.A_log.resize(static_cast<std::size_t>(HV));
        g.dt_bias.resize(static_cast<std::size_t>(G));  // GDN: one per head; KDA: per channel
        const int per_head = G / HV;
        for (int h = 0; h < HV; ++h) {  // decays in (0, 1): A in [1, 16], dt in [1e-3, 1e-1]
          g.A_log[h] = static_cast<float>(std::log(1.0 + 15.0 * uniform01(rng)));
          for (int i = 0; i < per_head; ++i) {
            const double dt = std::exp(std::log(1e-3) + uniform01(rng) * std::log(100.0));
            g.dt_bias[static_cast<std::size_t>(h) * per_head + i] =
                static_cast<float>(std::log(std::expm1(dt)));
          }
        }
        fill(g.w_out, static_cast<std::size_t>(HV) * V * d, 1.0f / std::sqrt(float(HV * V)));
        gdn_.push_back(std::move(g));
      } else {
        AttentionLayer a;
        for (auto* w : {&a.wq, &a.wk, &a.wv, &a.wo}) {
          fill(*w, static_cast<std::size_t>(d) * d, 1.0f / std::sqrt(float(d)));
        }
        attention_.push_back(std::move(a));
      }
    }
  }

  // The same model with every weight w -> w + eps * |w| * N(0, 1): a drafter that agrees with
  // the target most of the time.
  HybridModel perturbed(float eps, uint64_t seed) const {
    HybridModel copy = *this;
    std::mt19937_64 rng(seed);
    auto jitter = [&](std::vector<float>& w) {
      for (auto& x : w) x += eps * std::fabs(x) * normal(rng);
    };
    jitter(copy.embed_);
    jitter(copy.lm_head_);
    for (auto& g : copy.gdn_) {
      jitter(g.w_in);
      jitter(g.conv_weight);
      jitter(g.w_out);
    }
    for (auto& a : copy.attention_) {
      for (auto* w : {&a.wq, &a.wk, &a.wv, &a.wo}) jitter(*w);
    }
    return copy;
  }

  const ModelShape& shape() const noexcept { return shape_; }
  // What the pool holds: the recurrent layers only (GDN, or KDA with ModelShape::kda).
  ModelConfig state_config() const {
    const int n = static_cast<int>(gdn_.size());
    return shape_.kda ? ModelConfig::kda(n, shape_.kda_config())
                      : ModelConfig::gated_delta_net(n, shape_.gdn);
  }
  int num_gdn_layers() const noexcept { return static_cast<int>(gdn_.size()); }
  int num_attention_layers() const noexcept { return static_cast<int>(attention_.size()); }
  const GdnLayer& gdn(int i) const { return gdn_[static_cast<std::size_t>(i)]; }
  const AttentionLayer& attention(int i) const { return attention_[static_cast<std::size_t>(i)]; }
  const std::vector<float>& embed() const noexcept { return embed_; }
  const std::vector<float>& lm_head() const noexcept { return lm_head_; }

 private:
  ModelShape shape_;
  std::vector<float> embed_, lm_head_;
  std::vector<GdnLayer> gdn_;
  std::vector<AttentionLayer> attention_;
};

// A request's attention KV cache: keys and values of every consumed token, per attention layer.
struct KvCache {
  std::vector<std::vector<float>> k, v;  // [attention layers][tokens * d_model]
  friend bool operator==(const KvCache& x, const KvCache& y) { return x.k == y.k && x.v == y.v; }
};

// rows x T tokens packed by row (token i of row r at r*T + i). Token t of row r sees the row's
// cache, then the window nodes on its path root..t (parents[r]; a chain is -1, 0, 1, ...).
struct ForwardBatch {
  int rows = 0;
  int window = 1;
  std::vector<int32_t> tokens;                // [rows * T]
  std::vector<std::vector<int32_t>> parents;  // [rows][T]
  std::vector<const KvCache*> caches;         // [rows]; null: a padding row (empty cache)
};

struct ForwardResult {
  std::vector<int32_t> argmax;           // [rows * T]
  std::vector<int32_t> second;           // [rows * T] the second most likely token
  std::vector<std::vector<float>> k, v;  // [attention layers][rows * T * d_model]
};

namespace detail {

// y[n, out] = x[n, in] . w[in, out], one token at a time in a fixed order (bit-reproducible
// whatever n is, which the equivalence proof relies on).
inline void matmul(const float* x, const float* w, float* y, int64_t n, int64_t in, int64_t out) {
  for (int64_t t = 0; t < n; ++t) {
    float* yt = y + t * out;
    std::fill(yt, yt + out, 0.0f);
    for (int64_t i = 0; i < in; ++i) {
      const float xi = x[t * in + i];
      const float* wi = w + i * out;
      for (int64_t o = 0; o < out; ++o) yt[o] += xi * wi[o];
    }
  }
}

inline void rms_norm(const std::vector<float>& h, std::vector<float>& x, int64_t n, int64_t d) {
  x.resize(h.size());
  for (int64_t t = 0; t < n; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(h[t * d + i]) * h[t * d + i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / d + 1e-6));
    for (int64_t i = 0; i < d; ++i) x[t * d + i] = h[t * d + i] * inv;
  }
}

}  // namespace detail

// One forward pass. `gdn_op(layer, weights, inputs, outputs)` runs the recurrent layer's state
// update through the pool (prefill, decode or verify, whichever the caller is doing), with the
// kind's types (GdnWeights / GdnInputs / GdnOutputs, or the Kda ones): a generic lambda.
template <typename GdnOp>
ForwardResult forward(const HybridModel& model, const ForwardBatch& batch, GdnOp&& gdn_op) {
  const ModelShape& s = model.shape();
  const int64_t n = int64_t{batch.rows} * batch.window, d = s.d_model;
  const int64_t D = s.gdn.conv_dim(), HV = s.gdn.num_v_heads, V = s.gdn.head_v_dim;
  const int64_t G = s.gate_cols();
  ForwardResult result;
  result.k.resize(static_cast<std::size_t>(model.num_attention_layers()));
  result.v.resize(result.k.size());
  std::vector<float> h(static_cast<std::size_t>(n * d)), x;
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(model.embed().data() + int64_t{batch.tokens[t]} * d, d, h.data() + t * d);
  }
  int gi = 0, ai = 0;
  for (LayerKind kind : s.layers) {
    detail::rms_norm(h, x, n, d);
    if (kind == LayerKind::kGdn) {
      const GdnLayer& g = model.gdn(gi);
      const int64_t P = D + G + HV;
      std::vector<float> proj(static_cast<std::size_t>(n * P));
      detail::matmul(x.data(), g.w_in.data(), proj.data(), n, d, P);
      std::vector<float> qkv(static_cast<std::size_t>(n * D)), a(static_cast<std::size_t>(n * G)),
          b(static_cast<std::size_t>(n * HV)), core(static_cast<std::size_t>(n * HV * V), 0.0f);
      for (int64_t t = 0; t < n; ++t) {
        std::copy_n(proj.data() + t * P, D, qkv.data() + t * D);
        std::copy_n(proj.data() + t * P + D, G, a.data() + t * G);
        std::copy_n(proj.data() + t * P + D + G, HV, b.data() + t * HV);
      }
      const TensorView qkv_v = TensorView::contiguous(qkv.data(), DType::kF32, {n, D});
      const TensorView b_v = TensorView::contiguous(b.data(), DType::kF32, {n, HV});
      const TensorView core_v = TensorView::contiguous(core.data(), DType::kF32, {n, HV, V});
      if (s.kda) {
        // A callback written for GDN's types only (the TP example) cannot run a KDA model.
        if constexpr (std::is_invocable_v<GdnOp&, int, const KdaWeights&, const KdaInputs&,
                                          const KdaOutputs&>) {
          const int64_t K = s.gdn.head_k_dim;
          gdn_op(gi, g.kda_view(),
                 KdaInputs{qkv_v, TensorView::contiguous(a.data(), DType::kF32, {n, HV, K}), b_v},
                 KdaOutputs{{}, core_v});
        } else {
          throw std::invalid_argument(
              "forward: a KDA model needs a layer callback for KDA's types");
        }
      } else {
        gdn_op(gi, g.view(),
               GdnInputs{qkv_v, TensorView::contiguous(a.data(), DType::kF32, {n, HV}), b_v},
               GdnOutputs{{}, core_v});
      }
      std::vector<float> out(static_cast<std::size_t>(n * d));
      detail::matmul(core.data(), g.w_out.data(), out.data(), n, HV * V, d);
      for (int64_t i = 0; i < n * d; ++i) h[i] += out[i];
      ++gi;
    } else {
      const AttentionLayer& A = model.attention(ai);
      std::vector<float> q(static_cast<std::size_t>(n * d)), k(q.size()), v(q.size()),
          o(q.size(), 0.0f), out(q.size());
      detail::matmul(x.data(), A.wq.data(), q.data(), n, d, d);
      detail::matmul(x.data(), A.wk.data(), k.data(), n, d, d);
      detail::matmul(x.data(), A.wv.data(), v.data(), n, d, d);
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      for (int r = 0; r < batch.rows; ++r) {
        const KvCache* cache = batch.caches[static_cast<std::size_t>(r)];
        const std::vector<float>* ck = cache ? &cache->k[static_cast<std::size_t>(ai)] : nullptr;
        const std::vector<float>* cv = cache ? &cache->v[static_cast<std::size_t>(ai)] : nullptr;
        const int64_t m = ck ? static_cast<int64_t>(ck->size()) / d : 0;
        const auto& parents = batch.parents[static_cast<std::size_t>(r)];
        for (int t = 0; t < batch.window; ++t) {
          const int64_t row_t = int64_t{r} * batch.window + t;
          // Keys in sequence order: the cache, then the path root..t.
          std::vector<const float*> keys, values;
          for (int64_t j = 0; j < m; ++j) {
            keys.push_back(ck->data() + j * d);
            values.push_back(cv->data() + j * d);
          }
          std::vector<int64_t> path;
          for (int32_t p = t; p >= 0; p = parents[static_cast<std::size_t>(p)]) path.push_back(p);
          for (auto it = path.rbegin(); it != path.rend(); ++it) {
            keys.push_back(k.data() + (int64_t{r} * batch.window + *it) * d);
            values.push_back(v.data() + (int64_t{r} * batch.window + *it) * d);
          }
          std::vector<float> score(keys.size());
          float peak = -INFINITY;
          for (std::size_t j = 0; j < keys.size(); ++j) {
            float dot = 0;
            for (int64_t i = 0; i < d; ++i) dot += q[row_t * d + i] * keys[j][i];
            score[j] = dot * scale;
            peak = std::max(peak, score[j]);
          }
          float total = 0;
          for (auto& sc : score) total += (sc = std::exp(sc - peak));
          for (std::size_t j = 0; j < keys.size(); ++j) {
            const float p = score[j] / total;
            for (int64_t i = 0; i < d; ++i) o[row_t * d + i] += p * values[j][i];
          }
        }
      }
      detail::matmul(o.data(), A.wo.data(), out.data(), n, d, d);
      for (int64_t i = 0; i < n * d; ++i) h[i] += out[i];
      result.k[static_cast<std::size_t>(ai)] = std::move(k);
      result.v[static_cast<std::size_t>(ai)] = std::move(v);
      ++ai;
    }
  }
  detail::rms_norm(h, x, n, d);
  std::vector<float> logits(static_cast<std::size_t>(n * s.vocab));
  detail::matmul(x.data(), model.lm_head().data(), logits.data(), n, d, s.vocab);
  result.argmax.resize(static_cast<std::size_t>(n));
  result.second.resize(static_cast<std::size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits.data() + t * s.vocab;
    int32_t best = 0, second = -1;
    for (int32_t i = 1; i < s.vocab; ++i) {
      if (l[i] > l[best]) {
        second = best;
        best = i;
      } else if (second < 0 || l[i] > l[second]) {
        second = i;
      }
    }
    result.argmax[static_cast<std::size_t>(t)] = best;
    result.second[static_cast<std::size_t>(t)] = second < 0 ? best : second;
  }
  return result;
}

// Appends the keys and values of window nodes `nodes` of row `row` to `cache`.
inline void append_kv(KvCache& cache, const ForwardResult& fr, int row, int window, int d,
                      const std::vector<int32_t>& nodes) {
  cache.k.resize(fr.k.size());
  cache.v.resize(fr.v.size());
  for (std::size_t l = 0; l < fr.k.size(); ++l) {
    for (int32_t node : nodes) {
      const int64_t at = (int64_t{row} * window + node) * d;
      cache.k[l].insert(cache.k[l].end(), fr.k[l].begin() + at, fr.k[l].begin() + at + d);
      cache.v[l].insert(cache.v[l].end(), fr.v[l].begin() + at, fr.v[l].begin() + at + d);
    }
  }
}

inline std::vector<int32_t> chain_parents(int window) {
  return specstate::spec::Window::chain(window).parents();
}

// One request's committed state: every GDN layer's conv window and SSM state, as bytes.
inline std::vector<uint8_t> slot_state_bytes(const StatePool& pool, SlotHandle handle) {
  std::vector<uint8_t> out;
  const int slot = pool.slot_index(handle);
  for (int layer = 0; layer < pool.config().num_layers; ++layer) {
    for (const TensorView& view : {pool.conv_state(layer), pool.ssm_state(layer)}) {
      const int64_t bytes =
          view.stride[0] * static_cast<int64_t>(specstate::dtype_size(view.dtype));
      const auto* base = static_cast<const uint8_t*>(view.data) + slot * bytes;
      out.insert(out.end(), base, base + bytes);
    }
  }
  return out;
}

struct LoopOptions {
  int requests = 3;
  int window = 4;  // T: root + T-1 drafts per round
  int prompt_length = 6;
  int new_tokens = 32;  // a request stops once it has generated at least this many
  float draft_noise = 0.05f;
  uint64_t seed = 1;
  // Draft a tree instead of a chain: the T-1 drafts of the chain, plus at every depth the
  // drafter's second choice as a leaf beside them (2T-1 window tokens). Depth stays T.
  bool branch = false;
};

// The draft tree of LoopOptions::branch: node k (1..T-1) is draft k, child of k-1; node
// T-1+k is the alternative to draft k, also a child of k-1 (and a leaf).
inline std::vector<int32_t> branch_parents(int T) {
  std::vector<int32_t> parents = chain_parents(T);
  for (int k = 1; k < T; ++k) parents.push_back(k - 1);
  return parents;
}

struct LoopResult {
  std::vector<std::vector<int32_t>> tokens;  // per request: the generated tokens
  std::vector<std::vector<uint8_t>> states;  // per request: committed state bytes at the end
  std::vector<KvCache> caches;               // per request: the target's KV cache at the end
  std::vector<int64_t> accepted_histogram;   // [T + 1], speculative runs only
  int rounds = 0;
  int padding_rows = 0;
};

inline std::vector<std::vector<int32_t>> make_prompts(const HybridModel& model,
                                                      const LoopOptions& o) {
  std::mt19937_64 rng(o.seed * 7919 + 17);
  std::vector<std::vector<int32_t>> prompts(static_cast<std::size_t>(o.requests));
  for (auto& p : prompts) {
    for (int i = 0; i < o.prompt_length; ++i) {
      p.push_back(static_cast<int32_t>(uniform01(rng) * model.shape().vocab));
    }
  }
  return prompts;
}

// Prefills prompt[0 .. P-2] (the last prompt token is the first round's root).
inline void prefill_prompt(const HybridModel& model, StatePool& pool, SlotHandle slot,
                           KvCache& cache, const std::vector<int32_t>& prompt) {
  const int n = static_cast<int>(prompt.size()) - 1;
  cache = KvCache{};
  cache.k.resize(static_cast<std::size_t>(model.num_attention_layers()));
  cache.v.resize(cache.k.size());
  if (n <= 0) return;
  ForwardBatch batch{
      1, n, std::vector<int32_t>(prompt.begin(), prompt.end() - 1), {chain_parents(n)}, {&cache}};
  const ForwardResult fr =
      forward(model, batch, [&](int l, const auto& w, const auto& in, const auto& out) {
        pool.prefill(l, slot, w, in, out);
      });
  std::vector<int32_t> all(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
  append_kv(cache, fr, 0, n, model.shape().d_model, all);
}

// Plain autoregressive greedy decoding: one token per step per request through
// StatePool::decode, until request r has generated lengths[r] tokens.
inline LoopResult run_autoregressive(const HybridModel& model, const LoopOptions& o,
                                     const std::vector<int>& lengths) {
  specstate::PoolOptions po;
  po.num_slots = o.requests;
  po.max_rows = o.requests;
  po.max_window = 1;
  StatePool pool(model.state_config(), po);
  const auto prompts = make_prompts(model, o);
  LoopResult res;
  res.tokens.resize(static_cast<std::size_t>(o.requests));
  res.caches.resize(static_cast<std::size_t>(o.requests));
  std::vector<SlotHandle> slots;
  std::vector<int32_t> next(static_cast<std::size_t>(o.requests));
  for (int r = 0; r < o.requests; ++r) {
    slots.push_back(pool.acquire());
    prefill_prompt(model, pool, slots.back(), res.caches[r], prompts[r]);
    next[r] = prompts[r].back();
  }
  for (;;) {
    // Requests that still need tokens decode together; the others become padding rows.
    ForwardBatch batch;
    batch.window = 1;
    std::vector<SlotHandle> rows;
    std::vector<int> live;
    for (int r = 0; r < o.requests; ++r) {
      const bool more = static_cast<int>(res.tokens[r].size()) < lengths[r];
      rows.push_back(more ? slots[r] : SlotHandle::padding());
      batch.tokens.push_back(more ? next[r] : 0);
      batch.parents.push_back({-1});
      batch.caches.push_back(more ? &res.caches[r] : nullptr);
      if (more) live.push_back(r);
    }
    if (live.empty()) break;
    batch.rows = o.requests;
    const ForwardResult fr =
        forward(model, batch, [&](int l, const auto& w, const auto& in, const auto& out) {
          pool.decode(l, rows, w, in, out);
        });
    for (int r : live) {
      append_kv(res.caches[r], fr, r, 1, model.shape().d_model, {0});
      next[r] = fr.argmax[static_cast<std::size_t>(r)];
      res.tokens[r].push_back(next[r]);
    }
    ++res.rounds;
  }
  for (int r = 0; r < o.requests; ++r) res.states.push_back(slot_state_bytes(pool, slots[r]));
  return res;
}

// Greedy speculative decoding: per round, the drafter proposes T-1 tokens per request (a chain,
// or with LoopOptions::branch a tree holding its second choices too), the target verifies root +
// drafts in one pass (every GDN layer through StatePool::verify), spec::accept_greedy picks the
// accepted path and bonus token, and both pools commit it.
inline LoopResult run_speculative(const HybridModel& target, const HybridModel& drafter,
                                  const LoopOptions& o) {
  namespace spec = specstate::spec;
  const int T = o.window, d = target.shape().d_model;
  const spec::Window window =
      o.branch ? spec::Window::from_parents(branch_parents(T)) : spec::Window::chain(T);
  const int W = window.size();  // tokens per row in the target's verify
  // CUDA graphs are captured for batch sizes 1, 2, 4, ...: a batch of 3 live rows runs as 4.
  int bucket_max = 1;
  while (bucket_max < o.requests) bucket_max *= 2;
  const auto buckets = spec::VerifyBatchBuilder::power_of_two_buckets(bucket_max);
  specstate::PoolOptions po;
  po.num_slots = o.requests;
  po.max_rows = bucket_max;
  po.max_window = W;
  StatePool target_pool(target.state_config(), po), draft_pool(drafter.state_config(), po);
  const auto prompts = make_prompts(target, o);
  LoopResult res;
  res.tokens.resize(static_cast<std::size_t>(o.requests));
  res.caches.resize(static_cast<std::size_t>(o.requests));
  res.accepted_histogram.assign(static_cast<std::size_t>(T) + 1, 0);
  std::vector<KvCache> draft_caches(static_cast<std::size_t>(o.requests));
  std::vector<SlotHandle> tslot, dslot;
  std::vector<int32_t> root(static_cast<std::size_t>(o.requests));
  for (int r = 0; r < o.requests; ++r) {
    tslot.push_back(target_pool.acquire());
    dslot.push_back(draft_pool.acquire());
    prefill_prompt(target, target_pool, tslot[r], res.caches[r], prompts[r]);
    prefill_prompt(drafter, draft_pool, dslot[r], draft_caches[r], prompts[r]);
    root[r] = prompts[r].back();
  }
  for (;;) {
    std::vector<int> live;
    for (int r = 0; r < o.requests; ++r) {
      if (static_cast<int>(res.tokens[r].size()) < o.new_tokens) live.push_back(r);
    }
    if (live.empty()) break;

    // Verify batches: live requests, padded to a CUDA-graph bucket.
    spec::VerifyBatchBuilder tb(buckets);
    for (int r : live) tb.add(tslot[r], window);
    const auto plan = tb.build();
    const int rows = plan.rows();
    res.padding_rows += rows - plan.live_rows;
    auto window_batch = [&](const spec::Window& w, const std::vector<std::vector<int32_t>>& toks,
                            const std::vector<KvCache>& caches) {
      ForwardBatch fb;
      fb.rows = rows;
      fb.window = w.size();
      for (int i = 0; i < rows; ++i) {
        const bool real = i < plan.live_rows;
        for (int t = 0; t < w.size(); ++t) {
          fb.tokens.push_back(real ? toks[static_cast<std::size_t>(i)][static_cast<std::size_t>(t)]
                                   : 0);
        }
        fb.parents.push_back(w.parents());
        fb.caches.push_back(real ? &caches[static_cast<std::size_t>(live[i])] : nullptr);
      }
      return fb;
    };

    // 1. Draft: pass k verifies root + k-1 drafts; its last argmax is draft k (its second choice
    //    the alternative). The drafter's committed state never moves while drafting: verify is
    //    pure, and the round ends with one commit, like the target's.
    std::vector<std::vector<int32_t>> window_tokens(static_cast<std::size_t>(rows));
    std::vector<std::vector<int32_t>> alternatives(static_cast<std::size_t>(rows));
    for (int i = 0; i < plan.live_rows; ++i) window_tokens[i] = {root[live[i]]};
    spec::BatchPlan draft_plan;
    ForwardResult draft_fr;
    spec::Window draft_window;  // the window of the drafter's last pass
    auto draft_pass = [&](const spec::Window& w) {
      spec::VerifyBatchBuilder db(buckets);
      for (int r : live) db.add(dslot[r], w);
      draft_plan = db.build();
      // The previous pass verified a round that is never committed: drop it explicitly.
      if (draft_pool.round_open()) draft_pool.abort_round();
      draft_pool.begin_verify(draft_plan.batch);
      draft_fr = forward(drafter, window_batch(w, window_tokens, draft_caches),
                         [&](int l, const auto& w, const auto& in, const auto& out) {
                           draft_pool.verify(l, w, in, out);
                         });
      draft_window = w;
    };
    bool drafted = false;
    for (int k = 1; k < T; ++k) {
      draft_pass(spec::Window::chain(k));
      drafted = true;
      for (int i = 0; i < plan.live_rows; ++i) {
        const auto at = static_cast<std::size_t>(i * k + k - 1);
        window_tokens[i].push_back(draft_fr.argmax[at]);
        alternatives[i].push_back(draft_fr.second[at]);
      }
    }
    if (o.branch) {
      for (int i = 0; i < plan.live_rows; ++i) {
        window_tokens[i].insert(window_tokens[i].end(), alternatives[i].begin(),
                                alternatives[i].end());
      }
    }

    // 2. Verify: the target consumes the whole window; every GDN layer through the pool.
    target_pool.begin_verify(plan.batch);
    const ForwardResult fr = forward(target, window_batch(window, window_tokens, res.caches),
                                     [&](int l, const auto& w, const auto& in, const auto& out) {
                                       target_pool.verify(l, w, in, out);
                                     });

    // 3. Accept greedily against the target's argmax.
    std::vector<int32_t> flat_tokens(static_cast<std::size_t>(plan.num_tokens()), 0);
    for (int i = 0; i < plan.live_rows; ++i) {
      std::copy(window_tokens[i].begin(), window_tokens[i].end(), flat_tokens.begin() + i * W);
    }
    const auto accepted = plan.accept_greedy(flat_tokens, fr.argmax);

    // 4. Commit both pools. The drafter's last pass did not consume the last draft (nor, for a
    //    tree, the alternatives): when the accepted path needs more, it verifies the whole
    //    window first.
    bool covered = drafted;
    for (const auto& a : accepted) {
      for (int32_t node : a.path) covered = covered && node < draft_window.size();
    }
    if (!covered) draft_pass(window);
    target_pool.commit(plan.commit_values(accepted));
    draft_pool.commit(draft_plan.commit_values(accepted));
    for (int i = 0; i < plan.live_rows; ++i) {
      const int r = live[i];
      const auto& a = accepted[static_cast<std::size_t>(i)];
      append_kv(res.caches[r], fr, i, W, d, a.path);
      append_kv(draft_caches[r], draft_fr, i, draft_window.size(), d, a.path);
      const auto emitted = a.emitted(window_tokens[i].data());
      res.tokens[r].insert(res.tokens[r].end(), emitted.begin(), emitted.end());
      root[r] = a.bonus_token;
      ++res.accepted_histogram[static_cast<std::size_t>(a.accepted_length())];
    }
    ++res.rounds;
  }
  for (int r = 0; r < o.requests; ++r) {
    res.states.push_back(slot_state_bytes(target_pool, tslot[r]));
  }
  return res;
}

}  // namespace draft_verify_loop
