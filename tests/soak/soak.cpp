// Soak test: many random speculative rounds (chains, trees, padding rows, a = 0, requests arriving
// and departing, prefill and decode in between) on the CPU backend, every commit compared bit for
// bit with sequential decode of the accepted tokens in a shadow pool (tests/fuzz/pool_driver.h).
//
//   specstate_soak [ROUNDS] [SEED]      ROUNDS defaults to $SPECSTATE_SOAK_ROUNDS, else 100000
//
// The driver draws a new small config (the layer kind, Gated DeltaNet, Mamba2 or KDA, then its
// heads, head and state sizes, W, optional arguments, dtypes, layers, pool shape, strategy, owned /
// caller-owned / vLLM-paged memory, element order, lazy comparisons) for every block of rounds, so
// one run covers many configs of every kind.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pool_driver.h"

namespace {

// A whole decimal number, or false (empty, signs, trailing characters, out of range).
bool parse_count(const char* text, unsigned long long* value) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  char* end = nullptr;
  errno = 0;
  *value = std::strtoull(text, &end, 10);
  return errno == 0 && *end == '\0';
}

int usage(const char* what, const char* value) {
  std::fprintf(stderr,
               "specstate_soak: %s = '%s' is not a positive whole number\n"
               "usage: specstate_soak [ROUNDS] [SEED]  (ROUNDS: $SPECSTATE_SOAK_ROUNDS, else "
               "100000)\n",
               what, value);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned long long rounds_arg = 100000, seed = 20250801ull;
  if (const char* env = std::getenv("SPECSTATE_SOAK_ROUNDS")) {
    if (!parse_count(env, &rounds_arg)) return usage("SPECSTATE_SOAK_ROUNDS", env);
  }
  if (argc > 1 && !parse_count(argv[1], &rounds_arg)) return usage("ROUNDS", argv[1]);
  if (argc > 2 && !parse_count(argv[2], &seed)) return usage("SEED", argv[2]);
  if (argc > 3) {
    std::fprintf(stderr,
                 "specstate_soak: unexpected argument '%s' (usage: specstate_soak [ROUNDS] "
                 "[SEED])\n",
                 argv[3]);
    return 2;
  }
  if (rounds_arg == 0 || rounds_arg > (1ull << 40)) {
    return usage("ROUNDS", argc > 1 ? argv[1] : std::getenv("SPECSTATE_SOAK_ROUNDS"));
  }
  const auto rounds = static_cast<long long>(rounds_arg);
  constexpr long long kRoundsPerConfig = 500;
  const auto start = std::chrono::steady_clock::now();
  specstate::fuzz::DriverStats total;
  long long done = 0;
  int configs = 0;
  for (unsigned long long block = 0; done < rounds; ++block) {
    specstate::fuzz::RngSource src(seed * 1000003ull + block);
    specstate::fuzz::PoolDriver driver(src);
    ++configs;
    const long long target = std::min(rounds - done, kRoundsPerConfig);
    while (driver.stats().rounds < target) driver.step();
    driver.finish();
    const auto& s = driver.stats();
    done += s.rounds;
    total.add(s);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "specstate_soak: %lld rounds (%lld tree, %lld variable windows, %lld aborted) over %d "
      "configs (%lld Mamba2, %lld KDA, the others Gated DeltaNet), seed %llu: %lld "
      "ops, %lld rejected calls, %lld padding rows, %lld arrivals, %lld departures (%lld "
      "mid-round), %lld slot-layer comparisons, all bit-exact, %.1f s\n",
      done, static_cast<long long>(total.tree_rounds), static_cast<long long>(total.varlen_rounds),
      static_cast<long long>(total.aborted), configs, static_cast<long long>(total.mamba2_runs),
      static_cast<long long>(total.kda_runs), seed, static_cast<long long>(total.ops),
      static_cast<long long>(total.rejected), static_cast<long long>(total.padded_rows),
      static_cast<long long>(total.acquired), static_cast<long long>(total.released),
      static_cast<long long>(total.released_mid_round),
      static_cast<long long>(total.compared_slots), secs);
  std::printf(
      "specstate_soak: hostile draws: %lld caller-owned configs (%lld vLLM-paged), %lld lazy "
      "replay configs (%lld with R = 2T, %lld with R = 3T + 1 or 40); %lld re-adopted after "
      "release (%lld mid-round), %lld adopted as written, "
      "%lld releases with steps pending, %lld materialize calls (%lld slots with steps pending), "
      "%lld calls with poisoned weights; rejected: %lld misaligned views, %lld wrong layer "
      "arguments, %lld duplicate materializes, %lld adopts\n",
      static_cast<long long>(total.caller_runs), static_cast<long long>(total.paged_runs),
      static_cast<long long>(total.lazy_runs), static_cast<long long>(total.ring_2t_runs),
      static_cast<long long>(total.long_ring_runs), static_cast<long long>(total.adopted),
      static_cast<long long>(total.adopted_mid_round),
      static_cast<long long>(total.adopted_written), static_cast<long long>(total.released_pending),
      static_cast<long long>(total.materialized),
      static_cast<long long>(total.materialized_pending),
      static_cast<long long>(total.poisoned_calls),
      static_cast<long long>(total.misaligned_rejected),
      static_cast<long long>(total.bad_argument_rejected),
      static_cast<long long>(total.duplicate_materialize_rejected),
      static_cast<long long>(total.adopt_rejected));
  // Bit-exact comparisons of all-zero states or outputs would pass whatever the pools did.
  std::printf(
      "specstate_soak: %lld of %lld compared slot-layers hold a nonzero SSM state, %lld of "
      "%lld compared verify rows a nonzero output\n",
      static_cast<long long>(total.nonzero_slots), static_cast<long long>(total.compared_slots),
      static_cast<long long>(total.nonzero_rows), static_cast<long long>(total.compared_rows));
  if (total.compared_slots == 0 || total.nonzero_slots * 2 < total.compared_slots ||
      total.compared_rows == 0 || total.nonzero_rows * 2 < total.compared_rows) {
    std::fprintf(stderr,
                 "specstate_soak: fewer than half of the compared states or outputs were "
                 "nonzero: the comparisons prove little\n");
    return 1;
  }
  if (total.tree_rounds == 0 || total.rejected == 0 || total.padded_rows == 0 ||
      total.varlen_rounds == 0) {
    std::fprintf(stderr,
                 "specstate_soak: the run did not cover trees, rejections, padding and variable "
                 "windows\n");
    return 1;
  }
  // The hostile draws (issue 20): a run long enough for a few configs of each kind covers them.
  if (configs >= 20 &&
      (total.caller_runs == 0 || total.paged_runs == 0 || total.lazy_runs == 0 ||
       total.adopted == 0 || total.adopted_mid_round == 0 || total.adopted_written == 0 ||
       total.released_pending == 0 || total.materialized_pending == 0 ||
       total.poisoned_calls == 0 || total.misaligned_rejected == 0 ||
       total.bad_argument_rejected == 0 || total.mamba2_runs == 0 || total.kda_runs == 0 ||
       total.mamba2_runs + total.kda_runs == configs || total.duplicate_materialize_rejected == 0 ||
       total.adopt_rejected == 0 || total.ring_2t_runs == 0 || total.long_ring_runs == 0)) {
    std::fprintf(
        stderr,
        "specstate_soak: the run did not cover the three layer kinds, caller-owned and paged "
        "pools, re-adopts "
        "(mid-round too), adopts of written slots, releases and materializes with steps "
        "pending, poisoned weights, misaligned views, wrong layer arguments, duplicate "
        "materializes, rejected adopts and replay rings of 2T and longer\n");
    return 1;
  }
  return 0;
}
