// engine_loop: the loop of an inference engine around specstate (README "Integrating into an
// engine"): requests arrive (acquire + one batched variable-length prefill), leave (release),
// fork (parallel sampling: fork), and every round verifies each request's own number of draft
// tokens (variable windows, spec::VerifyBatchBuilder with Packing::kVariable: no filler tokens),
// then commits each request's accepted length. Public API only; the layer inputs are synthetic
// (what a model's projections would produce), the acceptance is random.
//
// Check: after every round, every live request's committed state (all layers) equals a
// reference pool that only ever prefilled and decoded, one token at a time, the tokens each
// request accepted: bit for bit on the CPU backend. --kind picks the layer kind: Gated DeltaNet
// (Qwen3-Next's, the default) or KDA (Kimi-Linear's: a gate per key channel); the loop is the
// same code for both (one template over the kind's config, weights, inputs and outputs).
//
//   engine_loop [--rounds N] [--seed S] [--strategy snapshot|replay] [--max-draft K]
//               [--kind gdn|kda]
//
// Exit status 0 on success, 1 on a mismatch, 2 for bad arguments.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli_checks.h"
#include "specstate/spec/verify_batch.h"
#include "specstate/specstate.h"

namespace {

using namespace specstate;

// Host f32 tensors of a layer call: [tokens, conv_dim] mixed_qkv, the gate input a ([tokens, HV]
// for GDN, [tokens, HV, K] for KDA's g) and [tokens, HV] b.
struct Tokens {
  int64_t n = 0;
  std::vector<float> qkv, a, b;
  void append(const Tokens& t, int64_t i) {  // token i of t
    const auto row = [&](const std::vector<float>& from, std::vector<float>& to) {
      const std::size_t w = from.size() / static_cast<std::size_t>(t.n);
      to.insert(to.end(), from.begin() + i * w, from.begin() + (i + 1) * w);
    };
    row(t.qkv, qkv);
    row(t.a, a);
    row(t.b, b);
    ++n;
  }
};

// What differs between the kinds: the config, the API's structs, and the gate's shapes (GDN a
// gate input and dt_bias per value head, KDA per value head and key channel).
struct GdnKind {
  using Config = GdnConfig;
  using Weights = GdnWeights;
  using Inputs = GdnInputs;
  using Outputs = GdnOutputs;
  static ModelConfig model(int layers, const Config& c) {
    return ModelConfig::gated_delta_net(layers, c);
  }
  static int64_t gate_width(const Config& c) { return c.num_v_heads; }
  static void set_gate(Weights& w, Inputs& in, const Config& c, float* dt_bias, float* a,
                       int64_t n) {
    w.dt_bias = TensorView::contiguous(dt_bias, DType::kF32, {c.num_v_heads});
    in.a = TensorView::contiguous(a, DType::kF32, {n, c.num_v_heads});
  }
};
struct KdaKind {
  using Config = KdaConfig;
  using Weights = KdaWeights;
  using Inputs = KdaInputs;
  using Outputs = KdaOutputs;
  static ModelConfig model(int layers, const Config& c) { return ModelConfig::kda(layers, c); }
  static int64_t gate_width(const Config& c) { return int64_t{c.num_v_heads} * c.head_k_dim; }
  static void set_gate(Weights& w, Inputs& in, const Config& c, float* dt_bias, float* g,
                       int64_t n) {
    w.dt_bias = TensorView::contiguous(dt_bias, DType::kF32, {c.num_v_heads, c.head_k_dim});
    in.g = TensorView::contiguous(g, DType::kF32, {n, c.num_v_heads, c.head_k_dim});
  }
};

template <typename Kind>
struct Model {
  typename Kind::Config g;
  int layers = 3;
  std::vector<std::vector<float>> conv_w, conv_b, a_log, dt_bias;
  std::mt19937_64 rng;

