// Soak test: many random speculative rounds (chains, trees, padding rows, a = 0, requests arriving
// and departing, prefill and decode in between) on the CPU backend, every commit compared bit for
// bit with sequential decode of the accepted tokens in a shadow pool (tests/fuzz/pool_driver.h).
//
//   specstate_soak [ROUNDS] [SEED]      ROUNDS defaults to $SPECSTATE_SOAK_ROUNDS, else 100000
//
// The driver draws a new small config (heads, K, V, W, conv bias, dtypes, layers, pool shape)
// for every block of rounds, so one run covers many configs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pool_driver.h"

int main(int argc, char** argv) {
  long long rounds = 100000;
  if (const char* env = std::getenv("SPECSTATE_SOAK_ROUNDS")) rounds = std::atoll(env);
  if (argc > 1) rounds = std::atoll(argv[1]);
  const unsigned long long seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20250801ull;
  if (rounds <= 0) {
    std::fprintf(stderr, "specstate_soak: ROUNDS must be > 0\n");
    return 2;
  }
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
    const auto& s = driver.stats();
    done += s.rounds;
    total.ops += s.ops;
    total.rejected += s.rejected;
    total.tree_rounds += s.tree_rounds;
    total.padded_rows += s.padded_rows;
    total.acquired += s.acquired;
    total.released += s.released;
    total.compared_slots += s.compared_slots;
    total.aborted += s.aborted;
    total.released_mid_round += s.released_mid_round;
    total.varlen_rounds += s.varlen_rounds;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "specstate_soak: %lld rounds (%lld tree, %lld variable windows, %lld aborted) over %d "
      "configs, seed %llu: %lld "
      "ops, %lld rejected calls, %lld padding rows, %lld arrivals, %lld departures (%lld "
      "mid-round), %lld slot-layer comparisons, all bit-exact, %.1f s\n",
      done, static_cast<long long>(total.tree_rounds), static_cast<long long>(total.varlen_rounds),
      static_cast<long long>(total.aborted), configs, seed, static_cast<long long>(total.ops),
      static_cast<long long>(total.rejected), static_cast<long long>(total.padded_rows),
      static_cast<long long>(total.acquired), static_cast<long long>(total.released),
      static_cast<long long>(total.released_mid_round),
      static_cast<long long>(total.compared_slots), secs);
  if (total.tree_rounds == 0 || total.rejected == 0 || total.padded_rows == 0 ||
      total.varlen_rounds == 0) {
    std::fprintf(stderr,
                 "specstate_soak: the run did not cover trees, rejections, padding and variable "
                 "windows\n");
    return 1;
  }
  return 0;
}
