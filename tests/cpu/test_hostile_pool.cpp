// Regression tests for the pool-side defects of issue 8 (2: size overflow, 5: token counts
// beyond int, 9: aliasing output views and wrapping strides, 8: a pool that cannot fit is refused
// before memory is touched). The fixes live in lib/layout.cpp (overflow-checked sizes),
// lib/pool.cpp (token counts, aliasing outputs), lib/validate.cpp (view spans) and the backends'
// can_implement (memory that cannot fit); these tests use only the public API.
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/address_limit.h"
#include "common/gdn_data.h"
#include "specstate/specstate.h"

namespace specstate {
namespace {

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

using test::tiny_config;  // common/gdn_data.h

// Defect 2: conv_dim() = 2*H*K + HV*V overflows int at K = 2^30; the pool must refuse the config
// with kInvalidArgument naming the field, before any allocation.
TEST(HostilePool, ConfigWhoseSizesOverflowIsRejected) {
  GdnConfig g = tiny_config();
  g.head_k_dim = 1 << 30;
  try {
    StatePool pool(ModelConfig::gated_delta_net(1, g), PoolOptions{});
    FAIL() << "a pool with head_k_dim = 2^30 was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
    EXPECT_TRUE(contains(e.what(), "head_k_dim")) << e.what();
  }
}

// The configs' size accessors of a config that does not validate saturate instead of overflowing
// (signed overflow is undefined: UBSan stopped at config.h's products, and conv_dim() of a GDN
// config of INT_MAX fields returned -4611686031312289789).
TEST(HostilePool, SizeAccessorsOfAnUnvalidatedConfigSaturate) {
  constexpr int64_t kMax = INT64_MAX, kMin = INT64_MIN;
  GdnConfig g;
  g.num_k_heads = g.num_v_heads = g.head_k_dim = g.head_v_dim = g.conv_width = INT32_MAX;
  EXPECT_EQ(g.conv_dim(), kMax);
  EXPECT_EQ(g.ssm_state_elems(), kMax);
  const ModelConfig m = ModelConfig::gated_delta_net(INT32_MAX, g);
  EXPECT_EQ(m.conv_state_elems(), kMax);
  EXPECT_EQ(m.slot_bytes(), kMax);
  g.num_v_heads = INT32_MIN;  // negative: saturated below
  EXPECT_EQ(g.ssm_state_elems(), kMin);
  KdaConfig k;
  k.num_k_heads = k.num_v_heads = k.head_k_dim = k.head_v_dim = INT32_MAX;
  EXPECT_EQ(k.conv_dim(), kMax);
  EXPECT_EQ(k.ssm_state_elems(), kMax);
  Mamba2Config m2;
  m2.num_heads = m2.head_dim = m2.d_state = m2.n_groups = INT32_MAX;
  m2.conv_width = INT32_MIN;
  EXPECT_EQ(m2.conv_dim(), kMax);
  EXPECT_EQ(m2.ssm_state_elems(), kMax);
  EXPECT_EQ(ModelConfig::mamba2(2, m2).conv_state_elems(), kMin);
  // Fields of mixed signs: exact where the value fits, saturated by the exact value's sign (each
  // step saturated on its own gave INT64_MAX + INT64_MIN = -1 and the like).
  GdnConfig mixed;
  mixed.num_k_heads = mixed.head_k_dim = mixed.num_v_heads = INT32_MIN;
  mixed.head_v_dim = INT32_MAX;
  EXPECT_EQ(mixed.conv_dim(), int64_t{4611686020574871552});  // 2^62 + 2^31, exact
  mixed.num_k_heads = mixed.head_k_dim = mixed.conv_width = INT32_MAX;
  mixed.head_v_dim = (1 << 30) + 1;
  EXPECT_EQ(ModelConfig::gated_delta_net(36, mixed).slot_bytes(), kMax);  // about +3.6e29
  // A valid config's sizes are exact, as before.
  const GdnConfig q;  // Qwen3-Next at TP1
  EXPECT_EQ(q.conv_dim(), 8192);
  EXPECT_EQ(ModelConfig::gated_delta_net(36, q).slot_bytes(),
            36 * (8192 * 3 * 2 + int64_t{32} * 128 * 128 * 4));
  EXPECT_THROW(m.validate(), Error);
}

// Defect 2: the scratch size (max_rows * max_window * state bytes * layers) overflows int64 and
// used to wrap to a tiny buffer that one verify then overran.
TEST(HostilePool, ScratchSizeOverflowIsRejected) {
  // A slot of 2^40 bytes (under the 2^48 bound on one slot) and rows x window at the options'
  // bound (kMaxRoundTokens): 2^74 bytes of snapshot scratch, which only the size arithmetic can
  // catch.
  GdnConfig g = tiny_config();
  g.num_v_heads = 1 << 10;
  g.num_k_heads = 1 << 10;
  g.head_k_dim = 1 << 10;
  g.head_v_dim = 1 << 10;
  PoolOptions o;
  o.max_rows = static_cast<int>(PoolOptions::kMaxRoundTokens / PoolOptions::kMaxWindow);
  o.max_window = PoolOptions::kMaxWindow;
  try {
    StatePool pool(ModelConfig::gated_delta_net(1 << 8, g), o);
    FAIL() << "an impossible pool was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
    EXPECT_TRUE(contains(e.what(), "overflows")) << e.what();
  }
}

// max_window = 2^20 was accepted and sized a workspace of gigabytes for windows that no
// spec::Window can hold (kMaxWindowNodes); max_rows likewise past spec::kMaxBatchRows. Both are
// rejected by name, before any allocation, on either strategy.
TEST(HostilePool, RowsAndWindowPastTheirBoundsAreRejectedByName) {
  struct Case {
    int rows, window;
    const char* what;
  };
  for (const Strategy strategy : {Strategy::kSnapshot, Strategy::kReplay}) {
    for (const Case& c : {Case{1, PoolOptions::kMaxWindow + 1,
                               "options.max_window = 65537 is "
                               "larger than PoolOptions::"
                               "kMaxWindow = 65536"},
                          Case{PoolOptions::kMaxRows + 1, 1,
                               "options.max_rows = 1048577 is "
                               "larger than PoolOptions::kMaxRows "
                               "= 1048576"},
                          Case{1, 1 << 20, "options.max_window = 1048576"},
                          // Each within its bound, the round past kMaxRoundTokens: 2^27 parents
                          // on the host for any round (int32 token offsets could wrap past 2^31).
                          Case{1 << 11, PoolOptions::kMaxWindow,
                               "options.max_rows x options.max_window = 2048 x 65536 = 134217728 "
                               "tokens a round, more than PoolOptions::kMaxRoundTokens = "
                               "67108864"}}) {
      PoolOptions o;
      o.strategy = strategy;
      o.max_rows = c.rows;
      o.max_window = c.window;
      try {
        StatePool pool(ModelConfig::gated_delta_net(1, tiny_config()), o);
        FAIL() << "a pool with max_rows = " << c.rows << ", max_window = " << c.window;
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
        EXPECT_TRUE(contains(e.what(), c.what)) << e.what();
      }
    }
    // Below them a pool is built as before.
    PoolOptions o;
    o.strategy = strategy;
    o.max_window = 64;
    StatePool pool(ModelConfig::gated_delta_net(1, tiny_config()), o);
    EXPECT_EQ(pool.options().max_window, 64);
    if (strategy == Strategy::kReplay) {
      // At the round bound exactly (replay's workspace does not grow with rows).
      o.max_rows = 1 << 10;
      o.max_window = PoolOptions::kMaxWindow;
      StatePool at_bound(ModelConfig::gated_delta_net(1, tiny_config()), o);
      EXPECT_EQ(int64_t{at_bound.options().max_rows} * at_bound.options().max_window,
                PoolOptions::kMaxRoundTokens);
    }
  }
}

// Defect 8 (pool part): a pool that cannot fit is refused up front, with the bytes it needs.
TEST(HostilePool, PoolThatCannotFitIsRefusedBeforeTouchingMemory) {
  GdnConfig g;  // Qwen3-Next-80B at TP1: 77 MB of committed state per request
  PoolOptions o;
  o.num_slots = 1 << 20;
  o.max_rows = 4096;
  o.max_window = 16;
  const auto start = std::chrono::steady_clock::now();
  try {
    StatePool pool(ModelConfig::gated_delta_net(36, g), o);
    FAIL() << "a pool of 80 TB was built";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "bytes")) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
}

struct TinyLayer {
  GdnConfig g = tiny_config();
  int D = g.conv_dim();
  std::vector<float> w = std::vector<float>(static_cast<std::size_t>(D) * 2, 0.25f);
  std::vector<float> alog = {0.1f}, dtb = {0.2f};
  std::vector<float> qkv = std::vector<float>(static_cast<std::size_t>(D) * 4, 0.5f);
  std::vector<float> a = std::vector<float>(4, 0.3f), b = std::vector<float>(4, 0.4f);
  std::vector<float> conv_out = std::vector<float>(static_cast<std::size_t>(D) * 4);
  std::vector<float> core_out = std::vector<float>(16);
  GdnWeights weights() {
    return {TensorView::contiguous(w.data(), DType::kF32, {D, 2}),
            {},
            TensorView::contiguous(alog.data(), DType::kF32, {1}),
            TensorView::contiguous(dtb.data(), DType::kF32, {1})};
  }
};

// A CPU replay pool's verify held a working copy of the slot's layer state for every window
// token, chains included, which the construction's host-memory check did not count: a window of
// 65536 tokens of a 2 MiB state was accepted and its first verify asked for 137 GB (a plain
// std::bad_alloc, or the OOM killer). The check now counts the copies a tree window may hold at
// once (3 + 65536 / 2 + 1, 69 GB), and names them, as the snapshot pool of the same shape is
// refused for its scratch.
TEST(HostilePool, ReplayPoolWhoseWindowCopiesCannotFitIsRefusedAtConstruction) {
  GdnConfig g;  // a Qwen3-Next layer: a 2 MiB fp32 state
  PoolOptions o;
  o.num_slots = 1;
  o.max_rows = 1;
  o.max_window = PoolOptions::kMaxWindow;
  o.strategy = Strategy::kReplay;
  const int64_t state = g.conv_dim() * (g.conv_width - 1) * 2 + g.ssm_state_elems() * 4;
  const int64_t copies = (int64_t{o.max_window} / 2 + 4) * state;  // 69 GB
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0 || copies <= int64_t{pages} * page) {
    GTEST_SKIP() << "this machine's memory holds " << copies << " bytes of working copies";
  }
  try {
    StatePool pool(ModelConfig::gated_delta_net(1, g), o);
    FAIL() << "a replay pool whose verify needs " << copies << " bytes of working copies was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kResourceExhausted) << e.what();
    EXPECT_TRUE(contains(e.what(), "working copies")) << e.what();
    EXPECT_TRUE(contains(e.what(),
                         "32772 states of one slot's layer, as many as a tree window of "
                         "max_window = 65536 tokens may hold at once"))
        << e.what();
  }
}

