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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "hybrid_model.h"

namespace {

int usage(const char* message, const char* arg) {
  std::fprintf(stderr, "draft_verify_loop: %s: %s\n", message, arg);
  std::fprintf(stderr,
               "usage: draft_verify_loop [--window T] [--requests R] [--new-tokens N] "
               "[--noise EPS] [--seed S] [--branch] [--kind gdn|kda]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace draft_verify_loop;
  LoopOptions o;
  ModelShape shape;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: draft_verify_loop [--window T] [--requests R] [--new-tokens N] "
          "[--noise EPS] [--seed S] [--branch] [--kind gdn|kda]\n");
      return 0;
    }
    if (arg == "--branch") {
      o.branch = true;
      continue;
    }
    if (arg == "--kind") {
      if (i + 1 >= argc) return usage("missing value for", argv[i]);
      const std::string kind = argv[++i];
      if (kind != "gdn" && kind != "kda") return usage("--kind must be gdn or kda, not", argv[i]);
      shape.kda = kind == "kda";
      continue;
    }
    if (i + 1 >= argc) return usage("missing value for", argv[i]);
    const char* value = argv[++i];
    char* end = nullptr;
    const double v = std::strtod(value, &end);
    if (end == value || *end != '\0') return usage("not a number", value);
    if (arg == "--window" && v >= 1 && v <= 16 && v == int(v)) {
      o.window = static_cast<int>(v);
    } else if (arg == "--requests" && v >= 1 && v <= 64 && v == int(v)) {
      o.requests = static_cast<int>(v);
    } else if (arg == "--new-tokens" && v >= 1 && v <= 4096 && v == int(v)) {
      o.new_tokens = static_cast<int>(v);
    } else if (arg == "--noise" && v >= 0 && v <= 10) {
      o.draft_noise = static_cast<float>(v);
    } else if (arg == "--seed" && v >= 0 && v == double(uint64_t(v))) {
      o.seed = static_cast<uint64_t>(v);
    } else {
      return usage("bad argument or value out of range", (arg + " " + value).c_str());
    }
  }
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
        "loop: %d requests, %s window of depth T=%d, %d new tokens each, drafter noise %.3g, "
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
