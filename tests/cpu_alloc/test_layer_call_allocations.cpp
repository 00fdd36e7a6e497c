// The CPU backend's layer calls allocate no state-sized memory: run_rows keeps its working copies
// of a slot's state (the row's, the snapshots' in a non-canonical order, a replay window's tree
// states) from call to call. Allocating and zeroing them per call (3 + T slot states) made decode
// 2x slower; this test pins the cause, not the speed. Its own binary: it replaces the global
// operator new to count the bytes the calls allocate.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <string>

#include "common/caller_owned.h"
#include "common/gdn_data.h"
#include "specstate/spec/verify_batch.h"

namespace {
std::atomic<long long> g_allocated{0};
// Nonzero: an allocation of at least this many bytes throws std::bad_alloc (fault injection).
std::atomic<std::size_t> g_fail_at_least{0};
// Positive: the allocation that brings it to 0 throws std::bad_alloc (the N-th from when it was
// set to N; fault injection at every allocation of a call in turn).
std::atomic<long long> g_fail_countdown{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocated.fetch_add(static_cast<long long>(n), std::memory_order_relaxed);
  const std::size_t fail = g_fail_at_least.load(std::memory_order_relaxed);
  if (fail != 0 && n >= fail) throw std::bad_alloc();
  if (g_fail_countdown.load(std::memory_order_relaxed) > 0 &&
      g_fail_countdown.fetch_sub(1, std::memory_order_relaxed) == 1)
    throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

// free() itself, in this binary only (not under AddressSanitizer, which owns malloc): when the
// watched pointer is freed, the hook runs first (the pool-close test below); then glibc frees it.
#if !defined(__SANITIZE_ADDRESS__)
extern "C" void __libc_free(void* p);
namespace {
std::atomic<void*> g_watch_free{nullptr};
void (*g_on_free)() = nullptr;
thread_local bool g_in_free_hook = false;
}  // namespace
extern "C" void free(void* p) {
  if (p != nullptr && !g_in_free_hook && p == g_watch_free.load()) {
    g_in_free_hook = true;
    g_watch_free.store(nullptr);
    if (g_on_free) g_on_free();
    g_in_free_hook = false;
  }
  __libc_free(p);
}
#endif

namespace specstate::test {
namespace {

struct Case {
  const char* name;
  Strategy strategy;
  SsmLayout ssm_layout;
};
void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

class LayerCallAllocations : public ::testing::TestWithParam<Case> {};

// After a warm-up round, a round (begin_verify, every layer's verify, commit) and a decode step of
// every layer together allocate less than one slot's state of one layer.
TEST_P(LayerCallAllocations, StayBelowOneSlotStatePerCall) {
  const Case& c = GetParam();
  constexpr int L = 3, T = 4, B = 2;
  GdnConfig g = small_config();
  g.num_k_heads = 2;
  g.num_v_heads = 8;
  g.head_k_dim = 64;
  g.head_v_dim = 64;
  std::mt19937_64 rng(7);
  std::vector<LayerWeights> weights;
  std::vector<TokenInputs> inputs;
  std::vector<TokenOutputs> outputs;
  for (int l = 0; l < L; ++l) {
    weights.push_back(random_weights(g, rng));
    inputs.push_back(random_inputs(g, B * T, rng));
    outputs.push_back(make_outputs(g, B * T));
  }
  PoolOptions o;
  o.num_slots = B;
  o.max_rows = B;
  o.max_window = T;
  o.strategy = c.strategy;
  o.ssm_layout = c.ssm_layout;
  StatePool pool(ModelConfig::gated_delta_net(L, g), o);
  VerifyBatch batch;
  batch.window = T;
  for (int r = 0; r < B; ++r) batch.rows.push_back(pool.acquire());
  const std::vector<int32_t> accepted = {T - 1, 2};
  const auto round_and_decode = [&] {
    pool.begin_verify(batch);
    for (int l = 0; l < L; ++l) {
      pool.verify(l, weights[l].view(), inputs[l].view(), outputs[l].view());
    }
    pool.commit(accepted);
    for (int l = 0; l < L; ++l) {
      pool.decode(l, batch.rows, weights[l].view(), inputs[l].rows(0, B), outputs[l].rows(0, B));
    }
  };
  round_and_decode();  // warm-up: the backend's working states are sized here
  const long long before = g_allocated.load();
  constexpr int kRepeats = 3;
  for (int i = 0; i < kRepeats; ++i) round_and_decode();
  const long long per_call = (g_allocated.load() - before) / (kRepeats * 2 * L);
  const long long state = pool.committed_bytes() / (int64_t{L} * B);  // one slot, one layer
  EXPECT_LT(per_call, state) << c.name << ": " << per_call << " bytes a layer call, a slot's "
                             << "layer state is " << state << " bytes";
  // Not vacuous: the calls ran (the outputs are not all zeros).
  double sum = 0;
  for (int64_t i = 0; i < outputs[0].core_out.numel(); ++i)
    sum += std::abs(outputs[0].core_out.get(i));
  EXPECT_GT(sum, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Cpu, LayerCallAllocations,
                         ::testing::Values(Case{"snapshot", Strategy::kSnapshot, SsmLayout::kVK},
                                           Case{"replay", Strategy::kReplay, SsmLayout::kVK},
                                           Case{"snapshot_kv", Strategy::kSnapshot, SsmLayout::kKV},
                                           Case{"replay_kv", Strategy::kReplay, SsmLayout::kKV}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace specstate::test

namespace specstate::test {
namespace {

// VerifyBatchBuilder::add() that fails to allocate (its copy of the window) changes nothing: it
// had pushed the handle first, so the builder held a row without a window (build() read past
// the windows) and the same slot could be added again.
TEST(VerifyBatchBuilderAllocations, AnAddThatCannotAllocateChangesNothing) {
  using spec::VerifyBatchBuilder;
  using spec::Window;
  for (const spec::Packing packing : {spec::Packing::kPadded, spec::Packing::kVariable}) {
    VerifyBatchBuilder b({}, packing);
    b.add(SlotHandle{0, 1, 42}, Window::chain(2));
    std::vector<int32_t> parents(4096);
    for (int t = 0; t < 4096; ++t) parents[static_cast<std::size_t>(t)] = t / 2 - (t == 0);
    const Window tree = Window::from_parents(parents);  // 16 KiB of parents to copy
    g_fail_at_least.store(4096);
    bool threw = false;
    try {
      b.add(SlotHandle{1, 1, 42}, tree);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    g_fail_at_least.store(0);
    ASSERT_TRUE(threw);
    EXPECT_EQ(b.size(), 1);
    EXPECT_EQ(b.add(SlotHandle{1, 1, 42}, tree), 1);  // not "already row 1 of this batch"
    const spec::BatchPlan plan = b.build();
    ASSERT_EQ(plan.windows.size(), 2u);
    EXPECT_EQ(plan.windows[1].size(), 4096);
    EXPECT_EQ(plan.batch.rows[1].slot, 1);
  }
}

}  // namespace
}  // namespace specstate::test

namespace specstate::test {
namespace {

// `call` run with its n-th allocation failing (std::bad_alloc): whether it threw (bad_alloc, or a
// specstate::Error, which must then say kResourceExhausted), and whether the n-th allocation was
// reached (false: the call made fewer than n, so every one of its allocations has been failed).
struct Injected {
  bool threw = false, reached = false;
};
template <typename Fn>
Injected with_allocation_failing(long long n, Fn&& call) {
  Injected r;
  g_fail_countdown.store(n);
  try {
    call();
  } catch (const std::bad_alloc&) {
    r.threw = true;
  } catch (const Error& e) {
    r.threw = true;
    EXPECT_EQ(e.status(), Status::kResourceExhausted) << e.what();
  }
  r.reached = g_fail_countdown.load() <= 0;
  g_fail_countdown.store(0);
  return r;
}

}  // namespace
}  // namespace specstate::test

namespace specstate::test {
namespace {

// release() of a round's row that fails to allocate, at each of its allocations in turn, changes
// nothing: the row is still the request's and the handle live. It turned the row into padding,
// then freed the slot, whose free-run entry could fail to allocate: the handle stayed live beside
// a padding row (its verify outputs no longer committed), and the error was a bare bad_alloc.
// The allocator now allocates that entry when the slot is taken (SlotAllocator::free allocates
// nothing).
TEST(ReleaseAllocations, AReleaseThatCannotAllocateChangesNothing) {
  const GdnConfig g = small_config();
  for (const Strategy strategy : {Strategy::kSnapshot, Strategy::kReplay}) {
    bool released = false;
    for (long long n = 1; n <= 256 && !released; ++n) {
      std::mt19937_64 rng(11);
      const LayerWeights w = random_weights(g, rng);
      const TokenInputs in = random_inputs(g, 3 * 2, rng);
      TokenOutputs out = make_outputs(g, 3 * 2);
      PoolOptions o;
      o.num_slots = 3;
      o.max_rows = 3;
      o.max_window = 2;
      o.strategy = strategy;
      StatePool pool(ModelConfig::gated_delta_net(1, g), o);
      VerifyBatch batch;
      batch.window = 2;
      for (int r = 0; r < 3; ++r) batch.rows.push_back(pool.acquire());
      pool.begin_verify(batch);
      pool.verify(0, w.view(), in.view(), out.view());
      // Slot 1 between two live slots: freeing it needs a new free run.
      const SlotHandle h = batch.rows[1];
      const Injected r = with_allocation_failing(n, [&] { pool.release(h); });
      if (r.threw) {
        ASSERT_TRUE(r.reached) << "release failed without an injected failure";
        EXPECT_TRUE(pool.is_live(h)) << "allocation " << n;
        EXPECT_EQ(pool.current_batch().rows[1], h) << "allocation " << n;
        EXPECT_EQ(pool.free_slots(), 0) << "allocation " << n;
      } else {
        EXPECT_FALSE(pool.is_live(h));
        EXPECT_TRUE(pool.current_batch().rows[1].is_padding());
        EXPECT_EQ(pool.free_slots(), 1);
        released = !r.reached;  // every allocation of the call has been failed in turn
      }
      pool.commit(std::vector<int32_t>{1, 0, 2});  // the round still commits
      if (pool.is_live(h)) pool.release(h);
      EXPECT_EQ(pool.acquire().slot, 1) << "allocation " << n;
    }
    EXPECT_TRUE(released);
  }
}

}  // namespace
}  // namespace specstate::test

namespace specstate::test {
namespace {

// Building a pool that fails to allocate, at each of its allocations in turn, leaves nothing
// behind: the process goes on (close_round, noexcept, allocated the verified-layer flags: a
// bad_alloc there ended in std::terminate), the error is the allocation's, and a pool over the
// same caller memory is built afterwards.
TEST(PoolConstructionAllocations, AConstructionThatCannotAllocateLeavesNothingBehind) {
  const GdnConfig g = small_config();
  const ModelConfig model = ModelConfig::gated_delta_net(2, g);
  for (const Strategy strategy : {Strategy::kSnapshot, Strategy::kReplay}) {
    PoolOptions o;
    o.num_slots = 2;
    o.max_rows = 2;
    o.max_window = 2;
    o.strategy = strategy;
    auto mem = host_memory();
    const CallerMemory caller = make_caller_memory(model, o, CallerLayout::kOneTensor, *mem, 5);
    for (const bool caller_owned : {false, true}) {
      bool built = false;
      int failures = 0;
      for (long long n = 1; n <= 400 && !built; ++n) {
        const Injected r = with_allocation_failing(n, [&] {
          if (caller_owned) {
            StatePool pool(model, o, caller.views);
          } else {
            StatePool pool(model, o);
          }
        });
        failures += r.threw;
        built = !r.reached;
        // Nothing of the failed pool is claimed: a pool over the same caller memory is built.
        EXPECT_NO_THROW({ StatePool again(model, o, caller.views); }) << "allocation " << n;
      }
      EXPECT_TRUE(built);
      EXPECT_GT(failures, 10) << "the constructions allocated almost nothing";
    }
  }
}

// A pool's memory leaves the registry of committed memory before it is freed: freed first,
// another thread's allocator could hand it out at once, and a pool built over it was refused as
// overlapping the dying pool ("which is alive"; a review reproduced it with two threads, 4,055
// refusals in 10 s). Deterministic here: at the free of the dying pool's SSM buffer, a pool is
// built over that very memory, as another thread would once the allocator had handed it out.
TEST(PoolClose, TheRegistryLetsGoOfAPoolsMemoryBeforeItIsFreed) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "replaces free(), which AddressSanitizer owns";
#else
  const GdnConfig g = tiny_config();  // f32 states
  const ModelConfig model = ModelConfig::gated_delta_net(1, g);
  PoolOptions o;
  o.num_slots = 2;
  static std::vector<float> conv;
  conv.assign(static_cast<std::size_t>(2 * model.conv_dim() * (g.conv_width - 1)), 0.0f);
  static std::string outcome;
  static void* watched = nullptr;
  static const ModelConfig* model_p = nullptr;
  static const PoolOptions* options_p = nullptr;
  static const GdnConfig* g_p = nullptr;
  outcome = "the dying pool's SSM buffer was never freed";
  model_p = &model;
  options_p = &o;
  g_p = &g;
  g_on_free = [] {
    CommittedStateViews v;
    v.conv.push_back(TensorView::contiguous(conv.data(), DType::kF32,
                                            {2, model_p->conv_dim(), g_p->conv_width - 1}));
    v.ssm.push_back(TensorView::contiguous(
        watched, DType::kF32, {2, g_p->num_v_heads, g_p->head_v_dim, g_p->head_k_dim}));
    try {
      StatePool next(*model_p, *options_p, v);
      outcome = "built";
    } catch (const std::exception& e) {
      outcome = e.what();
    }
  };
  {
    StatePool dying(model, o);
    watched = dying.ssm_state(0).data;  // the start of its SSM buffer (one layer)
    g_watch_free.store(watched);
  }
  g_watch_free.store(nullptr);
  g_on_free = nullptr;
  EXPECT_EQ(outcome, "built");
#endif
}

}  // namespace
}  // namespace specstate::test