// The working copies of a replay chain's verify are two, whatever its window: each token's state
// is kept until the last token that starts from it has run. Run in a child process whose address
// space allows 64 MB more than it holds before the verify, which the 137 MB of one copy a token
// (T = 512, a 268 kB state) overran.
TEST(HostilePool, AReplayChainVerifyHoldsTwoWorkingCopiesWhateverItsWindow) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an address-space limit does not hold under AddressSanitizer";
#else
  GdnConfig g = tiny_config();
  g.num_k_heads = 2;
  g.num_v_heads = 4;
  g.head_k_dim = 128;
  g.head_v_dim = 128;
  constexpr int T = 512;
  PoolOptions o;
  o.num_slots = 1;
  o.max_rows = 1;
  o.max_window = T;
  o.strategy = Strategy::kReplay;
  StatePool pool(ModelConfig::gated_delta_net(1, g), o);
  std::mt19937_64 rng(11);
  const test::LayerWeights w = test::random_weights(g, rng);
  const test::TokenInputs in = test::random_inputs(g, T, rng);
  test::TokenOutputs out = test::make_outputs(g, T);
  const SlotHandle h = pool.acquire();
  VerifyBatch batch;
  batch.rows = {h};
  batch.window = T;
  pool.begin_verify(batch);
  const auto verify_under_a_limit = [&] {
    if (!test::limit_address_space(int64_t{64} << 20)) std::_Exit(2);
    try {
      pool.verify(0, w.view(), in.view(), out.view());
    } catch (const std::exception&) {
      std::_Exit(1);
    }
    std::_Exit(test::sum_squares(out.core_out.view()) > 0 ? 0 : 3);
  };
  EXPECT_EXIT(verify_under_a_limit(), ::testing::ExitedWithCode(0), "");
