// Regression tests for issue 20 (hostile input, round 3). Each test fails on the code before its
// fix and covers both strategies and both layer kinds where the defect applies:
//   e. a pool of num_slots = INT_MAX is refused quickly, without building per-slot structures.
// The fixes live in lib/pool.cpp, lib/slot_allocator.cpp.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/caller_owned.h"
#include "common/expect.h"
#include "common/layer_kinds.h"
#include "common/pool_rounds.h"
#include "common/presets.h"
#include "common/strategy_equivalence.h"

namespace specstate::test {
namespace {

constexpr int kLayers = 2;
constexpr int kSlots = 4;
constexpr int kRows = 3;

// Layer kind x strategy. The presets keep realistic dtypes: bf16 activations and conv state, f32
// SSM state (Qwen3-Next, Nemotron-H).
struct Case {
  const char* name;
  const char* preset;
  Strategy strategy;
};

const Case kCases[] = {
    {"gdn_snapshot", "small_bf16", Strategy::kSnapshot},
    {"gdn_replay", "small_bf16", Strategy::kReplay},
    {"m2_snapshot", "m2_small_bf16", Strategy::kSnapshot},
    {"m2_replay", "m2_small_bf16", Strategy::kReplay},
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }
void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

class HostileRound3 : public ::testing::TestWithParam<Case> {};

// The caller's bytes of `slot` in the export layout (per layer: conv window, then SSM state),
// read straight from the caller's buffers (no pool call, so nothing is materialized).
std::vector<uint8_t> caller_slot(Memory& mem, const CallerMemory& cm, int layers, int slots,
                                 int slot) {
  const std::vector<uint8_t> conv = mem.bytes(cm.conv_buffer), ssm = mem.bytes(cm.ssm_buffer);
  std::vector<uint8_t> out;
  for (int l = 0; l < layers; ++l) {
    const auto co =
        static_cast<std::size_t>(cm.conv_offset[static_cast<std::size_t>(l * slots + slot)]);
    const auto so =
        static_cast<std::size_t>(cm.ssm_offset[static_cast<std::size_t>(l * slots + slot)]);
    out.insert(out.end(), conv.begin() + co, conv.begin() + co + cm.conv_state_bytes);
    out.insert(out.end(), ssm.begin() + so, ssm.begin() + so + cm.ssm_state_bytes);
  }
  return out;
}

// Every byte of the caller's buffers.
std::vector<uint8_t> caller_bytes(Memory& mem, const CallerMemory& cm) {
  std::vector<uint8_t> out = mem.bytes(cm.conv_buffer);
  const std::vector<uint8_t> ssm = mem.bytes(cm.ssm_buffer);
  out.insert(out.end(), ssm.begin(), ssm.end());
  return out;
}

// A slot state (export bytes) as an i32 view for import_slot.
struct StateBuffer {
  std::vector<int32_t> words;
  explicit StateBuffer(const std::vector<uint8_t>& bytes) : words((bytes.size() + 3) / 4, 0) {
    std::memcpy(words.data(), bytes.data(), bytes.size());
  }
  TensorView view() {
    return TensorView::contiguous(words.data(), DType::kI32, {static_cast<int64_t>(words.size())});
  }
};

// Bit-for-bit equality of two byte strings; on failure, where they first differ (not the bytes).
::testing::AssertionResult same_bytes(const std::vector<uint8_t>& got,
                                      const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " bytes, expected " << want.size();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure() << "byte " << i << " of " << got.size() << " is "
                                           << int{got[i]} << ", expected " << int{want[i]};
    }
  }
  return ::testing::AssertionSuccess();
}

// Two requests of a caller-owned pool of `strategy` and of an owning snapshot pool (the
// reference), prefilled alike and advanced by `rounds` committed rounds in which every row
// accepts at least one token (so a replay pool's memory lags its committed state).
template <typename Kind>
struct TwoPools {
  PoolRounds<Kind> m;
  std::unique_ptr<Memory> mem = host_memory();
  PoolOptions o;
  CallerMemory cm;
  StatePool subject, ref;
  std::vector<SlotHandle> hs, hr;  // the same requests in subject / ref

  TwoPools(const typename Kind::Config& g, Strategy strategy, uint64_t seed)
      : m(g, kLayers, seed),
        o(m.options(strategy, kSlots, kRows, kRoundT)),
        cm(make_caller_memory(m.model(), o, CallerLayout::kOneTensor, *mem, seed ^ 0x77)),
        subject(m.model(), o, cm.views),
        ref(m.pool(Strategy::kSnapshot, kSlots, kRows, kRoundT)) {
    for (int i = 0; i < 2; ++i) {
      hs.push_back(subject.acquire());
      hr.push_back(ref.acquire());
      const auto in = m.inputs(3 + i);
      m.prefill(subject, hs.back(), in);
      m.prefill(ref, hr.back(), in);
    }
  }