  explicit Model(uint64_t seed) : rng(seed) {
    g.num_k_heads = 2;
    g.num_v_heads = 4;
    g.head_k_dim = 32;
    g.head_v_dim = 32;
    g.act_dtype = DType::kF32;
    std::normal_distribution<float> n(0.f, 0.3f);
    const int64_t d = g.conv_dim();
    for (int l = 0; l < layers; ++l) {
      conv_w.emplace_back(static_cast<std::size_t>(d * g.conv_width));
      conv_b.emplace_back(static_cast<std::size_t>(d));
      a_log.emplace_back(static_cast<std::size_t>(g.num_v_heads));
      dt_bias.emplace_back(static_cast<std::size_t>(Kind::gate_width(g)));
      for (auto* v : {&conv_w.back(), &conv_b.back(), &a_log.back(), &dt_bias.back()}) {
        for (float& x : *v) x = n(rng);
      }
    }
  }
  // Layer l's weights and a call's inputs over tokens t (the gate's views are the kind's).
  std::pair<typename Kind::Weights, typename Kind::Inputs> call(int l, Tokens& t) {
    const int64_t d = g.conv_dim(), hv = g.num_v_heads;
    typename Kind::Weights w;
    w.conv_weight = TensorView::contiguous(conv_w[l].data(), DType::kF32, {d, g.conv_width});
    if (g.conv_bias) w.conv_bias = TensorView::contiguous(conv_b[l].data(), DType::kF32, {d});
    w.A_log = TensorView::contiguous(a_log[l].data(), DType::kF32, {hv});
    typename Kind::Inputs in;
    in.mixed_qkv = TensorView::contiguous(t.qkv.data(), DType::kF32, {t.n, d});
    in.b = TensorView::contiguous(t.b.data(), DType::kF32, {t.n, hv});
    Kind::set_gate(w, in, g, dt_bias[l].data(), t.a.data(), t.n);
    return {w, in};
  }
  // n random tokens of one layer's inputs.
  Tokens tokens(int64_t n) {
    std::normal_distribution<float> x(0.f, 1.f);
    Tokens t;
    t.n = n;
    t.qkv.resize(static_cast<std::size_t>(n * g.conv_dim()));
    t.a.resize(static_cast<std::size_t>(n * Kind::gate_width(g)));
    t.b.resize(static_cast<std::size_t>(n * g.num_v_heads));
    for (auto* v : {&t.qkv, &t.a, &t.b}) {
      for (float& e : *v) e = x(rng);
    }
    return t;
  }
};

// Outputs of a layer call (host f32).
struct Out {
  std::vector<float> conv, core;
  template <typename Outputs, typename Config>
  Outputs view(const Config& g, int64_t n) {
    conv.assign(static_cast<std::size_t>(n * g.conv_dim()), 0.f);
    core.assign(static_cast<std::size_t>(n * g.num_v_heads * g.head_v_dim), 0.f);
    Outputs o;
    o.conv_out = TensorView::contiguous(conv.data(), DType::kF32, {n, g.conv_dim()});
    o.core_out = TensorView::contiguous(core.data(), DType::kF32, {n, g.num_v_heads, g.head_v_dim});
    return o;
  }
};

std::vector<uint8_t> state_of(StatePool& pool, SlotHandle h) {
  const int64_t n = (pool.slot_state_bytes() + 3) / 4;
  std::vector<int32_t> words(static_cast<std::size_t>(n));
  pool.export_slot(h, TensorView::contiguous(words.data(), DType::kI32, {n}));
  std::vector<uint8_t> bytes(static_cast<std::size_t>(pool.slot_state_bytes()));
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
}

// The engine's loop for one layer kind (main picks it).
template <typename Kind>
int run(int rounds, int max_draft, uint64_t seed, Strategy strategy) {
  using Outputs = typename Kind::Outputs;
  try {
    Model<Kind> model(seed);
    const ModelConfig config = Kind::model(model.layers, model.g);
    PoolOptions options;
    options.num_slots = 8;
    options.max_rows = 8;
    options.max_window = max_draft + 1;
    options.strategy = strategy;
    StatePool pool(config, options);  // the engine's pool
    options.strategy = Strategy::kSnapshot;
    StatePool ref(config, options);  // the reference: prefill and decode only
    std::mt19937_64 rng(seed * 7 + 1);

    struct Request {
      SlotHandle h, r;  // in the pool and in the reference
      int left = 0;     // tokens to go before it leaves
    };
    std::vector<Request> live;
    int arrivals = 0, departures = 0, forks = 0, verified = 0, accepted_total = 0;

    // Arrivals: acquire a slot each, then ONE batched variable-length prefill per layer.
    auto arrive = [&](int count) {
      std::vector<SlotHandle> hs;
      std::vector<int32_t> lengths;
      for (int i = 0; i < count && pool.free_slots() > 0; ++i) {
        Request q{pool.acquire(), ref.acquire(), 4 + static_cast<int>(rng() % 24)};
        hs.push_back(q.h);
        lengths.push_back(1 + static_cast<int32_t>(rng() % 9));  // prompt lengths differ
        live.push_back(q);
        ++arrivals;
      }
      if (hs.empty()) return;
      int64_t total = 0;
      for (int32_t n : lengths) total += n;
      for (int l = 0; l < model.layers; ++l) {
        Tokens t = model.tokens(total);
        Out out;
        auto [w, in] = model.call(l, t);
        pool.prefill(l, hs, lengths, w, in, out.template view<Outputs>(model.g, total));
        // The reference prefills each request on its own.
        int64_t at = 0;
        for (std::size_t k = 0; k < hs.size(); ++k) {
          Tokens one;
          for (int i = 0; i < lengths[k]; ++i) one.append(t, at + i);
          at += lengths[k];
          Out o;
          auto [w1, in1] = model.call(l, one);
          ref.prefill(l, live[live.size() - hs.size() + k].r, w1, in1,
                      o.template view<Outputs>(model.g, one.n));
        }
      }
    };

    arrive(3);
    for (int round = 0; round < rounds; ++round) {
      if (round % 4 == 1) arrive(1 + static_cast<int>(rng() % 2));
      // Parallel sampling: a request forks; both continue independently. Every 7th round from
      // round 3, and at the first round from 3 on with a live request until one has forked (long
      // drafts can finish every request before round 3 or 10).
      if ((round % 7 == 3 || (round >= 3 && forks == 0)) && !live.empty() &&
          pool.free_slots() > 0) {
        const Request& p = live[rng() % live.size()];
        live.push_back(Request{pool.fork(p.h), ref.fork(p.r), 6});
        ++forks;
      }
      if (live.empty()) continue;

      // Each request drafts its own number of tokens (0..max_draft): window 1 + drafts.
      spec::VerifyBatchBuilder builder({}, spec::Packing::kVariable);
      for (const Request& q : live) {
        builder.add(q.h, spec::Window::chain(1 + static_cast<int>(rng() % (max_draft + 1))));
      }
      const spec::BatchPlan plan = builder.build();
      pool.begin_verify(plan.batch);
      std::vector<Tokens> in(static_cast<std::size_t>(model.layers));
      for (int l = 0; l < model.layers; ++l) {
        in[l] = model.tokens(plan.num_tokens());  // packed: row r at plan.token_offsets[r]
        Out out;
        auto [w, inputs] = model.call(l, in[l]);
        pool.verify(l, w, inputs, out.template view<Outputs>(model.g, plan.num_tokens()));
      }
      verified += static_cast<int>(plan.num_tokens());
      // Acceptance (random here; spec::accept_greedy in a real engine): 1..T_r per row.
      std::vector<int32_t> lengths;
      for (int r = 0; r < plan.live_rows; ++r) {
        lengths.push_back(1 + static_cast<int32_t>(rng() % plan.windows[r].size()));
      }
      pool.commit(plan.commit_lengths(lengths));
      // The reference decodes the accepted tokens one at a time.
      for (int r = 0; r < plan.live_rows; ++r) {
        for (int i = 0; i < lengths[r]; ++i) {
          for (int l = 0; l < model.layers; ++l) {
            Tokens one;
            one.append(in[l], plan.token_offsets[r] + i);
            Out o;
            auto [w, inputs] = model.call(l, one);
            ref.decode(l, {live[r].r}, w, inputs, o.template view<Outputs>(model.g, 1));
          }
        }
        accepted_total += lengths[r];
        live[r].left -= lengths[r];
      }
      for (const Request& q : live) {
        if (state_of(pool, q.h) != state_of(ref, q.r)) {
          std::printf("FAIL: round %d: slot %d differs from the reference\n", round, q.h.slot);
          return 1;
        }
      }
      // Departures: finished requests release their slots.
      for (std::size_t i = live.size(); i-- > 0;) {
        if (live[i].left > 0) continue;
        pool.release(live[i].h);
        ref.release(live[i].r);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        ++departures;
      }
    }
    std::printf(
        "engine_loop: %s, %d rounds, strategy %s: %d arrivals, %d forks, %d departures; %d tokens "
        "verified (no filler), %d accepted\n",
        layer_kind_name(config.kind), rounds, strategy_name(strategy), arrivals, forks, departures,
        verified, accepted_total);
    // The self-check that the run covered the engine's events holds from kCoverageRounds rounds
    // on (every seed of 0..60 covers them in 10, at --max-draft 1..15, either kind); a shorter
    // run only checks the states.
    constexpr int kCoverageRounds = 10;
    if (arrivals < 4 || departures < 1 || forks < 1) {
      if (rounds >= kCoverageRounds) {
        std::printf("FAIL: the run exercised too little (arrivals, forks, departures)\n");
        return 1;
      }
      std::printf("note: %d rounds are too few to cover arrivals, forks and departures (%d+ do)\n",
                  rounds, kCoverageRounds);
    }
    std::printf("PASS: every request's state equals prefill + decode of its accepted tokens\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_loop: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 40, max_draft = 3;
  uint64_t seed = 1;
  std::string strategy = "replay", kind = "gdn";
  CLI::App app{
      "engine_loop: an engine's loop through specstate (arrivals with batched variable-length "
      "prefill, departures, forks, variable windows), checked against prefill + decode of every "
      "request's accepted tokens. Exit 0 pass, 1 mismatch, 2 bad arguments."};
  app.add_option("--rounds", rounds,
                 "speculative rounds (from 10 on, a run that covers no fork, departure or 4 "
                 "arrivals fails its self-check)")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(1, 100000));
  app.add_option("--seed", seed, "seed of the model, arrivals and drafts")
      ->transform(specstate::examples::unsigned_64());
  app.add_option("--max-draft", max_draft, "most drafted tokens a request proposes a round")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(0, 15));
  app.add_option("--strategy", strategy, "replay (default) or snapshot")
      ->check(CLI::IsMember({"snapshot", "replay"}));
  app.add_option("--kind", kind, "gdn (Gated DeltaNet, default) or kda (Kimi-Linear)")
      ->check(CLI::IsMember({"gdn", "kda"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  const Strategy s = strategy == "replay" ? Strategy::kReplay : Strategy::kSnapshot;
  return kind == "kda" ? run<KdaKind>(rounds, max_draft, seed, s)
                       : run<GdnKind>(rounds, max_draft, seed, s);
}