#endif
}

// A batch's rows were checked for repeats by inserting each slot into a sorted vector: O(rows)
// per row, so rows in descending slot order took quadratic time (131,072 rows: 3.7 s a decode
// call against 38 ms ascending). Now one sort: the two orders take about the same time. Ratios
// within one process, so the machine's speed does not matter.
TEST(HostilePool, RowsInAnySlotOrderAreResolvedInLinearithmicTime) {
  const GdnConfig g = tiny_config();
  constexpr int kRows = 1 << 16;
  PoolOptions o;
  o.num_slots = kRows;
  o.max_rows = kRows;
  StatePool pool(ModelConfig::gated_delta_net(1, g), o);
  std::vector<SlotHandle> up;
  for (int i = 0; i < kRows; ++i) up.push_back(pool.acquire());
  const std::vector<SlotHandle> down(up.rbegin(), up.rend());
  std::mt19937_64 rng(5);
  const test::LayerWeights w = test::random_weights(g, rng);
  const test::TokenInputs in = test::random_inputs(g, kRows, rng);
  test::TokenOutputs out = test::make_outputs(g, kRows);
  const auto seconds = [&](const std::vector<SlotHandle>& rows) {
    double best = 1e9;
    for (int i = 0; i < 2; ++i) {
      const auto start = std::chrono::steady_clock::now();
      pool.decode(0, rows, w.view(), in.view(), out.view());
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
  };
  const double ascending = seconds(up), descending = seconds(down);
  EXPECT_LT(descending, 4 * ascending + 0.05)
      << "descending " << descending << " s, ascending " << ascending << " s";
  EXPECT_GT(test::sum_squares(out.core_out.view()), 0.0);
  // A repeat is still named, the first one in row order, after the row it repeats.
  std::vector<SlotHandle> repeats = down;
  repeats[7] = repeats[3];
  repeats[5] = repeats[2];
  try {
    pool.decode(0, repeats, w.view(), in.view(), out.view());
    FAIL() << "a batch repeating a slot was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
    EXPECT_TRUE(contains(e.what(), "rows[5] = ")) << e.what();
    EXPECT_TRUE(contains(e.what(), "repeats the slot of rows[2]")) << e.what();
  }
}

// Defect 5: a prefill of 2^32 + 1 tokens used to be truncated to one token and succeed.
TEST(HostilePool, TokenCountBeyondIntIsRejected) {
  TinyLayer t;
  StatePool pool(ModelConfig::gated_delta_net(1, t.g), PoolOptions{});
  const SlotHandle h = pool.acquire();
  const int64_t n = (int64_t{1} << 32) + 1;
  // Stride 0 on the token dimension: every token reads the same small buffer.
  GdnInputs in{TensorView::strided(t.qkv.data(), DType::kF32, {n, t.D}, {0, 1}),
               TensorView::strided(t.a.data(), DType::kF32, {n, 1}, {0, 1}),
               TensorView::strided(t.b.data(), DType::kF32, {n, 1}, {0, 1})};
  GdnOutputs out{{}, TensorView::strided(t.core_out.data(), DType::kF32, {n, 1, 4}, {0, 4, 1})};
  try {
    pool.prefill(0, h, t.weights(), in, out);
    FAIL() << "a prefill of 2^32 + 1 tokens succeeded";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), std::to_string(n))) << e.what();
  }
  const TensorView ssm = pool.ssm_state(0);
  for (int64_t i = 0; i < ssm.numel(); ++i) {
    ASSERT_EQ(static_cast<const float*>(ssm.data)[i], 0.0f) << "state changed at " << i;
  }
}