  // One round over the rows (`rows` indexes hs / hr) in both pools; the outputs must agree.
  void round(const std::vector<int>& rows, const std::vector<int>& steps, bool tree = false) {
    VerifyBatch bs = round_batch(tree, {}), br = round_batch(tree, {});
    for (int i : rows) {
      bs.rows.push_back(hs[static_cast<std::size_t>(i)]);
      br.rows.push_back(hr[static_cast<std::size_t>(i)]);
    }
    const int64_t n = static_cast<int64_t>(rows.size()) * kRoundT;
    const auto in = m.inputs(n);
    const auto accepted = round_accept(tree, steps);
    const auto out_s = m.round(subject, bs, in, accepted);
    const auto out_r = m.round(ref, br, in, accepted);
    ASSERT_TRUE(same_bytes(PoolRounds<Kind>::output_bytes(out_s, 0, n),
                           PoolRounds<Kind>::output_bytes(out_r, 0, n)))
        << "verify outputs differ from the snapshot reference";
  }

  void rounds(int count) {
    for (int r = 0; r < count; ++r) {
      round({0, 1}, {1 + r % kRoundT, kRoundT - r % 2}, r % 2 == 1);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

  std::vector<uint8_t> caller_slot_bytes(int slot) {
    return caller_slot(*mem, cm, kLayers, kSlots, slot);
  }
};

template <typename F>
void for_case(const Case& c, F&& f) {
  for_kind(c.preset, [&](auto kind, const auto& g) { f(kind, g); });
}

// --- e. a pool of INT_MAX slots ------------------------------------------------------------------

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST_P(HostileRound3, PoolOfIntMaxSlotsIsRefusedQuicklyWithoutPerSlotStructures) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    PoolRounds<Kind> m(g, kLayers, 0xE5);
    PoolOptions o = m.options(c.strategy, kSlots, kRows, kRoundT);
    o.num_slots = INT_MAX;
    const long rss0 = peak_rss_kib();
    const auto start = std::chrono::steady_clock::now();
    try {
      StatePool pool(m.model(), o);
      ADD_FAILURE() << "a pool of INT_MAX slots was built";
    } catch (const Error& e) {
      const bool named = std::string(e.what()).find("num_slots") != std::string::npos;
      EXPECT_TRUE(e.status() == Status::kResourceExhausted ||
                  (e.status() == Status::kInvalidArgument && named))
          << e.what();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 0.5) << "refusing the pool took " << seconds << " s";
    const long grown_mib = (peak_rss_kib() - rss0) / 1024;
    EXPECT_LT(grown_mib, 64) << "refusing the pool grew the peak memory by " << grown_mib << " MiB";
  });
}

// A pool's memory and bookkeeping still grow only with the slots it uses: a large pool of a
// tiny state hands out, frees and re-hands slots lowest first, generations intact.
TEST(HostileRound3Allocator, LargePoolHandsOutLowestSlotsAndKeepsGenerations) {
  GdnConfig g = gdn_preset("small_f32");
  PoolOptions o;
  o.num_slots = 1 << 16;
  o.max_rows = 2;
  o.max_window = 2;
  StatePool p(ModelConfig::gated_delta_net(1, g), o);
  EXPECT_EQ(p.free_slots(), 1 << 16);
  const SlotHandle a = p.acquire(), b = p.acquire();
  EXPECT_EQ(a.slot, 0);
  EXPECT_EQ(b.slot, 1);
  const SlotHandle far = p.adopt(1000);  // slots 2..999 stay free
  EXPECT_EQ(p.free_slots(), (1 << 16) - 3);
  p.release(a);
  EXPECT_EQ(p.acquire().slot, 0);
  EXPECT_FALSE(p.is_live(a));  // the old generation is stale
  EXPECT_EQ(p.acquire().slot, 2);
  p.release(far);
  const SlotHandle again = p.adopt(1000);
  EXPECT_NE(again.generation, far.generation);
  expect_rejected([&] { p.slot_index(far); }, Status::kFailedPrecondition, {"stale"});
  expect_rejected([&] { p.adopt(1000); }, Status::kFailedPrecondition, {"is live"});
  EXPECT_EQ(p.free_slots(), (1 << 16) - 4);
}

INSTANTIATE_TEST_SUITE_P(Cpu, HostileRound3, ::testing::ValuesIn(kCases), case_name);

}  // namespace
}  // namespace specstate::test
