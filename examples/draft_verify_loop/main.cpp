// draft_verify_loop: greedy speculative decoding of a tiny synthetic hybrid model through
// specstate, checked against plain autoregressive decoding.
//
//   draft_verify_loop [--window T] [--requests R] [--new-tokens N] [--noise EPS] [--seed S]
//                     [--branch] [--kind gdn|kda]
//
// --branch drafts a tree: the chain of T-1 drafts plus, at every depth, the drafter's second
// choice beside it (2T-1 window tokens, verified and committed as a tree). --kind kda makes the
// recurrent layers Kimi-Linear's KDA (the gate per key channel) instead of Gated DeltaNet.
//
// Exit status 0 when the speculative run emitted exactly the autoregressive tokens and left
// bit-identical committed states and KV caches; 1 otherwise; 2 for bad arguments.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "cli_checks.h"
#include "hybrid_model.h"

int main(int argc, char** argv) {
  using namespace draft_verify_loop;
  LoopOptions o;
  ModelShape shape;
  std::string kind = "gdn";
  CLI::App app{
      "draft_verify_loop: greedy speculative decoding of a tiny synthetic hybrid model through "
      "specstate, checked against plain autoregressive decoding. Exit 0 pass, 1 mismatch, 2 bad "
      "arguments."};
  app.add_option("--window", o.window, "T: root + T-1 drafts per round")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(1, 16));
  app.add_option("--requests", o.requests, "requests decoded together")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(1, 64));
  app.add_option("--new-tokens", o.new_tokens,
                 "tokens each request emits at least (a round keeps every token it accepts: up to "
                 "T - 1 more). The run is single-threaded and its time grows faster than "
                 "linearly in it (attention over the whole cache): 4096 with --requests 4 "
                 "--window 16 --branch --noise 10 takes minutes, the largest accepted run about "
                 "an hour")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(1, 4096));
  app.add_option("--noise", o.draft_noise, "the drafter's perturbation of the target's weights")
      ->check(specstate::examples::finite_range(0.0, 10.0));
  app.add_option("--seed", o.seed, "seed of the model, prompts and drafter")
      ->transform(specstate::examples::unsigned_64());
  app.add_flag("--branch", o.branch,
               "draft a tree: the chain plus the drafter's second choice at every depth");
  app.add_option("--kind", kind, "gdn (Gated DeltaNet, default) or kda (Kimi-Linear)")
      ->check(CLI::IsMember({"gdn", "kda"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  shape.kda = kind == "kda";
  try {
    const HybridModel target(shape, o.seed);
    const HybridModel drafter = target.perturbed(o.draft_noise, o.seed + 1);
    std::printf(
        "model: vocab %d, d_model %d, %zu layers (%d %s through specstate, "
        "%d attention with a KV cache)\n",
        target.shape().vocab, target.shape().d_model, target.shape().layers.size(),
        target.num_gdn_layers(), shape.kda ? "KDA" : "Gated DeltaNet",
        target.num_attention_layers());
    std::printf(
        "loop: %d requests, %s window of depth T=%d, at least %d new tokens each, drafter noise "
        "%.3g, "
        "seed %llu\n",
        o.requests, o.branch ? "tree" : "chain", o.window, o.new_tokens, o.draft_noise,
        static_cast<unsigned long long>(o.seed));

    const LoopResult spec = run_speculative(target, drafter, o);
    std::vector<int> lengths;
    for (const auto& t : spec.tokens) lengths.push_back(static_cast<int>(t.size()));
    const LoopResult plain = run_autoregressive(target, o, lengths);

    int64_t total = 0, rounds = 0;
    for (std::size_t a = 0; a < spec.accepted_histogram.size(); ++a) {
      total += static_cast<int64_t>(a) * spec.accepted_histogram[a];
      rounds += spec.accepted_histogram[a];
    }
    std::printf(
        "speculative: %d rounds (%d padding rows), %.2f tokens per request-round; "
        "accepted-length histogram:",
        spec.rounds, spec.padding_rows, rounds ? double(total) / rounds : 0.0);
    for (std::size_t a = 0; a < spec.accepted_histogram.size(); ++a) {
      std::printf(" a=%zu:%lld", a, static_cast<long long>(spec.accepted_histogram[a]));
    }
    std::printf("\nautoregressive: %d decode steps\n", plain.rounds);

    bool ok = true;
    for (int r = 0; r < o.requests; ++r) {
      const bool same_tokens = spec.tokens[r] == plain.tokens[r];
      const bool same_state = spec.states[r] == plain.states[r];
      const bool same_cache = spec.caches[r] == plain.caches[r];
      ok = ok && same_tokens && same_state && same_cache;
      std::printf("request %d: %zu tokens:", r, spec.tokens[r].size());
      for (int32_t t : spec.tokens[r]) std::printf(" %d", t);
      std::printf("\n  tokens %s, committed state (%zu bytes) %s, KV cache %s\n",
                  same_tokens ? "identical" : "DIFFER", spec.states[r].size(),
                  same_state ? "bit-identical" : "DIFFERS", same_cache ? "identical" : "DIFFERS");
    }
    std::printf("%s: speculative decoding %s plain autoregressive decoding\n", ok ? "PASS" : "FAIL",
                ok ? "reproduces" : "does NOT reproduce");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "draft_verify_loop: %s\n", e.what());
    return 1;
  }
}