// Defect 9: verify's output views must not alias the pool's committed state or scratch.
TEST(HostilePool, OutputsAliasingThePoolAreRejected) {
  TinyLayer t;
  PoolOptions o;
  o.max_window = 2;
  StatePool pool(ModelConfig::gated_delta_net(1, t.g), o);
  const SlotHandle h = pool.acquire();
  GdnInputs in{TensorView::contiguous(t.qkv.data(), DType::kF32, {2, t.D}),
               TensorView::contiguous(t.a.data(), DType::kF32, {2, 1}),
               TensorView::contiguous(t.b.data(), DType::kF32, {2, 1})};
  pool.begin_verify(VerifyBatch{{h}, 2, {}});
  for (const TensorView& target : {pool.ssm_state(0), pool.snapshot_ssm(0), pool.conv_state(0)}) {
    GdnOutputs out{{}, TensorView::contiguous(target.data, DType::kF32, {2, 1, 4})};
    try {
      pool.verify(0, t.weights(), in, out);
      FAIL() << "verify wrote its outputs into the pool's own memory";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "core_out")) << e.what();
    }
  }
}

// Defect 9: a stride of 2^62 makes the element offset wrap; it must be rejected.
TEST(HostilePool, HugeStrideIsRejected) {
  TinyLayer t;
  StatePool pool(ModelConfig::gated_delta_net(1, t.g), PoolOptions{});
  const SlotHandle h = pool.acquire();
  GdnInputs in{TensorView::strided(t.qkv.data(), DType::kF32, {1, t.D}, {int64_t{1} << 62, 1}),
               TensorView::contiguous(t.a.data(), DType::kF32, {1, 1}),
               TensorView::contiguous(t.b.data(), DType::kF32, {1, 1})};
  in.mixed_qkv.shape[0] = 2;  // two tokens: token 1 sits 2^62 elements away
  in.a = TensorView::contiguous(t.a.data(), DType::kF32, {2, 1});
  in.b = TensorView::contiguous(t.b.data(), DType::kF32, {2, 1});
  GdnOutputs out{{}, TensorView::contiguous(t.core_out.data(), DType::kF32, {2, 1, 4})};
  try {
    pool.prefill(0, h, t.weights(), in, out);
    FAIL() << "a stride of 2^62 was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "stride")) << e.what();
  }
}

}  // namespace
}  // namespace specstate

