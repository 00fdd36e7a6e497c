// libFuzzer target: random StatePool API sequences (valid and invalid calls) against a shadow pool
// that only decodes (pool_driver.h states the oracle). The bytes choose the layer kind (Gated
// DeltaNet or Mamba2), the config, the pool shape and memory (owned, caller-owned, vLLM-paged) and
// every call; any oracle violation or any exception other than a rejection aborts. At exit it
// prints what the inputs covered.
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "pool_driver.h"

namespace {

struct Coverage {
  specstate::fuzz::DriverStats total;
  long long inputs = 0;
  ~Coverage() {
    const auto& s = total;
    std::printf(
        "fuzz_api: %lld inputs, %lld ops, %lld rounds (%lld tree, %lld aborted), %lld rejected "
        "calls; %lld Mamba2 runs, %lld KDA runs (the others Gated DeltaNet), %lld caller-owned "
        "runs (%lld "
        "vLLM-paged), %lld in vLLM's element order, %lld lazy replay runs; %lld re-adopted "
        "after release (%lld mid-round), %lld adopted as written, %lld releases with steps "
        "pending, %lld materialize calls (%lld slots with steps pending), %lld calls with "
        "poisoned weights, %lld misaligned views, %lld wrong layer arguments, %lld duplicate "
        "materializes and %lld adopts rejected; %lld slot-layer comparisons\n",
        inputs, static_cast<long long>(s.ops), static_cast<long long>(s.rounds),
        static_cast<long long>(s.tree_rounds), static_cast<long long>(s.aborted),
        static_cast<long long>(s.rejected), static_cast<long long>(s.mamba2_runs),
        static_cast<long long>(s.kda_runs), static_cast<long long>(s.caller_runs),
        static_cast<long long>(s.paged_runs), static_cast<long long>(s.vllm_order_runs),
        static_cast<long long>(s.lazy_runs), static_cast<long long>(s.adopted),
        static_cast<long long>(s.adopted_mid_round), static_cast<long long>(s.adopted_written),
        static_cast<long long>(s.released_pending), static_cast<long long>(s.materialized),
        static_cast<long long>(s.materialized_pending), static_cast<long long>(s.poisoned_calls),
        static_cast<long long>(s.misaligned_rejected),
        static_cast<long long>(s.bad_argument_rejected),
        static_cast<long long>(s.duplicate_materialize_rejected),
        static_cast<long long>(s.adopt_rejected), static_cast<long long>(s.compared_slots));
  }
};
Coverage coverage;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  specstate::fuzz::ByteSource src(data, size);
  specstate::fuzz::PoolDriver driver(src);
  for (int i = 0; i < 256 && driver.step(); ++i) {
  }
  driver.finish();
  coverage.total.add(driver.stats());
  ++coverage.inputs;
  return 0;
}