#include "common/layer_kinds.h"
#include "common/pool_rounds.h"

namespace specstate::test {
namespace {

// A CPU layer call that runs out of memory changes nothing: every buffer of the token step is
// sized before the first row writes. The step allocated K- and V-vectors per head and token, after
// a replay verify had already stored the slot's replayed conv window; a verify refused there left
// the pending conv steps to be applied a second time, and the retried round's outputs and state
// differed from the snapshot strategy's (a plain std::bad_alloc, too). Here, in a child process, a
// replay verify runs under address-space limits that sweep the step's allocations (256 KiB vectors:
// K = 2^16); at each, the verify either succeeds or is refused as kResourceExhausted, and the
// round retried without the limit gives the snapshot pool's outputs and state bit for bit.
TEST(HostilePoolMemory, ALayerCallRefusedForMemoryChangesNothing) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an address-space limit does not hold under AddressSanitizer";
#else
  GdnConfig g;
  g.num_k_heads = g.num_v_heads = 1;
  g.head_k_dim = 1 << 16;
  g.head_v_dim = 1;
  g.conv_width = 4;
  g.act_dtype = g.conv_state_dtype = g.ssm_state_dtype = DType::kF32;
  const auto sweep = [&] {
    // Every buffer of 64 KiB or more mapped afresh, so that the limit meets each of the call's.
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
    malloc_trim(0);
    rlimit unlimited{};
    if (getrlimit(RLIMIT_AS, &unlimited) != 0) std::_Exit(2);
    int refused = 0, passed = 0;
    for (int64_t slack = 0; slack <= (int64_t{12} << 20); slack += int64_t{3} << 17) {
      PoolRounds<GdnKind> ms(g, 1, 5), mr(g, 1, 5);  // the same weights and inputs
      StatePool snap = ms.pool(Strategy::kSnapshot, 1, 1, 4);
      StatePool rep = mr.pool(Strategy::kReplay, 1, 1, 4);
      const SlotHandle a = snap.acquire(), b = rep.acquire();
      ms.round(snap, round_batch(false, {a}), {2});
      mr.round(rep, round_batch(false, {b}), {2});  // two pending conv steps
      const std::vector<GdnKind::HostInputs> in = ms.inputs(4);
      std::vector<GdnKind::HostOutputs> want = ms.round(snap, round_batch(false, {a}), in, {1});
      std::vector<GdnKind::HostOutputs> got = mr.outputs(4);
      rep.begin_verify(round_batch(false, {b}));
      if (!limit_address_space(slack)) std::_Exit(2);
      try {
        mr.verify(rep, in, got, 0, 1);
        ++passed;
      } catch (const Error& e) {
        if (e.status() != Status::kResourceExhausted) std::_Exit(3);
        ++refused;
      } catch (...) {
        std::_Exit(4);  // a std::bad_alloc: not refused as the library's error
      }
      if (setrlimit(RLIMIT_AS, &unlimited) != 0) std::_Exit(2);
      mr.verify(rep, in, got, 0, 1);  // the round retried
      rep.commit({1});
      if (got[0].core_out.bytes() != want[0].core_out.bytes()) std::_Exit(5);
      if (exported(rep, b) != exported(snap, a)) std::_Exit(6);
    }
    std::fprintf(stderr, "refused %d, passed %d\n", refused, passed);
    std::_Exit(refused > 0 && passed > 0 ? 0 : 7);  // the sweep crossed the call's allocations
  };
  // In a fresh process (the binary run again for this test alone): a long test process's heap
  // holds freed memory that the limit does not see, and the sweep then met no allocation.
#ifdef GTEST_FLAG_SET  // googletest 1.12 and later
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(sweep(), ::testing::ExitedWithCode(0), "");
  GTEST_FLAG_SET(death_test_style, style);
#else
  const std::string style = ::testing::GTEST_FLAG(death_test_style);
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  EXPECT_EXIT(sweep(), ::testing::ExitedWithCode(0), "");
  ::testing::GTEST_FLAG(death_test_style) = style;
#endif
#endif
}

}  // namespace
}  // namespace specstate::test
